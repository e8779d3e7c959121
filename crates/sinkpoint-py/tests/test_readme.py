"""README.md's Python section works as written: its two shell blocks (the build and the example jobs; the stop
recipe of a Ray run) are read from README.md and run line by line in a bash of their own, from a directory laid
out like a fresh clone. Each example prints ``table: 50000 rows, 0 duplicates, 0 missing``, the stop recipe leaves
no process of the killed run alive, and the rerun finishes the job.

What the test substitutes, and why (everything else runs as written):

- ``python3 -m venv .venv`` links ``.venv`` to the venv this test runs in (ci-python.sh's, which holds what the
  README's ``pip install`` lines install): a new venv would download Daft, Ray and pylance again.
- ``maturin develop --release`` becomes an import of the compiled module: ci-python.sh has just built the wheel
  and installed it in that venv. A release build of Lance takes ~16 min on 2 cores, far over CI's budget, and
  builds nothing the dev-profile wheel does not.
- ``pip`` runs with ``PIP_NO_INDEX=1``: it confirms the pinned packages are installed and fails if one is not,
  without the network.
- ``/tmp/`` becomes a temporary directory of this test, and ``RAY_TMPDIR`` one of its own, so a run shares no job
  and no Ray instance with anything else on the machine.
- The "clone" is a directory holding links to this checkout's ``.ci`` and ``crates``, the paths the lines use.
- After the line that kills the Ray run, a check that no process of the run is left (by a marker in the
  environment every process of the run inherits, and by the Ray temp dir in a command line).
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "README.md"
MARK = "SINKPOINT_README_RUN"
TABLE_OK = "table: 50000 rows, 0 duplicates, 0 missing"


def blocks():
    """The README's fenced ``sh`` blocks of the Python section: the one that builds the wheel, the stop recipe."""
    fenced = re.findall(r"```sh\n(.*?)```", README.read_text(), flags=re.S)
    build = [b for b in fenced if "maturin develop" in b]
    stop = [b for b in fenced if "pkill -KILL -s" in b]
    assert len(build) == 1 and len(stop) == 1, "README.md's Python section has moved: update tests/test_readme.py"
    return build[0], stop[0]


def commands(block: str):
    """The block's commands: each line without its comment (from two spaces and a ``#`` on), comment-only lines
    dropped, continued lines (ending in a backslash) joined."""
    out = []
    pending = ""
    for line in block.splitlines():
        command = re.split(r"\s{2,}#", line, maxsplit=1)[0].rstrip()
        if not command or command.lstrip().startswith("#"):
            continue
        if command.endswith("\\"):  # a continued line: joined with the next one, as bash joins them
            pending += command[:-1]
            continue
        out.append(pending + command)
        pending = ""
    assert pending == "", f"the block ends in a continued line: {pending}"
    return out


def substitute(command: str, tmp: str) -> str:
    """``command`` with the CI substitutions of the module docstring."""
    # The README's /tmp paths first: the venv's own path may be under /tmp too (a CI cache there), and is kept.
    command = command.replace("/tmp/", f"{tmp}/")
    command = command.replace("python3 -m venv .venv", f"ln -s {shlex.quote(sys.prefix)} .venv")
    return command.replace("maturin develop --release", "python -c 'import sinkpoint._sinkpoint'")


#: Run after the kill line: fails, listing them, if a process of the killed run is still alive 0.5 s later.
NO_PROCESS_LEFT = r"""
import os, sys, time
mark, temp = sys.argv[1].encode(), sys.argv[2]
def left():
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in (os.getpid(), os.getppid()):
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    continue
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{name}/environ", "rb") as f:
                marked = mark in f.read().split(b"\0")
        except OSError:
            continue
        if marked or temp in cmdline:
            found.append((int(name), cmdline[:120]))
    return found
time.sleep(0.5)
survivors = left()
print(f"no-process-left: {len(survivors)} survivors {survivors}", flush=True)
sys.exit(1 if survivors else 0)
"""


def script(lines, tmp: str, ray_tmp: str, mark: str) -> str:
    out = ["set -euo pipefail", f"export {MARK}={mark} RAY_TMPDIR={ray_tmp} PIP_NO_INDEX=1"]
    out.append("export PIP_DISABLE_PIP_VERSION_CHECK=1")
    for line in lines:
        out.append(f"printf 'readme: + %s\\n' {shlex.quote(line)}")
        out.append(substitute(line, tmp))
        if "pkill -KILL -s" in line:
            out.append(f"python -c {shlex.quote(NO_PROCESS_LEFT)} {MARK}={mark} {ray_tmp}")
    return "\n".join(out) + "\n"


@pytest.fixture
def clone():
    """A directory laid out like a fresh clone (links to this checkout's .ci and crates), a /tmp of the test's
    own and a Ray temp dir (short: Ray's socket paths have a length limit); removed after, their processes too."""
    top = Path(tempfile.mkdtemp(prefix="sp-readme-", dir="/tmp"))
    (top / "clone").mkdir()
    (top / "tmp").mkdir()
    (top / "ray").mkdir()
    for name in (".ci", "crates"):
        (top / "clone" / name).symlink_to(ROOT / name)
    yield top
    shutil.rmtree(top, ignore_errors=True)


def run(top: Path, lines, mark: str, timeout: float) -> str:
    text = script(lines, str(top / "tmp"), str(top / "ray"), mark)
    started = time.monotonic()
    done = subprocess.run(
        ["bash", "-c", text],
        cwd=top / "clone",
        env={k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")},
        capture_output=True,
        text=True,
        timeout=timeout,
        start_new_session=True,
    )
    print(f"{len(lines)} lines in {time.monotonic() - started:.1f} s")
    print(done.stdout[-6000:])
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def test_the_python_section_of_the_readme_runs_as_written(clone):
    pytest.importorskip("ray")
    if shutil.which("setsid") is None or shutil.which("pkill") is None:
        pytest.skip("the stop recipe needs setsid and pkill (util-linux, procps)")
    build, stop = blocks()
    mark = uuid.uuid4().hex
    out = run(clone, commands(build), mark, timeout=300)
    # The native Lance run, the Ray run in its own directory, then the Delta job.
    assert out.count(TABLE_OK) == 3, out
    assert "already finished" not in out
    out = run(clone, [". .venv/bin/activate"] + commands(stop), mark, timeout=300)
    assert "no-process-left: 0 survivors" in out
    # Only the rerun finished: the kill came in the middle of the first run (else pgrep finds nothing to kill).
    assert out.count(TABLE_OK) == 1 and out.count("finished True") == 1, out
