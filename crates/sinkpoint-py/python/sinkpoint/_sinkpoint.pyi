"""Type stubs of sinkpoint's compiled core (``sinkpoint._sinkpoint``); import from ``sinkpoint``.

Every blocking call releases the GIL. Handles pickle as their configuration and reopen lazily in the process
that unpickles them (so Ray can ship them to workers). ``python -m mypy.stubtest sinkpoint._sinkpoint`` checks
this file against the compiled module in CI; the names only type checkers see (``KeyLike``, ``ResultLike``,
``Verdict``, ``Target``, ``DataFiles``) are listed in ``stubtest-allowlist.txt``.
"""

import os
from typing import Any, Iterable, Literal, Mapping, Protocol, Sequence, Union, final

from typing_extensions import TypeAlias

__version__: str

#: The most bytes of a checkpoint id, a job id, a worker name, a source key and a write result, as the core
#: checks them (a bigger input raises InvalidInputError and writes nothing).
CHECKPOINT_ID_BYTES_MAX: int
JOB_ID_BYTES_MAX: int
SOURCE_KEY_BYTES_MAX: int
WRITE_RESULT_BYTES_MAX: int
WORKER_NAME_BYTES_MAX: int
#: The most checkpoint ids one ``Driver.adopt(expected=...)`` round takes (more raise InvalidInputError).
ADOPT_EXPECTED_IDS_MAX: int

#: The format tag of a pylance ``FragmentMetadata`` staged as its JSON (``json.dumps(f.to_json())``).
LANCE_FRAGMENT_JSON: str

# ----------------------------------------------------------------------------------------------------------
# Errors: one class per ErrorKind, created in the module ``sinkpoint``; ``str(e)`` says what to do. The tree is
# in the package docstring (``help(sinkpoint)``).

class SinkpointError(Exception):
    """Base of every sinkpoint error. ``kind`` is the ErrorKind's snake_case name (``"fenced"``, ``"io"``, ...):
    a class attribute of each subclass, and set on every instance the core raises."""

    kind: str

class InvalidInputError(SinkpointError):
    """Malformed or over a limit: fix the input; retrying fails the same way. Nothing was written.
    ``kind``: ``"invalid_input"``."""

class IllegalTransitionError(SinkpointError):
    """The call does not fit the state of the checkpoint, the commit or the handle (a closed ``Driver``); nothing
    was written. ``kind``: ``"illegal_transition"``."""

class SealLostError(IllegalTransitionError):
    """Another attempt sealed this checkpoint first. ``id`` is the checkpoint, ``winner`` names the attempt that
    won, ``results`` are this attempt's own write results, whose data files the caller should delete.
    ``kind``: ``"illegal_transition"``."""

    id: str
    winner: str
    results: list[WriteResult]

class WrongStoreError(SinkpointError):
    """The store belongs to another job or target, or its state was lost while the table has its commits: fix
    the configuration, never start afresh. ``kind``: ``"wrong_store"``."""

class FencedError(SinkpointError):
    """A newer writer took over: stop this one. ``kind``: ``"fenced"``."""

class CorruptError(SinkpointError):
    """Stored bytes are damaged: report it; restore from the mirror. ``kind``: ``"corrupt"``."""

class PoisonedError(SinkpointError):
    """A write or fsync failed: drop the handle, reopen and recover. ``kind``: ``"poisoned"``."""

class AlreadyOpenError(SinkpointError):
    """Another writer holds the store's file: stop it or give this one its own file. ``kind``:
    ``"already_open"``."""

class TransientIOError(SinkpointError):
    """A transient I/O or object-store failure: retrying may succeed. ``kind``: ``"io"``."""

class TargetError(SinkpointError):
    """The target failed or its answer is unknown: retry later (an unknown commit is re-probed). ``kind``:
    ``"target"``."""

class CommitMismatchError(SinkpointError):
    """The target holds our key with other checkpoints: an operator must resolve it. ``kind``:
    ``"commit_mismatch"``."""

class InternalError(SinkpointError):
    """An internal invariant broke: a bug in sinkpoint; report it. ``kind``: ``"bug"``."""

# ----------------------------------------------------------------------------------------------------------
# Values

@final
class WriteResult:
    """One write result: opaque bytes plus a format tag ("lance", "parquet", "iceberg", "delta", "arrow-ipc",
    or any other non-empty name, e.g. LANCE_FRAGMENT_JSON). Equal when both are; pickles as itself."""

    def __new__(cls, format: str, data: bytes) -> WriteResult: ...
    @property
    def format(self) -> str:
        """The format tag."""
    @property
    def data(self) -> bytes:
        """The bytes, as staged."""
    @staticmethod
    def from_lance_fragment(fragment: Any) -> WriteResult:
        """A pylance ``FragmentMetadata`` (anything with ``to_json()``) as a LANCE_FRAGMENT_JSON result."""

