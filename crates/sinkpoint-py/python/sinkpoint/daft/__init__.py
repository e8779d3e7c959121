"""Exactly-once Lance and Delta Lake writes from Daft: :class:`LanceSink` and :class:`DeltaSink`, each a
``daft.io.DataSink`` (Daft 0.7.26). The two share everything but the table; this text tells it for Lance, and
:class:`DeltaSink`'s docstring what differs for Delta (its modes, partitions, the Parquet data files and their
``Add`` actions, committed through ``sinkpoint.DeltaTarget``).

Each input file of a job is one sinkpoint checkpoint (``checkpoint_id_for_key(input)``). Workers write the input's
rows as uncommitted Lance fragments and seal the checkpoint in shared staging themselves (nothing goes through the
driver); ``finalize`` on the driver adopts every sealed checkpoint into the committer's store and commits them into
the Lance table through :class:`sinkpoint.LanceTarget` (the Rust Lance adapter compiled into the wheel: no commit
overwrites a racing writer's, so several jobs may append to one table at once). A rerun after any crash skips what
was sealed and finishes the job; a rerun after the job finished does nothing. The protocol is in
``docs/protocols/shared-staging.md``; the sink in ``docs/protocols/python.md``.

The package's modules follow its seams: ``_sink.py`` (:class:`LanceSink`: its configuration, ``start``, ``write``
and the worker side), ``_runner.py`` (:meth:`LanceSink.run`, the recovery, adoption and commits of ``finalize``,
:func:`prune_inputs`), ``_reader.py`` (:func:`read_inputs`, row positions and their runs), ``_table.py`` (the
Lance table in ``df.write_lance``'s terms: modes, storage options, writer settings), ``_delta_sink.py`` and
``_delta_table.py`` (:class:`DeltaSink` and the Delta table in ``df.write_deltalake``'s terms) and ``_errors.py``
(:class:`IncompleteInputsError`). Import every name from ``sinkpoint.daft``.

Usage (``examples/daft_lance_job.py`` is the full job)::

    sink = LanceSink("s3://bucket/table.lance", "nightly-2024-06-01", "s3://bucket/sinkpoint",
                     "/var/lib/job/committer.redb", mirror_url="s3://bucket/sinkpoint-mirror")
    sink.run(["s3://in/0001.parquet", ...])        # recover, adopt, prune, read, write, commit: the commits

``LanceSink`` takes ``df.write_lance``'s arguments: ``mode="append"`` (the default) or ``mode="create"``, both
exactly-once; ``io_config``, ``schema``, ``storage_options`` and the writer settings (``max_rows_per_file``, ...).
The modes that cannot be exactly-once (``overwrite``, ``insert_overwrite``, ``merge``, ``use_mem_wal=True``,
``checkpoint=``) raise ``sinkpoint.InvalidInputError`` at construction; the table of modes is in
:class:`LanceSink`'s docstring and ``docs/protocols/python.md``.

or, with a DataFrame built by hand (every row must carry its input and its position in it, and every row of an input
must reach the sink once)::

    df = read_inputs(prune_inputs(paths, staging_url=..., job=...))
    df.write_sink(sink)

How Daft calls a DataSink (the facts this module is built on, from Daft 0.7.26):

- ``DataFrame.write_sink`` calls ``start()`` on the driver, then executes the plan, then calls
  ``finalize(list_of_WriteResult)`` on the driver and checks that the MicroPartition it returns has exactly
  ``schema()`` (``daft/dataframe/dataframe.py`` ``write_sink``).
- ``write`` runs where the plan runs: in the driver's process with the native runner, in the Ray actors
  (``RaySwordfishActor``, long-lived, several plans at once) with the Ray runner. Each call gets an iterator of
  exactly ONE MicroPartition (``src/daft-writers/src/sink.rs``: ``safe_write`` on a one-element list); there is
  no end-of-task call. With Ray the sink is pickled into every task's plan, after ``start()``.
- One input file reaches the sink as several MicroPartitions, interleaved with other files: the parquet reader
  emits one per row group (or per morsel of ``default_morsel_size`` rows), with both runners. A row count cannot
  tell an input read once from one read twice and interleaved, and ``read_parquet`` gives each row its file but not
  its position in it; so :func:`read_inputs` (a ``daft.io.source.DataSource``, one task per file, or per
  ``inputs_per_task`` files whose small files then share a MicroPartition) adds the
  position, and an input is complete only once positions ``0 .. rows - 1`` have each arrived exactly once; the
  sink reads ``rows`` from the parquet footer (Daft's ``read_parquet_statistics``; or give ``row_counts``). A
  position that arrives twice, beyond the file, or after the seal is rejected, and ``finalize`` raises it.
- Daft splits one parquet file across scan tasks (by row groups) only when ``enable_scan_task_split_and_merge``
  is on (off by default), the scan has at most ``parquet_split_row_groups_max_files`` (10) tasks, and the file is
  larger than ``scan_tasks_max_size_bytes`` (384 MiB) or of unknown size
  (``src/daft-scan/src/scan_task_iters/mod.rs`` ``split_by_row_groups``, called only by the Ray runner's planner).
  The split pieces can run on different machines, where no process sees the whole input, so
  :meth:`LanceSink.start` refuses that configuration (set ``parquet_split_row_groups_max_files=0``: merging whole
  files into one task stays allowed). Anything else that spreads an input's rows over processes (a
  repartition, a join) or drops rows (a filter, a limit) leaves the input incomplete: it is never sealed, and
  ``finalize`` raises :class:`IncompleteInputsError` after committing what is complete (never a partial input).
- Ray retries a task only when its worker died (``src/daft-distributed/src/statistics/mod.rs``): a new process,
  so nothing of the dead attempt's buffers survives. The retry re-reads the task's inputs; an input the dead
  attempt sealed is lost by the retry's seal (its fragment reported as garbage, never committed twice), or skipped
  before it is written when the workers check (``check_processed_in_worker``).

Object-store requests (shared staging and the store's mirror; the inputs, their footers and the Lance table are
not counted here), as :meth:`LanceSink.run` makes them (``tests/test_requests.py`` counts them on moto's S3 API):

- Worker, per input: 1 (``stage_and_seal``: the seal's conditional create, which holds the fragment; no inbox
  entry). An input large enough to be flushed in parts puts 1 inbox entry per part, then the create. With
  ``check_processed_in_worker``, 1 more (a read of the input's claim) before the input is written.
  Besides: 1 footer read of the input (on the inputs' store) for its row count, unless ``row_counts`` gives it.
- Driver, per input: 1 (adopt reads each new claim once; a claim whose checkpoint the driver's store holds is not
  read again). Per run, 3 listings: before pruning, the claims (1 request per 1,000 claims of the job: the seals
  of an earlier crashed run) and the inbox; in ``finalize``, the inbox alone (empty unless inputs were flushed in
  parts; their entries are bulk-deleted once adopted, 1 request per 1,000), for ``finalize`` reads only the claims
  of the run's inputs (``Driver.adopt(expected=...)``), whatever the job's history. Pruning itself is free: after
  the adopt every sealed input is in the driver's store, which answers locally.
- Mirror (``mirror_url``): the store's open under a new epoch (6 requests on a new mirror; a reopen also reads the
  WAL segments since the last snapshot), 1 put per WAL group of the adoptions (the core adopts up to 16 seals at
  once, folded into groups: about 1 group per 7 inputs), 1 listing by the mirror's upkeep, and 2 puts per commit
  (its intent, its mark).
- A rerun of a finished job: the store's open, nothing else (no worker, no staging request).

With ``inputs_per_checkpoint=k``, the worker's create and the driver's claim read are per checkpoint of ``k``
inputs: 2/k requests per input.

So a fresh run costs 2 requests per input, plus the adoption groups and a constant per run: measured 2.40 per input
for 50 inputs, 2.20 for 200 (``tests/test_requests.py`` and ``examples/daft_lance_job.py`` on moto; 3.34 and 3.17
while ``stage_and_seal`` also put an inbox entry; 5.8 for 50 before that, with a claim read per input by the
driver's pruning and by each worker, and the store opened twice). An attempt that loses its seal (a racing
driver, a Ray retry of a task whose worker died after sealing) costs 1 more (it reads the winner's claim) and its
fragment is garbage (the worker deletes it: requests on the table's store, not counted here).

Limits:

- Inputs are parquet files, each written whole: an input's rows are buffered in the worker until they are all there
  (memory: up to ``flush_bytes`` per input in flight, then the buffer is written and staged as one more part). Its
  positions are kept as sorted disjoint runs: one for rows read in order, at most :data:`POSITION_RUNS_MAX`.
- :func:`read_inputs` reads with pyarrow on Daft's event loop (one batch at a time per process), not with Daft's
  native reader.
- Fragment files of an attempt that lost its seal are deleted by that worker at once (best effort; a file it could
  not delete stays and is reported: :attr:`LanceSink.report` ``garbage``, the deleted ones in ``garbage_deleted``).
  Those of losers the driver's adoption finds and of force-aborted checkpoints are in the store's garbage ledger:
  :meth:`LanceSink.collect_orphans` deletes them. Those of a worker that died before staging anything are named
  nowhere: Lance's ``cleanup_old_versions`` removes them, as it removes every unreferenced file once it is 7 days
  old.
- That includes the fragments of inputs staged and not yet committed: commit a staged input (rerun the job) within
  7 days of its write, or its commit names files that are gone. Never run Lance's cleanup with
  ``delete_unverified=True`` while a job on the table runs: it deletes the staged fragments at once, whatever
  their age (``sinkpoint.LanceTarget.cleanup_old_versions`` never sets it).
- ``finalize``'s ``rows`` is ``None`` for a commit holding checkpoints sealed by an earlier run (their counts were in
  that run's write results).
"""

