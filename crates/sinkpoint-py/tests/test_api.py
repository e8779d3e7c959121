"""The package API: every handle and method, every error class (and its 0.1 name, deprecated), pickling round
trips, bad input, and a Python target answering with typed outcomes or the older string tags."""

import ast
import pickle
import threading
import warnings
from pathlib import Path

import pytest

import sinkpoint
from sinkpoint import (
    CommitOutcome,
    DirTable,
    Driver,
    IllegalTransitionError,
    InvalidInputError,
    ProbeOutcome,
    SealLostError,
    SharedStaging,
    SinkpointError,
    WriteResult,
    checkpoint_id_for_key,
    checkpoint_id_for_keys,
)

#: Each error class, its kind, and its sinkpoint 0.1 name.
ERROR_CLASSES = [
    ("InvalidInputError", "invalid_input", "InvalidInput"),
    ("IllegalTransitionError", "illegal_transition", "IllegalTransition"),
    ("SealLostError", "illegal_transition", "SealLost"),
    ("WrongStoreError", "wrong_store", "WrongStore"),
    ("FencedError", "fenced", "Fenced"),
    ("CorruptError", "corrupt", "Corrupt"),
    ("PoisonedError", "poisoned", "Poisoned"),
    ("AlreadyOpenError", "already_open", "AlreadyOpen"),
    ("TransientIOError", "io", "IoError"),
    ("TargetError", "target", None),
    ("CommitMismatchError", "commit_mismatch", "CommitMismatch"),
    ("InternalError", "bug", "Bug"),
]


@pytest.fixture
def job(tmp_path):
    staging = SharedStaging(f"file://{tmp_path}/staging", "job-1")
    table = DirTable(str(tmp_path / "table"))
    return staging, table, tmp_path


def seal_inputs(worker, table, keys):
    for key in keys:
        result = table.write_data_file(f"{key}-{worker.session:x}", f"{key}:0\n{key}:1\n".encode())
        worker.stage_and_seal(checkpoint_id_for_key(key), [key], [result])


def test_every_error_is_a_sinkpoint_error_of_the_sinkpoint_module_with_a_kind():
    for name, kind, _ in ERROR_CLASSES:
        cls = getattr(sinkpoint, name)
        assert issubclass(cls, SinkpointError), name
        assert cls.__module__ == "sinkpoint" and cls.__qualname__ == name, name
        assert cls.__doc__, name
        assert cls.kind == kind, name
        assert name in sinkpoint.__all__, name
    assert SinkpointError.__module__ == "sinkpoint" and issubclass(SinkpointError, Exception)
    assert issubclass(SealLostError, IllegalTransitionError)
    # Every class the compiled module exports as an exception is one of them (none is left out of the test).
    exported = {n for n in dir(sinkpoint._sinkpoint) if isinstance(getattr(sinkpoint._sinkpoint, n), type)}
    errors = {n for n in exported if issubclass(getattr(sinkpoint._sinkpoint, n), BaseException)}
    assert errors == {name for name, _, _ in ERROR_CLASSES} | {"SinkpointError"}


def test_the_stubs_exception_tree_is_the_runtimes():
    # mypy.stubtest checks signatures and members, not base classes: this checks the stub's bases.
    stub = ast.parse(Path(sinkpoint.__file__).with_name("_sinkpoint.pyi").read_text())
    bases = {c.name: [b.id for b in c.bases] for c in stub.body if isinstance(c, ast.ClassDef)}
    for name in [n for n, _, _ in ERROR_CLASSES] + ["SinkpointError"]:
        runtime = [b.__name__ for b in getattr(sinkpoint, name).__bases__]
        assert bases[name] == runtime, name


@pytest.mark.parametrize(("new", "old"), [(new, old) for new, _, old in ERROR_CLASSES if old])
def test_a_0_1_error_name_is_the_same_class_with_a_deprecation_warning(new, old):
    with pytest.warns(DeprecationWarning, match=f"sinkpoint.{old} is deprecated: use sinkpoint.{new}"):
        cls = getattr(sinkpoint, old)
    assert cls is getattr(sinkpoint, new)
    assert old not in sinkpoint.__all__
    # `from sinkpoint import Old` goes through the same path, and the old name still catches the new class.
    with pytest.warns(DeprecationWarning):
        exec(f"from sinkpoint import {old} as imported", namespace := {})
    assert namespace["imported"] is cls
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(getattr(sinkpoint, old)):
            raise getattr(sinkpoint, new)("raised under the new name")


