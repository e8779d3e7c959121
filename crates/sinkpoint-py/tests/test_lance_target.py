"""sinkpoint.LanceTarget (the Rust Lance adapter compiled into the wheel) over real pylance 14.0.2 datasets, black
box: jobs commit through ``Driver``, a plain pylance writer appends beside them, and every test reads the table back
with pylance. The racing trials are in ``test_lance_race.py``.

What needs a hook inside the commit (a lost acknowledgement after the manifest landed, a failure before it, a
foreign commit between the key check and the commit, two sends of one key at once, the zombie writer) is proven
on the same code by ``crates/sinkpoint-lance/tests/lance.rs`` (``faults``, ``foreign``, ``racing`` and the
conformance suite's writer scenarios); a lost acknowledgement is also run here, across a process exit.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import struct
import subprocess
import sys
import textwrap
import urllib.request
import uuid

import pytest

lance = pytest.importorskip("lance")
pa = pytest.importorskip("pyarrow")
try:
    import sinkpoint._sinkpoint  # noqa: F401
except ImportError:
    pytest.skip("sinkpoint._sinkpoint is not built (maturin develop)", allow_module_level=True)

import sinkpoint
from sinkpoint import Driver, InvalidInputError, SharedStaging, TargetError, WriteResult, checkpoint_id_for_key
from sinkpoint.lance import LANCE_FRAGMENT_JSON, LanceTarget, create_dataset, fragment_json, write_fragment

SCHEMA = pa.schema([("x", pa.int64())])
JOB = "job-1"


# ----------------------------------------------------------------------------------------------------------
# Helpers


@pytest.fixture
def uri(tmp_path):
    path = str(tmp_path / "t.lance")
    create_dataset(path, SCHEMA)
    return path


def rows(uri):
    return sorted(lance.dataset(uri).to_table().column("x").to_pylist())


def latest(uri):
    return lance.dataset(uri).version


def props_at(uri, version):
    return lance.dataset(uri).read_transaction(version).transaction_properties


def foreign_append(uri, values=(9,), properties=None):
    """Another writer's plain append (Lance's default handler and retries)."""
    lance.write_dataset(
        pa.table({"x": pa.array(list(values), pa.int64())}), uri, mode="append", transaction_properties=properties
    )


class Job:
    """A job on the dataset: its shared staging and a driver (its own store file) committing through a
    LanceTarget."""

    def __init__(self, tmp, uri, job=JOB, store="store.redb", **driver_options):
        self.uri = uri
        self.staging = SharedStaging(f"file://{tmp}/staging-{job}", job)
        self.driver = Driver(str(tmp / store), job, LanceTarget(uri), staging=self.staging, **driver_options)

    def seal(self, key, values):
        """A worker writes ``values`` as an uncommitted fragment and seals input ``key``; returns its id."""
        fragments = write_fragment(self.uri, pa.table({"x": pa.array(values, pa.int64())}), schema=SCHEMA)
        id = checkpoint_id_for_key(key)
        self.staging.worker(f"w-{key}").stage_and_seal(id, [key], fragments)
        return id

    def commit(self, *, final=False):
        """Adopts every sealed input and commits it."""
        self.driver.adopt()
        return self.driver.finish() if final else self.driver.commit_pending()


@pytest.fixture
def job(tmp_path, uri):
    j = Job(tmp_path, uri)
    yield j
    j.driver.close()


# ----------------------------------------------------------------------------------------------------------
# The target's own surface


def test_the_target_is_the_native_one_and_pickles_as_its_configuration(uri):
    target = LanceTarget(uri, storage_options={"allow_http": "true"})

    assert sinkpoint.LanceTarget is LanceTarget
    assert type(target).__module__ == "sinkpoint"
    assert target.uri == uri
    assert target.storage_options == {"allow_http": "true"}
    assert LanceTarget(uri).storage_options is None
    assert target.identity == f"lance:{uri}"
    assert repr(target) == f'LanceTarget("{uri}")'
    back = pickle.loads(pickle.dumps(target))
    assert (back.uri, back.storage_options, back.version()) == (uri, {"allow_http": "true"}, target.version())


def test_a_driver_records_the_targets_identity_and_pickles_with_it(tmp_path, uri):
    driver = Driver(str(tmp_path / "s.redb"), JOB, LanceTarget(uri))

    assert driver.target_identity == f"lance:{uri}"
    back = pickle.loads(pickle.dumps(driver))
    assert back.target_identity == f"lance:{uri}"


def test_a_missing_dataset_has_no_version_to_read(tmp_path):
    with pytest.raises(TargetError):
        LanceTarget(str(tmp_path / "nothing.lance")).version()


# ----------------------------------------------------------------------------------------------------------
# Commit and probe


def test_a_commit_lands_once_and_its_probe_finds_its_ids(job, uri):
    target = LanceTarget(uri)
    v0 = target.version()
    ids = sorted([job.seal("in-0", [1, 2]), job.seal("in-1", [3])])

    assert job.commit(final=True).committed_keys == [0]

    assert rows(uri) == [1, 2, 3]
    assert target.version() == v0 + 1
    assert props_at(uri, v0 + 1) == {
        "sinkpoint.job": JOB,
        "sinkpoint.key": "0",
        "sinkpoint.epoch": str(job.driver.epoch),
        "sinkpoint.ids": "[" + ",".join(f'"{i}"' for i in ids) + "]",  # compact, as serde_json writes it
        "sinkpoint.final": "true",
    }
    assert target.probe(JOB, 0, v0) == ("committed", ids)
    assert target.probe(JOB, 0) == ("committed", ids)
    # Another job's key 0 is not ours, nor is our key 1.
    assert target.probe("job-2", 0) == "not_committed"
    assert target.probe(JOB, 1, v0) == "not_committed"


def test_a_lost_acknowledgement_is_settled_by_the_probe_and_adds_no_rows(tmp_path, uri, job):
    """The driver's process exits after the manifest landed and before the store marked it; the next driver's
    recovery finds the key in the table and marks it, without a second copy."""
    job.seal("in-0", [1, 2, 3])
    script = textwrap.dedent(
        f"""
        from sinkpoint import Driver, SharedStaging
        from sinkpoint.lance import LanceTarget
        staging = SharedStaging({f"file://{tmp_path}/staging-{JOB}"!r}, {JOB!r})
        driver = Driver({str(tmp_path / "store.redb")!r}, {JOB!r}, LanceTarget({uri!r}), staging=staging,
                        crash_at="after-target-commit-before-mark")
        driver.adopt()
        driver.finish()
        """
    )
    crashed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert crashed.returncode == 86, crashed.stderr
    assert rows(uri) == [1, 2, 3]

    report = job.driver.recover()

    assert report.blocked is None and report.marked_landed == 0
    assert job.commit(final=True).committed_keys == []
    assert rows(uri) == [1, 2, 3]
    assert job.driver.is_finished()


def test_an_input_with_no_rows_commits_nothing_to_the_table(job, uri):
    v0 = latest(uri)
    job.staging.worker("w").stage_and_seal(checkpoint_id_for_key("in-0"), ["in-0"], [])

    report = job.commit(final=True)

    assert (report.committed_keys, report.committed_empty) == ([], 1)
    assert rows(uri) == []
    assert latest(uri) == v0
    assert job.driver.is_finished()


def test_fragments_staged_as_json_bytes_commit_like_fragment_metadata(job, uri):
    fragments = write_fragment(uri, pa.table({"x": pa.array([4, 5], pa.int64())}), schema=SCHEMA)
    results = [WriteResult(LANCE_FRAGMENT_JSON, fragment_json(f)) for f in fragments]
    job.staging.worker("w").stage_and_seal(checkpoint_id_for_key("in-0"), ["in-0"], results)

    job.commit(final=True)

    assert rows(uri) == [4, 5]


def test_a_result_that_is_not_a_lance_fragment_never_reaches_the_table(job, uri):
    v0 = latest(uri)
    job.staging.worker("w").stage_and_seal(checkpoint_id_for_key("in-0"), ["in-0"], [WriteResult("parquet", b"PAR1")])

    with pytest.raises(sinkpoint.SinkpointError):
        job.commit(final=True)

    assert rows(uri) == []
    assert latest(uri) == v0
    assert LanceTarget(uri).probe(JOB, 0, v0) == "not_committed"


def test_a_job_commits_into_a_dataset_on_the_s3_api_through_the_storage_options(tmp_path):
    """The target's storage options reach the wheel's Lance (moto's S3 API; skipped without
    SINKPOINT_S3_ENDPOINT, which .ci/run sets)."""
    endpoint = os.environ.get("SINKPOINT_S3_ENDPOINT", "").rstrip("/")
    if not endpoint:
        pytest.skip("SINKPOINT_S3_ENDPOINT is unset (source .ci/moto.sh && moto_start)")
    bucket = f"lance-{uuid.uuid4().hex[:12]}"
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/{bucket}", method="PUT", data=b""), timeout=10)
    options = {
        "aws_endpoint": endpoint,
        "aws_access_key_id": "test",
        "aws_secret_access_key": "test",
        "aws_region": "us-east-1",
        "allow_http": "true",
    }
    uri = f"s3://{bucket}/t.lance"
    create_dataset(uri, SCHEMA, storage_options=options)
    staging = SharedStaging(f"file://{tmp_path}/staging", JOB)
    fragments = write_fragment(
        uri, pa.table({"x": pa.array([1, 2], pa.int64())}), schema=SCHEMA, storage_options=options
    )
    staging.worker("w").stage_and_seal(checkpoint_id_for_key("in-0"), ["in-0"], fragments)
    target = LanceTarget(uri, storage_options=options)
    with Driver(str(tmp_path / "store.redb"), JOB, target, staging=staging) as driver:
        driver.adopt()
        assert driver.finish().committed_keys == [0]

    assert sorted(lance.dataset(uri, storage_options=options).to_table().column("x").to_pylist()) == [1, 2]
    assert target.probe(JOB, 0) == ("committed", [checkpoint_id_for_key("in-0")])


# ----------------------------------------------------------------------------------------------------------
# Other writers of the table


def test_other_jobs_and_foreign_commits_are_passed_over(tmp_path, uri, job):
    other = Job(tmp_path, uri, job="job-2", store="other.redb")
    v0 = latest(uri)
    foreign_append(uri, [9], {"some": "thing"})
    other.seal("in-b", [1])
    assert other.commit(final=True).committed_keys == [0]
    foreign_append(uri, [8])

    job.seal("in-a", [2, 3])
    assert job.commit(final=True).committed_keys == [0]

    assert rows(uri) == [1, 2, 3, 8, 9]
    target = LanceTarget(uri)
    assert target.probe(JOB, 0, v0) == ("committed", [checkpoint_id_for_key("in-a")])
    assert target.probe("job-2", 0, v0) == ("committed", [checkpoint_id_for_key("in-b")])
    other.driver.close()


def test_a_second_store_of_the_same_job_cannot_land_the_key_again(tmp_path, uri, job):
    """Two stores of one job without a mirror (the same input sealed in each): the key lands once; the second
    driver's commit of key 0 finds it taken by another commit and lands nothing."""
    job.seal("in-0", [1, 2])
    job.commit(final=True)
    twin = Job(tmp_path, uri, store="twin.redb")
    twin.staging = SharedStaging(f"file://{tmp_path}/staging-twin", JOB)
    twin.driver = Driver(str(tmp_path / "twin.redb"), JOB, LanceTarget(uri), staging=twin.staging)
    twin.seal("in-0", [1, 2])

    with pytest.raises(sinkpoint.SinkpointError):
        twin.commit(final=True)

    assert rows(uri) == [1, 2]
    twin.driver.close()