#: What ``stage``/``stage_and_seal``/``seal`` accept as results: WriteResult or a pylance FragmentMetadata.
ResultLike: TypeAlias = Union[WriteResult, Any]
#: A source key: bytes, or a str (its UTF-8 bytes).
KeyLike: TypeAlias = Union[bytes, str]

def checkpoint_id_for_key(key: KeyLike) -> str:
    """The deterministic checkpoint id of a one-input checkpoint (its seal is the key's claim: one request)."""

def checkpoint_id_for_keys(keys: Sequence[KeyLike]) -> str:
    """The deterministic checkpoint id of a checkpoint of exactly ``keys`` (a task's inputs, in any order); one key
    gives ``checkpoint_id_for_key``'s. Under ``key_exclusivity="adoption"`` its seal is one request.

    >>> import sinkpoint
    >>> sinkpoint.checkpoint_id_for_keys(["b", "a"]) == sinkpoint.checkpoint_id_for_keys(["a", "b"])
    True
    >>> sinkpoint.checkpoint_id_for_keys(["a"]) == sinkpoint.checkpoint_id_for_key("a")
    True
    """

# ----------------------------------------------------------------------------------------------------------
# Targets written in Python

@final
class TargetCommit:
    """One commit offered to a Python target (what the Rust committer passes to ``Target.commit``)."""

    #: The job id.
    job: str
    #: The commit key's number n: at most one commit per (job, n) may ever land.
    key: int
    #: The checkpoints it covers, sorted; record them with the commit.
    ids: list[str]
    #: The writer's epoch; record it with the commit.
    epoch: int
    #: The write results to publish, in checkpoint then part order.
    results: list[WriteResult]
    #: Whether this is the job's last commit.
    final: bool
    #: The target version read before the intent was recorded (None if the target has no versions).
    prepared_version: int | None

@final
class CommitOutcome:
    """A Python target's answer to ``commit``: made by :meth:`committed`, :meth:`not_landed` or :meth:`unknown`.
    Frozen, equal when kind and reason are, hashable. (The older answers, the string tags ``"committed"``,
    ``("not_landed", reason)`` and ``("unknown", reason)``, are still accepted.)

    >>> from sinkpoint import CommitOutcome
    >>> CommitOutcome.not_landed("key 3 is taken")
    CommitOutcome.not_landed('key 3 is taken')
    >>> done = CommitOutcome.committed()
    >>> done.kind, done.reason, done == CommitOutcome.committed()
    ('committed', None, True)

    A whole target, in memory (``Target`` says what it must guarantee), driven by a ``Driver``:

    >>> import tempfile, sinkpoint
    >>> from sinkpoint import ProbeOutcome
    >>> class MemoryTarget:
    ...     identity = "memory:example"
    ...     def __init__(self):
    ...         self.commits = {}
    ...     def version(self):
    ...         return len(self.commits)
    ...     def commit(self, commit):
    ...         if commit.key in self.commits:
    ...             return CommitOutcome.not_landed(f"key {commit.key} is taken")
    ...         self.commits[commit.key] = list(commit.ids)
    ...         return CommitOutcome.committed()
    ...     def probe(self, job, key, prepared_version):
    ...         if key in self.commits:
    ...             return ProbeOutcome.committed(self.commits[key])
    ...         return ProbeOutcome.not_committed()
    >>> tmp = tempfile.mkdtemp()
    >>> staging = sinkpoint.SharedStaging(f"file://{tmp}/staging", "job-1")
    >>> result = sinkpoint.WriteResult("parquet", b"the data file of input a")
    >>> staging.worker("w1").stage_and_seal(sinkpoint.checkpoint_id_for_key("a"), ["a"], [result])
    >>> target = MemoryTarget()
    >>> with sinkpoint.Driver(f"{tmp}/job.redb", "job-1", target, staging=staging) as driver:
    ...     _ = driver.recover()
    ...     _ = driver.adopt()
    ...     driver.finish().committed_keys
    [0]
    >>> target.commits == {0: [sinkpoint.checkpoint_id_for_key("a")]}
    True
    """

    @staticmethod
    def committed() -> CommitOutcome:
        """The commit landed."""
    @staticmethod
    def not_landed(reason: str) -> CommitOutcome:
        """The commit did not land and never will (a refused precondition, a validation error); ``reason`` says
        why. Answer it only when certain: when in doubt, :meth:`unknown`."""
    @staticmethod
    def unknown(reason: str) -> CommitOutcome:
        """The commit may or may not have landed (a timeout, a lost response); only a probe can tell."""
    @property
    def kind(self) -> Literal["committed", "not_landed", "unknown"]:
        """Which answer it is."""
    @property
    def reason(self) -> str | None:
        """Why it did not land or is unknown; ``None`` for a commit that landed."""

