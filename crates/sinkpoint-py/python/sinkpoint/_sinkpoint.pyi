"""Type stubs of sinkpoint's compiled core (``sinkpoint._sinkpoint``); import from ``sinkpoint``.

Every blocking call releases the GIL. Handles pickle as their configuration and reopen lazily in the process
that unpickles them (so Ray can ship them to workers).
"""

from typing import Any, Iterable, Literal, Protocol, Sequence, Union

__version__: str

#: The most bytes of a checkpoint id, a job id, a worker name, a source key and a write result, as the core
#: checks them (a bigger input raises InvalidInput and writes nothing).
CHECKPOINT_ID_BYTES_MAX: int
JOB_ID_BYTES_MAX: int
SOURCE_KEY_BYTES_MAX: int
WRITE_RESULT_BYTES_MAX: int
WORKER_NAME_BYTES_MAX: int

#: The format tag of a pylance ``FragmentMetadata`` staged as its JSON (``json.dumps(f.to_json())``).
LANCE_FRAGMENT_JSON: str

# ----------------------------------------------------------------------------------------------------------
# Errors: one class per ErrorKind; ``str(e)`` says what to do.


class SinkpointError(Exception):
    """Base of every sinkpoint error. ``kind`` is the ErrorKind's snake_case name."""

    kind: str

class InvalidInput(SinkpointError):
    """Malformed or over a limit: fix the input; retrying fails the same way. Nothing was written."""

class IllegalTransition(SinkpointError):
    """The call does not fit the checkpoint's state; nothing was written."""

class SealLost(IllegalTransition):
    """Another attempt sealed this checkpoint first. ``winner`` names it; ``results`` are this attempt's own
    write results, whose data files the caller should delete."""

    id: str
    winner: str
    results: list[WriteResult]

class WrongStore(SinkpointError):
    """The store belongs to another job or target, or its state was lost while the table has its commits."""

class Fenced(SinkpointError):
    """A newer writer took over: stop this one."""

class Corrupt(SinkpointError):
    """Stored bytes are damaged: report it; restore from the mirror."""

class Poisoned(SinkpointError):
    """A write or fsync failed: drop the handle, reopen and recover."""

class AlreadyOpen(SinkpointError):
    """Another writer holds the store's file."""

class IoError(SinkpointError):
    """A transient I/O or object-store failure: retrying may succeed."""

class TargetError(SinkpointError):
    """The target failed or its answer is unknown: retry later (an unknown commit is re-probed)."""

class CommitMismatch(SinkpointError):
    """The target holds our key with other checkpoints: an operator must resolve it."""

class Bug(SinkpointError):
    """An internal invariant broke: report it."""

# ----------------------------------------------------------------------------------------------------------
# Values


class WriteResult:
    """One write result: opaque bytes plus a format tag ("lance", "parquet", "iceberg", "delta", "arrow-ipc",
    or any other non-empty name, e.g. LANCE_FRAGMENT_JSON)."""

    def __init__(self, format: str, data: bytes) -> None: ...
    @property
    def format(self) -> str: ...
    @property
    def data(self) -> bytes: ...
    @staticmethod
    def from_lance_fragment(fragment: Any) -> WriteResult:
        """A pylance ``FragmentMetadata`` (anything with ``to_json()``) as a LANCE_FRAGMENT_JSON result."""

#: What ``stage``/``stage_and_seal``/``seal`` accept as results: WriteResult or a pylance FragmentMetadata.
ResultLike = Union[WriteResult, Any]
#: A source key: bytes, or a str (its UTF-8 bytes).
KeyLike = Union[bytes, str]

def checkpoint_id_for_key(key: KeyLike) -> str:
    """The deterministic checkpoint id of a one-input checkpoint (its seal is the key's claim: one request)."""

class TargetCommit:
    """One commit offered to a Python target (what the Rust committer passes to ``Target.commit``)."""

    job: str
    key: int
    ids: list[str]
    epoch: int
    results: list[WriteResult]
    final: bool
    prepared_version: int | None

