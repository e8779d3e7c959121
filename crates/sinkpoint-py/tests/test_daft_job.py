"""examples/daft_lance_job.py end to end, in real processes: one run writes every row once, a rerun of a finished
job does nothing, every crash point and kill -9 at random moments is finished by a rerun with 0 duplicates and 0
missing, with Lance cleanup and compaction between the runs and before the commits too (``--maintenance``), two
drivers started 0.5 s apart write no duplicate, a Ray run finishes, and so does a Ray run killed -9
(every process of its session) at random moments and rerun. (The object-store requests of a run are counted in
test_requests.py.)

Knobs: SINKPOINT_DAFT_TRIALS (kill trials, default 10), SINKPOINT_DAFT_SEED (default 20240601); for the kills of
every process of a Ray run, SINKPOINT_RAY_KILL_TRIALS (default 4) and SINKPOINT_PY_SEED (default random, printed).
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from _support import EXAMPLE, require_daft_and_the_binding

require_daft_and_the_binding()
INPUTS, ROWS = 20, 500
LAST = re.compile(r"^table: (\d+) rows, (\d+) duplicates, (\d+) missing$")
TRIALS = int(os.environ.get("SINKPOINT_DAFT_TRIALS", "10"))
SEED = int(os.environ.get("SINKPOINT_DAFT_SEED", "20240601"))


def _cmd(directory: Path, *extra: str, inputs: int = INPUTS, rows: int = ROWS):
    return [sys.executable, str(EXAMPLE), "--dir", str(directory), "--inputs", str(inputs), "--rows", str(rows), *extra]


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


def test_crashes_of_a_job_sealing_four_inputs_a_checkpoint_are_finished_by_a_rerun(tmp_path):
    # Tasks of 4 inputs, each sealed as one checkpoint: crashed before a seal, after one, after adopting, and in
    # the committer after the Lance commit landed and before the store knew; each run further on.
    per = ("--inputs-per-checkpoint", "4")
    for point, code in [
        ("written:3", 137),
        ("sealed:6", 137),
        ("adopted", 137),
        ("commit:after-target-commit-before-mark", 86),
    ]:
        crashed = _run(tmp_path, "--crash-at", point, *per)
        assert crashed.returncode == code, f"{point}: {crashed.stdout[-2000:]}\n{crashed.stderr[-2000:]}"
        assert _count(tmp_path)[1] == 0, point  # never a duplicate, even mid-job
    _ok(_run(tmp_path, *per))
    assert "already finished" in _ok(_run(tmp_path, *per)).stdout


def test_maintenance_before_between_and_after_the_commits_keeps_every_row_once(tmp_path):
    first = _ok(_run(tmp_path, "--maintenance"))
    assert "maintenance: after the run: cleanup removed" in first.stdout
    assert "already finished" in _ok(_run(tmp_path, "--maintenance")).stdout


@pytest.mark.parametrize("point,code", CRASH_POINTS, ids=[p for p, _ in CRASH_POINTS])
def test_a_rerun_after_a_crash_point_and_maintenance_finishes_the_job(tmp_path, point, code):
    crashed = _run(tmp_path, "--maintenance", "--crash-at", point)
    assert crashed.returncode == code, f"{crashed.stdout[-2000:]}\n{crashed.stderr[-2000:]}"
    assert _count(tmp_path)[1] == 0
    # The rerun's maintenance comes before its recovery: the landed key's version outlives it.
    rerun = _ok(_run(tmp_path, "--maintenance"))
    assert "maintenance: before the run: cleanup removed" in rerun.stdout
    if point == "commit:after-target-commit-before-mark":
        assert "marked landed 0" in rerun.stdout


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
        proc = subprocess.Popen(
            _cmd(directory, *extra), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
        )
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
        return subprocess.Popen(
            _cmd(tmp_path, *extra), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )

    a = start("a")
    time.sleep(0.5)
    b = start("b")
    outs = [p.communicate(timeout=300)[0] for p in (a, b)]
    codes = [a.returncode, b.returncode]
    rows, dups, missing = _count(tmp_path)
    both = f"exits {codes}\n--- a\n{outs[0][-3000:]}\n--- b\n{outs[1][-3000:]}"
    assert dups == 0, f"{dups} duplicates; {both}"
    assert 0 in codes, f"neither driver finished: {both}"
    summaries = [
        re.search(r"(\d+) to write after pruning, (\d+) sealed .*, (\d+) skipped, (\d+) lost", out) for out in outs
    ]
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
        # once either way. The first's finalize then fails with FencedError at its first write (or, had the second
        # adopted and deleted every seal before, with IncompleteInputsError: its own store never saw them).
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


# ----------------------------------------------------------------------------------------------------------
# kill -9 of every process of a Ray run's session
#
# With --runner ray the example starts a local Ray instance. Its gcs_server, raylet, dashboard, monitor,
# log_monitor and the raylet's agents stay in the driver's process group and session, but Ray puts every worker
# (default_worker.py, retitled ray::<task>) in a process group of its own, still in the driver's session: a kill
# of the driver's process group would miss the workers (they go on writing fragments for seconds after such a kill,
# until they notice that their raylet is gone). So the test kills by session id and, in case a Ray process left the
# session (setsid), by a marker in the environment that every process of the run inherits (a safety net only: a
# process that sets a long title, like Ray's agents, may overwrite its /proc environ) or by the Ray temp dir of the
# run in its command line: each run gets one of its own (RAY_TMPDIR), so its session dir and address file are its own.

RAY_KILL_TRIALS = int(os.environ.get("SINKPOINT_RAY_KILL_TRIALS", "4"))
RAY_INPUTS, RAY_ROWS = 20, 500
RAY_EXTRA = ("--runner", "ray", "--delay-ms", "15")
RAY_MARK = "SINKPOINT_RAY_KILL_MARK"


def _procs(sid: int, mark: str, temp: str):
    """{pid: (pgid, session, marked, cmdline)} of the live (not zombie) processes in session ``sid``, or with
    ``mark`` in their environment, or naming the Ray temp dir ``temp`` in their command line."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
            fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": state ppid pgrp session ...
            state, pgid, session = fields[0], int(fields[2]), int(fields[3])
            if state in ("Z", "X") or pid == os.getpid():
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    marked = f"{RAY_MARK}={mark}".encode() in f.read().split(b"\0")
            except OSError:
                marked = False
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        if session == sid or marked or temp in cmdline:
            found[pid] = (pgid, session, marked, cmdline)
    return found


