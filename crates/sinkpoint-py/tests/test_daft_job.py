"""examples/daft_lance_job.py end to end, in real processes: one run writes every row once, a rerun of a finished
job does nothing, every crash point and kill -9 at random moments is finished by a rerun with 0 duplicates and 0
missing, two drivers started 0.5 s apart write no duplicate, and a Ray run finishes. (The object-store requests of
a run are counted in test_requests.py.)

Knobs: SINKPOINT_DAFT_TRIALS (kill trials, default 10), SINKPOINT_DAFT_SEED (default 20240601).
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("daft")
pytest.importorskip("lance")
try:
    import sinkpoint._sinkpoint  # noqa: F401
except ImportError:
    pytest.skip("sinkpoint._sinkpoint is not built (maturin develop)", allow_module_level=True)

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "daft_lance_job.py"
INPUTS, ROWS = 20, 500
LAST = re.compile(r"^table: (\d+) rows, (\d+) duplicates, (\d+) missing$")
TRIALS = int(os.environ.get("SINKPOINT_DAFT_TRIALS", "10"))
SEED = int(os.environ.get("SINKPOINT_DAFT_SEED", "20240601"))


def _cmd(directory: Path, *extra: str, inputs: int = INPUTS, rows: int = ROWS):
    return [sys.executable, str(EXAMPLE), "--dir", str(directory), "--inputs", str(inputs), "--rows", str(rows),
            *extra]


def _run(directory: Path, *extra: str, timeout: float = 180, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(_cmd(directory, *extra, **kw), capture_output=True, text=True, timeout=timeout)


def _table(out: str):
    lines = [line for line in out.splitlines() if line.strip()]
    assert lines, "no output"
    m = LAST.match(lines[-1])
    assert m, f"last line is not the table line: {lines[-1]!r}"
    return tuple(int(g) for g in m.groups())


def _ok(p: subprocess.CompletedProcess, rows: int = INPUTS * ROWS):
    assert p.returncode == 0, f"exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    assert _table(p.stdout) == (rows, 0, 0), p.stdout[-2000:]
    return p


def _count(directory: Path, inputs: int = INPUTS, rows: int = ROWS):
    sys.path.insert(0, str(EXAMPLE.parent))
    try:
        import daft_lance_job
    finally:
        sys.path.pop(0)
    return daft_lance_job.count_table(str(directory / "table.lance"), inputs, rows)


# ----------------------------------------------------------------------------------------------------------


def test_a_run_writes_every_row_once_and_a_rerun_does_nothing(tmp_path):
    first = _ok(_run(tmp_path))
    assert "finished True" in first.stdout
    again = _ok(_run(tmp_path))
    assert "already finished: nothing to do" in again.stdout


def test_plain_and_compare_print_timings(tmp_path):
    plain = _ok(_run(tmp_path / "p", "--plain", inputs=5, rows=100), rows=500)
    assert "timing: plain Lance append" in plain.stdout
    compare = _ok(_run(tmp_path / "c", "--compare", inputs=5, rows=100), rows=500)
    assert "timing: checkpoint cost" in compare.stdout


CRASH_POINTS = [
    ("written:3", 137),
    ("sealed:5", 137),
    ("finalize", 137),
    ("adopted", 137),
    # The committer's own (Rust) crash points: the intent is durable and Lance was not called (the rerun
    # re-commits under the same key), or Lance has the commit and the store does not know (the rerun's probe
    # finds it and only marks it).
    ("commit:after-begin-commit", 86),
    ("commit:after-target-commit-before-mark", 86),
]


@pytest.mark.parametrize("point,code", CRASH_POINTS, ids=[p for p, _ in CRASH_POINTS])
def test_a_rerun_after_a_crash_point_finishes_the_job(tmp_path, point, code):
    crashed = _run(tmp_path, "--crash-at", point)
    assert crashed.returncode == code, f"{crashed.stdout[-2000:]}\n{crashed.stderr[-2000:]}"
    assert _count(tmp_path)[1] == 0  # never a duplicate, even mid-job
    rerun = _ok(_run(tmp_path))
    if point == "commit:after-begin-commit":
        assert "re-committed 0" in rerun.stdout
    if point == "commit:after-target-commit-before-mark":
        assert "marked landed 0" in rerun.stdout
    assert "already finished" in _ok(_run(tmp_path)).stdout


def test_a_crash_during_the_recovery_run_is_recovered_too(tmp_path):
    assert _run(tmp_path, "--crash-at", "sealed:7").returncode == 137
    assert _run(tmp_path, "--crash-at", "commit:after-target-commit-before-mark").returncode == 86
    assert _count(tmp_path)[1] == 0
    _ok(_run(tmp_path))


def test_kill_9_of_the_process_group_at_random_moments_then_a_rerun(tmp_path):
    # Calibrate: how long one clean run takes here, with a delay per micropartition so kills land mid-job.
    extra = ("--delay-ms", "15")
    t0 = time.monotonic()
    _ok(_run(tmp_path / "calibrate", *extra))
    clean = time.monotonic() - t0
    rng = random.Random(SEED)
    moments = []
    for trial in range(TRIALS):
        directory = tmp_path / f"trial-{trial}"
        after = rng.uniform(0.3, clean * 1.1)
        moments.append(round(after, 2))
        proc = subprocess.Popen(_cmd(directory, *extra), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            proc.wait(timeout=after)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        proc.stdout.close()
        rows, dups, _ = _count(directory)
        assert dups == 0, f"trial {trial} (kill after {after:.2f} s): {dups} duplicates before the rerun"
        _ok(_run(directory))
    print(f"clean run {clean:.2f} s; kills after {moments} s")


@pytest.mark.parametrize("stores", ["one store", "a store each, mirrored"])
def test_two_drivers_started_half_a_second_apart_write_no_duplicate(tmp_path, stores):
    def start(name: str) -> subprocess.Popen:
        # 50 ms per micropartition: a 4 s write phase, so the second run (Daft takes ~1 s to start) opens its store
        # while the first is mid-way.
        extra = ["--delay-ms", "50"]
        if stores != "one store":
            extra += ["--mirror", "--store", str(tmp_path / f"state-{name}" / "committer.redb")]
        return subprocess.Popen(_cmd(tmp_path, *extra), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)

    a = start("a")
    time.sleep(0.5)
    b = start("b")
    outs = [p.communicate(timeout=300)[0] for p in (a, b)]
    codes = [a.returncode, b.returncode]
    rows, dups, missing = _count(tmp_path)
    both = f"exits {codes}\n--- a\n{outs[0][-3000:]}\n--- b\n{outs[1][-3000:]}"
    assert dups == 0, f"{dups} duplicates; {both}"
    assert 0 in codes, f"neither driver finished: {both}"
    summaries = [re.search(r"(\d+) to write after pruning, (\d+) sealed .*, (\d+) skipped, (\d+) lost", out)
                 for out in outs]
    stats = [tuple(int(g) for g in m.groups()) if m else None for m in summaries]
    print(f"{stores}: exits {codes}; (to write, sealed, skipped, lost) per run: {stats}")
    if stores == "one store":
        # A run holds the store's file from its open to its end (one epoch per run): the second waits for the
        # first, then finds the job finished and reads nothing.
        assert codes == [0, 0], both
        assert "already finished: nothing to do" in outs[1], both
    else:
        # The second opens the mirrored store while the first is mid-way (fencing it), prunes what the first sealed
        # so far, and writes the rest racing the first's workers (it loses seals to them, or wins them): every input
        # once either way. The first's finalize then fails with Fenced at its first write (or, had the second
        # adopted and deleted every seal before, with IncompleteInputs: its own store never saw them).
        assert stats[1] and stats[1][0] > 0, f"the runs did not overlap\n{both}"
        if codes[0] != 0:
            print(f"the first run, fenced: {outs[0].strip().splitlines()[-1]}")
        assert codes[1] == 0 and (codes[0] == 0 or "Fenced" in outs[0] or "IncompleteInputs" in outs[0]), both
    # Whatever happened, one more run (on a third machine's empty disk, for the mirrored case) ends the job.
    final = ["--mirror", "--store", str(tmp_path / "state-c" / "committer.redb")] if stores != "one store" else []
    _ok(_run(tmp_path, *final))


def test_a_ray_run_with_a_worker_crash_finishes(tmp_path):
    pytest.importorskip("ray")
    # The 3rd seal of the job kills its Ray actor (os._exit): Daft re-runs that task on a new actor (it retries
    # only a task whose worker died), the re-run writes the input the dead one sealed again and loses its seal
    # (run() pruned before the read, so the workers do not check claims), and the run finishes: every row once.
    p = _run(tmp_path, "--runner", "ray", "--crash-at", "sealed:3", timeout=600, inputs=10, rows=500)
    assert "crash-at sealed:3" in p.stdout + p.stderr, "the worker did not crash"
    if p.returncode != 0:  # the crash took the whole job down instead of one task: a rerun must finish it
        print(f"the Ray run failed ({p.returncode}); rerunning")
        p = _run(tmp_path, "--runner", "ray", timeout=600, inputs=10, rows=500)
    _ok(p, rows=5000)