def mark_digest(ids, files):
    """The job mark's digest, computed here from its definition in docs/FORMATS.md ("Lance job mark")."""

    def part(tag, items):
        out = tag + struct.pack("<Q", len(items))
        for item in sorted(items):
            out += struct.pack("<Q", len(item.encode())) + item.encode()
        return out

    return hashlib.sha256(part(b"i", ids) + part(b"f", files)).hexdigest()[:32]


def test_the_mark_digest_golden_vector_matches_the_rust_one():
    # The same vector as mark::golden_mark_and_digest in crates/sinkpoint-lance/tests/lance.rs.
    assert mark_digest(["cp-b", "cp-a"], ["f2.lance", "f1.lance"]) == "661e1c84a0a99cff3fa0090e3bba9303"


def test_a_commit_sets_the_jobs_mark_in_the_manifest_pylance_reads(job, uri):
    ids = sorted([job.seal("in-0", [1, 2]), job.seal("in-1", [3])])
    job.commit(final=True)
    foreign_append(uri, [9])  # a plain pylance append carries the mark on

    dataset = lance.dataset(uri)
    mark = json.loads(dataset.metadata[f"sinkpoint.job.{JOB}"])
    landed = mark["version"]
    files = [f.path for fragment in dataset.read_transaction(landed).operation.fragments for f in fragment.files]
    assert mark == {"v": 1, "key": 0, "epoch": job.driver.epoch, "version": landed, "digest": mark_digest(ids, files)}
    assert landed == dataset.version - 1