@final
class ProbeOutcome:
    """A Python target's answer to ``probe``: made by :meth:`committed`, :meth:`not_committed` or
    :meth:`unknown`. Frozen, equal when kind, ids and reason are, hashable. (The older answers, the string tags
    ``"not_committed"``, ``("committed", ids or None)`` and ``("unknown", reason)``, are still accepted.)

    >>> from sinkpoint import ProbeOutcome
    >>> landed = ProbeOutcome.committed(["cp-1", "cp-2"])
    >>> landed
    ProbeOutcome.committed(['cp-1', 'cp-2'])
    >>> landed.kind, landed.ids
    ('committed', ['cp-1', 'cp-2'])
    >>> ProbeOutcome.committed().ids is None  # a target that keeps only a watermark
    True
    >>> ProbeOutcome.unknown("version 7 was cleaned up").reason
    'version 7 was cleaned up'
    """

    @staticmethod
    def committed(ids: Sequence[str] | None = None) -> ProbeOutcome:
        """A commit under the key is in the table; ``ids`` are the checkpoints it recorded (in any order), or
        ``None`` for a target that keeps only a watermark. A malformed id raises ``InvalidInputError``."""
    @staticmethod
    def not_committed() -> ProbeOutcome:
        """No commit under the key landed, and none can land later."""
    @staticmethod
    def unknown(reason: str) -> ProbeOutcome:
        """The target cannot tell (unreachable, or its history was expired past the key); ``reason`` says why."""
    @property
    def kind(self) -> Literal["committed", "not_committed", "unknown"]:
        """Which answer it is."""
    @property
    def ids(self) -> list[str] | None:
        """The checkpoints a landed commit recorded; ``None`` otherwise, or when the target keeps no ids."""
    @property
    def reason(self) -> str | None:
        """Why the target cannot tell; ``None`` otherwise."""

#: What ``Target.commit`` answers: a ``CommitOutcome``, or one of the older string tags.
CommitAnswer: TypeAlias = Union[CommitOutcome, Literal["committed"], tuple[Literal["not_landed", "unknown"], str]]
#: What ``Target.probe`` answers: a ``ProbeOutcome``, or one of the older string tags.
ProbeAnswer: TypeAlias = Union[
    ProbeOutcome,
    Literal["not_committed"],
    tuple[Literal["committed"], Union[list[str], None]],
    tuple[Literal["unknown"], str],
]

class Target(Protocol):
    """A table target written in Python, driven by the Rust committer (``DirTable`` and ``LanceTarget`` are
    compiled targets, driven without calling back into Python). ``CommitOutcome`` has a whole example.

    The same four guarantees as the Rust ``Target`` trait: one commit per key, key/ids/epoch atomic with the
    data, honest probes, no hidden retries. Raising from ``commit`` or ``probe``, or answering anything but a
    ``CommitOutcome`` / ``ProbeOutcome`` or an older tag, counts as an unknown outcome (the job stops with a
    ``TargetError`` naming the expected forms; it is never taken for "not landed").
    """

    def version(self) -> int | None:
        """The table's latest version, or ``None`` for a target without versions."""
    def commit(self, commit: TargetCommit) -> CommitAnswer:
        """Publishes ``commit.results`` under the key ``(commit.job, commit.key)``, at most once per key."""
    def probe(self, job: str, key: int, prepared_version: int | None) -> ProbeAnswer:
        """Whether a commit under ``(job, key)`` landed in the versions after ``prepared_version``."""

# ----------------------------------------------------------------------------------------------------------
# Reports

@final
class SealedBy:
    """Who sealed a checkpoint in shared staging (``Worker.sealed_by``)."""

    #: The worker's name.
    worker: str
    #: Its handle's session.
    session: int
    #: The attempt.
    attempt: int

@final
class RecoveryReport:
    """What ``Driver.recover`` found and did."""

    #: Checkpoints Staged by an older epoch (restart or abort them; seal complete ones).
    orphans: list[str]
    #: A key found landed and only marked committed.
    marked_landed: int | None
    #: A key found not landed and re-committed under the same key.
    recommitted: int | None
    #: Keys begun for checkpoints that were Sealed at the crash.
    committed_keys: list[int]
    #: None, or ("unknown", key, reason) / ("mismatch", key, recorded_ids, landed_ids)
    blocked: tuple[Any, ...] | None
    #: Whether the job's final commit has landed (a rerun can skip everything).
    finished: bool

@final
class CommitReport:
    """What ``Driver.commit_pending`` / ``Driver.finish`` did."""

    #: The keys committed.
    committed_keys: list[int]
    #: Checkpoints without results marked committed without a target commit.
    committed_empty: int

