"""DeltaSink writes each input into a Delta table exactly once, as the Python ``deltalake`` reader sees it: after a
crash at any point of the job (a worker's write, its seal, the driver's adoption, the committer's own crash points,
a kill -9 at a moment of its own) a rerun leaves 0 duplicates and 0 missing rows; two drivers of one job running at
once (a store each, one mirror) do too; the modes that cannot be exactly-once are refused with their reason; the
data files carry what a reader needs (partition values, stats).

The process-level tests run ``examples/daft_delta_job.py`` (the native runner; the Ray runner is the example's
``--runner ray``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from _support import require_daft_and_the_binding, set_native_runner

require_daft_and_the_binding()
deltalake = pytest.importorskip("deltalake")

import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow import fs as pafs

from sinkpoint import InvalidInputError
from sinkpoint.daft import DELTA_REFUSED_MODES, DeltaSink

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "daft_delta_job.py"
INPUTS, ROWS = 8, 100
JOB = "daft-delta-job"


def _example(directory, *args, timeout=120):
    cmd = [sys.executable, str(EXAMPLE), "--dir", str(directory), "--inputs", str(INPUTS), "--rows", str(ROWS)]
    return subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=timeout)


def _table_line(run) -> str:
    lines = [line for line in run.stdout.splitlines() if line.startswith("table: ")]
    assert lines, f"no table line (exit {run.returncode}):\n{run.stdout}\n{run.stderr}"
    return lines[-1]


EXACT = f"table: {INPUTS * ROWS} rows, 0 duplicates, 0 missing"


@pytest.mark.parametrize("per", [1, 4], ids=["a checkpoint per input", "4 inputs a checkpoint"])
def test_a_rerun_after_crashes_at_several_points_leaves_each_row_once(tmp_path, per):
    # One job crashed again and again, each run further on: in a worker before its seal, in a worker after a seal,
    # on the driver after adopting, in the committer after the Delta commit landed and before the store knew.
    per_arg = ("--inputs-per-checkpoint", str(per))
    points = [("written:3", 137), ("sealed:6", 137), ("adopted", 137), ("commit:after-target-commit-before-mark", 86)]
    for point, code in points:
        crashed = _example(tmp_path, "--crash-at", point, *per_arg)
        assert crashed.returncode == code, (point, crashed.stderr[-2000:])
    rerun = _example(tmp_path, *per_arg)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert _table_line(rerun) == EXACT
    # The job finished: one more run reads nothing and commits nothing.
    again = _example(tmp_path, *per_arg)
    assert "commits []" in again.stdout and _table_line(again) == EXACT


def test_a_rerun_after_a_kill_9_of_the_running_job_leaves_each_row_once(tmp_path):
    cmd = [sys.executable, str(EXAMPLE), "--dir", str(tmp_path), "--inputs", "20", "--rows", str(ROWS)]
    job = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    claims = tmp_path / "staging"
    deadline = time.monotonic() + 60
    # Killed once workers have sealed some inputs, while the job runs.
    while job.poll() is None and time.monotonic() < deadline:
        if claims.exists() and sum(len(files) for _, _, files in os.walk(claims)) >= 5:
            break
        time.sleep(0.01)
    os.killpg(job.pid, signal.SIGKILL)
    job.wait()
    rerun = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert _table_line(rerun) == f"table: {20 * ROWS} rows, 0 duplicates, 0 missing"


def test_two_drivers_of_one_job_at_once_leave_each_row_once(tmp_path):
    # A store each, one mirror: the newer driver fences the older, which stops with FencedError.
    runs = [
        subprocess.Popen(
            [
                sys.executable,
                str(EXAMPLE),
                "--dir",
                str(tmp_path),
                "--inputs",
                str(INPUTS),
                "--rows",
                str(ROWS),
                "--mirror",
                "--store",
                str(tmp_path / f"state-{n}" / "committer.redb"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(2)
    ]
    outs = [r.communicate(timeout=120) for r in runs]
    assert any(r.returncode == 0 for r in runs), [o[1][-1500:] for o in outs]
    for r, (_, err) in zip(runs, outs):
        assert r.returncode == 0 or "FencedError" in err or "Fenced" in err, err[-1500:]
    # Whatever the race left, a rerun finishes the job with each row once.
    rerun = _example(tmp_path, "--mirror", "--store", str(tmp_path / "state-2" / "committer.redb"))
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert _table_line(rerun) == EXACT


@pytest.mark.parametrize("mode", sorted(DELTA_REFUSED_MODES))
def test_a_refused_mode_raises_with_its_reason(tmp_path, mode):
    with pytest.raises(InvalidInputError) as refused:
        DeltaSink(str(tmp_path / "t"), "j", f"file://{tmp_path}/s", str(tmp_path / "j.redb"), mode=mode)
    assert DELTA_REFUSED_MODES[mode] in str(refused.value)


@pytest.mark.parametrize(
    "option, why",
    [
        ({"schema_mode": "merge"}, "a schema change is one commit"),
        ({"custom_metadata": {"a": "b"}}, "sinkpoint's own record"),
        ({"dynamo_table_name": "locks"}, "put-if-absent"),
        ({"allow_unsafe_rename": True}, "put-if-absent"),
        ({"checkpoint": object()}, "Daft's own checkpointing"),
    ],
)
def test_a_refused_option_raises_with_its_reason(tmp_path, option, why):
    with pytest.raises(InvalidInputError, match=why):
        DeltaSink(str(tmp_path / "t"), "j", f"file://{tmp_path}/s", str(tmp_path / "j.redb"), **option)


def test_a_table_off_this_machine_is_refused(tmp_path):
    with pytest.raises(InvalidInputError, match="local Delta tables only"):
        DeltaSink("s3://bucket/t", "j", f"file://{tmp_path}/s", str(tmp_path / "j.redb"))


def _read(table, uri: str, **kwargs) -> pa.Table:
    """``table`` (the ``deltalake.DeltaTable`` at ``uri``) read by deltalake's reader through Arrow's own local
    filesystem. Not through deltalake's default filesystem (a Python one): an Arrow thread can still be tearing that
    scan down after the read returned, freeing Python buffers, which aborts the process if it races the
    interpreter's exit ("terminate called without an active exception";
    https://github.com/delta-io/delta-rs/issues/2184 is that abort)."""
    return table.to_pyarrow_table(filesystem=pafs.SubTreeFileSystem(uri, pafs.LocalFileSystem()), **kwargs)