def test_an_unknown_attribute_is_still_an_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'Nope'"):
        sinkpoint.Nope  # noqa: B018
    assert not hasattr(sinkpoint, "InvalidInputErrorr")


def test_an_error_pickles_with_its_kind_and_message(job):
    staging, _, _ = job
    with pytest.raises(InvalidInputError) as raised:
        staging.worker("w").stage_and_seal("", ["k"], [])
    copy = pickle.loads(pickle.dumps(raised.value))
    assert type(copy) is InvalidInputError
    assert (str(copy), copy.kind) == (str(raised.value), "invalid_input")


def test_an_old_name_still_catches_what_the_core_raises(job):
    staging, _, _ = job
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old = sinkpoint.InvalidInput
    with pytest.raises(old):
        staging.worker("w").stage_and_seal("", ["k"], [])


def test_a_job_through_workers_and_a_driver_commits_every_row_once(job):
    staging, table, tmp = job
    worker = staging.worker("w1")
    keys = [f"input-{i}" for i in range(10)]
    seal_inputs(worker, table, keys)
    assert all(worker.is_processed(k) for k in keys)
    assert not worker.is_processed("input-99")
    assert worker.sealed_by(checkpoint_id_for_key("input-3")).worker == "w1"
    assert worker.sealed_by(checkpoint_id_for_key("input-99")) is None
    with Driver(str(tmp / "d.redb"), "job-1", table, mirror=f"file://{tmp}/mirror", staging=staging) as driver:
        report = driver.recover()
        assert report.blocked is None and not report.finished
        adopted = driver.adopt()
        assert len(adopted.adopted) == 10 and adopted.cleanup == [] and adopted.requests > 0
        assert driver.finish().committed_keys == [0]
        assert driver.is_finished()
        assert driver.is_processed("input-4")
        assert {c.state for c in driver.checkpoints()} == {"committed"}
        assert [c.key for c in driver.checkpoints("committed")] == [0] * 10
        assert driver.retention_watermark() is None
    rows = table.rows()
    assert sorted(rows) == sorted(f"{k}:{r}" for k in keys for r in (0, 1))


def test_tasks_of_several_inputs_seal_with_one_request_each_when_keys_are_decided_at_adoption(tmp_path):
    staging = SharedStaging(f"file://{tmp_path}/staging", "job-1", key_exclusivity="adoption")
    assert staging.key_exclusivity == "adoption"
    assert pickle.loads(pickle.dumps(staging)).key_exclusivity == "adoption"
    table = DirTable(str(tmp_path / "table"))
    worker = staging.worker("w1")
    # The split changed between runs: "in-2" is in both tasks, and both seal (no key is claimed).
    ids = []
    for name, keys in [("a", ["in-0", "in-1", "in-2"]), ("b", ["in-2", "in-3"])]:
        result = table.write_data_file(name, "".join(f"{k}:0\n" for k in keys).encode())
        ids.append(checkpoint_id_for_keys(keys))
        worker.stage_and_seal(ids[-1], keys, [result])
    with pytest.raises(InvalidInputError, match="Store::is_processed"):
        worker.is_processed("in-3")
    claims = list((tmp_path / "staging" / "jobs" / "job-1" / "shared" / "claims").iterdir())
    assert len(claims) == 2, "one object a task, none a key"
    with Driver(str(tmp_path / "d.redb"), "job-1", table, staging=staging) as driver:
        report = driver.adopt(expected=ids)
        assert len(report.adopted) == 1 and len(report.refused) == 1 and len(report.cleanup) == 1
        driver.finish()
        rest = [k for k in ["in-0", "in-1", "in-2", "in-3"] if not driver.is_processed(k)]
        assert rest in (["in-3"], ["in-0", "in-1"])
        result = table.write_data_file("rerun", "".join(f"{k}:0\n" for k in rest).encode())
        worker.stage_and_seal(checkpoint_id_for_keys(rest), rest, [result])
        assert len(driver.adopt(expected=[checkpoint_id_for_keys(rest)]).adopted) == 1
        driver.finish()
    assert sorted(table.rows()) == [f"in-{i}:0" for i in range(4)]
    with pytest.raises(InvalidInputError, match="key_exclusivity"):
        SharedStaging(f"file://{tmp_path}/staging", "job-1", key_exclusivity="sometimes")