@final
class AdoptReport:
    """What one ``Driver.adopt`` round did."""

    #: Checkpoints sealed by workers, now Sealed in the driver's store.
    adopted: list[str]
    #: Sealed checkpoints the store already held.
    already_adopted: int
    #: Checkpoints with staged parts and no seal yet.
    unsealed: int
    #: Write results of attempts that lost their seal, and of seals whose claim the round released: delete
    #: their data files.
    cleanup: list[WriteResult]
    #: (id, reason) pairs of sealed checkpoints the store refused.
    refused: list[tuple[str, str]]
    #: Checkpoints whose claim the round released (force-aborted or restarted after adoption): their inputs are
    #: unprocessed again for workers, and the next seal of each is adopted as the next attempt.
    released: list[str]
    #: (id, reason) pairs of seals the round left as they were, nothing written; the next round tries them again.
    held_back: list[tuple[str, str]]
    #: Object-store requests the round made.
    requests: int

@final
class CheckpointInfo:
    """One checkpoint in the driver's store (``Driver.checkpoints``)."""

    #: The id.
    id: str
    #: "staged", "sealed", "committing", "commit_unknown", "committed" or "aborted".
    state: str
    #: The current attempt.
    attempt: int
    #: The epoch that began it.
    epoch: int
    #: The commit key, for committing, commit_unknown and committed checkpoints (None: committed without one).
    key: int | None
    #: Its write result count.
    results: int

# ----------------------------------------------------------------------------------------------------------
# Orphan data files: the garbage ledger and the collector

@final
class GarbageEntry:
    """One entry of the store's garbage ledger: a write result of a dropped attempt (a restart, an abort, a
    ``force_abort``, or the loser of a seal found by ``adopt``) whose data files ``Driver.collect_data_files``
    deletes. ``(seq, index)`` is its place in the ledger (the sequence number of the record that dropped it, and
    the result's index among that record's)."""

    seq: int
    index: int
    #: The checkpoint whose attempt it was.
    id: str
    #: The dropped attempt.
    attempt: int
    #: The write result (``result.format``, ``result.data``).
    result: WriteResult

#: What the collector decided about a file.
Verdict: TypeAlias = Literal["deleted", "due", "young", "gone", "live", "referenced"]

@final
class OrphanFile:
    """One file of one ledger entry and what the collector decided:

    - ``"deleted"``: past the grace period and named by nothing live: deleted (``apply=True``);
    - ``"due"``: the same, in a dry run: would be deleted;
    - ``"young"``: modified within the grace period: kept, and its entry stays in the ledger;
    - ``"gone"``: already gone;
    - ``"live"``: a live checkpoint's write result names it: kept;
    - ``"referenced"``: the table references it: kept.

    An entry none of whose files is young or due leaves the ledger (with ``apply``)."""

    #: The file, as ``DataFiles.files_of`` named it.
    file: str
    verdict: Verdict
    #: The checkpoint whose dropped attempt wrote it.
    id: str
    attempt: int
    #: Its size, when it exists.
    bytes: int | None
    #: Its ledger entry.
    seq: int
    index: int

@final
class CollectReport:
    """What ``Driver.collect_data_files`` found and did."""

    #: Every file of every ledger entry read, in ledger order.
    files: list[OrphanFile]
    #: Ledger entries read.
    entries: int
    #: Ledger entries removed (0 in a dry run).
    forgotten: int
    def tally(self, verdict: Verdict) -> tuple[int, int]:
        """How many files got ``verdict``, and their bytes."""

class DataFiles(Protocol):
    """What a table tells ``Driver.collect_data_files`` about its data files (``sinkpoint.lance.LanceDataFiles``
    is one). Keep these promises:

    - ``files_of`` names every data file the write result ``(format, data)`` makes a commit publish, each as the one
      string the other methods take for it, always the same for the same file; raise ``ValueError`` for a result
      this table cannot have written;
    - ``referenced`` includes every data file of every table version a reader may still open (a file it misses may
      be deleted under a reader's feet); it may include more;
    - ``stat`` answers ``None`` only for a file that does not exist, else ``(bytes, modified_ms)`` (milliseconds
      since the Unix epoch, wall time);
    - ``delete`` of a file already gone succeeds.

    An exception raised by a method stops the collection: ``TransientIOError`` for most (retry),
    ``InvalidInputError`` for ``ValueError``, ``TypeError``, ``LookupError``, ``AttributeError`` and
    ``NotImplementedError`` and for an answer of the wrong shape; the exception is the ``__cause__`` of the one
    raised.
    """

    def files_of(self, format: str, data: bytes) -> Sequence[str]:
        """The data files the write result ``(format, data)`` makes a commit publish."""
    def referenced(self) -> Iterable[str]:
        """Every data file of every table version a reader may still open."""
    def stat(self, file: str) -> tuple[int, int] | None:
        """``(bytes, modified_ms)`` of ``file``, or ``None`` when it does not exist."""
    def delete(self, file: str) -> None:
        """Deletes ``file``; a file already gone is not an error."""

# ----------------------------------------------------------------------------------------------------------
# Handles

