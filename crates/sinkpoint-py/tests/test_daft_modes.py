"""LanceSink takes df.write_lance's modes and writer settings as far as exactly-once allows: ``append`` and
``create`` are written exactly once (a ``create`` job accepts only a table it created itself), the writer settings
reach Lance's fragment writer, and the modes and options that cannot be exactly-once are refused at construction,
saying why. The comparison with df.write_lance itself is in test_write_lance.py."""

from __future__ import annotations

import pickle
from datetime import timedelta

import pytest

from _support import lance_snapshot, make_job_inputs, require_daft_and_the_binding, set_native_runner

require_daft_and_the_binding()

import daft
import lance
import pyarrow as pa

import sinkpoint
from sinkpoint.daft import MODES, REFUSED_MODES, IncompleteInputsError, LanceSink

CREATED_BY = "sinkpoint.created_by"


@pytest.fixture(scope="module", autouse=True)
def _native_runner():
    set_native_runner()


def _sink(tmp, job="job", uri=None, **kwargs) -> LanceSink:
    return LanceSink(
        uri or str(tmp / "table.lance"), job, f"file://{tmp}/staging", str(tmp / "state" / f"{job}.redb"), **kwargs
    )


def _created_by(uri: str):
    return (lance.dataset(uri).read_transaction(1).transaction_properties or {}).get(CREATED_BY)


# ----------------------------------------------------------------------------------------------------------
# Refused at construction


@pytest.mark.parametrize("mode", [*REFUSED_MODES, "upsert"])
def test_modes_that_cannot_be_exactly_once_are_refused_at_construction(tmp_path, mode):
    with pytest.raises(sinkpoint.InvalidInputError, match=f"mode={mode!r}") as err:
        _sink(tmp_path, mode=mode)
    assert err.value.kind == "invalid_input"
    if mode in REFUSED_MODES:
        # It says why and what to do instead.
        assert "exactly once" in str(err.value) and ("use " in str(err.value) or "then write" in str(err.value))
    assert not (tmp_path / "table.lance").exists() and not (tmp_path / "state").exists()
    assert set(MODES) == {"append", "create"} and not set(MODES) & set(REFUSED_MODES)


@pytest.mark.parametrize(
    "option, why",
    [({"use_mem_wal": True}, "MemWAL"), ({"checkpoint": object()}, "Daft's own checkpointing")],
    ids=["use_mem_wal", "checkpoint"],
)
def test_options_that_cannot_be_exactly_once_are_refused_at_construction(tmp_path, option, why):
    with pytest.raises(sinkpoint.InvalidInputError, match=why):
        _sink(tmp_path, **option)


def test_writer_settings_are_checked_at_construction(tmp_path):
    for name in ("max_rows_per_file", "max_rows_per_group", "max_bytes_per_file"):
        with pytest.raises(sinkpoint.InvalidInputError, match=f"{name} must be positive"):
            _sink(tmp_path, **{name: 0})
    with pytest.raises(TypeError):
        _sink(tmp_path, compact_after_write=True)  # a write_lance option for the MemWAL only: not taken


# ----------------------------------------------------------------------------------------------------------
# mode="create"


def test_create_makes_the_table_under_the_jobs_name_and_writes_every_row_once(tmp_path):
    paths = make_job_inputs(str(tmp_path / "inputs"))
    sink = _sink(tmp_path, mode="create")
    sink.run(paths)
    uri = str(tmp_path / "table.lance")
    snap = lance_snapshot(uri)
    assert snap["num_rows"] == 1000 and len(set(snap["rows"])) == 1000
    assert snap["operations"] == ["Overwrite"] + ["Append"] * len(sink.report["committed_keys"])
    assert _created_by(uri) == "job"