@pytest.mark.parametrize(
    "damage",
    ["not json", '{"v":2,"key":0,"epoch":1,"version":1,"digest":"00"}', '{"v":1,"key":"zero"}'],
)
def test_a_damaged_mark_makes_the_probe_unknown(uri, damage):
    lance.dataset(uri).update_metadata({f"sinkpoint.job.{JOB}": damage})

    outcome = LanceTarget(uri).probe(JOB, 0)

    assert outcome[0] == "unknown" and "mark of job" in outcome[1]
    assert LanceTarget(uri).probe("job-2", 0) == "not_committed", "another job's damage is not this job's"


def test_a_damaged_mark_stops_a_commit_rather_than_land_a_second_copy(uri, job):
    job.seal("in-0", [1, 2])
    lance.dataset(uri).update_metadata({f"sinkpoint.job.{JOB}": "{damaged"})

    with pytest.raises(TargetError):
        job.commit(final=True)

    assert rows(uri) == []


# ----------------------------------------------------------------------------------------------------------
# Maintenance


def test_the_probe_after_its_versions_were_cleaned_up_is_unknown(uri, job):
    target = LanceTarget(uri)
    v0 = target.version()
    job.seal("in-0", [1, 2])
    job.commit(final=True)
    foreign_append(uri, [9])

    # Maintenance ignoring the watermark removes every version but the latest.
    stats = target.cleanup_old_versions(older_than_seconds=0)

    assert stats.old_versions == 2
    outcome = target.probe(JOB, 0, v0)
    assert outcome[0] == "unknown" and "cleaned up" in outcome[1]
    assert rows(uri) == [1, 2, 9]


