"""sinkpoint: crash-safe, exactly-once checkpoints for data sink writers.

A job's tasks write data files and stage their *write results* under a checkpoint id; a driver then commits
every sealed checkpoint into the table exactly once, whatever crashed and was retried. The pieces:

- :class:`SharedStaging` / :class:`Worker` — the worker side, on any machine: ``is_processed``, ``stage``,
  ``seal``, ``stage_and_seal``, ``restart``, ``abort``. Handles pickle as their configuration.
- :class:`Driver` — the committer side: a local redb store (optionally mirrored to object storage), a target,
  ``recover`` / ``adopt`` / ``commit_pending`` / ``finish``, the operator hatches ``resolve`` and
  ``force_abort``, and the orphan data-file collector: ``garbage`` (the ledger of dropped attempts' results) and
  ``collect_data_files`` (over ``sinkpoint.lance.LanceDataFiles`` or any object of the stubs' ``DataFiles`` protocol).
- Targets: :class:`DirTable` (the reference directory table), :class:`LanceTarget` (the Rust Lance adapter,
  compiled in; ``sinkpoint.lance`` has it with the worker-side helpers over pylance) and :class:`DeltaTarget` (the
  Rust Delta Lake adapter, compiled in; local tables), or any Python object with
  ``version``, ``commit`` and ``probe`` that answers with a :class:`CommitOutcome` / :class:`ProbeOutcome`.
- ``sinkpoint.daft.LanceSink`` and ``sinkpoint.daft.DeltaSink`` — Daft data sinks writing Lance and Delta Lake
  exactly once.

Drivers: a job is safe when a second driver starts (a retry, a failover, a zombie) in two deployments: every driver
opens the same store file (one machine), or each driver has its own store file and all share one mirror (several
machines); a newer driver's epoch then fences every older one (its next call raises :class:`FencedError`). Two
drivers of one job with separate store files and no mirror are not fenced: both can commit the same inputs, and
rows can land twice.

A whole job in one process, its table a directory:

>>> import tempfile, sinkpoint
>>> tmp = tempfile.mkdtemp()
>>> staging = sinkpoint.SharedStaging(f"file://{tmp}/staging", "job-1")
>>> table = sinkpoint.DirTable(f"{tmp}/table")
>>> worker = staging.worker("w1")
>>> result = table.write_data_file("part-0", b"row 0\\nrow 1\\n")
>>> worker.stage_and_seal(sinkpoint.checkpoint_id_for_key("input-0"), ["input-0"], [result])
>>> with sinkpoint.Driver(f"{tmp}/job.redb", "job-1", table, staging=staging) as driver:
...     _ = driver.recover()
...     _ = driver.adopt()
...     driver.finish().committed_keys
[0]
>>> table.rows()
['row 0', 'row 1']

Errors
------

Every error sinkpoint raises is a :class:`SinkpointError`; its message says what to do and its ``kind`` names
the kind (``"fenced"``, ``"io"``, ...)::

    SinkpointError
    ├── InvalidInputError         malformed or over a limit: fix the input (nothing was written)
    ├── IllegalTransitionError    the call does not fit the state (nothing was written)
    │   └── SealLostError         another attempt sealed first: .winner, .results (delete their files)
    ├── WrongStoreError           another job's or target's store, or its state was lost
    ├── FencedError               a newer writer took over: stop this one
    ├── CorruptError              stored bytes are damaged: report; restore from the mirror
    ├── PoisonedError             a write or fsync failed: drop the handle, reopen and recover
    ├── AlreadyOpenError          another writer holds the store's file
    ├── TransientIOError          a transient I/O or object-store failure: retry
    ├── TargetError               the target failed or its answer is unknown: retry later
    ├── CommitMismatchError       the table holds our key with other checkpoints: an operator resolves it
    └── InternalError             an internal invariant broke: a bug in sinkpoint, report it

The names of sinkpoint 0.1 (``InvalidInput``, ``IllegalTransition``, ``SealLost``, ``WrongStore``, ``Fenced``,
``Corrupt``, ``Poisoned``, ``AlreadyOpen``, ``IoError``, ``CommitMismatch``, ``Bug``) still import from
``sinkpoint`` and are the same classes, with a ``DeprecationWarning``.
"""

from ._deprecated import deprecated_names
from ._sinkpoint import (
    ADOPT_EXPECTED_IDS_MAX,
    CHECKPOINT_ID_BYTES_MAX,
    JOB_ID_BYTES_MAX,
    LANCE_FRAGMENT_JSON,
    SOURCE_KEY_BYTES_MAX,
    WORKER_NAME_BYTES_MAX,
    WRITE_RESULT_BYTES_MAX,
    AdoptReport,
    AlreadyOpenError,
    CheckpointInfo,
    CleanupStats,
    CollectReport,
    CommitMismatchError,
    CommitOutcome,
    CommitReport,
    CorruptError,
    DeltaTarget,
    DirTable,
    Driver,
    FencedError,
    GarbageEntry,
    IllegalTransitionError,
    InternalError,
    InvalidInputError,
    LanceTarget,
    OrphanFile,
    PoisonedError,
    ProbeOutcome,
    RecoveryReport,
    SealedBy,
    SealLostError,
    SharedStaging,
    SinkpointError,
    TargetCommit,
    TargetError,
    TransientIOError,
    Worker,
    WriteResult,
    WrongStoreError,
    __version__,
    checkpoint_id_for_key,
    checkpoint_id_for_keys,
)

__all__ = [
    "ADOPT_EXPECTED_IDS_MAX",
    "CHECKPOINT_ID_BYTES_MAX",
    "JOB_ID_BYTES_MAX",
    "LANCE_FRAGMENT_JSON",
    "SOURCE_KEY_BYTES_MAX",
    "WORKER_NAME_BYTES_MAX",
    "WRITE_RESULT_BYTES_MAX",
    "AdoptReport",
    "AlreadyOpenError",
    "CheckpointInfo",
    "CleanupStats",
    "CollectReport",
    "CommitMismatchError",
    "CommitOutcome",
    "CommitReport",
    "CorruptError",
    "DeltaTarget",
    "DirTable",
    "Driver",
    "FencedError",
    "GarbageEntry",
    "IllegalTransitionError",
    "InternalError",
    "InvalidInputError",
    "LanceTarget",
    "OrphanFile",
    "PoisonedError",
    "ProbeOutcome",
    "RecoveryReport",
    "SealLostError",
    "SealedBy",
    "SharedStaging",
    "SinkpointError",
    "TargetCommit",
    "TargetError",
    "TransientIOError",
    "Worker",
    "WriteResult",
    "WrongStoreError",
    "__version__",
    "checkpoint_id_for_key",
    "checkpoint_id_for_keys",
]

#: The exception names of sinkpoint 0.1, each the same class as its new name: ``except sinkpoint.Fenced`` still
#: catches a ``FencedError``. Reading one warns (``DeprecationWarning``); they are not in ``__all__``.
_DEPRECATED_NAMES = {
    "AlreadyOpen": "AlreadyOpenError",
    "Bug": "InternalError",
    "CommitMismatch": "CommitMismatchError",
    "Corrupt": "CorruptError",
    "Fenced": "FencedError",
    "IllegalTransition": "IllegalTransitionError",
    "InvalidInput": "InvalidInputError",
    "IoError": "TransientIOError",
    "Poisoned": "PoisonedError",
    "SealLost": "SealLostError",
    "WrongStore": "WrongStoreError",
}


__getattr__ = deprecated_names(__name__, _DEPRECATED_NAMES, globals())