def _inputs(directory: Path):
    directory.mkdir()
    paths = []
    for i in range(3):
        path = str(directory / f"{i}.parquet")
        ids = list(range(i * 10, i * 10 + 10))
        kinds = ["a b" if n % 2 else None if n % 5 == 0 else "c" for n in ids]
        pq.write_table(pa.table({"id": ids, "kind": kinds}), path, row_group_size=4)
        paths.append(path)
    return paths


def test_partitioned_files_carry_their_values_and_stats_for_the_reader(tmp_path):
    set_native_runner()
    paths = _inputs(tmp_path / "in")
    uri = str(tmp_path / "table")
    sink = DeltaSink(uri, "j", f"file://{tmp_path}/s", str(tmp_path / "j.redb"), partition_cols=["kind"])
    sink.run(paths)
    table = deltalake.DeltaTable(uri)
    assert table.metadata().partition_columns == ["kind"]
    read = _read(table, uri).sort_by("id")
    assert read.column("id").to_pylist() == list(range(30))
    assert read.column("kind").to_pylist() == ["a b" if n % 2 else None if n % 5 == 0 else "c" for n in range(30)]
    # The reader prunes by partition value and by the files' stats.
    assert _read(table, uri, filters=[("kind", "=", "a b")]).num_rows == 15
    assert sorted(_read(table, uri, filters=[("id", ">=", 25)]).column("id").to_pylist()) == list(range(25, 30))
    adds = pa.table(table.get_add_actions(flatten=True)).to_pydict()
    assert sum(adds["num_records"]) == 30
    assert table.transaction_version(f"sinkpoint.job.{sink.job}") == 0
    stats = [
        json.loads(json.loads(line)["add"]["stats"])
        for f in sorted((Path(uri) / "_delta_log").glob("*.json"))
        for line in f.read_text().splitlines()
        if '"add"' in line
    ]
    assert all(s["nullCount"] == {"id": 0} and "id" in s["minValues"] for s in stats)


def test_mode_error_creates_the_table_and_accepts_only_its_own(tmp_path):
    set_native_runner()
    paths = _inputs(tmp_path / "in")
    uri = str(tmp_path / "table")
    staging, store = f"file://{tmp_path}/s", str(tmp_path / "j.redb")
    DeltaSink(uri, "j", staging, store, mode="error").run(paths)
    # A rerun of the job accepts the table it created (and finds the job finished).
    DeltaSink(uri, "j", staging, store, mode="error").run(paths)
    assert _read(deltalake.DeltaTable(uri), uri).num_rows == 30
    with pytest.raises(InvalidInputError, match="created by job 'j', not by job 'other'"):
        DeltaSink(uri, "other", f"file://{tmp_path}/s2", str(tmp_path / "o.redb"), mode="error").run(paths)
