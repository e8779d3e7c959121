"""sinkpoint: crash-safe, exactly-once checkpoints for data sink writers.

A job's tasks write data files and stage their *write results* under a checkpoint id; a driver then commits
every sealed checkpoint into the table exactly once, whatever crashed and was retried. The pieces:

- :class:`SharedStaging` / :class:`Worker` — the worker side, on any machine: ``is_processed``, ``stage``,
  ``seal``, ``stage_and_seal``, ``restart``, ``abort``. Handles pickle as their configuration.
- :class:`Driver` — the committer side: a local redb store (optionally mirrored to object storage), a target,
  ``recover`` / ``adopt`` / ``commit_pending`` / ``finish``, the operator hatches ``resolve`` and
  ``force_abort``, and the orphan data-file collector: ``garbage`` (the ledger of dropped attempts' results) and
  ``collect_data_files`` (over ``sinkpoint.lance.LanceDataFiles`` or any object of the stubs' ``DataFiles`` protocol).
- Targets: :class:`DirTable` (the reference directory table) and :class:`LanceTarget` (the Rust Lance adapter,
  compiled in; ``sinkpoint.lance`` has it with the worker-side helpers over pylance).
- ``sinkpoint.daft.LanceSink`` — a Daft ``DataSink`` writing Lance exactly once.

Errors are :class:`SinkpointError` subclasses, one per kind; each message says what to do.
"""

from ._sinkpoint import (
    CHECKPOINT_ID_BYTES_MAX,
    JOB_ID_BYTES_MAX,
    LANCE_FRAGMENT_JSON,
    SOURCE_KEY_BYTES_MAX,
    WORKER_NAME_BYTES_MAX,
    WRITE_RESULT_BYTES_MAX,
    AdoptReport,
    AlreadyOpen,
    Bug,
    CheckpointInfo,
    CleanupStats,
    CollectReport,
    CommitMismatch,
    CommitReport,
    Corrupt,
    DirTable,
    Driver,
    Fenced,
    GarbageEntry,
    IllegalTransition,
    InvalidInput,
    IoError,
    LanceTarget,
    OrphanFile,
    Poisoned,
    RecoveryReport,
    SealedBy,
    SealLost,
    SharedStaging,
    SinkpointError,
    TargetCommit,
    TargetError,
    Worker,
    WriteResult,
    WrongStore,
    __version__,
    checkpoint_id_for_key,
)

__all__ = [
    "CHECKPOINT_ID_BYTES_MAX",
    "JOB_ID_BYTES_MAX",
    "LANCE_FRAGMENT_JSON",
    "SOURCE_KEY_BYTES_MAX",
    "WORKER_NAME_BYTES_MAX",
    "WRITE_RESULT_BYTES_MAX",
    "AdoptReport",
    "AlreadyOpen",
    "Bug",
    "CheckpointInfo",
    "CleanupStats",
    "CollectReport",
    "CommitMismatch",
    "CommitReport",
    "Corrupt",
    "DirTable",
    "Driver",
    "Fenced",
    "GarbageEntry",
    "IllegalTransition",
    "InvalidInput",
    "IoError",
    "LanceTarget",
    "OrphanFile",
    "Poisoned",
    "RecoveryReport",
    "SealedBy",
    "SealLost",
    "SharedStaging",
    "SinkpointError",
    "TargetCommit",
    "TargetError",
    "Worker",
    "WriteResult",
    "WrongStore",
    "__version__",
    "checkpoint_id_for_key",
]