def test_create_reruns_accept_only_the_jobs_own_table(tmp_path):
    paths = make_job_inputs(str(tmp_path / "inputs"))
    uri = str(tmp_path / "table.lance")
    # A first run that created the table (start, schema known) and crashed before anything was written.
    first = _sink(tmp_path, mode="create", schema=daft.read_parquet(paths[0]).schema())
    first.start()
    assert _created_by(uri) == "job" and lance.dataset(uri).count_rows() == 0
    # Its rerun accepts the table: it is the job's own.
    _sink(tmp_path, mode="create").run(paths)
    assert lance.dataset(uri).count_rows() == 1000
    # Another job in mode create is refused, before anything is read or written; append is accepted.
    version = lance.dataset(uri).version
    with pytest.raises(sinkpoint.InvalidInputError, match="created by job 'job', not by job 'other'"):
        _sink(tmp_path, job="other", mode="create").run(paths)
    with pytest.raises(sinkpoint.InvalidInputError, match="created by job 'job', not by job 'other'"):
        _sink(tmp_path, job="other", mode="create").start()
    assert lance.dataset(uri).version == version
    _sink(tmp_path, job="other", mode="append").run(paths[:1])
    assert lance.dataset(uri).count_rows() == 1200


def test_create_refuses_a_table_another_writer_created(tmp_path):
    paths = make_job_inputs(str(tmp_path / "inputs"), count=2)
    uri = str(tmp_path / "table.lance")
    lance.write_dataset(pa.table({"id": pa.array([1], pa.int64())}), uri, mode="create")
    with pytest.raises(sinkpoint.InvalidInputError, match="created by another writer") as err:
        _sink(tmp_path, mode="create").run(paths)
    assert "mode='append'" in str(err.value)
    assert lance.dataset(uri).count_rows() == 1


def test_create_accepts_its_table_once_the_create_version_was_cleaned_up(tmp_path):
    """Lance's cleanup removes version 1 (the create) in time; the job's mark in the manifest still names it."""
    paths = make_job_inputs(str(tmp_path / "inputs"), count=2)
    uri = str(tmp_path / "table.lance")
    _sink(tmp_path, mode="create").run(paths[:1])
    lance.dataset(uri).cleanup_old_versions(older_than=timedelta(0))
    assert min(v["version"] for v in lance.dataset(uri).versions()) > 1
    # The finished job takes no more inputs, but the table is still accepted as its own (no InvalidInputError).
    with pytest.raises(IncompleteInputsError):
        _sink(tmp_path, mode="create").run(paths)
    with pytest.raises(sinkpoint.InvalidInputError, match="created by another writer"):
        _sink(tmp_path, job="other", mode="create").run(paths)


# ----------------------------------------------------------------------------------------------------------
# Writer settings, storage options, io_config


def test_writer_settings_reach_the_fragment_writer_and_an_input_is_still_one_checkpoint(tmp_path):
    paths = make_job_inputs(str(tmp_path / "inputs"), count=3, rows=200)
    sink = _sink(tmp_path, max_rows_per_file=50, max_rows_per_group=10)
    out = sink.run(paths).to_pydict()
    dataset = lance.dataset(str(tmp_path / "table.lance"))
    assert dataset.count_rows() == 600
    # 200 rows at 50 per file: 4 fragments per input, all in the input's one checkpoint and one commit.
    assert len(dataset.get_fragments()) == 12
    assert sink.report["sealed"] == 3 and len(out["checkpoints"][0]) == 3
    assert all(f.count_rows() == 50 for f in dataset.get_fragments())