def test_a_second_attempt_loses_the_seal_and_gets_its_results_back(job):
    staging, table, _ = job
    first, second = staging.worker("a"), staging.worker("b")
    seal_inputs(first, table, ["k"])
    mine = WriteResult("parquet", b"second attempt's file")
    with pytest.raises(SealLostError) as lost:
        second.stage_and_seal(checkpoint_id_for_key("k"), ["k"], [mine])
    assert lost.value.kind == "illegal_transition"
    assert '"a"' in lost.value.winner
    assert lost.value.results == [mine]


def test_stage_then_seal_through_one_handle_and_restart_abort(job):
    staging, _, _ = job
    worker = staging.worker("w")
    result = WriteResult("lance", b"fragment")
    assert worker.stage("cp-1", attempt=0, part=0, keys=[b"k1"], results=[result]) == "staged"
    assert worker.stage("cp-1", attempt=0, part=0, keys=[b"k1"], results=[result]) == "already_staged"
    assert worker.stage("cp-1", attempt=0, part=1, keys=["k2"]) == "staged"
    worker.seal("cp-1", 2)
    assert worker.is_processed("k1") and worker.is_processed(b"k2")
    worker.stage("cp-2", results=[WriteResult("lance", b"f2")])
    assert worker.restart("cp-2") == [WriteResult("lance", b"f2")]
    worker.stage("cp-2", attempt=1, results=[WriteResult("lance", b"f3")])
    assert worker.abort("cp-2") == [WriteResult("lance", b"f3")]
    with pytest.raises(IllegalTransitionError):
        worker.seal("cp-never-staged", 1)


def test_handles_pickle_as_their_configuration(job):
    staging, table, tmp = job
    staging2 = pickle.loads(pickle.dumps(staging))
    assert (staging2.url, staging2.job) == (staging.url, staging.job)
    worker = staging.worker("w")
    worker2 = pickle.loads(pickle.dumps(worker))
    assert worker2.name == "w" and worker2.session != worker.session  # a new session where it is unpickled
    table2 = pickle.loads(pickle.dumps(table))
    assert table2.path == table.path
    driver = Driver(str(tmp / "d.redb"), "job-1", table, staging=staging)
    driver2 = pickle.loads(pickle.dumps(driver))
    assert driver2.target_identity == driver.target_identity == f"file://{table.path}"
    result = WriteResult("delta", b"\x00\x01")
    assert pickle.loads(pickle.dumps(result)) == result


@pytest.mark.parametrize(
    "call",
    [
        lambda s, t, d: SharedStaging("file:///tmp/x", ""),
        lambda s, t, d: SharedStaging("file:///tmp/x", "j" * (sinkpoint.JOB_ID_BYTES_MAX + 1)),
        lambda s, t, d: SharedStaging("relative/dir", "job"),
        lambda s, t, d: SharedStaging("nope://x", "job"),
        lambda s, t, d: s.worker("w").is_processed(b"k" * (sinkpoint.SOURCE_KEY_BYTES_MAX + 1)),
        lambda s, t, d: s.worker("w").stage_and_seal("", ["k"], []),
        lambda s, t, d: s.worker("w").stage_and_seal("x" * (sinkpoint.CHECKPOINT_ID_BYTES_MAX + 1), ["k"], []),
        lambda s, t, d: s.worker("w").stage_and_seal("cp", [42], []),
        lambda s, t, d: s.worker("w").stage_and_seal("cp", ["k"], ["not a result"]),
        lambda s, t, d: s.worker("n" * (sinkpoint.WORKER_NAME_BYTES_MAX + 1)),
        lambda s, t, d: WriteResult("", b"x"),
        lambda s, t, d: WriteResult("lance", b"x" * (sinkpoint.WRITE_RESULT_BYTES_MAX + 1)),
        lambda s, t, d: Driver(str(d / "x.redb"), "job-1", object()),
        lambda s, t, d: Driver(str(d / "x.redb"), "job-1", t, crash_at="nowhere"),
        lambda s, t, d: Driver(str(d / "x.redb"), "job-1", t).resolve(0, "maybe", "why"),
        lambda s, t, d: Driver(str(d / "x.redb"), "job-1", t).checkpoints("lost"),
        lambda s, t, d: Driver(str(d / "x.redb"), "job-1", t).adopt(),
    ],
)
def test_bad_input_raises_invalid_input_and_writes_nothing(job, call):
    staging, table, tmp = job
    before = sorted(p.relative_to(tmp) for p in tmp.rglob("*"))
    with pytest.raises(InvalidInputError) as raised:
        call(staging, table, tmp)
    assert raised.value.kind == "invalid_input"
    assert str(raised.value)  # the message says what is wrong
    after = sorted(p.relative_to(tmp) for p in tmp.rglob("*"))
    new = [p for p in after if p not in before and not str(p).startswith("x.redb")]
    assert new == [], f"bad input wrote {new}"


