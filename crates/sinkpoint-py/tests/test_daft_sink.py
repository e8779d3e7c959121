"""sinkpoint.daft.LanceSink in one process (native runner): the sink's rules, one by one.

The end-to-end runs of the example (crashes, kills, two drivers, Ray) are in test_daft_job.py.
"""

from __future__ import annotations

import importlib.util
import os
import pickle
from pathlib import Path

import pytest

daft = pytest.importorskip("daft")
lance = pytest.importorskip("lance")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
try:
    import sinkpoint._sinkpoint  # noqa: F401
except ImportError:
    pytest.skip("sinkpoint._sinkpoint is not built (maturin develop)", allow_module_level=True)

from daft.recordbatch import MicroPartition

import sinkpoint
import sinkpoint.lance
from sinkpoint.daft import (
    INPUT_COLUMN,
    POSITION_COLUMN,
    RESULT_SCHEMA,
    IncompleteInputsError,
    LanceSink,
    daft_path,
    prune_inputs,
    read_inputs,
)

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "daft_lance_job.py"


def _example():
    spec = importlib.util.spec_from_file_location("daft_lance_job", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


job_mod = _example()


@pytest.fixture(scope="module", autouse=True)
def _native_runner():
    try:
        daft.set_runner_native()
    except Exception:  # the runner can be set once per process: it is already set
        pass


def _sink(tmp: Path, job: str = "job", cls: type = LanceSink, **kwargs) -> LanceSink:
    return cls(
        str(tmp / "table.lance"),
        job,
        f"file://{tmp}/staging",
        str(tmp / "state" / "committer.redb"),
        **kwargs,
    )


def _inputs(tmp: Path, count: int = 4, rows: int = 200, row_groups: int = 4):
    return job_mod.make_inputs(str(tmp / "inputs"), count, rows, row_groups)


def _count(tmp: Path, count: int, rows: int):
    return job_mod.count_table(str(tmp / "table.lance"), count, rows)


def _mp(path: str, first: int, rows: int) -> MicroPartition:
    """A micropartition of ``rows`` rows of input ``path`` (the example's schema) from position ``first``, as
    :func:`read_inputs` reads them."""
    table = pq.read_table(path).slice(first, rows)
    table = table.append_column(INPUT_COLUMN, pa.array([daft_path(path)] * table.num_rows, pa.large_string()))
    table = table.append_column(POSITION_COLUMN, pa.array(range(first, first + table.num_rows), pa.int64()))
    return MicroPartition.from_arrow(table)


def _events(results):
    return [e for r in results for e in r.result["events"]]


# ----------------------------------------------------------------------------------------------------------


def test_the_sink_pickles_as_its_configuration(tmp_path):
    sink = _sink(tmp_path, mirror_url=f"file://{tmp_path}/mirror", storage_options={"k": "v"})
    sink._inputs = ["/a", "/b"]
    sink.report = {"x": 1}
    copy = pickle.loads(pickle.dumps(sink))
    assert (copy.uri, copy.job, copy.staging_url, copy.store_path, copy.mirror_url, copy.storage_options) == (
        sink.uri,
        sink.job,
        sink.staging_url,
        sink.store_path,
        sink.mirror_url,
        sink.storage_options,
    )
    assert copy._token == sink._token
    assert copy._inputs is None and copy.report == {}


def test_finalize_returns_the_schema_daft_checks(tmp_path):
    sink = _sink(tmp_path)
    assert sink.schema() == daft.Schema.from_pyarrow_schema(RESULT_SCHEMA)


def test_one_input_in_many_micropartitions_is_written_once(tmp_path):
    paths = _inputs(tmp_path, count=6, rows=300, row_groups=5)
    sink = _sink(tmp_path)
    out = sink.run(paths).to_pydict()
    assert _count(tmp_path, 6, 300) == (1800, 0, 0)
    assert sink.report["sealed"] == 6 and sink.report["finished"]
    assert out["rows"] == [1800] and len(out["checkpoints"][0]) == 6
    assert sorted(out["inputs"][0]) == sorted(daft_path(p) for p in paths)
    # Each input became one fragment.
    assert len(lance.dataset(str(tmp_path / "table.lance")).get_fragments()) == 6


def test_a_rerun_of_a_finished_job_does_nothing(tmp_path):
    paths = _inputs(tmp_path)
    _sink(tmp_path).run(paths)
    version = lance.dataset(str(tmp_path / "table.lance")).version
    again = _sink(tmp_path)
    assert again.run(paths).to_pydict()["key"] == []
    assert again.report["already_finished"] and again.report["pending"] == 0
    assert lance.dataset(str(tmp_path / "table.lance")).version == version
    with sinkpoint.Driver(
        str(tmp_path / "state" / "committer.redb"), "job", sinkpoint.lance.LanceTarget(str(tmp_path / "table.lance"))
    ) as d:
        assert prune_inputs(paths, driver=d) == []


def test_a_finished_job_run_with_a_new_input_raises_and_writes_nothing(tmp_path):
    paths = _inputs(tmp_path, count=3)
    _sink(tmp_path).run(paths[:2])
    version = lance.dataset(str(tmp_path / "table.lance")).version
    again = _sink(tmp_path)
    with pytest.raises(IncompleteInputsError, match="write them under a new job id") as err:
        again.run(paths)
    assert err.value.missing == [daft_path(paths[2])]
    assert again.report["finished"] and again.report["missing"] == [daft_path(paths[2])]
    assert lance.dataset(str(tmp_path / "table.lance")).version == version
    assert _count(tmp_path, 2, 200) == (400, 0, 0)


def test_prune_inputs_drops_sealed_inputs_and_spells_paths_as_daft(tmp_path):
    paths = _inputs(tmp_path, count=3)
    sink = _sink(tmp_path)
    sink.start()
    # Seal input 1 through the sink's write, then stop (no finalize): it is sealed, not committed.
    results = []
    for first in range(0, 200, 50):
        results += list(sink.write(iter([_mp(paths[1], first, 50)])))
    assert [e["event"] for r in results for e in r.result["events"]][-1] == "sealed"
    urls = [f"file://{p}" for p in paths] + [paths[0]]
    left = prune_inputs(urls, staging_url=sink.staging_url, job="job")
    assert left == [daft_path(paths[0]), daft_path(paths[2])]
    with pytest.raises(ValueError):
        prune_inputs(paths)


def test_large_inputs_are_staged_in_parts_and_sealed_once(tmp_path):
    paths = _inputs(tmp_path, count=3, rows=400, row_groups=4)
    sink = _sink(tmp_path, flush_bytes=1)  # every micropartition flushes a part
    sink.run(paths, batch_rows=100)  # 4 micropartitions per input
    assert _count(tmp_path, 3, 400) == (1200, 0, 0)
    # 4 parts (one fragment each) per input.
    assert len(lance.dataset(str(tmp_path / "table.lance")).get_fragments()) == 12


def test_an_input_filtered_on_the_way_is_never_written_and_blocks_the_finish(tmp_path):
    paths = _inputs(tmp_path, count=3, rows=200)
    sink = _sink(tmp_path)
    sink._inputs = [daft_path(p) for p in paths]
    df = read_inputs(paths).where(daft.col("id") != 250)  # input 1 loses a row
    with pytest.raises(IncompleteInputsError) as err:
        df.write_sink(sink)
    assert list(err.value.incomplete) == [daft_path(paths[1])]
    assert err.value.incomplete[daft_path(paths[1])] == (199, 200)
    assert "incompletely" in str(err.value)
    # Inputs 0 and 2 are committed, nothing of input 1 is; the job is not finished.
    ids = set(lance.dataset(str(tmp_path / "table.lance")).to_table(columns=["id"]).column("id").to_pylist())
    assert ids == set(range(0, 200)) | set(range(400, 600))
    assert not sink.report["finished"]
    # The whole input, read again, completes the job.
    rerun = _sink(tmp_path)
    rerun.run(paths)
    assert rerun.report["pending"] == 1 and rerun.report["finished"]
    assert _count(tmp_path, 3, 200) == (600, 0, 0)


def test_row_positions_are_tracked_as_runs(tmp_path):
    from sinkpoint.daft import POSITION_RUNS_MAX
    from sinkpoint.daft._reader import _Ranges

    r = _Ranges()
    assert r.complete(0) and not r.complete(10)
    assert r.add(pa.array([2, 3, 4]), 10) is None and (r.starts, r.ends) == ([2], [5])
    assert r.add(pa.array([0, 1]), 10) is None and (r.starts, r.ends) == ([0], [5])  # joined: one run
    assert r.add(pa.array([9, 7]), 10) is None and (r.starts, r.ends) == ([0, 7, 9], [5, 8, 10])
    # A position held already, twice in one batch, or beyond the file: refused, nothing of the batch added.
    assert "arrived twice" in r.add(pa.array([5, 4]), 10)
    assert "twice in one batch" in r.add(pa.array([5, 5]), 10)
    assert "beyond the file's 10 rows" in r.add(pa.array([10]), 10)
    assert "beyond" in r.add(pa.array([-1]), 10)
    assert (r.starts, r.ends, r.count) == ([0, 7, 9], [5, 8, 10], 7) and not r.complete(10)
    assert r.add(pa.array([8, 5, 6]), 10) is None
    assert (r.starts, r.ends, r.count) == ([0], [10], 10) and r.complete(10)
    # Rows scattered into more runs than the limit: refused (the input would never complete cheaply).
    scattered = _Ranges()
    assert "disjoint runs" in scattered.add(pa.array(range(0, 2 * POSITION_RUNS_MAX + 2, 2)), 10**9)


def test_rows_without_positions_are_refused(tmp_path):
    paths = _inputs(tmp_path, count=1, rows=100, row_groups=1)
    sink = _sink(tmp_path)
    sink.start()
    table = pq.read_table(paths[0]).append_column(
        INPUT_COLUMN, pa.array([daft_path(paths[0])] * 100, pa.large_string())
    )
    with pytest.raises(ValueError, match="read_inputs"):
        list(sink.write(iter([MicroPartition.from_arrow(table)])))


def test_an_input_whose_copies_interleave_is_never_sealed(tmp_path):
    paths = _inputs(tmp_path, count=2, rows=100, row_groups=1)
    sink = _sink(tmp_path)
    sink.start()
    results = []
    # Two copies of input 0, interleaved: 100 rows arrive, positions 0..59 twice and 60..99 never.
    for first in (0, 30):
        results += list(sink.write(iter([_mp(paths[0], first, 30)])))
        results += list(sink.write(iter([_mp(paths[0], first, 30)])))
    results += list(sink.write(iter([_mp(paths[1], 0, 100)])))
    assert [e["event"] for e in _events(results)] == ["pending", "rejected", "sealed"]
    sink._inputs = [daft_path(p) for p in paths]
    with pytest.raises(IncompleteInputsError, match="more than once") as err:
        sink.finalize(results)
    assert list(err.value.rejected) == [daft_path(paths[0])]
    assert "arrived twice" in err.value.rejected[daft_path(paths[0])]
    assert err.value.missing == [] and err.value.incomplete == {}
    # Input 1 is committed; nothing of input 0; the job is not finished.
    ids = lance.dataset(str(tmp_path / "table.lance")).to_table(columns=["id"]).column("id").to_pylist()
    assert sorted(ids) == list(range(100, 200)) and not sink.report["finished"]


def test_rows_after_an_input_is_sealed_are_an_error_finalize_raises(tmp_path):
    paths = _inputs(tmp_path, count=1, rows=100, row_groups=1)
    sink = _sink(tmp_path)
    sink.start()
    results = list(sink.write(iter([_mp(paths[0], 0, 100)])))
    results += list(sink.write(iter([_mp(paths[0], 0, 40)])))  # a second copy, after the first was complete
    assert [e["event"] for e in _events(results)] == ["sealed", "rejected"]
    sink._inputs = [daft_path(paths[0])]
    with pytest.raises(IncompleteInputsError, match="after the input was complete") as err:
        sink.finalize(results)
    assert list(err.value.rejected) == [daft_path(paths[0])]
    # The complete copy was sealed (each position once) and is committed once; the second copy is not.
    assert _count(tmp_path, 1, 100) == (100, 0, 0)
    assert sink.report["committed_keys"] == [0] and not sink.report["finished"]


def _one_input_in_row_groups(tmp_path, rows: int = 40000, row_groups: int = 40) -> str:
    """One input of ``rows`` rows in ``row_groups`` row groups (ids 0 .. rows - 1): the A5 reproduction's file."""
    path = str(tmp_path / "inputs" / "big.parquet")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(pa.table({"id": pa.array(range(rows), pa.int64())}), path, row_group_size=rows // row_groups)
    return path


def test_a_duplicated_path_through_write_sink_is_refused(tmp_path):
    path = _one_input_in_row_groups(tmp_path)
    # daft.read_parquet gives each row its input but not its position: the sink refuses such rows, as it cannot
    # tell one input read twice (here, interleaved in one process) from one read once.
    sink = _sink(tmp_path)
    df = daft.read_parquet([path, path], file_path_column=INPUT_COLUMN)
    with pytest.raises(Exception, match="read_inputs"):
        df.write_sink(sink)
    assert _ids(tmp_path) == []


def test_a_duplicated_path_read_with_positions_is_never_sealed_as_a_mix(tmp_path):
    path = _one_input_in_row_groups(tmp_path)
    # The table is created at start(): when the copies interleave nothing is sealed, and finalize's recovery probes
    # the table.
    sink = _sink(tmp_path, schema=pa.schema([("id", pa.int64())]))
    sink._inputs = [daft_path(path)]
    df = read_inputs([path, path], batch_rows=1000)
    with pytest.raises(IncompleteInputsError, match="more than once") as err:
        df.write_sink(sink)
    assert list(err.value.rejected) == [daft_path(path)]
    # Whether the copies interleaved (nothing sealed) or came one after the other (the first sealed whole), the
    # table holds no mix: each row once, or nothing.
    ids = _ids(tmp_path)
    assert ids in ([], list(range(40000)))


def _ids(tmp_path):
    try:
        return sorted(lance.dataset(str(tmp_path / "table.lance")).to_table(columns=["id"]).column("id").to_pylist())
    except (ValueError, OSError):
        return []


def test_splitting_one_input_across_tasks_is_refused(tmp_path):
    paths = _inputs(tmp_path, count=2)
    with daft.execution_config_ctx(enable_scan_task_split_and_merge=True):
        with pytest.raises(ValueError, match="parquet_split_row_groups_max_files=0"):
            _sink(tmp_path).run(paths)
    with daft.execution_config_ctx(enable_scan_task_split_and_merge=True, parquet_split_row_groups_max_files=0):
        _sink(tmp_path).run(paths)
    assert _count(tmp_path, 2, 200) == (400, 0, 0)


def test_a_lost_seal_reports_its_garbage_and_the_winner_is_committed_once(tmp_path):
    paths = _inputs(tmp_path, count=1, rows=200, row_groups=1)
    slow, fast = _sink(tmp_path), _sink(tmp_path)
    slow.start()
    fast.start()
    assert slow._token != fast._token
    results = list(slow.write(iter([_mp(paths[0], 0, 150)])))  # not complete: pending
    results += list(fast.write(iter([_mp(paths[0], 0, 200)])))  # complete: sealed
    results += list(slow.write(iter([_mp(paths[0], 150, 50)])))  # complete too late: lost
    events = [e for r in results for e in r.result["events"]]
    assert [e["event"] for e in events] == ["pending", "sealed", "lost"]
    lost = events[-1]
    # The loser's fragment is in no seal: its worker deleted it at once.
    assert lost["garbage"] and lost["deleted"] == lost["garbage"]
    assert not any(os.path.exists(f) for f in lost["garbage"])
    fast._inputs = [daft_path(paths[0])]
    out = fast.finalize(results).to_pydict()
    assert out["rows"] == [200]
    assert fast.report["lost"] == {daft_path(paths[0]): lost["winner"]}
    assert set(lost["garbage"]) <= set(fast.report["garbage"])
    assert set(lost["garbage"]) <= set(fast.report["garbage_deleted"])
    assert _count(tmp_path, 1, 200) == (200, 0, 0)
    assert len(lance.dataset(str(tmp_path / "table.lance")).get_fragments()) == 1
    assert len(os.listdir(tmp_path / "table.lance" / "data")) == 1


def test_a_lost_seal_whose_files_cannot_be_deleted_still_ends_the_task(tmp_path, monkeypatch, caplog):
    def refuse(self, file):
        raise PermissionError(f"no delete for {file}")

    monkeypatch.setattr(sinkpoint.lance.LanceDataFiles, "delete", refuse)
    paths = _inputs(tmp_path, count=1, rows=200, row_groups=1)
    slow, fast = _sink(tmp_path), _sink(tmp_path)
    slow.start()
    fast.start()
    results = list(slow.write(iter([_mp(paths[0], 0, 150)])))
    results += list(fast.write(iter([_mp(paths[0], 0, 200)])))
    with caplog.at_level("WARNING", logger="sinkpoint.daft"):
        results += list(slow.write(iter([_mp(paths[0], 150, 50)])))
    lost = [e for r in results for e in r.result["events"]][-1]
    assert lost["event"] == "lost" and lost["deleted"] == []
    assert lost["garbage"] and all(os.path.exists(f) for f in lost["garbage"])
    assert "could not delete" in caplog.text and "no delete for" in caplog.text
    fast._inputs = [daft_path(paths[0])]
    assert fast.finalize(results).to_pydict()["rows"] == [200]
    assert fast.report["garbage_deleted"] == [] and set(lost["garbage"]) <= set(fast.report["garbage"])
    assert _count(tmp_path, 1, 200) == (200, 0, 0)


def test_collect_orphans_deletes_the_parts_of_an_attempt_that_died_after_another_sealed(tmp_path):
    paths = _inputs(tmp_path, count=1, rows=200, row_groups=1)
    data = tmp_path / "table.lance" / "data"
    dead, fast = _sink(tmp_path, flush_bytes=1), _sink(tmp_path)
    dead.start()
    fast.start()
    # The first attempt stages half the input as a part (flush_bytes=1), then its process dies.
    events = [e for r in dead.write(iter([_mp(paths[0], 0, 100)])) for e in r.result["events"]]
    assert [e["event"] for e in events] == ["pending"]
    dead_files = {str(data / f) for f in os.listdir(data)}
    assert len(dead_files) == 1
    dead_names = [f"data/{os.path.basename(f)}" for f in dead_files]  # as LanceDataFiles names them
    # The retry writes the whole input and seals it; finalize adopts it, and finds the dead attempt's part: a
    # loser, whose result goes to the store's garbage ledger.
    results = list(fast.write(iter([_mp(paths[0], 0, 200)])))
    fast._inputs = [daft_path(paths[0])]
    assert fast.finalize(results).to_pydict()["rows"] == [200]
    assert set(fast.report["garbage"]) == dead_files and fast.report["garbage_deleted"] == []
    assert _count(tmp_path, 1, 200) == (200, 0, 0)

    young = fast.collect_orphans()  # the default grace period: a day
    assert [(f.file, f.verdict) for f in young.files] == [(f, "young") for f in dead_names]
    dry = fast.collect_orphans(grace_s=0)
    assert [(f.file, f.verdict) for f in dry.files] == [(f, "due") for f in dead_names]
    assert all(os.path.exists(f) for f in dead_files)

    applied = fast.collect_orphans(grace_s=0, apply=True)
    assert [(f.file, f.verdict) for f in applied.files] == [(f, "deleted") for f in dead_names]
    assert (applied.entries, applied.forgotten) == (1, 1)
    assert not any(os.path.exists(f) for f in dead_files)
    assert len(os.listdir(data)) == 1
    assert _count(tmp_path, 1, 200) == (200, 0, 0)
    assert fast.collect_orphans(grace_s=0, apply=True).entries == 0
    # A rerun of the finished job does nothing.
    assert _sink(tmp_path).run(paths).to_pydict()["key"] == []


@pytest.mark.parametrize("per", [1, 3], ids=["a checkpoint per input", "3 inputs a checkpoint"])
def test_an_empty_input_is_sealed_by_the_driver(tmp_path, per):
    paths = _inputs(tmp_path, count=2, rows=100)
    empty = str(tmp_path / "inputs" / "empty.parquet")
    pq.write_table(pq.read_table(paths[0]).slice(0, 0), empty)
    sink = _sink(tmp_path, inputs_per_checkpoint=per)
    sink.run(paths + [empty])
    assert sink.report["finished"] and sink.report["missing"] == []
    assert _count(tmp_path, 2, 100) == (200, 0, 0)
    with sinkpoint.Driver(
        str(tmp_path / "state" / "committer.redb"), "job", sinkpoint.lance.LanceTarget(str(tmp_path / "table.lance"))
    ) as d:
        assert d.is_processed(daft_path(empty))


#: Worker.is_processed calls made through _CountingSink, per test (module-level: the native runner may copy the sink).
_CHECKS: list = []


class _CountingWorker:
    def __init__(self, inner):
        self._inner = inner

    def is_processed(self, key):
        _CHECKS.append(key)
        return self._inner.is_processed(key)

    def __getattr__(self, name):
        return getattr(self._inner, name)


class _CountingStaging:
    def __init__(self, inner):
        self._inner = inner

    def worker(self, name):
        return _CountingWorker(self._inner.worker(name))


class _RacedSink(LanceSink):
    """A sink whose input ``raced`` is sealed by another attempt (a racing driver's worker, or a Ray retry's dead
    first attempt) after run() pruned it and before this run's workers see it; counts the workers' is_processed."""

    raced: str = ""

    def start(self) -> None:
        super().start()
        rival = LanceSink(self.uri, self.job, self.staging_url, self.store_path + ".rival")
        rival.start()
        events = [
            e
            for r in rival.write(iter([_mp(self.raced, 0, pq.read_metadata(self.raced).num_rows)]))
            for e in r.result["events"]
        ]
        assert [e["event"] for e in events] == ["sealed"], events

    def _staging(self, role: str):
        staging = super()._staging(role)
        return _CountingStaging(staging) if role == "worker" else staging


@pytest.mark.parametrize("check", [None, True], ids=["run() default: no worker check", "check_processed_in_worker"])
def test_an_input_sealed_by_another_attempt_after_pruning_is_never_duplicated(tmp_path, check):
    paths = _inputs(tmp_path, count=4, rows=200)
    _CHECKS.clear()
    sink = _sink(tmp_path, cls=_RacedSink, check_processed_in_worker=check)
    sink.raced = paths[0]
    out = sink.run(paths).to_pydict()
    report = sink.report
    assert _count(tmp_path, 4, 200) == (800, 0, 0)
    assert report["finished"] and report["pending"] == 4
    assert out["rows"] == [None]  # the commit holds the rival's checkpoint, whose rows this run did not write
    assert sorted(out["inputs"][0]) == sorted(daft_path(p) for p in paths)
    if check is None:
        # run() pruned just before the read: the workers do not read claims; the raced input is written, loses
        # its seal, and its fragment is garbage (reported, never committed).
        assert _CHECKS == []
        assert report["skipped"] == 0 and report["sealed"] == 3
        assert list(report["lost"]) == [daft_path(paths[0])]
        assert report["garbage"] and not any(os.path.exists(f) for f in report["garbage"])
        assert report["garbage_deleted"] == report["garbage"]  # the losing worker deleted its own
    else:
        # One claim read per input; the raced input is skipped before it is written.
        assert sorted(_CHECKS) == sorted(daft_path(p) for p in paths)
        assert report["skipped"] == 1 and report["sealed"] == 3
        assert report["lost"] == {} and report["garbage"] == []
    # The table holds each input's fragment once: the rival's for the raced input.
    assert len(lance.dataset(str(tmp_path / "table.lance")).get_fragments()) == 4


def test_run_prunes_by_the_store_after_adopting_without_a_claim_read_per_input(tmp_path, monkeypatch):
    paths = _inputs(tmp_path, count=4, rows=200)
    first = _sink(tmp_path)
    first.start()
    # A crashed run: input 1 sealed by a worker, never adopted.
    for r in first.write(iter([_mp(paths[1], 0, 200)])):
        assert [e["event"] for e in r.result["events"]] == ["sealed"]
    import sinkpoint.daft._runner as runner

    def no_prune(*a, **k):
        raise AssertionError("run() must prune by the driver's store, not with a claim read per input")

    monkeypatch.setattr(runner, "prune_inputs", no_prune)
    _CHECKS.clear()
    rerun = _RacedSink(
        str(tmp_path / "table.lance"), "job", f"file://{tmp_path}/staging", str(tmp_path / "state" / "committer.redb")
    )
    rerun.raced = paths[3]
    rerun.run(paths)
    # Input 1 was adopted before pruning (not read again); 3 was raced after pruning (written, lost). Adopted: 1
    # before pruning, then 0 and 2 (this run's) and 3 (the rival's).
    assert rerun.report["pending"] == 3 and rerun.report["adopted"] == 4
    assert list(rerun.report["lost"]) == [daft_path(paths[3])]
    assert _CHECKS == []
    assert _count(tmp_path, 4, 200) == (800, 0, 0)


def test_every_public_name_still_imports_from_sinkpoint_daft():
    import sinkpoint.daft as sd

    # The module's public names before it became a package of modules.
    names = [
        "INPUT_COLUMN",
        "POSITION_COLUMN",
        "RESULT_SCHEMA",
        "LanceSink",
        "daft_path",
        "prune_inputs",
        "read_inputs",
        "FLUSH_BYTES_DEFAULT",
        "GRACE_S_DEFAULT",
        "OPEN_TIMEOUT_S_DEFAULT",
        "READ_BATCH_ROWS_DEFAULT",
        "POSITION_RUNS_MAX",
    ]
    assert [n for n in names if not hasattr(sd, n)] == []
    assert set(names) <= set(sd.__all__)
    assert sd.LanceSink.__module__ == "sinkpoint.daft" and sd.IncompleteInputsError.__module__ == "sinkpoint.daft"


def test_incomplete_inputs_is_the_deprecated_name_of_incomplete_inputs_error():
    import sinkpoint.daft as sd

    message = "sinkpoint.daft.IncompleteInputs is deprecated: use sinkpoint.daft.IncompleteInputsError"
    with pytest.warns(DeprecationWarning, match=message):
        old = sd.IncompleteInputs
    assert old is IncompleteInputsError
    with pytest.warns(DeprecationWarning, match=message):
        exec("from sinkpoint.daft import IncompleteInputs as imported", namespace := {})
    assert namespace["imported"] is IncompleteInputsError
    assert "IncompleteInputs" not in sd.__all__ and "IncompleteInputsError" in sd.__all__
    # The old name still catches what is raised, and the error pickles under its new name.
    with pytest.warns(DeprecationWarning):
        with pytest.raises(sd.IncompleteInputs):
            raise IncompleteInputsError("job j cannot finish", missing=["a"])
    copy = pickle.loads(pickle.dumps(IncompleteInputsError("m", missing=["a"], rejected={"b": "twice"})))
    assert type(copy) is IncompleteInputsError and copy.missing == ["a"] and copy.rejected == {"b": "twice"}
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchName'"):
        sd.NoSuchName  # noqa: B018


def test_the_readers_footer_row_counts_are_kept_for_the_sink_and_bounded():
    """The reader keeps each input's footer row count for the sink in its process (no second footer read), at
    most FOOTER_ROWS_CACHED_MAX of them, the oldest forgotten first."""
    from sinkpoint.daft import _reader

    limit = _reader.FOOTER_ROWS_CACHED_MAX
    for i in range(limit + 2):
        _reader._remember_footer_rows(f"mem://footer-{i}", i)
    assert _reader._footer_rows_read("mem://footer-0") is None
    assert _reader._footer_rows_read("mem://footer-1") is None
    assert _reader._footer_rows_read(f"mem://footer-{limit + 1}") == limit + 1
    assert len(_reader._footer_rows) == limit


# -- checkpoints of several inputs (inputs_per_checkpoint) ----------------------------------------------------------


def _mps(paths, rows: int) -> MicroPartition:
    """One micropartition holding every row of the inputs ``paths`` (``rows`` each), as a task of them reads it."""
    return MicroPartition.concat([_mp(p, 0, rows) for p in paths])


#: stage_and_seal calls of the workers of _SealCountingSink, per test.
_SEALS: list = []


class _SealCountingWorker(_CountingWorker):
    def stage_and_seal(self, id, keys, results):
        _SEALS.append((id, list(keys)))
        return self._inner.stage_and_seal(id, keys, results)


class _SealCountingSink(LanceSink):
    def _staging(self, role: str):
        staging = super()._staging(role)
        if role != "worker":
            return staging
        counting = _CountingStaging(staging)
        counting.worker = lambda name: _SealCountingWorker(staging.worker(name))
        return counting


def test_a_task_of_several_inputs_is_sealed_as_one_checkpoint_in_one_call(tmp_path):
    paths = _inputs(tmp_path, count=12, rows=100, row_groups=2)
    _SEALS.clear()
    sink = _sink(tmp_path, cls=_SealCountingSink, inputs_per_checkpoint=4)
    out = sink.run(paths).to_pydict()
    assert _count(tmp_path, 12, 100) == (1200, 0, 0)
    assert sink.report["finished"] and sink.report["sealed"] == 12 and sink.report["missing"] == []
    # Three tasks of four inputs: three seals, each one call under the id of its four inputs, one fragment each.
    assert sorted(len(keys) for _, keys in _SEALS) == [4, 4, 4]
    assert {cid for cid, _ in _SEALS} == {sinkpoint.checkpoint_id_for_keys(keys) for _, keys in _SEALS}
    assert len(lance.dataset(str(tmp_path / "table.lance")).get_fragments()) == 3
    assert out["rows"] == [1200] and len(out["checkpoints"][0]) == 3
    assert sorted(out["inputs"][0]) == sorted(daft_path(p) for p in paths)
    # The driver's store holds every input; a rerun does nothing.
    assert _sink(tmp_path, inputs_per_checkpoint=4).run(paths).to_pydict()["key"] == []
    assert _count(tmp_path, 12, 100) == (1200, 0, 0)


def test_a_retried_task_of_several_inputs_loses_its_seal_and_they_are_committed_once(tmp_path):
    paths = _inputs(tmp_path, count=3, rows=100, row_groups=1)
    first, retry = (_sink(tmp_path, inputs_per_checkpoint=3) for _ in range(2))
    first.start()
    retry.start()
    results = list(first.write(iter([_mps(paths, 100)])))
    results += list(retry.write(iter([_mps(paths, 100)])))
    events = _events(results)
    assert [e["event"] for e in events] == ["sealed"] * 3 + ["lost"] * 3
    assert len({e["id"] for e in events}) == 1  # the retry raced its first attempt on one id
    lost = [e for e in events if e["event"] == "lost"]
    # The retry's one fragment is named once, and deleted by its worker.
    assert lost[0]["garbage"] and lost[0]["deleted"] == lost[0]["garbage"]
    assert all(e["garbage"] == [] for e in lost[1:])
    retry._inputs = [daft_path(p) for p in paths]
    out = retry.finalize(results).to_pydict()
    assert out["rows"] == [300] and sorted(out["inputs"][0]) == sorted(retry._inputs)
    assert _count(tmp_path, 3, 100) == (300, 0, 0)
    assert len(lance.dataset(str(tmp_path / "table.lance")).get_fragments()) == 1


def test_a_checkpoint_overlapping_another_is_refused_at_adoption_and_a_rerun_writes_the_rest(tmp_path):
    # A re-planned split: one attempt sealed inputs {0, 1}, another {1, 2}. Both seals succeed (workers claim no
    # input); the driver's store commits input 1 once, refuses one checkpoint, and its other input runs again.
    paths = _inputs(tmp_path, count=3, rows=100, row_groups=1)
    a, b = (_sink(tmp_path, inputs_per_checkpoint=2) for _ in range(2))
    a.start()
    b.start()
    results = list(a.write(iter([_mps(paths[:2], 100)]))) + list(b.write(iter([_mps(paths[1:], 100)])))
    assert [e["event"] for e in _events(results)] == ["sealed"] * 4
    b._inputs = [daft_path(p) for p in paths]
    with pytest.raises(IncompleteInputsError) as raised:
        b.finalize(results)
    assert len(raised.value.refused) == 1
    rows, duplicates, missing = _count(tmp_path, 3, 100)
    assert (rows, duplicates, missing) == (200, 0, 100)
    # The rerun adopts nothing new, prunes the two committed inputs and writes the third.
    rerun = _sink(tmp_path, inputs_per_checkpoint=2)
    rerun.run(paths)
    assert rerun.report["finished"] and rerun.report["pending"] == 1
    assert _count(tmp_path, 3, 100) == (300, 0, 0)


def test_the_workers_check_is_refused_with_checkpoints_of_several_inputs(tmp_path):
    with pytest.raises(sinkpoint.InvalidInputError, match="inputs_per_checkpoint=1"):
        _sink(tmp_path, inputs_per_checkpoint=2, check_processed_in_worker=True)
    for bad, error in ((0, ValueError), (1025, ValueError), (2.0, TypeError), (True, TypeError)):
        with pytest.raises(error, match="inputs_per_checkpoint"):
            _sink(tmp_path, inputs_per_checkpoint=bad)
    # By hand (no run()), the workers do not check either: the driver's adoption decides.
    assert not _sink(tmp_path, inputs_per_checkpoint=2)._check_in_worker
    assert _sink(tmp_path)._check_in_worker


def test_read_inputs_packs_a_tasks_small_files_into_one_batch(tmp_path):
    import asyncio

    from sinkpoint.daft import _reader

    paths = _inputs(tmp_path, count=5, rows=100, row_groups=2)
    spec = _reader._InputSource(paths, INPUT_COLUMN, POSITION_COLUMN, None, 150, inputs_per_task=2)
    source = _reader._InputsSource(spec)

    async def batches():
        out = []
        async for task in source.get_tasks(None):
            out.append([b.to_arrow_table().column(INPUT_COLUMN).to_pylist() async for b in task.read()])
        return out

    tasks = asyncio.run(batches())
    # Tasks of files [0, 1], [2, 3], [4]; a batch closes once it holds 150 rows or more: the two files of a task
    # share one batch (Daft hands a sink one batch per write call).
    assert [[sorted(set(b)) for b in task] for task in tasks] == [
        [sorted(daft_path(p) for p in paths[0:2])],
        [sorted(daft_path(p) for p in paths[2:4])],
        [[daft_path(paths[4])]],
    ]
    assert read_inputs(paths, inputs_per_task=2).count_rows() == 500
    with pytest.raises(ValueError, match="inputs_per_task"):
        read_inputs(paths, inputs_per_task=0)