from .._deprecated import deprecated_names
from ._common import RESULT_SCHEMA
from ._delta_sink import DeltaSink
from ._delta_table import MODES as DELTA_MODES
from ._delta_table import REFUSED_MODES as DELTA_REFUSED_MODES
from ._errors import IncompleteInputsError
from ._reader import (
    INPUT_COLUMN,
    INPUTS_PER_TASK_MAX,
    POSITION_COLUMN,
    POSITION_RUNS_MAX,
    READ_BATCH_ROWS_DEFAULT,
    daft_path,
    read_inputs,
)
from ._runner import GRACE_S_DEFAULT, OPEN_TIMEOUT_S_DEFAULT, prune_inputs
from ._sink import FLUSH_BYTES_DEFAULT, LanceSink
from ._table import MODES, REFUSED_MODES

__all__ = [
    "DELTA_MODES",
    "DELTA_REFUSED_MODES",
    "FLUSH_BYTES_DEFAULT",
    "GRACE_S_DEFAULT",
    "INPUT_COLUMN",
    "INPUTS_PER_TASK_MAX",
    "MODES",
    "OPEN_TIMEOUT_S_DEFAULT",
    "POSITION_COLUMN",
    "POSITION_RUNS_MAX",
    "READ_BATCH_ROWS_DEFAULT",
    "REFUSED_MODES",
    "RESULT_SCHEMA",
    "DeltaSink",
    "IncompleteInputsError",
    "LanceSink",
    "daft_path",
    "prune_inputs",
    "read_inputs",
]

# The module users import every name from: what the classes print and pickle as.
LanceSink.__module__ = __name__
DeltaSink.__module__ = __name__

#: The names of sinkpoint 0.1 in this module, each the same object as its new name; reading one warns
#: (``DeprecationWarning``). They are not in ``__all__``.
_DEPRECATED_NAMES = {"IncompleteInputs": "IncompleteInputsError"}


__getattr__ = deprecated_names(__name__, _DEPRECATED_NAMES, globals())