@final
class SharedStaging:
    """The one thing workers and the driver share: an object store URL (``file:///abs/dir``, ``s3://bucket/prefix``,
    ``memory://`` for tests in one process) and the job id. Pickles as its configuration. A local directory is
    created now; one this process may not write raises ``InvalidInputError`` naming it.

    >>> import tempfile, pickle, sinkpoint
    >>> staging = sinkpoint.SharedStaging(f"file://{tempfile.mkdtemp()}/staging", "job-1")
    >>> staging.job
    'job-1'
    >>> pickle.loads(pickle.dumps(staging)).url == staging.url
    True
    >>> worker = staging.worker("w1")
    """

    def __new__(
        cls,
        url: str | os.PathLike[str],
        job: str,
        storage_options: Mapping[str, str] | None = None,
        request_timeout_ms: int | None = None,
        key_exclusivity: Literal["seal", "adoption"] = "seal",
    ) -> SharedStaging: ...
    @property
    def url(self) -> str:
        """The object store URL."""
    @property
    def job(self) -> str:
        """The job id."""
    @property
    def key_exclusivity(self) -> Literal["seal", "adoption"]:
        """Where the job decides that each source key belongs to one checkpoint. ``"seal"`` (the default): workers
        claim each key of a checkpoint of several, so a seal is a request per key and ``Worker.is_processed``
        answers. ``"adoption"``: workers claim none, a checkpoint of any number of keys (``checkpoint_id_for_keys``)
        seals with one request, and the driver's store decides each key's owner when it adopts (an overlapping
        checkpoint is refused there, its other inputs left for the next run); ``Worker.is_processed`` then raises
        ``InvalidInputError`` for a key without a claim of its own (ask ``Driver.is_processed``)."""
    def worker(self, name: str) -> Worker:
        """A new worker handle (a new session) named ``name``."""

@final
class Worker:
    """A worker's handle on shared staging. Each handle (and each unpickled copy) is its own session: stage and
    seal a checkpoint through the same handle, or use ``stage_and_seal``.

    >>> import tempfile, sinkpoint
    >>> tmp = tempfile.mkdtemp()
    >>> worker = sinkpoint.SharedStaging(f"file://{tmp}/staging", "job-1").worker("w1")
    >>> table = sinkpoint.DirTable(f"{tmp}/table")
    >>> key = "s3://bucket/input-0.csv"
    >>> worker.is_processed(key)
    False
    >>> result = table.write_data_file("input-0-attempt-1", b"row 0\\n")
    >>> worker.stage_and_seal(sinkpoint.checkpoint_id_for_key(key), [key], [result])
    >>> worker.is_processed(key)
    True
    >>> worker.stage("cp-2", keys=["input-1"], results=[sinkpoint.WriteResult("parquet", b"f")])
    'staged'
    >>> worker.seal("cp-2", 1)
    """

    def __new__(cls, staging: SharedStaging, name: str) -> Worker: ...
    @property
    def name(self) -> str:
        """The worker's name."""
    @property
    def session(self) -> int:
        """This handle's session, random per handle."""
    def is_processed(self, key: KeyLike) -> bool:
        """Whether a sealed checkpoint claims ``key`` (skip the input). Under ``key_exclusivity="adoption"`` only a
        key with a claim of its own (a ``checkpoint_id_for_key`` seal) answers; any other raises
        ``InvalidInputError`` (ask ``Driver.is_processed``)."""
    def sealed_by(self, id: str) -> SealedBy | None:
        """Who sealed checkpoint ``id``, or ``None`` when nobody has."""
    def stage(
        self,
        id: str,
        *,
        attempt: int = 0,
        part: int = 0,
        keys: Sequence[KeyLike] = (),
        results: Sequence[ResultLike] = (),
    ) -> Literal["staged", "already_staged"]:
        """Stages one part of one attempt of checkpoint ``id``: the source keys it covers and its write results.
        Idempotent in one handle (``"already_staged"`` for the same bytes)."""
    def seal(self, id: str, parts: int) -> None:
        """Seals checkpoint ``id`` once its ``parts`` parts are staged through this handle. Raises
        ``SealLostError`` when another attempt sealed it first."""
    def stage_and_seal(self, id: str, keys: Sequence[KeyLike], results: Sequence[ResultLike]) -> None:
        """Stages one part and seals it: a checkpoint in one call. Raises ``SealLostError`` when another attempt
        sealed it first. One request for a ``checkpoint_id_for_key`` id, and for any id under
        ``key_exclusivity="adoption"``; otherwise one more per key."""
    def restart(self, id: str) -> list[WriteResult]:
        """Drops the current attempt of checkpoint ``id`` and begins the next; returns the dropped results."""
    def abort(self, id: str) -> list[WriteResult]:
        """Aborts checkpoint ``id``; returns its dropped results."""