def test_cleanup_with_a_watermark_keeps_the_versions_after_it(uri, job):
    target = LanceTarget(uri)
    for i in range(3):
        foreign_append(uri, [i])
    watermark = target.version()  # the version a key in flight was prepared against
    job.seal("in-0", [7, 7])
    job.commit(final=True)
    foreign_append(uri, [8])
    before = [v["version"] for v in lance.dataset(uri).versions()]

    stats = target.cleanup_old_versions(older_than_seconds=0, retention_watermark=watermark)

    after = [v["version"] for v in lance.dataset(uri).versions()]
    assert stats.old_versions == watermark
    assert after == [v for v in before if v > watermark]
    assert target.probe(JOB, 0, watermark) == ("committed", [checkpoint_id_for_key("in-0")])
    assert rows(uri) == [0, 1, 2, 7, 7, 8]
    # Nothing at or below the watermark left: nothing to remove.
    assert target.cleanup_old_versions(older_than_seconds=0, retention_watermark=watermark).old_versions == 0
    # Young versions stay under the default age (two weeks).
    kept = [v["version"] for v in lance.dataset(uri).versions()]
    assert target.cleanup_old_versions().old_versions == 0
    assert [v["version"] for v in lance.dataset(uri).versions()] == kept


def test_cleanup_keeps_the_fragments_of_inputs_staged_and_not_yet_committed(uri, job):
    """Lance deletes unreferenced files only once they are 7 days old (``delete_unverified`` stays off): a staged
    input's fragment survives a cleanup of every old version, and its commit lands readable rows."""
    job.seal("in-0", [1, 2])
    foreign_append(uri, [9])
    foreign_append(uri, [8])

    # Version 1 goes too: the store's first probe reads the job's mark in the latest manifest, not the history.
    assert LanceTarget(uri).cleanup_old_versions(older_than_seconds=0).old_versions >= 1
    job.commit(final=True)

    assert rows(uri) == [1, 2, 8, 9]


def test_a_uri_scheme_lance_commits_to_unconditionally_is_refused(tmp_path):
    with pytest.raises(InvalidInputError, match="file\\+uring"):
        LanceTarget(f"file+uring://{tmp_path}/t.lance")


def test_cleanup_refuses_an_age_that_is_not_one(uri):
    for age in (-1.0, float("nan"), float("inf")):
        with pytest.raises(InvalidInputError):
            LanceTarget(uri).cleanup_old_versions(older_than_seconds=age)


# ----------------------------------------------------------------------------------------------------------
# Worker-side helpers


def test_create_dataset_opens_an_existing_one_and_refuses_another_schema(uri):
    foreign_append(uri, [1])
    assert create_dataset(uri, SCHEMA).count_rows() == 1
    with pytest.raises(ValueError, match="another schema"):
        create_dataset(uri, pa.schema([("y", pa.string())]))
    assert rows(uri) == [1]