def test_a_newer_driver_fences_the_older(job):
    staging, table, tmp = job
    seal_inputs(staging.worker("w"), table, ["a"])
    old = Driver(str(tmp / "old.redb"), "job-1", table, mirror=f"file://{tmp}/mirror", staging=staging)
    old.recover()
    old.adopt()
    new = Driver(str(tmp / "new.redb"), "job-1", table, mirror=f"file://{tmp}/mirror", staging=staging)
    assert new.epoch > old.epoch
    with pytest.raises(sinkpoint.FencedError) as fenced:
        old.finish()
    assert fenced.value.kind == "fenced"
    new.recover()
    new.adopt()
    new.finish()
    assert table.rows().count("a:0") == 1


def test_operator_hatches(job):
    staging, table, tmp = job
    worker = staging.worker("w")
    worker.stage("cp", results=[WriteResult("parquet", b"f")], keys=["k"])
    worker.seal("cp", 1)
    driver = Driver(str(tmp / "d.redb"), "job-1", table, staging=staging)
    driver.adopt()
    assert driver.force_abort(["cp"], "operator: bad input file") == [WriteResult("parquet", b"f")]
    assert [c.state for c in driver.checkpoints()] == ["aborted"]
    with pytest.raises(IllegalTransitionError):
        driver.resolve(7, "committed", "no such key in flight")


def test_adopt_reports_the_claims_it_released_and_the_seals_it_held_back(job):
    staging, table, tmp = job
    worker = staging.worker("w")
    worker.stage_and_seal("cp", ["k"], [WriteResult("parquet", b"f")])
    with Driver(str(tmp / "d.redb"), "job-1", table, staging=staging) as driver:
        first = driver.adopt()
        assert (first.adopted, first.released, first.held_back) == (["cp"], [], [])
        driver.force_abort(["cp"], "operator: bad input file")
        # The next round releases the aborted seal's claim: workers see the input unprocessed again.
        again = driver.adopt()
        assert again.released == ["cp"] and again.held_back == []
        assert again.cleanup == [WriteResult("parquet", b"f")]
        assert not worker.is_processed("k")
        assert 'released=["cp"]' in repr(again) and "held_back=[]" in repr(again)
        assert driver.adopt().released == []


def test_a_dir_table_collects_the_files_of_dropped_attempts(job):
    staging, table, tmp = job
    key = "input-0"
    cid = checkpoint_id_for_key(key)
    # The first attempt stages its file and dies; the retry (a new handle) seals its own.
    first = table.write_data_file("input-0-first", b"input-0:0\n")
    staging.worker("attempt-1").stage(cid, keys=[key], results=[first])
    retry = table.write_data_file("input-0-retry", b"input-0:0\n")
    staging.worker("attempt-2").stage_and_seal(cid, [key], [retry])
    with Driver(str(tmp / "d.redb"), "job-1", table, staging=staging) as driver:
        driver.recover()
        assert driver.adopt().cleanup == [first]
        driver.finish()
        (entry,) = driver.garbage()
        assert (entry.id, entry.attempt, entry.result) == (cid, 0, first)
        dry = driver.collect_data_files(table, grace_s=0)
        assert [(f.file, f.verdict) for f in dry.files] == [("input-0-first", "due")]
        done = driver.collect_data_files(table, grace_s=0, apply=True)
        assert [(f.file, f.verdict) for f in done.files] == [("input-0-first", "deleted")]
        assert (done.entries, done.forgotten) == (1, 1) and driver.garbage() == []
    assert not (tmp / "table" / "data" / "input-0-first").exists()
    assert (tmp / "table" / "data" / "input-0-retry").exists()
    assert table.rows() == ["input-0:0"]