@final
class DirTable:
    """The reference directory table (a local directory): data files, one commit record per key.

    >>> import tempfile, sinkpoint
    >>> table = sinkpoint.DirTable(f"{tempfile.mkdtemp()}/table")
    >>> result = table.write_data_file("part-0", b"a\\nb\\n")
    >>> result.format
    'dir-table'
    >>> table.rows()  # nothing committed yet
    []
    """

    def __new__(cls, path: str | os.PathLike[str]) -> DirTable: ...
    @property
    def path(self) -> str:
        """The directory."""
    def write_data_file(self, name: str, data: bytes) -> WriteResult:
        """Writes a data file, invisible until a commit references it. A data file is written once: a name that
        exists raises ``InvalidInputError`` (name each attempt's files apart)."""
    def rows(self) -> list[str]:
        """Every line of every data file of every landed commit, in commit order (a file committed twice is
        read twice, as a duplicate would be)."""

@final
class CleanupStats:
    """What one ``LanceTarget.cleanup_old_versions`` removed (Lance's ``RemovalStats``)."""

    #: Bytes deleted.
    bytes_removed: int
    #: Versions (manifests) removed.
    old_versions: int
    #: Data files deleted.
    data_files_removed: int
    #: Transaction files deleted.
    transaction_files_removed: int
    #: Index files deleted.
    index_files_removed: int
    #: Deletion files deleted.
    deletion_files_removed: int
    #: Files Lance could not delete (the next cleanup finds them again).
    failed_deletes: int

@final
class LanceTarget:
    """The Lance target: the Rust adapter ``sinkpoint_lance::LanceTarget`` compiled in, driven natively by the
    ``Driver``. Commits go through Lance's conditional-put commit handler, fenced to version V + 1 (V: the version
    the key check read), so a racing writer's manifest is never overwritten. The dataset at ``uri`` must exist
    (``sinkpoint.lance.create_dataset``). Keeps no state between calls; pickles as its URI and options.
    ``storage_options``: Lance's (pylance's) object-store options (for S3: ``aws_endpoint``, ``aws_region``,
    ``allow_http``, credentials).

    >>> import tempfile, lance, pyarrow as pa, sinkpoint, sinkpoint.lance
    >>> tmp = tempfile.mkdtemp()
    >>> uri = f"{tmp}/table.lance"
    >>> _ = sinkpoint.lance.create_dataset(uri, pa.schema([("x", pa.int64())]))
    >>> target = sinkpoint.LanceTarget(uri)
    >>> staging = sinkpoint.SharedStaging(f"file://{tmp}/staging", "job-1")
    >>> fragments = sinkpoint.lance.write_fragment(uri, pa.table({"x": [1, 2, 3]}))
    >>> staging.worker("w1").stage_and_seal(sinkpoint.checkpoint_id_for_key("in-0"), ["in-0"], fragments)
    >>> with sinkpoint.Driver(f"{tmp}/job.redb", "job-1", target, staging=staging) as driver:
    ...     _ = driver.recover()
    ...     _ = driver.adopt()
    ...     driver.finish().committed_keys
    [0]
    >>> lance.dataset(uri).count_rows()
    3
    >>> target.probe("job-1", 0)[0]
    'committed'
    """

    def __new__(cls, uri: str | os.PathLike[str], storage_options: Mapping[str, str] | None = None) -> LanceTarget: ...
    @property
    def uri(self) -> str:
        """The dataset's URI."""
    @property
    def storage_options(self) -> dict[str, str] | None:
        """The object-store options it was given."""
    @property
    def identity(self) -> str:
        """What a ``Driver`` records in its store for this target: ``lance:<uri>``."""
    def version(self) -> int | None:
        """The dataset's latest version. Raises ``TargetError`` when it cannot be read."""
    def probe(
        self, job: str, key: int, prepared_version: int | None = None
    ) -> Union[
        Literal["not_committed"],
        tuple[Literal["committed"], list[str] | None],
        tuple[Literal["unknown"], str],
    ]:
        """Whether key ``key`` of ``job`` landed in the versions after ``prepared_version`` (all of them for
        ``None``); ``("unknown", reason)`` when a version in that range is gone (cleaned up) or unreadable."""
    def cleanup_old_versions(
        self, older_than_seconds: float = 1209600.0, retention_watermark: int | None = None
    ) -> CleanupStats:
        """Lance's ``cleanup_old_versions``: removes versions older than ``older_than_seconds`` (two weeks by
        default), keeping every version after ``retention_watermark`` (``Driver.retention_watermark()``; None:
        nothing in flight). Lance also deletes unreferenced data files (staged, not yet committed ones included)
        once they are 7 days old: commit a staged input within 7 days. Raises ``TargetError`` when it fails
        (retry). Raises ``InvalidInputError`` for a negative or non-finite age."""

