"""sinkpoint.lance.LanceTarget over real pylance 14.0.2 datasets (local directories); no compiled binding needed.

Every test reads the row count back with pylance. Run:
``~/.cache/sinkpoint/py-venv/bin/python -m pytest crates/sinkpoint-py/tests/test_lance_target.py -q``
"""

import importlib.util
import json
import sys
import threading
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import lance
import pyarrow as pa
import pytest

# Loaded by path: `sinkpoint/__init__.py` may import the compiled core, which these tests do not need.
_LANCE_PY = Path(__file__).resolve().parents[1] / "python" / "sinkpoint" / "lance.py"
_spec = importlib.util.spec_from_file_location("sinkpoint_lance_under_test", _LANCE_PY)
sl = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = sl
_spec.loader.exec_module(sl)

SCHEMA = pa.schema([("x", pa.int64())])
JOB = "job-1"


# ----------------------------------------------------------------------------------------------------------
# Helpers


@pytest.fixture
def uri(tmp_path):
    path = str(tmp_path / "t.lance")
    sl.create_dataset(path, SCHEMA)
    return path


def rows(uri):
    return lance.dataset(uri).count_rows()


def latest(uri):
    return lance.dataset(uri).version


def props_at(uri, version):
    return lance.dataset(uri).read_transaction(version).transaction_properties


def results_of(uri, values):
    """A worker's write: one uncommitted fragment of `values`, as lance-fragment-json write results."""
    fragments = sl.write_fragment(uri, pa.table({"x": pa.array(values, pa.int64())}), schema=SCHEMA)
    return [SimpleNamespace(format=sl.LANCE_FRAGMENT_JSON, data=sl.fragment_json(f)) for f in fragments]


def commit_of(uri, key, ids, values, *, epoch=1, prepared_version=None, final=False, job=JOB):
    """A stand-in for the binding's TargetCommit."""
    return SimpleNamespace(
        job=job,
        key=key,
        ids=list(ids),
        epoch=epoch,
        results=results_of(uri, values),
        final=final,
        prepared_version=prepared_version,
    )


def foreign_append(uri, values=(9,), properties=None):
    """Another writer's plain append (Lance's default handler and retries)."""
    lance.write_dataset(
        pa.table({"x": pa.array(list(values), pa.int64())}),
        uri,
        mode="append",
        transaction_properties=properties,
    )


# ----------------------------------------------------------------------------------------------------------
# Commit and probe


def test_a_commit_lands_once_and_its_probe_finds_its_ids(uri):
    target = sl.LanceTarget(uri)
    v0 = target.version()
    commit = commit_of(uri, 0, ["input-0", "input-1"], [1, 2, 3], prepared_version=v0, final=True)

    assert target.commit(commit) == "committed"

    assert rows(uri) == 3
    assert target.version() == v0 + 1
    assert props_at(uri, v0 + 1) == {
        "sinkpoint.job": JOB,
        "sinkpoint.key": "0",
        "sinkpoint.epoch": "1",
        "sinkpoint.ids": '["input-0","input-1"]',  # compact, as serde_json writes it
        "sinkpoint.final": "true",
    }
    assert target.probe(JOB, 0, v0) == ("committed", ["input-0", "input-1"])
    assert target.probe(JOB, 0, None) == ("committed", ["input-0", "input-1"])
    # Versions up to the prepared one are not read.
    assert target.probe(JOB, 0, v0 + 1) == "not_committed"
    # Another job's key 0 is not ours.
    assert target.probe("job-2", 0, None) == "not_committed"
    assert target.identity == f"lance:{uri}"


def test_a_resend_after_a_lost_ack_answers_committed_and_adds_no_rows(uri):
    target = sl.LanceTarget(uri)
    v0 = target.version()
    commit = commit_of(uri, 0, ["a"], [1, 2], prepared_version=v0)
    assert target.commit(commit) == "committed"
    assert rows(uri) == 2

    # The committer never saw the answer and sends the same key again.
    assert target.commit(commit) == "committed"

    assert rows(uri) == 2
    assert target.version() == v0 + 1