class Target(Protocol):
    """A table target written in Python, driven by the Rust committer (``DirTable`` and ``LanceTarget`` are
    compiled targets, driven without calling back into Python).

    The same four guarantees as the Rust ``Target`` trait: one commit per key, key/ids/epoch atomic with the
    data, honest probes, no hidden retries. Raising from ``commit`` or ``probe`` counts as an unknown outcome.
    """

    def version(self) -> int | None: ...
    def commit(
        self, commit: TargetCommit
    ) -> Union[Literal["committed"], tuple[Literal["not_landed", "unknown"], str]]: ...
    def probe(
        self, job: str, key: int, prepared_version: int | None
    ) -> Union[
        Literal["not_committed"],
        tuple[Literal["committed"], list[str] | None],
        tuple[Literal["unknown"], str],
    ]: ...

class SealedBy:
    worker: str
    session: int
    attempt: int

class RecoveryReport:
    orphans: list[str]
    marked_landed: int | None
    recommitted: int | None
    committed_keys: list[int]
    #: None, or ("unknown", key, reason) / ("mismatch", key, recorded_ids, landed_ids)
    blocked: tuple | None
    finished: bool

class CommitReport:
    committed_keys: list[int]
    committed_empty: int

class AdoptReport:
    adopted: list[str]
    already_adopted: int
    unsealed: int
    cleanup: list[WriteResult]
    #: (id, reason) pairs
    refused: list[tuple[str, str]]
    #: Checkpoints whose claim the round released (force-aborted or restarted after adoption): their inputs are
    #: unprocessed again for workers, and the next seal of each is adopted as the next attempt.
    released: list[str]
    #: (id, reason) pairs of seals the round left as they were, nothing written; the next round tries them again.
    held_back: list[tuple[str, str]]
    requests: int

class CheckpointInfo:
    id: str
    state: str  # "staged" | "sealed" | "committing" | "committed" | "aborted" | "commit_unknown"
    attempt: int
    epoch: int
    key: int | None