@final
class DeltaTarget:
    """The Delta Lake target: the Rust adapter ``sinkpoint_delta::DeltaTarget`` (delta-rs) compiled in, driven
    natively by the ``Driver``. Key n lands as one append carrying the Delta action ``txn {appId:
    "sinkpoint.job.<job>", version: n}``, built on a snapshot whose txn for the job is n - 1 and written only as the
    next version: a retry after a lost answer, a racing writer or a zombie driver never lands a key twice. The
    table at ``uri`` (a local path or ``file://`` URL: the wheel's delta-rs has no cloud storage compiled in) must
    exist. Write results are Delta ``Add`` actions, ``{"v": 1, "add": {...}}`` tagged ``"delta"``
    (``sinkpoint.daft.DeltaSink`` writes them). Keeps no state between calls; pickles as its URI and options.
    ``Driver.collect_data_files(target)`` deletes the data files of the job's dropped attempts.

    >>> import json, os, tempfile, deltalake, pyarrow as pa, pyarrow.parquet as pq, sinkpoint
    >>> tmp = tempfile.mkdtemp()
    >>> uri = f"{tmp}/table"
    >>> _ = deltalake.DeltaTable.create(uri, pa.schema([("x", pa.int64())]))
    >>> pq.write_table(pa.table({"x": [1, 2, 3]}), f"{uri}/part-0.parquet")
    >>> add = {"path": "part-0.parquet", "size": os.path.getsize(f"{uri}/part-0.parquet"), "partitionValues": {},
    ...        "modificationTime": 0, "dataChange": True, "stats": json.dumps({"numRecords": 3})}
    >>> result = sinkpoint.WriteResult("delta", json.dumps({"v": 1, "add": add}).encode())
    >>> staging = sinkpoint.SharedStaging(f"file://{tmp}/staging", "job-1")
    >>> staging.worker("w1").stage_and_seal(sinkpoint.checkpoint_id_for_key("in-0"), ["in-0"], [result])
    >>> target = sinkpoint.DeltaTarget(uri)
    >>> with sinkpoint.Driver(f"{tmp}/job.redb", "job-1", target, staging=staging) as driver:
    ...     _ = driver.recover()
    ...     _ = driver.adopt()
    ...     driver.finish().committed_keys
    [0]
    >>> table = deltalake.DeltaTable(uri)
    >>> table.to_pyarrow_table().num_rows, table.transaction_version("sinkpoint.job.job-1")
    (3, 0)
    >>> target.probe("job-1", 0)[0]
    'committed'
    """

    def __new__(cls, uri: str | os.PathLike[str], storage_options: Mapping[str, str] | None = None) -> DeltaTarget: ...
    @property
    def uri(self) -> str:
        """The table's URI."""
    @property
    def storage_options(self) -> dict[str, str] | None:
        """The storage options it was given."""
    @property
    def identity(self) -> str:
        """What a ``Driver`` records in its store for this target: ``delta:<uri>``."""
    def version(self) -> int | None:
        """The table's latest version. Raises ``TargetError`` when it cannot be read (no table at the URI
        included)."""
    def probe(
        self, job: str, key: int, prepared_version: int | None = None
    ) -> Union[
        Literal["not_committed"],
        tuple[Literal["committed"], list[str] | None],
        tuple[Literal["unknown"], str],
    ]:
        """Whether key ``key`` of ``job`` landed: exact whatever the table's history (the job's txn in the latest
        snapshot); the ids come from the key's own commit file when it is among the few after
        ``prepared_version``, else ``None``."""