def test_a_commit_that_lands_and_then_raises_is_read_back_as_committed(uri, monkeypatch):
    target = sl.LanceTarget(uri)
    v0 = target.version()
    real_commit = lance.LanceDataset.commit

    def lands_then_raises(*args, **kwargs):
        real_commit(*args, **kwargs)
        raise OSError("connection reset after the manifest was written")

    monkeypatch.setattr(lance.LanceDataset, "commit", staticmethod(lands_then_raises))
    commit = commit_of(uri, 0, ["a"], [1, 2], prepared_version=v0)

    # The fence was entered for v0 + 1 and the error is not the end of it: v0 + 1 holds our transaction.
    assert target.commit(commit) == "committed"
    assert rows(uri) == 2

    monkeypatch.undo()
    assert target.commit(commit) == "committed"  # and a resend adds nothing
    assert rows(uri) == 2
    assert target.version() == v0 + 1


def test_a_failure_before_publishing_is_not_landed(uri, monkeypatch):
    target = sl.LanceTarget(uri)
    v0 = target.version()

    def fails_before_the_lock(*args, **kwargs):
        raise OSError("object store unreachable")

    monkeypatch.setattr(lance.LanceDataset, "commit", staticmethod(fails_before_the_lock))
    outcome = target.commit(commit_of(uri, 0, ["a"], [1, 2], prepared_version=v0))

    assert outcome[0] == "not_landed" and "object store unreachable" in outcome[1]
    assert rows(uri) == 0
    assert target.version() == v0


def test_an_empty_commit_lands_its_key_with_no_rows(uri):
    target = sl.LanceTarget(uri)
    v0 = target.version()
    commit = SimpleNamespace(job=JOB, key=0, ids=["a"], epoch=1, results=[], final=False, prepared_version=v0)

    assert target.commit(commit) == "committed"
    assert rows(uri) == 0
    assert target.probe(JOB, 0, v0) == ("committed", ["a"])


# ----------------------------------------------------------------------------------------------------------
# Races: the fence


def after_first_key_check(monkeypatch, action):
    """Runs ``action(commit, outcome)`` right after the first key check (between the check and the commit);
    returns the list of read versions every key check was made at."""
    real_check = sl._key_check
    checks = []

    def intercepted(dataset, c, read_version):
        checks.append(read_version)
        outcome = real_check(dataset, c, read_version)
        if len(checks) == 1:
            action(c, outcome)
        return outcome

    monkeypatch.setattr(sl, "_key_check", intercepted)
    return checks


def test_a_racing_send_of_the_same_key_from_the_same_read_version_is_refused(uri, monkeypatch):
    target = sl.LanceTarget(uri)
    v0 = target.version()
    commit = commit_of(uri, 0, ["a"], [1, 2, 3], prepared_version=v0)
    def another_send_lands_first(c, outcome):
        # Between this attempt's key check (at v0) and its commit, a second send of the same key checks the same
        # v0 and lands at v0 + 1.
        assert outcome is None
        assert target.commit(c) == "committed"

    checks = after_first_key_check(monkeypatch, another_send_lands_first)

    # Lance rebases the first send onto v0 + 1 (it would land at v0 + 2); the fence refuses it, the retry's key
    # check finds our own commit.
    assert target.commit(commit) == "committed"

    assert checks == [v0, v0, v0 + 1]
    assert rows(uri) == 3
    assert target.version() == v0 + 1


def test_a_foreign_commit_after_the_key_check_is_retried_at_the_next_version(uri, monkeypatch):
    target = sl.LanceTarget(uri)
    v0 = target.version()
    commit = commit_of(uri, 0, ["a"], [1, 2, 3], prepared_version=v0)
    checks = after_first_key_check(monkeypatch, lambda c, outcome: foreign_append(uri, [9]))
    fences = []

    class RecordedFence(sl._NextVersionOnly):
        def __init__(self, expected):
            super().__init__(expected)
            fences.append(self)

    monkeypatch.setattr(sl, "_NextVersionOnly", RecordedFence)

    assert target.commit(commit) == "committed"

    assert checks == [v0, v0 + 1]  # refused once, then checked again past the foreign commit
    # Lance rebased the first attempt onto the foreign commit and asked once (its retries are off); the fence
    # refused it before anything was written. The second attempt asked for and wrote v0 + 2.
    assert [(f.expected, f.asked, f.refused, f.entered) for f in fences] == [
        (v0 + 1, [v0 + 2], [v0 + 2], 0),
        (v0 + 2, [v0 + 2], [], 1),
    ]
    assert rows(uri) == 1 + 3
    assert target.version() == v0 + 2
    assert "sinkpoint.job" not in props_at(uri, v0 + 1)
    assert props_at(uri, v0 + 2)["sinkpoint.key"] == "0"
    assert target.probe(JOB, 0, v0) == ("committed", ["a"])


