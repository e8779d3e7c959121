#!/usr/bin/env python3
"""Gives a fresh clone's unchanged files back the mtimes they had at the last CI run, so cargo rebuilds only what
changed.

    python3 .ci/mtimes.py RECORD

Cargo decides that a workspace crate is fresh by comparing its source files' mtimes with its last build's; a fresh
clone's files all carry the time of the clone, so every workspace crate (the core, the adapters, the CLI, the
wheel, the benches, the fuzz targets) would be compiled again on every run, minutes of a warm run. Where the clone
is does not matter to cargo (a copy of a package at another path, its mtimes kept, is fresh: cargo 1.95).

RECORD (tab-separated: path, blob id, mtime in nanoseconds) holds, for each tracked file, the content and mtime it
had in the previous run's clone. A file whose blob id is the one recorded for its path gets that mtime back: the
previous run built from exactly these bytes, after that time. Any other file keeps the clone's time, newer than
every earlier build, so cargo rebuilds what depends on it. Only the newest record per path is kept: a file changed
and changed back still carries the newer time, since the target dir last built the changed content. The record is
then rewritten for this clone, before anything is built.

This holds only while CI's runs are the only builds in their target dir, one after another: a build from another
checkout would leave artifacts newer than this clone's restored mtimes but built from other bytes. So nothing else
builds in $SINKPOINT_CACHE/target.
"""

from __future__ import annotations

import os
import subprocess
import sys


def tracked() -> list[tuple[str, str, str]]:
    """(mode, blob id, path) of every file in the index."""
    out = subprocess.run(["git", "ls-files", "-s", "-z"], check=True, capture_output=True).stdout.decode()
    files = []
    for entry in filter(None, out.split("\0")):
        meta, path = entry.split("\t", 1)
        mode, blob, _stage = meta.split(" ")
        files.append((mode, blob, path))
    return files


def read_record(record: str) -> dict[str, tuple[str, int]]:
    try:
        with open(record, encoding="utf-8") as f:
            rows = (line.rstrip("\n").split("\t") for line in f)
            return {path: (blob, int(ns)) for path, blob, ns in rows}
    except (FileNotFoundError, ValueError):
        return {}


def main() -> None:
    record = sys.argv[1]
    known = read_record(record)
    restored = 0
    rows = []
    for mode, blob, path in tracked():
        if mode == "120000" or not os.path.isfile(path):
            continue
        if known.get(path, ("", 0))[0] == blob:
            ns = known[path][1]
            os.utime(path, ns=(ns, ns))
            restored += 1
        rows.append(f"{path}\t{blob}\t{os.stat(path).st_mtime_ns}\n")
    tmp = f"{record}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.writelines(rows)
    os.replace(tmp, record)
    print(f"mtimes: {restored} of {len(rows)} tracked files unchanged since the last run got their mtime back")


if __name__ == "__main__":
    main()