def _kill_all(sid: int, mark: str, temp: str, grace: float = 10.0):
    """SIGKILL every process of the run (its session, each one with its marker or temp dir; the driver's group
    first), again until none is left; the processes found at the first pass (pid: (pgid, session, marked,
    cmdline); a look at /proc takes a few ms). Fails if one survives ``grace`` seconds."""
    first = _procs(sid, mark, temp)
    if sid > 0:
        try:
            os.killpg(sid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + grace
    left = first
    while left:
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)
        left = _procs(sid, mark, temp)
        if time.monotonic() > deadline:
            raise AssertionError(f"processes of the killed Ray run survive SIGKILL: {left}")
    return first


def _ray_env(mark: str, temp: str):
    return {**os.environ, RAY_MARK: mark, "RAY_TMPDIR": temp}


def _layout(directory: Path):
    """(fragments in the table, claims (one per sealed input), the table's versions) on disk now."""

    def n(path: Path, suffix: str = "") -> int:
        try:
            return sum(name.endswith(suffix) for name in os.listdir(path))
        except OSError:
            return 0

    claims = directory / "staging" / "jobs" / "daft-lance-job" / "shared" / "claims"
    return n(directory / "table.lance" / "data"), n(claims), n(directory / "table.lance" / "_versions", ".manifest")