def test_a_foreign_commit_of_the_fenced_version_itself_is_retried(uri, monkeypatch):
    target = sl.LanceTarget(uri)
    v0 = target.version()
    commit = commit_of(uri, 0, ["a"], [1, 2, 3], prepared_version=v0)
    real_enter = sl._Lease.__enter__
    entered = []

    def foreign_commit_inside_the_lock(lease):
        real_enter(lease)
        entered.append(lease.version)
        if len(entered) == 1:
            # pylance cannot be called from inside its own commit: the foreign writer is another thread. It takes
            # v0 + 1 after the fence let it through and before Lance checks it is free.
            other = threading.Thread(target=foreign_append, args=(uri, [9]))
            other.start()
            other.join()

    monkeypatch.setattr(sl._Lease, "__enter__", foreign_commit_inside_the_lock)
    fences = []

    class RecordedFence(sl._NextVersionOnly):
        def __init__(self, expected):
            super().__init__(expected)
            fences.append(self)

    monkeypatch.setattr(sl, "_NextVersionOnly", RecordedFence)

    assert target.commit(commit) == "committed"

    assert entered == [v0 + 1, v0 + 2]
    # Lance found v0 + 1 taken and, its retries off, did not go on to ask for v0 + 2; reading v0 + 1 back showed
    # the foreign transaction, so the attempt was retried from a fresh read.
    assert [(f.expected, f.asked, f.entered, f.exited) for f in fences] == [
        (v0 + 1, [v0 + 1], 1, 1),
        (v0 + 2, [v0 + 2], 1, 1),
    ]
    assert rows(uri) == 1 + 3
    assert target.version() == v0 + 2
    assert props_at(uri, v0 + 2)["sinkpoint.ids"] == '["a"]'


def test_foreign_commits_every_time_end_in_not_landed(uri, monkeypatch):
    target = sl.LanceTarget(uri)
    v0 = target.version()
    monkeypatch.setattr(sl, "FOREIGN_COMMIT_RETRIES_MAX", 2)
    real_check = sl._key_check

    def foreign_commit_after_every_check(dataset, c, read_version):
        outcome = real_check(dataset, c, read_version)
        foreign_append(uri, [9])
        return outcome

    monkeypatch.setattr(sl, "_key_check", foreign_commit_after_every_check)
    outcome = target.commit(commit_of(uri, 0, ["a"], [1, 2, 3], prepared_version=v0))

    assert outcome[0] == "not_landed" and "2 times in a row" in outcome[1]
    assert rows(uri) == 3  # the three foreign rows, none of ours
    assert target.probe(JOB, 0, v0) == "not_committed"


def test_without_the_fence_a_resend_after_a_lost_ack_lands_twice(uri):
    """The check must be able to fail: a plain pylance commit with its default retries rebases the resend past
    the first one and lands it again."""
    v0 = latest(uri)
    commit = commit_of(uri, 0, ["a"], [1, 2, 3], prepared_version=v0)
    fragments = [lance.FragmentMetadata.from_json(r.data.decode()) for r in commit.results]

    for _ in range(2):
        transaction = lance.Transaction(
            read_version=v0,
            operation=lance.LanceOperation.Append(fragments),
            transaction_properties=sl.encode_properties(commit),
        )
        lance.LanceDataset.commit(uri, transaction)

    assert rows(uri) == 6
    assert latest(uri) == v0 + 2
    assert props_at(uri, v0 + 1) == props_at(uri, v0 + 2)

    # The fenced target reading such a table sees its key once committed and does not add a third copy.
    assert sl.LanceTarget(uri).commit(commit) == "committed"
    assert rows(uri) == 6