@final
class Driver:
    """The committer side: a store (local redb file, optionally mirrored), a target, and optionally the shared
    staging whose sealed checkpoints it adopts. ``path`` (a ``str`` or ``os.PathLike``) is the store's file,
    created if missing in a directory that must exist and be writable: a path that can never hold a store (a
    directory, a missing or read-only directory, a read-only file) raises ``InvalidInputError`` naming it, before
    anything is written. ``crash_at``: exit the process (code 86) at that named crash point of the commit protocol
    ("after-begin-commit", "after-target-commit-before-mark", "after-mark-unknown"): crash drills only.

    Opening (lazily, on first use) claims a new epoch. Which deployments are safe when a second driver of the job
    starts (a retry, a failover, a zombie): every driver opens the same store file (one machine; its lock admits
    one driver at a time), or each driver has its own store file and all share one ``mirror`` (several machines):
    the newer epoch fences every older driver, whose next call raises ``FencedError``. Two drivers of one job with
    separate store files and no mirror are not fenced: both can commit the same inputs, and rows can land twice.
    A closed handle stays closed (``close()``, or the end of its ``with`` block): a later call raises
    ``IllegalTransitionError``; a new ``Driver`` opens the store again.

    >>> import tempfile, sinkpoint
    >>> tmp = tempfile.mkdtemp()
    >>> staging = sinkpoint.SharedStaging(f"file://{tmp}/staging", "job-1")
    >>> table = sinkpoint.DirTable(f"{tmp}/table")
    >>> worker = staging.worker("w1")
    >>> for n in range(3):
    ...     result = table.write_data_file(f"in-{n}", f"row {n}\\n".encode())
    ...     worker.stage_and_seal(sinkpoint.checkpoint_id_for_key(f"in-{n}"), [f"in-{n}"], [result])
    >>> driver = sinkpoint.Driver(f"{tmp}/job.redb", "job-1", table, mirror=f"file://{tmp}/mirror", staging=staging)
    >>> driver.recover().blocked is None
    True
    >>> len(driver.adopt().adopted)
    3
    >>> driver.finish().committed_keys
    [0]
    >>> sorted(table.rows())
    ['row 0', 'row 1', 'row 2']
    >>> driver.close()
    >>> again = sinkpoint.Driver(f"{tmp}/job.redb", "job-1", table, mirror=f"file://{tmp}/mirror")
    >>> again.recover().finished  # a rerun finds the job done
    True
    >>> again.close()
    """

    def __new__(
        cls,
        path: str | os.PathLike[str],
        job: str,
        target: Union[DirTable, LanceTarget, DeltaTarget, Target],
        target_identity: str | None = None,
        mirror: str | os.PathLike[str] | None = None,
        mirror_options: Mapping[str, str] | None = None,
        staging: SharedStaging | None = None,
        crash_at: str | None = None,
    ) -> Driver: ...
    @property
    def epoch(self) -> int:
        """The epoch this driver claimed (opens the store)."""
    @property
    def job(self) -> str:
        """The job id."""
    @property
    def target_identity(self) -> str:
        """What the store records for the target (a Python target's ``identity``, or ``target_identity``)."""
    def recover(self) -> RecoveryReport:
        """Settles what a crash left: the key in flight is probed and marked or re-committed, Sealed
        checkpoints are committed."""
    def adopt(self, expected: Sequence[str] | None = None) -> AdoptReport:
        """One round of adopting the checkpoints workers sealed in shared staging: every seal (a listing of the
        job's claims), or, given ``expected`` checkpoint ids (at most ``ADOPT_EXPECTED_IDS_MAX``), the seals of
        those ids and of the inbox's parts, with no listing of the claims."""
    def commit_pending(self) -> CommitReport:
        """Commits every Sealed checkpoint (not the final commit)."""
    def finish(self) -> CommitReport:
        """Commits every Sealed checkpoint and marks the job's last commit final."""
    def is_finished(self) -> bool:
        """Whether the job's final commit has landed."""
    def is_processed(self, key: KeyLike) -> bool:
        """Whether a checkpoint in the store claims ``key``."""
    def checkpoints(self, state: str | None = None) -> list[CheckpointInfo]:
        """The store's checkpoints, all or those in ``state`` (a ``CheckpointInfo.state`` name)."""
    def retention_watermark(self) -> int | None:
        """The oldest table version a commit in flight may still need (keep every version after it); ``None``
        when nothing is in flight."""
    def resolve(self, key: int, resolution: Literal["committed", "not_committed"], reason: str) -> None:
        """Operator hatch: settles key ``key``, whose outcome is unknown, as the table shows it; ``reason`` is
        recorded."""
    def force_abort(self, ids: Sequence[str], reason: str) -> list[WriteResult]:
        """Operator hatch: aborts Sealed checkpoints (any other state is refused with nothing written),
        un-processing their keys so their inputs are read again. Their write results go to the garbage ledger
        (``collect_data_files`` deletes their files) and are returned. For a checkpoint adopted from shared staging
        the next ``adopt`` releases its worker's claim: workers see the input unprocessed, and the rerun's seal is
        adopted and committed once."""
    def garbage(self, limit: int = 1000, after: tuple[int, int] | None = None) -> list[GarbageEntry]:
        """The garbage ledger in ledger order: at most ``limit`` entries (and at most 4096) after the entry
        ``after``, a ``(seq, index)`` pair (page on with the last entry's)."""
    def collect_data_files(
        self, files: Union[DataFiles, DirTable, DeltaTarget], grace_s: float = 86400.0, apply: bool = False
    ) -> CollectReport:
        """Collects the orphan data files of the ledger's entries from the table ``files`` knows (a ``DataFiles``
        object such as ``sinkpoint.lance.LanceDataFiles``, a ``DirTable``: its files by name, or a ``DeltaTarget``: its
        table's files, collected natively). A file a live
        checkpoint names, the table references, or modified less than ``grace_s`` seconds ago is kept (the grace
        period must exceed any task's time from writing a file to staging it); the rest is due. Without ``apply``
        (the default) it only reports; with it, due files are deleted and settled entries leave the ledger. Runs
        without the GIL, re-attaching it for each call on ``files``. Raises when ``files`` fails (see
        ``DataFiles``): what was deleted before stays deleted and its entries are forgotten; the rest waits for the
        next run. Raises InvalidInputError for a negative or non-finite ``grace_s``."""
    def close(self) -> None:
        """Closes the store. The handle stays closed: a later call raises ``IllegalTransitionError`` (a new
        ``Driver`` opens the store again, under a new epoch); closing again does nothing."""
    def __enter__(self) -> Driver: ...
    def __exit__(self, *exc: object) -> None: ...