class RecordingTarget:
    """A Python target in memory, keeping the protocol's guarantees: one commit per key. It answers with typed
    outcomes (``typed=True``) or with the older string tags."""

    identity = "memory:recording"

    def __init__(self, fail_with=None, typed=True, probe_answer=None):
        self.commits = {}
        self.fail_with = fail_with
        self.typed = typed
        self.probe_answer = probe_answer

    def version(self):
        return len(self.commits)

    def commit(self, commit):
        if self.fail_with is not None:
            return self.fail_with
        if commit.key in self.commits:
            reason = f"key {commit.key} is taken"
            return CommitOutcome.not_landed(reason) if self.typed else ("not_landed", reason)
        self.commits[commit.key] = (list(commit.ids), [r.data for r in commit.results], commit.final)
        return CommitOutcome.committed() if self.typed else "committed"

    def probe(self, job, key, prepared_version):
        if self.probe_answer is not None:
            return self.probe_answer
        if key in self.commits:
            ids = self.commits[key][0]
            return ProbeOutcome.committed(ids) if self.typed else ("committed", ids)
        return ProbeOutcome.not_committed() if self.typed else "not_committed"


@pytest.mark.parametrize("typed", [True, False], ids=["outcomes", "tags"])
def test_the_committer_drives_a_python_target(job, typed):
    staging, table, tmp = job
    seal_inputs(staging.worker("w"), table, ["a", "b"])
    target = RecordingTarget(typed=typed)
    driver = Driver(str(tmp / "d.redb"), "job-1", target, staging=staging)
    driver.recover()
    driver.adopt()
    assert driver.finish().committed_keys == [0]
    ids, data, final = target.commits[0]
    assert sorted(ids) == sorted(checkpoint_id_for_key(k) for k in "ab") and len(data) == 2 and final


@pytest.mark.parametrize("typed", [True, False], ids=["outcomes", "tags"])
def test_a_crash_after_the_commit_is_settled_by_the_python_targets_probe(job, typed):
    staging, table, tmp = job
    seal_inputs(staging.worker("w"), table, ["a"])
    target = RecordingTarget(typed=typed)
    driver = Driver(str(tmp / "d.redb"), "job-1", target, staging=staging)
    driver.adopt()
    # The commit lands but its answer is lost: the key is left in flight, for the probe to settle.
    target.fail_with = CommitOutcome.unknown("the response was lost") if typed else ("unknown", "lost")
    real_commit = target.commit

    def landed_then_lost(commit):
        target.fail_with, answer = None, target.fail_with
        real_commit(commit)
        return answer

    target.commit = landed_then_lost
    driver.finish()  # the probe after the unknown answer finds the commit
    assert [c.state for c in driver.checkpoints()] == ["committed"]
    assert list(target.commits) == [0]


@pytest.mark.parametrize(
    "answer",
    [
        ("unknown", "timeout"),
        CommitOutcome.unknown("timeout"),
        "garbage",
        ("committed", "extra"),
        42,
        ProbeOutcome.not_committed(),
        "not_committed",
    ],
)
def test_an_unclear_answer_from_a_python_target_is_unknown_never_not_landed(job, answer):
    staging, table, tmp = job
    seal_inputs(staging.worker("w"), table, ["a"])
    target = RecordingTarget(fail_with=answer)
    driver = Driver(str(tmp / "d.redb"), "job-1", target, staging=staging)
    driver.adopt()
    with pytest.raises(sinkpoint.TargetError):
        driver.finish()
    # Not NotLanded: the key stays bound to its checkpoints (the probe after the unclear answer found nothing,
    # so it is re-sent under the same key), and the next run's recovery settles it from the target.
    assert [(c.state, c.key) for c in driver.checkpoints()] in ([("committing", 0)], [("commit_unknown", 0)])
    target.fail_with = None
    driver.close()
    report = Driver(str(tmp / "d.redb"), "job-1", target).recover()
    assert report.blocked is None and report.recommitted == 0
    assert list(target.commits) == [0]


@pytest.mark.parametrize("answer", ["garbage", 42, CommitOutcome.committed(), ("committed", [1, 2])])
def test_a_wrong_answer_to_a_probe_raises_naming_the_expected_forms(job, answer):
    staging, table, tmp = job
    seal_inputs(staging.worker("w"), table, ["a"])
    target = RecordingTarget(fail_with=CommitOutcome.unknown("timeout"), probe_answer=answer)
    driver = Driver(str(tmp / "d.redb"), "job-1", target, staging=staging)
    driver.adopt()
    with pytest.raises(sinkpoint.TargetError) as raised:
        driver.finish()  # the commit's answer is unknown, and the probe that follows answers wrong
    message = str(raised.value)
    assert raised.value.kind == "target"
    assert f"answered {answer!r} to a probe" in message, message
    assert "expected a sinkpoint.ProbeOutcome (ProbeOutcome.not_committed()" in message, message
    assert '"not_committed", ("committed", ids or None) or ("unknown", reason)' in message, message
    assert target.commits == {}