# ----------------------------------------------------------------------------------------------------------
# The key check


def test_a_newer_epoch_fences_an_older_one(uri):
    target = sl.LanceTarget(uri)
    v0 = target.version()
    assert target.commit(commit_of(uri, 1, ["new"], [1], epoch=2, prepared_version=v0)) == "committed"
    assert rows(uri) == 1

    # The older epoch's key 1: taken by the newer epoch.
    taken = target.commit(commit_of(uri, 1, ["old"], [5, 5], epoch=1, prepared_version=v0))
    assert taken[0] == "not_landed" and "taken by epoch 2" in taken[1]
    # The older epoch's next key: a newer epoch landed after its intent.
    fenced = target.commit(commit_of(uri, 2, ["old"], [5, 5], epoch=1, prepared_version=v0))
    assert fenced[0] == "not_landed" and fenced[1].startswith("fenced")

    assert rows(uri) == 1
    assert target.version() == v0 + 1


def test_a_later_key_fences_an_earlier_one(uri):
    target = sl.LanceTarget(uri)
    v0 = target.version()
    assert target.commit(commit_of(uri, 3, ["k3"], [1], prepared_version=v0)) == "committed"

    outcome = target.commit(commit_of(uri, 2, ["k2"], [2, 2], prepared_version=v0))

    assert outcome[0] == "not_landed" and outcome[1].startswith("fenced: key 3")
    assert rows(uri) == 1


def test_a_non_fragment_result_is_not_landed_and_the_table_untouched(uri):
    target = sl.LanceTarget(uri)
    v0 = target.version()
    parquet = SimpleNamespace(
        job=JOB, key=0, ids=["a"], epoch=1, final=False, prepared_version=v0,
        results=[SimpleNamespace(format="parquet", data=b"PAR1")],
    )
    broken = SimpleNamespace(
        job=JOB, key=0, ids=["a"], epoch=1, final=False, prepared_version=v0,
        results=results_of(uri, [1]) + [SimpleNamespace(format=sl.LANCE_FRAGMENT_JSON, data=b"[1, 2]")],
    )

    for commit in (parquet, broken):
        outcome = target.commit(commit)
        assert outcome[0] == "not_landed" and outcome[1].startswith("not a Lance fragment")

    assert rows(uri) == 0
    assert target.version() == v0
    assert target.probe(JOB, 0, v0) == "not_committed"


@pytest.mark.parametrize(
    "damage",
    [
        {"sinkpoint.key": "one"},
        {"sinkpoint.epoch": "-1"},
        {"sinkpoint.ids": "[1]"},
        {"sinkpoint.ids": "not json"},
        {"sinkpoint.ids": '["a/b"]'},
        {"sinkpoint.key": None},
    ],
)
def test_damaged_sinkpoint_properties_are_unknown(uri, damage):
    target = sl.LanceTarget(uri)
    v0 = target.version()
    properties = {"sinkpoint.job": JOB, "sinkpoint.key": "0", "sinkpoint.epoch": "1",
                  "sinkpoint.ids": '["x"]', "sinkpoint.final": "false"}
    properties.update(damage)
    foreign_append(uri, [9], {k: v for k, v in properties.items() if v is not None})

    outcome = target.commit(commit_of(uri, 0, ["a"], [1, 2], prepared_version=v0))

    assert outcome[0] == "unknown" and f"version {v0 + 1}" in outcome[1]
    assert target.probe(JOB, 0, v0)[0] == "unknown"
    assert rows(uri) == 1


def test_other_jobs_and_foreign_commits_are_passed_over(uri):
    target = sl.LanceTarget(uri)
    v0 = target.version()
    foreign_append(uri, [9], {"some": "thing"})
    assert target.commit(commit_of(uri, 5, ["b"], [1], job="job-2", epoch=7, prepared_version=v0)) == "committed"

    assert target.commit(commit_of(uri, 0, ["a"], [1, 2], prepared_version=v0)) == "committed"

    assert rows(uri) == 1 + 1 + 2
    assert target.probe(JOB, 0, v0) == ("committed", ["a"])
    assert target.probe("job-2", 5, v0) == ("committed", ["b"])


