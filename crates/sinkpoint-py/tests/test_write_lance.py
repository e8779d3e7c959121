"""The same Daft job through Daft's own ``df.write_lance`` (daft 0.7.26, which writes through daft-lance 0.6.0's
sink) and through ``sinkpoint.daft.LanceSink``, the two Lance tables compared with pylance: the same schema and the
same rows (as a multiset) in ``mode="create"`` and ``mode="append"``; and the retry of a job whose commit landed,
where write_lance writes every row a second time and LanceSink writes nothing.

The versions differ by design and are asserted as they are: write_lance makes one commit per job, LanceSink one per
commit key, and in ``create`` one more for the empty table it creates under the job's name."""

from __future__ import annotations

import pytest

from _support import lance_snapshot, make_job_inputs, require_daft_and_the_binding, set_native_runner

require_daft_and_the_binding()
pytest.importorskip("daft_lance")  # df.write_lance is daft-lance's sink in Daft 0.7.26

import daft
import lance
import pyarrow.compute as pc
import pyarrow.parquet as pq

import sinkpoint
from sinkpoint.daft import LanceSink

INPUTS = 5
ROWS = 200


@pytest.fixture(scope="module", autouse=True)
def _native_runner():
    set_native_runner()


@pytest.fixture
def job(tmp_path):
    """The job's inputs (5 parquet files of 200 rows, 2 row groups each) and the two tables' URIs."""
    paths = make_job_inputs(str(tmp_path / "inputs"), count=INPUTS, rows=ROWS, row_groups=2)
    return tmp_path, paths, str(tmp_path / "write_lance.lance"), str(tmp_path / "sinkpoint.lance")


def _via_write_lance(paths, uri, mode):
    return daft.read_parquet(paths).write_lance(uri, mode=mode).to_pydict()


def _via_sinkpoint(tmp, paths, uri, mode, job="job"):
    sink = LanceSink(uri, job, f"file://{tmp}/staging", f"{tmp}/state/{job}.redb", mode=mode)
    sink.run(paths)
    return sink.report


def _seed(uri, paths):
    """Another writer's rows (input 0's, ids moved away), in Daft's schema of the inputs, written by pylance."""
    schema = daft.read_parquet(paths[:1]).schema().to_pyarrow_schema()
    table = pq.read_table(paths[0]).cast(schema)
    table = table.set_column(0, "id", pc.add(table.column("id"), 1_000_000))
    lance.write_dataset(table.cast(schema), uri, mode="create")


def _show(tag, a, b):
    for who, snap in (("write_lance", a), ("sinkpoint", b)):
        counts = f"rows={snap['num_rows']} versions={snap['versions']} fragments={snap['fragments']}"
        print(f"[{tag}] {who}: {counts} ops={snap['operations']}")


def _same_table(a, b):
    assert a["schema"].equals(b["schema"]), (a["schema"], b["schema"])
    assert a["rows"] == b["rows"]


def test_create_writes_the_same_table_as_write_lance(job):
    tmp, paths, wl_uri, sp_uri = job
    _via_write_lance(paths, wl_uri, "create")
    report = _via_sinkpoint(tmp, paths, sp_uri, "create")
    wl, sp = lance_snapshot(wl_uri), lance_snapshot(sp_uri)
    _show("create", wl, sp)
    _same_table(wl, sp)
    assert sp["num_rows"] == INPUTS * ROWS and len(set(sp["rows"])) == INPUTS * ROWS
    # write_lance: one Overwrite creates the table with every row. LanceSink: the empty table under the job's
    # name, then one Append per commit key.
    assert wl["operations"] == ["Overwrite"]
    assert sp["operations"] == ["Overwrite"] + ["Append"] * len(report["committed_keys"])


def test_create_on_an_existing_table_is_refused_by_both(job):
    tmp, paths, wl_uri, sp_uri = job
    _seed(wl_uri, paths)
    _seed(sp_uri, paths)
    with pytest.raises(Exception, match="(?i)exist"):
        _via_write_lance(paths, wl_uri, "create")
    with pytest.raises(sinkpoint.InvalidInputError, match="exists and was created by another writer"):
        _via_sinkpoint(tmp, paths, sp_uri, "create")
    _same_table(lance_snapshot(wl_uri), lance_snapshot(sp_uri))


def test_append_writes_the_same_rows_as_write_lance(job):
    tmp, paths, wl_uri, sp_uri = job
    _seed(wl_uri, paths)
    _seed(sp_uri, paths)
    _via_write_lance(paths, wl_uri, "append")
    report = _via_sinkpoint(tmp, paths, sp_uri, "append")
    wl, sp = lance_snapshot(wl_uri), lance_snapshot(sp_uri)
    _show("append", wl, sp)
    _same_table(wl, sp)
    assert sp["num_rows"] == (INPUTS + 1) * ROWS
    assert wl["operations"] == ["Overwrite", "Append"]
    assert sp["operations"] == ["Overwrite"] + ["Append"] * len(report["committed_keys"])


@pytest.mark.parametrize("mode", ["create", "append"])
def test_a_rerun_duplicates_with_write_lance_and_not_with_sinkpoint(job, mode):
    """The retry of a job whose commit landed (its orchestrator did not see it succeed): write_lance appends every
    row again (in create mode the retry fails, so the orchestrator retries in append), LanceSink writes nothing."""
    tmp, paths, wl_uri, sp_uri = job
    if mode == "append":
        _seed(wl_uri, paths)
        _seed(sp_uri, paths)
    _via_write_lance(paths, wl_uri, mode)
    _via_write_lance(paths, wl_uri, "append")
    _via_sinkpoint(tmp, paths, sp_uri, mode)
    version = lance.dataset(sp_uri).version
    again = _via_sinkpoint(tmp, paths, sp_uri, mode)
    assert again["already_finished"] and again["pending"] == 0
    wl, sp = lance_snapshot(wl_uri), lance_snapshot(sp_uri)
    _show(f"rerun {mode}", wl, sp)
    seeded = 1 if mode == "append" else 0
    assert wl["num_rows"] == (2 * INPUTS + seeded) * ROWS  # every row of the job twice
    assert sp["num_rows"] == (INPUTS + seeded) * ROWS  # once
    assert sorted(set(wl["rows"])) == sp["rows"]
    assert lance.dataset(sp_uri).version == version  # the rerun made no commit