@pytest.mark.parametrize("answer", ["garbage", ProbeOutcome.not_committed(), ("not_landed",)])
def test_a_wrong_answer_to_a_commit_raises_naming_the_expected_forms(job, answer):
    staging, table, tmp = job
    seal_inputs(staging.worker("w"), table, ["a"])
    target = RecordingTarget(fail_with=answer)
    driver = Driver(str(tmp / "d.redb"), "job-1", target, staging=staging)
    driver.adopt()
    with pytest.raises(sinkpoint.TargetError) as raised:
        driver.finish()
    message = str(raised.value)
    assert raised.value.kind == "target"
    assert f"answered {answer!r} to a commit" in message, message
    assert "expected a sinkpoint.CommitOutcome (CommitOutcome.committed()" in message, message
    assert '"committed", ("not_landed", reason) or ("unknown", reason)' in message, message


def test_a_wrong_answer_to_a_commit_is_named_even_when_a_later_probe_cannot_tell(job):
    staging, table, tmp = job
    seal_inputs(staging.worker("w"), table, ["a"])
    target = RecordingTarget(fail_with="garbage")
    probes = []

    def probe(job, key, prepared_version):
        # The first probe (before the first commit of a new store) finds nothing; the one after the commit's
        # unreadable answer cannot tell, and its reason is what the committer reports.
        probes.append(key)
        return ProbeOutcome.not_committed() if len(probes) == 1 else ProbeOutcome.unknown("the table is offline")

    target.probe = probe
    driver = Driver(str(tmp / "d.redb"), "job-1", target, staging=staging)
    driver.adopt()
    with pytest.raises(sinkpoint.TargetError) as raised:
        driver.finish()
    message = str(raised.value)
    assert "the table is offline" in message, message
    assert "the Python target answered 'garbage' to a commit: expected a sinkpoint.CommitOutcome" in message, message


def test_outcomes_are_frozen_values():
    assert CommitOutcome.committed() == CommitOutcome.committed()
    assert CommitOutcome.unknown("x") != CommitOutcome.not_landed("x")
    assert len({CommitOutcome.unknown("x"), CommitOutcome.unknown("x"), CommitOutcome.committed()}) == 2
    assert (CommitOutcome.not_landed("taken").kind, CommitOutcome.not_landed("taken").reason) == ("not_landed", "taken")
    assert repr(CommitOutcome.unknown("it's gone")) == 'CommitOutcome.unknown("it\'s gone")'
    landed = ProbeOutcome.committed(("b", "a"))
    assert (landed.kind, landed.ids, landed.reason) == ("committed", ["b", "a"], None)
    assert ProbeOutcome.committed() == ProbeOutcome.committed(None) != ProbeOutcome.committed([])
    assert ProbeOutcome.not_committed().ids is None and ProbeOutcome.unknown("r").reason == "r"
    assert hash(ProbeOutcome.committed(["a"])) == hash(ProbeOutcome.committed(["a"]))
    assert repr(ProbeOutcome.committed(["a"])) == "ProbeOutcome.committed(['a'])"
    assert CommitOutcome.committed() != "committed"  # a tag is not an outcome; the bridge reads both
    for outcome in (CommitOutcome.committed(), ProbeOutcome.not_committed()):
        with pytest.raises(AttributeError):
            outcome.kind = "unknown"
        with pytest.raises(TypeError):
            type(outcome)()
    with pytest.raises(InvalidInputError):
        ProbeOutcome.committed([""])
    with pytest.raises(TypeError):
        ProbeOutcome.committed("cp-1")  # a str is not a list of ids


def test_blocking_calls_release_the_gil(job):
    staging, table, _ = job
    worker = staging.worker("w")
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(1)
            stop.wait(0.001)

    thread = threading.Thread(target=ticker)
    thread.start()
    try:
        seal_inputs(worker, table, [f"k{i}" for i in range(30)])
    finally:
        stop.set()
        thread.join()
    assert len(ticks) > 5, "the other thread never ran while sinkpoint calls were in flight"