def test_the_properties_decode_as_the_rust_adapter_decodes_them():
    good = {"sinkpoint.job": "j", "sinkpoint.key": "+7", "sinkpoint.epoch": "3", "sinkpoint.ids": '["a", "b.c"]'}
    assert sl.decode_properties(good) == sl.Recorded(job="j", n=7, epoch=3, ids=["a", "b.c"])
    assert sl.decode_properties({"other": "x"}) is None
    assert sl.decode_properties({}) is None
    for bad in ({"sinkpoint.key": str(2**64)}, {"sinkpoint.epoch": " 3"}, {"sinkpoint.ids": '[".."]'},
                {"sinkpoint.ids": json.dumps(["a" * 129])}, {"sinkpoint.ids": '{"a": 1}'}):
        with pytest.raises(sl.PropertiesDamaged):
            sl.decode_properties({**good, **bad})


# ----------------------------------------------------------------------------------------------------------
# Probe and maintenance


def test_the_probe_of_a_key_never_committed_is_not_committed(uri):
    target = sl.LanceTarget(uri)
    v0 = target.version()
    foreign_append(uri, [9])
    assert target.commit(commit_of(uri, 0, ["a"], [1], prepared_version=v0)) == "committed"

    assert target.probe(JOB, 1, v0) == "not_committed"
    assert target.probe(JOB, 1, None) == "not_committed"
    assert rows(uri) == 2


def test_the_probe_after_its_versions_were_cleaned_up_is_unknown(uri):
    target = sl.LanceTarget(uri)
    v0 = target.version()
    assert target.commit(commit_of(uri, 0, ["a"], [1, 2], prepared_version=v0)) == "committed"
    foreign_append(uri, [9])

    # Maintenance ignoring the watermark removes every version but the latest.
    target.cleanup_old_versions(older_than=timedelta(0))

    outcome = target.probe(JOB, 0, v0)
    assert outcome[0] == "unknown" and "cleaned up" in outcome[1]
    # A commit whose key check needs those versions is unknown too, never a second copy.
    assert target.commit(commit_of(uri, 0, ["a"], [1, 2], prepared_version=v0))[0] == "unknown"
    assert rows(uri) == 3


def test_cleanup_with_a_watermark_keeps_the_versions_after_it(uri):
    target = sl.LanceTarget(uri)
    for i in range(3):
        foreign_append(uri, [i])
    watermark = target.version()  # the version the key in flight was prepared against
    assert target.commit(commit_of(uri, 0, ["a"], [7, 7], prepared_version=watermark)) == "committed"
    foreign_append(uri, [8])
    before = [v["version"] for v in lance.dataset(uri).versions()]

    stats = target.cleanup_old_versions(older_than=timedelta(0), retention_watermark=watermark)

    after = [v["version"] for v in lance.dataset(uri).versions()]
    assert stats.old_versions == watermark
    assert after == [v for v in before if v > watermark]
    assert target.probe(JOB, 0, watermark) == ("committed", ["a"])
    assert rows(uri) == 3 + 2 + 1
    # Nothing at or below the watermark left: nothing to remove.
    assert target.cleanup_old_versions(older_than=timedelta(0), retention_watermark=watermark) is None
    # Young versions stay under the default age even below the watermark.
    foreign_append(uri, [9])
    kept = [v["version"] for v in lance.dataset(uri).versions()]
    assert target.cleanup_old_versions(retention_watermark=target.version()).old_versions == 0
    assert [v["version"] for v in lance.dataset(uri).versions()] == kept


def test_create_dataset_opens_an_existing_one_and_refuses_another_schema(uri):
    foreign_append(uri, [1])
    assert sl.create_dataset(uri, SCHEMA).count_rows() == 1
    with pytest.raises(ValueError, match="another schema"):
        sl.create_dataset(uri, pa.schema([("y", pa.string())]))
    assert rows(uri) == 1
