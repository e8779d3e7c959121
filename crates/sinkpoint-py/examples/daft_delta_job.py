#!/usr/bin/env python3
"""A Daft job that copies parquet inputs into a Delta Lake table exactly once, through sinkpoint's DeltaSink.

    python examples/daft_delta_job.py --dir DIR [--inputs 50 --rows 1000] [--runner native|ray] [--crash-at POINT]

It makes the inputs as ``examples/daft_lance_job.py`` does (DIR/inputs: ``--inputs`` parquet files of ``--rows``
rows, ids unique across all inputs, ``--row-groups`` row groups each), writes them through
``sinkpoint.daft.DeltaSink`` into the Delta table DIR/table (``--partition`` partitions it by the ``input``
column), and prints as its last line, read back with the Python ``deltalake`` package::

    table: N rows, D duplicates, M missing

Run it again after any crash (kill -9 of the whole process group, ``--crash-at``) and it finishes the job with
0 duplicates and 0 missing; run it once more and it does nothing (the job finished).

State: the workers' shared staging is file://DIR/staging, the committer's store DIR/state/committer.redb
(``--store`` to put it elsewhere), mirrored to file://DIR/mirror with ``--mirror``.

``--crash-at`` takes the Lance example's points (exit code 137, as kill -9 would; counted across every process and
run in DIR, so it fires once; delete DIR/crash-*.count to arm it again): ``written:K`` (in a worker, the K-th input
it completed has its Parquet files written, before its seal), ``sealed:K`` (right after its K-th seal),
``finalize``, ``adopted`` (on the driver, after adopting, before committing), and the committer's own
``commit:after-begin-commit``, ``commit:after-target-commit-before-mark``, ``commit:after-mark-unknown`` (exit
code 86: the intent is durable but the table was not called, or the Delta commit landed but the store does not
know yet).

``--plain`` writes the same inputs WITHOUT sinkpoint (Daft's own ``df.write_deltalake``, mode append) into
DIR/plain; ``--compare`` runs both in one process (plain first, after a warm-up) and prints the difference per
input on lines starting with ``timing:``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sys
import time
from typing import List, Optional, Tuple

import daft

from sinkpoint.daft import DeltaSink


def _lance_example():
    """``examples/daft_lance_job.py``, whose inputs, crash points and drivers story this job shares."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "daft_lance_job.py")
    spec = importlib.util.spec_from_file_location("daft_lance_job", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_example = _lance_example()

JOB_DEFAULT = "daft-delta-job"


class DeltaJobSink(DeltaSink):
    """DeltaSink with the Lance example's crash points: the same counting of visits across processes (``_at``)
    and the committer's crash points (``_driver_options``)."""

    def __init__(self, *args, crash_at: Optional[str] = None, crash_dir: str = ".", **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.crash_at = crash_at
        self.crash_dir = crash_dir

    def finalize(self, write_results):
        self._at("finalize")
        return super().finalize(write_results)

    _at = _example.JobSink._at
    _driver_options = _example.JobSink._driver_options


def count_table(uri: str, count: int, rows: int) -> Tuple[int, int, int]:
    """(rows, duplicates, missing) of the Delta table at ``uri``, read with the Python ``deltalake`` package, against
    the ids ``0 .. count * rows``."""
    import deltalake
    from deltalake.exceptions import TableNotFoundError
    from pyarrow import fs

    try:
        table = deltalake.DeltaTable(uri)
    except TableNotFoundError:
        return 0, 0, count * rows
    # Through Arrow's own local filesystem, not deltalake's default one (a Python filesystem, whose file reads are
    # Python buffers): an Arrow thread can still be tearing the scan down after to_pyarrow_table returns, and
    # freeing a Python buffer there takes the GIL; when that races the interpreter's exit (this is the last read
    # before it) the thread is made to exit inside a C++ destructor and the process aborts with "terminate called
    # without an active exception".
    local = fs.SubTreeFileSystem(uri, fs.LocalFileSystem())
    ids = table.to_pyarrow_table(columns=["id"], filesystem=local).column("id").to_pylist()
    distinct = set(ids)
    return len(ids), len(ids) - len(distinct), len(set(range(count * rows)) - distinct)


def run_plain(paths: List[str], uri: str, partition: bool) -> float:
    """Writes ``paths`` into a fresh table at ``uri`` with Daft's own ``df.write_deltalake``; the seconds it took."""
    shutil.rmtree(uri, ignore_errors=True)
    t0 = time.monotonic()
    daft.read_parquet(paths).write_deltalake(uri, partition_cols=["input"] if partition else None)
    return time.monotonic() - t0


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=_example.DRIVERS)
    ap.add_argument("--dir", required=True, help="the job's directory (inputs, table, staging, store)")
    ap.add_argument("--inputs", type=int, default=50)
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--row-groups", type=int, default=4, help="row groups per input (Daft's pieces per input)")
    ap.add_argument("--runner", choices=("native", "ray"), default="native")
    ap.add_argument("--job", default=JOB_DEFAULT)
    ap.add_argument("--store", help="the committer's store file (default DIR/state/committer.redb)")
    ap.add_argument("--mirror", action="store_true", help="mirror the store to file://DIR/mirror")
    ap.add_argument("--partition", action="store_true", help="partition the table by the inputs' `input` column")
    ap.add_argument("--crash-at", help="written:K | sealed:K | finalize | adopted | commit:<core crash point>")
    ap.add_argument(
        "--inputs-per-checkpoint",
        type=int,
        default=1,
        help="seal the inputs of a task of this many as one checkpoint (the sink's inputs_per_checkpoint)",
    )
    ap.add_argument("--plain", action="store_true", help="only Daft's df.write_deltalake (no sinkpoint) into DIR/plain")
    ap.add_argument("--compare", action="store_true", help="plain write, then the sinkpoint job; print the cost")
    args = ap.parse_args(argv)

    directory = os.path.abspath(args.dir)
    os.makedirs(directory, exist_ok=True)
    if args.runner == "ray":
        daft.set_runner_ray()
    else:
        daft.set_runner_native()
    paths = _example.make_inputs(os.path.join(directory, "inputs"), args.inputs, args.rows, args.row_groups)
    print(f"inputs: {args.inputs} x {args.rows} rows in {directory}/inputs, runner {args.runner}", flush=True)

    plain_s = None
    if args.plain or args.compare:
        daft.read_parquet(paths[:1]).count_rows()  # warm-up: Daft's first query pays for imports and the runner
        plain_uri = os.path.join(directory, "plain")
        plain_s = run_plain(paths, plain_uri, args.partition)
        print(
            f"timing: plain df.write_deltalake: {args.inputs} inputs in {plain_s:.3f} s "
            f"({1000 * plain_s / args.inputs:.2f} ms/input)",
            flush=True,
        )
        if args.plain:
            n, d, m = count_table(plain_uri, args.inputs, args.rows)
            print(f"table: {n} rows, {d} duplicates, {m} missing", flush=True)
            return 0

    uri = os.path.join(directory, "table")
    sink = DeltaJobSink(
        uri,
        args.job,
        f"file://{directory}/staging",
        args.store or os.path.join(directory, "state", "committer.redb"),
        partition_cols=["input"] if args.partition else None,
        mirror_url=f"file://{directory}/mirror" if args.mirror else None,
        crash_at=args.crash_at,
        crash_dir=directory,
        inputs_per_checkpoint=args.inputs_per_checkpoint,
    )
    t1 = time.monotonic()
    commits = sink.run(paths).to_pydict()
    took = time.monotonic() - t1
    r = sink.report
    print(
        f"sinkpoint: {r.get('inputs')} inputs, {r.get('pending')} to write after pruning, {r.get('sealed', 0)} "
        f"sealed, {r.get('skipped', 0)} skipped, {len(r.get('lost') or {})} lost to another attempt, commits "
        f"{list(zip(commits['key'], commits['rows']))}, finished {r.get('finished', False)}",
        flush=True,
    )
    print(f"timing: sinkpoint job: {took:.3f} s ({1000 * took / max(1, args.inputs):.2f} ms/input)", flush=True)
    if plain_s is not None:
        print(
            f"timing: checkpoint cost: {1000 * (took - plain_s) / args.inputs:+.2f} ms/input "
            f"(sinkpoint {took:.3f} s - plain {plain_s:.3f} s, over {args.inputs} inputs)",
            flush=True,
        )
    n, d, m = count_table(uri, args.inputs, args.rows)
    print(f"table: {n} rows, {d} duplicates, {m} missing", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