def _wait_for(proc: subprocess.Popen, directory: Path, done, timeout: float) -> bool:
    """Polls the job's directory until ``done(layout)`` (True), or the process ended or ``timeout`` passed (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if done(_layout(directory)):
            return True
        time.sleep(0.01)
    return False


def test_kill_9_of_every_process_of_a_ray_run_at_random_moments_then_a_rerun(tmp_path, seed):
    pytest.importorskip("ray")
    import tempfile
    import uuid

    rng = random.Random(seed)
    # Short temp dirs: Ray's unix sockets live under them (108 bytes at most for a socket path).
    temps = []

    def temp_dir() -> str:
        temps.append(tempfile.mkdtemp(prefix="sp-ray-", dir="/tmp"))
        return temps[-1]

    def start(directory: Path, mark: str, temp: str) -> subprocess.Popen:
        return subprocess.Popen(
            _cmd(directory, *RAY_EXTRA, inputs=RAY_INPUTS, rows=RAY_ROWS),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env=_ray_env(mark, temp),
        )

    runs = []  # (Popen or None, mark, temp) of every run, for the cleanup
    try:
        # Calibrate: when a clean Ray run here writes its first fragment, has sealed every input, ends.
        directory, mark, temp = tmp_path / "calibrate", uuid.uuid4().hex, temp_dir()
        t0 = time.monotonic()
        proc = start(directory, mark, temp)
        runs.append((proc, mark, temp))
        _wait_for(proc, directory, lambda counts: counts[0] > 0, 300)
        t_first = time.monotonic() - t0
        _wait_for(proc, directory, lambda counts: counts[1] >= RAY_INPUTS, 300)
        t_sealed = time.monotonic() - t0
        _wait_for(proc, directory, lambda counts: counts[2] >= 2, 300)
        t_commit = time.monotonic() - t0
        assert proc.wait(timeout=300) == 0, "the clean Ray run failed"
        t_end = time.monotonic() - t0
        assert _count(directory, RAY_INPUTS, RAY_ROWS) == (RAY_INPUTS * RAY_ROWS, 0, 0)
        left = _procs(proc.pid, mark, temp)
        assert not left, f"a clean Ray run left processes behind: {left}"
        print(
            f"\nclean Ray run: first fragment {t_first:.2f} s, every input sealed {t_sealed:.2f} s, "
            f"committed {t_commit:.2f} s, exit {t_end:.2f} s"
        )

        # Kill moments across the run, one phase after the other (from a seeded start): before the first fragment
        # (Ray starting, the inputs read), mid-write (after the first fragment), around finalize and the commit
        # (from the last but one seal to 1.5 times as long as a seal and the commit took in the clean run, ~100 ms
        # in all: the last seal, Daft collects the results, the driver adopts and commits), and after the commit (the
        # table's version 2 is on disk; the driver reports, Ray shuts down). Version 1 is the empty table run()
        # creates.
        phases = ["startup", "write", "finalize", "committed"]
        offset = rng.randrange(len(phases))
        results = []
        for trial in range(RAY_KILL_TRIALS):
            phase = phases[(offset + trial) % len(phases)]
            directory, mark, temp = tmp_path / f"trial-{trial}", uuid.uuid4().hex, temp_dir()
            t0 = time.monotonic()
            proc = start(directory, mark, temp)
            runs.append((proc, mark, temp))
            if phase == "startup":
                delay = rng.uniform(0.3, t_first)
            elif phase == "write":
                _wait_for(proc, directory, lambda counts: counts[0] > 0, 300)
                delay = rng.uniform(0.0, max(0.1, t_sealed - t_first))
            elif phase == "finalize":
                _wait_for(proc, directory, lambda counts: counts[1] >= RAY_INPUTS - 1, 300)
                delay = rng.uniform(0.0, 1.5 * (t_commit - t_sealed + (t_sealed - t_first) / RAY_INPUTS))
            else:
                _wait_for(proc, directory, lambda counts: counts[2] >= 2, 300)
                delay = rng.uniform(0.0, 1.1 * max(0.2, t_end - t_commit))
            try:
                proc.wait(timeout=delay)
                exited = proc.returncode
            except subprocess.TimeoutExpired:
                exited = None
            at = time.monotonic() - t0
            killed = _kill_all(proc.pid, mark, temp)
            layout = _layout(directory)
            proc.wait(timeout=30)
            outside = sorted(
                {c.split()[0].rsplit("/", 1)[-1] if c else "?" for g, _, _, c in killed.values() if g != proc.pid}
            )
            in_session = sum(s == proc.pid for _, s, _, _ in killed.values())
            marked = sum(m for _, _, m, _ in killed.values())
            unmarked = sorted({c[:60] for _, _, m, c in killed.values() if not m})
            # Nothing of the killed run is left: not in its session, not with its marker, not in its temp dir.
            assert not _procs(proc.pid, mark, temp)
            rows, dups, missing = _count(directory, RAY_INPUTS, RAY_ROWS)
            what = (
                f"trial {trial}: {phase}, kill at {at:.2f} s (fragments {layout[0]}, seals {layout[1]}, "
                f"Lance versions {layout[2]}{', after the exit' if exited is not None else ''}): "
                f"{len(killed)} processes killed ({in_session} in the driver's session, {marked} with the marker"
                f"{' ' + str(unmarked) if unmarked else ''}), "
                f"{sum(g != proc.pid for g, _, _, _ in killed.values())} outside the driver's group "
                f"{outside}; table before the rerun: {rows} rows, {dups} duplicates"
            )
            assert dups == 0, what
            # The rerun: the native runner, and Ray every other trial.
            runner = "ray" if trial % 2 else "native"
            rmark, rtemp = uuid.uuid4().hex, temp_dir()
            rerun_cmd = _cmd(directory, "--runner", runner, inputs=RAY_INPUTS, rows=RAY_ROWS)
            p = subprocess.run(
                rerun_cmd,
                capture_output=True,
                text=True,
                timeout=300,
                start_new_session=True,
                env=_ray_env(rmark, rtemp),
            )
            runs.append((None, rmark, rtemp))
            _ok(p, rows=RAY_INPUTS * RAY_ROWS)
            assert _count(directory, RAY_INPUTS, RAY_ROWS) == (RAY_INPUTS * RAY_ROWS, 0, 0), what
            what += f"; rerun ({runner}): {RAY_INPUTS * RAY_ROWS} rows, 0 duplicates, 0 missing"
            print(what, flush=True)
            results.append(phase)
        print(f"seed {seed}: {len(results)} trials, phases {results}")
    finally:
        for proc, mark, temp in runs:
            # By the session too while the driver lives (its pid is its session's id only until then).
            _kill_all(proc.pid if proc is not None and proc.poll() is None else -1, mark, temp)
        for temp in temps:
            shutil.rmtree(temp, ignore_errors=True)