# ----------------------------------------------------------------------------------------------------------
# Orphan data files: the garbage ledger and the collector


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
Verdict = Literal["deleted", "due", "young", "gone", "live", "referenced"]

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

    An exception raised by a method stops the collection: ``IoError`` for most (retry), ``InvalidInput`` for
    ``ValueError``, ``TypeError``, ``LookupError``, ``AttributeError`` and ``NotImplementedError`` and for an
    answer of the wrong shape; the exception is the ``__cause__`` of the one raised.
    """

    def files_of(self, format: str, data: bytes) -> Sequence[str]: ...
    def referenced(self) -> Iterable[str]: ...
    def stat(self, file: str) -> tuple[int, int] | None: ...
    def delete(self, file: str) -> None: ...

# ----------------------------------------------------------------------------------------------------------
# Handles


class SharedStaging:
    """The one thing workers and the driver share: an object store URL (``file:///abs/dir``, ``s3://bucket/prefix``,
    ``memory://`` for tests in one process) and the job id."""

    def __init__(
        self,
        url: str,
        job: str,
        *,
        storage_options: dict[str, str] | None = None,
        request_timeout_ms: int | None = None,
    ) -> None: ...
    @property
    def url(self) -> str: ...
    @property
    def job(self) -> str: ...
    def worker(self, name: str) -> Worker: ...

class Worker:
    """A worker's handle on shared staging. Each handle (and each unpickled copy) is its own session: stage and
    seal a checkpoint through the same handle, or use ``stage_and_seal``."""

    def __init__(self, staging: SharedStaging, name: str) -> None: ...
    @property
    def name(self) -> str: ...
    @property
    def session(self) -> int: ...
    def is_processed(self, key: KeyLike) -> bool: ...
    def sealed_by(self, id: str) -> SealedBy | None: ...
    def stage(
        self, id: str, *, attempt: int = 0, part: int = 0, keys: Sequence[KeyLike] = (), results: Sequence[ResultLike] = ()
    ) -> Literal["staged", "already_staged"]: ...
    def seal(self, id: str, parts: int) -> None: ...
    def stage_and_seal(self, id: str, keys: Sequence[KeyLike], results: Sequence[ResultLike]) -> None: ...
    def restart(self, id: str) -> list[WriteResult]: ...
    def abort(self, id: str) -> list[WriteResult]: ...

class DirTable:
    """The reference directory table (a local directory): data files, one commit record per key."""

    def __init__(self, path: str) -> None: ...
    @property
    def path(self) -> str: ...
    def write_data_file(self, name: str, data: bytes) -> WriteResult:
        """Writes a data file, invisible until a commit references it. A data file is written once: a name that
        exists raises ``InvalidInput`` (name each attempt's files apart)."""
    def rows(self) -> list[str]:
        """Every line of every data file of every landed commit, in commit order (a file committed twice is
        read twice, as a duplicate would be)."""

class CleanupStats:
    """What one ``LanceTarget.cleanup_old_versions`` removed (Lance's ``RemovalStats``)."""

    bytes_removed: int
    old_versions: int
    data_files_removed: int
    transaction_files_removed: int
    index_files_removed: int
    deletion_files_removed: int
    #: Files Lance could not delete (the next cleanup finds them again).
    failed_deletes: int

class LanceTarget:
    """The Lance target: the Rust adapter ``sinkpoint_lance::LanceTarget`` compiled in, driven natively by the
    ``Driver``. Commits go through Lance's conditional-put commit handler, fenced to version V + 1 (V: the version
    the key check read), so a racing writer's manifest is never overwritten. The dataset at ``uri`` must exist
    (``sinkpoint.lance.create_dataset``). Keeps no state between calls; pickles as its URI and options."""

    def __init__(self, uri: str, storage_options: dict[str, str] | None = None) -> None:
        """``storage_options``: Lance's (pylance's) object-store options (for S3: ``aws_endpoint``,
        ``aws_region``, ``allow_http``, credentials)."""
    @property
    def uri(self) -> str: ...
    @property
    def storage_options(self) -> dict[str, str] | None: ...
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
        (retry). Raises ``InvalidInput`` for a negative or non-finite age."""

class Driver:
    """The committer side: a store (local redb file, optionally mirrored), a target, and optionally the shared
    staging whose sealed checkpoints it adopts. Opening (lazily, on first use) claims a new epoch and fences
    every older driver of the job."""

    def __init__(
        self,
        path: str,
        job: str,
        target: Union[DirTable, LanceTarget, Target],
        *,
        target_identity: str | None = None,
        mirror: str | None = None,
        mirror_options: dict[str, str] | None = None,
        staging: SharedStaging | None = None,
        crash_at: str | None = None,
    ) -> None:
        """``crash_at``: exit the process (code 86) at that named crash point of the commit protocol
        ("after-begin-commit", "after-target-commit-before-mark", "after-mark-unknown"): crash drills only."""
    @property
    def epoch(self) -> int: ...
    @property
    def job(self) -> str: ...
    @property
    def target_identity(self) -> str: ...
    def recover(self) -> RecoveryReport: ...
    def adopt(self) -> AdoptReport: ...
    def commit_pending(self) -> CommitReport: ...
    def finish(self) -> CommitReport: ...
    def is_finished(self) -> bool: ...
    def is_processed(self, key: KeyLike) -> bool: ...
    def checkpoints(self, state: str | None = None) -> list[CheckpointInfo]: ...
    def retention_watermark(self) -> int | None: ...
    def resolve(self, key: int, resolution: Literal["committed", "not_committed"], reason: str) -> None: ...
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
        self, files: Union[DataFiles, DirTable], grace_s: float = 86400.0, apply: bool = False
    ) -> CollectReport:
        """Collects the orphan data files of the ledger's entries from the table ``files`` knows (a ``DataFiles``
        object such as ``sinkpoint.lance.LanceDataFiles``, or a ``DirTable``: its files by name). A file a live
        checkpoint names, the table references, or modified less than ``grace_s`` seconds ago is kept (the grace
        period must exceed any task's time from writing a file to staging it); the rest is due. Without ``apply``
        (the default) it only reports; with it, due files are deleted and settled entries leave the ledger. Runs
        without the GIL, re-attaching it for each call on ``files``. Raises when ``files`` fails (see
        ``DataFiles``): what was deleted before stays deleted and its entries are forgotten; the rest waits for the
        next run. Raises InvalidInput for a negative or non-finite ``grace_s``."""
    def close(self) -> None: ...
    def __enter__(self) -> Driver: ...
    def __exit__(self, *exc: Any) -> None: ...