def test_the_table_settings_are_used_at_create_and_checked_on_an_existing_table(tmp_path):
    paths = make_job_inputs(str(tmp_path / "inputs"), count=2)
    uri = str(tmp_path / "table.lance")
    _sink(tmp_path, mode="create", data_storage_version="2.1", enable_stable_row_ids=True).run(paths[:1])
    dataset = lance.dataset(uri)
    assert dataset.data_storage_version == "2.1" and dataset.has_stable_row_ids
    with pytest.raises(sinkpoint.InvalidInputError, match="data_storage_version='2.0' does not match"):
        _sink(tmp_path, job="j2", data_storage_version="2.0").run(paths[1:])
    # Unset, the table's own version is written.
    _sink(tmp_path, job="j3").run(paths[1:])
    fragments = lance.dataset(uri).get_fragments()
    assert {(f.metadata.files[0].file_major_version, f.metadata.files[0].file_minor_version) for f in fragments} == {
        (2, 1)
    }
    other = str(tmp_path / "plain.lance")
    lance.write_dataset(lance.dataset(uri).schema.empty_table(), other, mode="create")
    with pytest.raises(sinkpoint.InvalidInputError, match="without stable row ids"):
        _sink(tmp_path, job="j4", uri=other, enable_stable_row_ids=True).run(paths[1:])


def test_storage_options_come_from_io_config_unless_given_as_write_lance_layers_them(tmp_path):
    from daft.io import IOConfig, S3Config

    io = IOConfig(s3=S3Config(key_id="AKID", access_key="SECRET", region_name="eu-west-1"))
    derived = LanceSink("s3://bucket/t.lance", "j", "file:///tmp/s", "/tmp/j.redb", io_config=io)
    assert derived.storage_options["access_key_id"] == "AKID"
    assert derived.storage_options["region"] == "eu-west-1"
    assert derived.input_io_config is io  # the inputs are read with it too
    given = LanceSink("s3://bucket/t.lance", "j", "file:///tmp/s", "/tmp/j.redb", io_config=io, storage_options={})
    assert given.storage_options == {}
    local = _sink(tmp_path, io_config=io, input_io_config=None)
    assert local.storage_options is None  # no options for a local table
    copy = pickle.loads(pickle.dumps(derived))
    assert copy.storage_options == derived.storage_options and copy.writer_settings == derived.writer_settings


# ----------------------------------------------------------------------------------------------------------
# Bad input to the sink: refused before anything is written, naming the argument


@pytest.mark.parametrize(
    "argument, kwargs",
    [
        ("uri", {"uri": 0}),
        ("storage_options", {"storage_options": [("aws_region", "x")]}),
        ("staging_options", {"staging_options": ["x"]}),
        ("row_counts", {"row_counts": [("a.parquet", 3)]}),
    ],
    ids=["uri", "storage_options", "staging_options", "row_counts"],
)
def test_a_sink_argument_of_the_wrong_type_is_a_type_error_naming_it(tmp_path, argument, kwargs):
    uri = kwargs.pop("uri", None)
    with pytest.raises(TypeError, match=argument):
        LanceSink(
            uri if uri is not None else str(tmp_path / "t.lance"),
            "job",
            f"file://{tmp_path}/staging",
            str(tmp_path / "s.redb"),
            **kwargs,
        )
    assert not (tmp_path / "0").exists(), "uri=0 created a dataset at ./0"


def test_one_path_given_to_run_is_a_type_error_and_nothing_is_written(tmp_path):
    (path,) = make_job_inputs(str(tmp_path / "in"), count=1, rows=10, row_groups=1)
    sink = _sink(tmp_path)
    with pytest.raises(TypeError, match="a list of parquet paths"):
        sink.run(path)
    assert not (tmp_path / "table.lance").exists() and not (tmp_path / "state").exists()


def test_row_counts_that_contradict_the_file_are_refused_before_anything_is_written(tmp_path):
    (path,) = make_job_inputs(str(tmp_path / "in"), count=1, rows=100, row_groups=1)
    with pytest.raises(ValueError, match="row_counts"):
        _sink(tmp_path, row_counts={path: -1})
    sink = _sink(tmp_path, row_counts={path: 60})
    with pytest.raises(ValueError, match="contradicts the parquet footer"):
        sink.run([path])
    table = tmp_path / "table.lance"
    assert not table.exists() or lance.dataset(str(table)).count_rows() == 0, "rows were written"
