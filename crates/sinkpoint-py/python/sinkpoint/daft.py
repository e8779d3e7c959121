"""Exactly-once Lance writes from Daft: :class:`LanceSink`, a ``daft.io.DataSink`` (Daft 0.7.26).

Each input file of a job is one sinkpoint checkpoint (``checkpoint_id_for_key(input)``). Workers write the input's
rows as uncommitted Lance fragments and seal the checkpoint in shared staging themselves (nothing goes through the
driver); ``finalize`` on the driver adopts every sealed checkpoint into the committer's store and commits them into
the Lance table through :class:`sinkpoint.LanceTarget` (the Rust Lance adapter compiled into the wheel: no commit
overwrites a racing writer's, so several jobs may append to one table at once). A rerun after any crash skips what
was sealed and finishes the job; a rerun after the job finished does nothing. The protocol is in
``docs/protocols/shared-staging.md``; the sink in ``docs/protocols/python.md``.

Usage (``examples/daft_lance_job.py`` is the full job)::

    sink = LanceSink("s3://bucket/table.lance", "nightly-2024-06-01", "s3://bucket/sinkpoint", "/var/lib/job/committer.redb",
                     mirror_url="s3://bucket/sinkpoint-mirror")
    sink.run(["s3://in/0001.parquet", ...])        # recover, adopt, prune, read, write, commit: the commits

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
  its position in it; so :func:`read_inputs` (a ``daft.io.source.DataSource``, one task per file) adds the
  position, and an input is complete only once positions ``0 .. rows - 1`` have each arrived exactly once; the
  sink reads ``rows`` from the parquet footer (Daft's ``read_parquet_statistics``; or give ``row_counts``). A
  position that arrives twice, beyond the file, or after the seal is rejected, and ``finalize`` raises it.
- Daft splits one parquet file across scan tasks (by row groups) only when ``enable_scan_task_split_and_merge``
  is on (off by default), the scan has at most ``parquet_split_row_groups_max_files`` (10) tasks, and the file is
  larger than ``scan_tasks_max_size_bytes`` (384 MiB) or of unknown size (``src/daft-scan/src/scan_task_iters/mod.rs``
  ``split_by_row_groups``, called only by the Ray runner's planner). The split pieces can run on different machines, where no process sees the whole input,
  so :meth:`LanceSink.start` refuses that configuration (set ``parquet_split_row_groups_max_files=0``: merging
  whole files into one task stays allowed). Anything else that spreads an input's rows over processes (a
  repartition, a join) or drops rows (a filter, a limit) leaves the input incomplete: it is never sealed, and
  ``finalize`` raises :class:`IncompleteInputs` after committing what is complete (never a partial input).
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
  read again). Per adopt, 2 listings: the claims (1 request per 1,000 claims of the job) and the inbox (empty
  unless inputs were flushed in parts; their entries are bulk-deleted once adopted, 1 request per 1,000); a run
  adopts twice (before pruning, in ``finalize``): 4 listings. Pruning itself is free: after the adopt every
  sealed input is in the driver's store, which answers locally.
- Mirror (``mirror_url``): the store's open under a new epoch (6 requests on a new mirror; a reopen also reads the
  WAL segments since the last snapshot), 1 put per WAL group of the adoptions (the core adopts up to 16 seals at
  once, folded into groups: about 1 group per 7 inputs), 1 listing by the mirror's upkeep, and 2 puts per commit
  (its intent, its mark).
- A rerun of a finished job: the store's open, nothing else (no worker, no staging request).

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

from __future__ import annotations

import bisect
import collections
import json
import logging
import os
import socket
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, AsyncIterator, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from daft.io.sink import DataSink, WriteResult
from daft.io.source import DataSource, DataSourceTask
from daft.schema import Schema

__all__ = [
    "INPUT_COLUMN",
    "POSITION_COLUMN",
    "RESULT_SCHEMA",
    "IncompleteInputs",
    "LanceSink",
    "daft_path",
    "prune_inputs",
    "read_inputs",
]

logger = logging.getLogger("sinkpoint.daft")

#: The column that carries each row's input (:func:`read_inputs` adds it); it is not written to the table.
INPUT_COLUMN = "_sinkpoint_input"

#: The column that carries each row's position in its input (0 for the file's first row; :func:`read_inputs` adds
#: it); it is not written to the table. An input is sealed only when positions ``0 .. rows - 1`` have each arrived
#: once.
POSITION_COLUMN = "_sinkpoint_row"

#: The schema of what ``finalize`` returns: one row per commit this run made (``key``), the checkpoint ids it
#: committed, their inputs (when this process knows them) and their rows (``None`` when not all are known, e.g.
#: checkpoints sealed by an earlier run).
RESULT_SCHEMA = pa.schema(
    [
        ("key", pa.int64()),
        ("checkpoints", pa.large_list(pa.large_string())),
        ("inputs", pa.large_list(pa.large_string())),
        ("rows", pa.int64()),
    ]
)

#: An input's rows are buffered until it is complete; past this many bytes the buffer is written as a fragment
#: and staged as one part of the input's checkpoint (memory stays bounded for large inputs).
FLUSH_BYTES_DEFAULT = 256 * 1024 * 1024

#: The grace period of :meth:`LanceSink.collect_orphans`, in seconds (the core's default: a day). It must exceed
#: any task's time from writing a fragment to staging it.
GRACE_S_DEFAULT = 86400.0

#: How long ``finalize`` waits for another driver that holds the store's file (AlreadyOpen).
OPEN_TIMEOUT_S_DEFAULT = 300.0

#: The number of runs whose per-input state a worker process keeps (a long-lived Ray actor serves many).
_RUNS_KEPT = 8

#: Concurrent claim reads of :func:`prune_inputs` (each call releases the GIL).
_PRUNE_CONCURRENCY = 16

#: Attempts of a stage or seal call that raised ``IoError`` (they are idempotent in one handle).
_IO_ATTEMPTS = 3

#: Rows per batch :func:`read_inputs` reads (one MicroPartition each on the way to the sink).
READ_BATCH_ROWS_DEFAULT = 65536

#: The most disjoint runs of positions one input may have arrived as before it is complete (see :class:`_Ranges`):
#: an input read in order is one run; a run costs about 100 bytes, so this bounds one input's tracking at a few MiB.
POSITION_RUNS_MAX = 65536


def _sp() -> Any:
    """The compiled core, imported on first use (so this module imports, and the sink pickles, without it)."""
    from sinkpoint import _sinkpoint

    return _sinkpoint


def _lance() -> Any:
    from sinkpoint import lance as sp_lance

    return sp_lance


class IncompleteInputs(RuntimeError):
    """Some inputs were not written exactly once; everything complete was committed, and the job is not finished.
    ``incomplete`` maps an input to ``(rows seen, rows it has)`` (never sealed: nothing of it is in the table);
    ``rejected`` maps an input to why some of its rows were refused (a row position that arrived twice, beyond the
    file's rows, or after the input was sealed: the input was read twice or its rows multiplied on the way). An input
    refused before its seal is never sealed; one sealed before (each row once) is committed, and the copies after are
    not. ``missing`` lists inputs of :meth:`LanceSink.run` that no task wrote, or that a finished job does not hold;
    ``refused`` the (id, reason) pairs the committer refused at adoption. ``report`` is the sink's report of the
    run."""

    def __init__(self, message: str, *, incomplete=None, missing=None, refused=None, rejected=None,
                 report=None) -> None:
        super().__init__(message)
        self.incomplete: Dict[str, tuple] = dict(incomplete or {})
        self.rejected: Dict[str, str] = dict(rejected or {})
        self.missing: List[str] = list(missing or [])
        self.refused: List[tuple] = list(refused or [])
        self.report: Dict[str, Any] = dict(report or {})


def daft_path(path: str) -> str:
    """An input path as Daft's ``file_path_column`` spells it (the checkpoint key): Daft turns a
    ``file:///abs/path`` into ``/abs/path`` and leaves every other URL as given."""
    path = str(path)
    if path.startswith("file://"):
        rest = path[len("file://") :]
        if rest.startswith("/"):
            return rest
        if rest.startswith("localhost/"):
            return rest[len("localhost") :]
    return path


# ----------------------------------------------------------------------------------------------------------
# Pruning (driver)


def prune_inputs(
    paths: Iterable[str],
    *,
    driver: Any = None,
    staging_url: Optional[str] = None,
    job: Optional[str] = None,
    staging_options: Optional[Dict[str, str]] = None,
    concurrency: int = _PRUNE_CONCURRENCY,
) -> List[str]:
    """The inputs of ``paths`` still to write, in their order, without duplicates, spelled as Daft spells them
    (:func:`daft_path`): read only these, so inputs already processed are not even scanned.

    With ``driver`` (a ``sinkpoint.Driver``): nothing at all when the job's final commit landed
    (``driver.is_finished()``: the fast path of a rerun), else the inputs its store does not hold. With
    ``staging_url`` and ``job`` (also, or instead): the inputs no worker has sealed yet (one claim read each, up to
    ``concurrency`` at once), which also catches seals the committer has not adopted yet.

    :meth:`LanceSink.run` does not need it: it adopts every seal into its driver's store first (a listing, and the
    claim reads the commit needs anyway), then prunes by the store alone (no request per input). This is for a
    DataFrame built by hand, by a caller that holds no driver.
    """
    if driver is None and (staging_url is None or job is None):
        raise ValueError("prune_inputs needs a driver, or staging_url and job (or all three)")
    inputs = list(dict.fromkeys(daft_path(p) for p in paths))
    if driver is not None:
        if driver.is_finished():
            return []
        inputs = [p for p in inputs if not driver.is_processed(p)]
    if staging_url is not None and job is not None and inputs:
        sp = _sp()
        staging = sp.SharedStaging(staging_url, job, storage_options=staging_options)
        worker = staging.worker(_worker_name("prune"))
        with ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(inputs)))) as pool:
            done = list(pool.map(worker.is_processed, inputs))
        inputs = [p for p, d in zip(inputs, done) if not d]
    return inputs


def _worker_name(role: str) -> str:
    return f"{role}@{socket.gethostname()}:{os.getpid()}"


# ----------------------------------------------------------------------------------------------------------
# Reading the inputs: every row carries its input and its position in it


def read_inputs(
    paths: Iterable[str],
    *,
    input_column: str = INPUT_COLUMN,
    position_column: str = POSITION_COLUMN,
    io_config: Any = None,
    batch_rows: int = READ_BATCH_ROWS_DEFAULT,
) -> Any:
    """A Daft DataFrame of the parquet files ``paths``, one scan task per file, each row with two columns more: its
    input (``input_column``, spelled as :func:`daft_path` spells it: the checkpoint key) and its position in that
    file (``position_column``, int64, from 0). Write it with ``df.write_sink(sink)``: :class:`LanceSink` seals an
    input only when each position arrived exactly once. ``io_config`` is Daft's IOConfig for the files.

    Daft 0.7.26's ``read_parquet`` gives the file path (``file_path_column``) but no row position, so this reads
    the files itself (pyarrow, through the filesystem Daft derives from ``io_config``), ``batch_rows`` rows at a
    time; the schema is the first file's."""
    if batch_rows < 1:
        raise ValueError("batch_rows must be positive")
    inputs = [str(p) for p in paths]
    if not inputs:
        raise ValueError("read_inputs needs at least one path")
    return _InputSource(inputs, input_column, position_column, io_config, int(batch_rows)).read()


def _open_parquet(path: str, io_config: Any) -> Any:
    """A ``pyarrow.parquet.ParquetFile`` of ``path`` (a local path or a URL Daft's IOConfig can reach)."""
    import pyarrow.parquet as pq
    from daft.filesystem import _resolve_paths_and_filesystem

    (resolved,), fs = _resolve_paths_and_filesystem(path, io_config)
    return pq.ParquetFile(fs.open_input_file(resolved))


class _InputSource:
    """What :func:`read_inputs` reads."""

    def __init__(self, paths: List[str], input_column: str, position_column: str, io_config: Any,
                 batch_rows: int) -> None:
        self.paths = paths
        self.input_column = input_column
        self.position_column = position_column
        self.io_config = io_config
        self.batch_rows = batch_rows

    def arrow_schema(self) -> pa.Schema:
        schema = _open_parquet(self.paths[0], self.io_config).schema_arrow
        for name in (self.input_column, self.position_column):
            if name in schema.names:
                raise ValueError(f"{self.paths[0]} has a column {name!r} already: choose another name for it")
        return schema.append(pa.field(self.input_column, pa.large_string())).append(
            pa.field(self.position_column, pa.int64()))

    def read(self) -> Any:
        return _InputsSource(self).read()


class _InputsSource(DataSource):
    """The inputs as a Daft DataSource: one task per file."""

    def __init__(self, spec: _InputSource) -> None:
        self.spec = spec
        self._schema = Schema.from_pyarrow_schema(spec.arrow_schema())

    @property
    def name(self) -> str:
        return "sinkpoint inputs"

    @property
    def schema(self) -> Schema:
        return self._schema

    async def get_tasks(self, pushdowns: Any) -> AsyncIterator[DataSourceTask]:
        # Pushdowns are not applied here: Daft applies projections, filters and limits after the scan.
        for path in self.spec.paths:
            yield _InputTask(self.spec, path, self._schema)


class _InputTask(DataSourceTask):
    """One input file, read in order: each batch with its input and its rows' positions."""

    def __init__(self, spec: _InputSource, path: str, schema: Schema) -> None:
        self.spec = spec
        self.path = path
        self._schema = schema

    @property
    def schema(self) -> Schema:
        return self._schema

    async def read(self) -> AsyncIterator[Any]:
        from daft.recordbatch import RecordBatch

        # Blocking reads on Daft's event loop, as Daft runs its own Python scan tasks: a read handed to Daft's
        # reader on another thread from here deadlocks, and an abandoned reader thread aborts the process at exit.
        spec = self.spec
        target = self._schema.to_pyarrow_schema()
        key = daft_path(self.path)
        position = 0
        for batch in _open_parquet(self.path, spec.io_config).iter_batches(batch_size=spec.batch_rows):
            n = batch.num_rows
            table = pa.Table.from_batches([batch])
            table = table.append_column(spec.input_column, pa.array([key] * n, pa.large_string()))
            table = table.append_column(spec.position_column, pa.array(range(position, position + n), pa.int64()))
            position += n
            if not table.schema.equals(target, check_metadata=False):
                table = table.select(target.names).cast(target)
            yield RecordBatch.from_arrow_table(table)


# ----------------------------------------------------------------------------------------------------------
# Worker-side state (per process, per run)


class _Ranges:
    """The row positions of one input that have arrived: sorted, disjoint, half-open runs ``[start, end)``, joined
    with their neighbours as the gaps fill. An input read in order is one run at all times; rows that arrive out of
    order cost one run per gap until it fills, up to :data:`POSITION_RUNS_MAX`."""

    __slots__ = ("starts", "ends", "count")

    def __init__(self) -> None:
        self.starts: List[int] = []
        self.ends: List[int] = []
        #: Positions held (the sum of the runs' lengths).
        self.count = 0

    def complete(self, total: int) -> bool:
        """Whether positions ``0 .. total - 1`` have each arrived (and nothing else)."""
        return self.count == total and (total == 0 or (self.starts == [0] and self.ends == [total]))

    def add(self, positions: pa.Array, total: int) -> Optional[str]:
        """Adds ``positions`` (of rows of a file with ``total`` rows); or, when one of them is out of range,
        arrived before, or twice among them, adds nothing and says why."""
        runs = _runs(positions)
        if isinstance(runs, str):
            return runs
        if runs and (runs[0][0] < 0 or runs[-1][1] > total):
            return (f"row positions {runs[0][0]}..{runs[-1][1] - 1} reach beyond the file's {total} rows "
                    "(rows multiplied on the way, or rows of another file)")
        for start, end in runs:
            i = bisect.bisect_right(self.starts, start) - 1
            if (i >= 0 and self.ends[i] > start) or (i + 1 < len(self.starts) and self.starts[i + 1] < end):
                return f"a row position in {start}..{end - 1} arrived twice (the input was read twice?)"
        for start, end in runs:
            self._insert(start, end)
        if len(self.starts) > POSITION_RUNS_MAX:
            return (f"its rows arrived as more than {POSITION_RUNS_MAX} disjoint runs of positions (rows filtered "
                    "or shuffled on the way)")
        return None

    def _insert(self, start: int, end: int) -> None:
        i = bisect.bisect_right(self.starts, start)
        self.count += end - start
        joins_left = i > 0 and self.ends[i - 1] == start
        joins_right = i < len(self.starts) and self.starts[i] == end
        if joins_left and joins_right:
            self.ends[i - 1] = self.ends[i]
            del self.starts[i], self.ends[i]
        elif joins_left:
            self.ends[i - 1] = end
        elif joins_right:
            self.starts[i] = start
        else:
            self.starts.insert(i, start)
            self.ends.insert(i, end)


def _runs(positions: pa.Array) -> Any:
    """The sorted runs ``[(start, end)]`` of consecutive values in ``positions``; or why there are none (a value
    twice, or a null)."""
    if len(positions) == 0:
        return []
    if positions.null_count:
        return f"{positions.null_count} row(s) have no position"
    positions = positions.cast(pa.int64())
    first = positions[0].as_py()
    last = positions[-1].as_py()
    if last - first + 1 == len(positions) and len(positions) > 1:
        steps = pc.pairwise_diff(positions).slice(1)
        if pc.all(pc.equal(steps, 1)).as_py():
            return [(first, last + 1)]  # in order: the usual case
    elif len(positions) == 1:
        return [(first, first + 1)]
    ordered = pc.take(positions, pc.array_sort_indices(positions))
    steps = pc.pairwise_diff(ordered).slice(1)
    if pc.any(pc.equal(steps, 0)).as_py():
        return "a row position arrived twice in one batch"
    breaks = pc.indices_nonzero(pc.not_equal(steps, 1)).to_pylist()
    values = ordered.to_pylist()
    runs = []
    begin = 0
    for b in breaks:
        runs.append((values[begin], values[b] + 1))
        begin = b + 1
    runs.append((values[begin], values[-1] + 1))
    return runs


class _Input:
    """One input as this process has seen it in one run."""

    __slots__ = ("path", "lock", "status", "expected", "rows", "positions", "chunks", "nbytes", "parts",
                 "fragments", "dropped", "timings")

    def __init__(self, path: str) -> None:
        self.path = path
        self.lock = threading.Lock()
        #: None (not seen yet), "collecting", "sealed", "skipped" (processed before), "lost", "rejected" (a row
        #: position arrived twice or out of range before the seal: never sealed), "failed"
        self.status: Optional[str] = None
        self.expected = 0
        self.rows = 0
        #: The row positions collected so far; the input is sealed when they are exactly 0 .. expected - 1.
        self.positions = _Ranges()
        self.chunks: List[pa.Table] = []
        self.nbytes = 0
        #: Parts staged so far (a large input flushes parts before it is complete).
        self.parts = 0
        #: The fragments staged so far (their JSON), for the garbage report of a lost seal.
        self.fragments: List[Any] = []
        self.dropped = 0
        #: Seconds spent per step (is_processed_s, row_count_s, fragment_s, stage_s, seal_s): the report's costs.
        self.timings: Dict[str, float] = collections.defaultdict(float)


class _Run:
    """What one process holds for one run of a sink: the worker handle, the dataset's schema, the inputs."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.worker: Any = None
        self.schema: Optional[pa.Schema] = None
        self.inputs: Dict[str, _Input] = {}

    def input(self, path: str) -> _Input:
        with self.lock:
            inp = self.inputs.get(path)
            if inp is None:
                inp = self.inputs[path] = _Input(path)
            return inp


_RUNS_LOCK = threading.Lock()
_RUNS: "collections.OrderedDict[str, _Run]" = collections.OrderedDict()


def _run_state(token: str) -> _Run:
    with _RUNS_LOCK:
        run = _RUNS.get(token)
        if run is None:
            run = _RUNS[token] = _Run()
            while len(_RUNS) > _RUNS_KEPT:
                _RUNS.popitem(last=False)
        else:
            _RUNS.move_to_end(token)
        return run


# ----------------------------------------------------------------------------------------------------------
# The sink


class LanceSink(DataSink):
    """A Daft DataSink that appends whole input files to the Lance table at ``uri`` exactly once per ``job``.

    - ``uri``, ``storage_options``: the Lance table (pylance's options). It is created when missing, with the
      schema of the rows (or ``schema``).
    - ``job``: the job id; one job writes each input once, ever. A new batch of inputs is a new job.
    - ``staging_url`` (+ ``staging_options``): the object store prefix workers and the driver share
      (``file:///abs/dir``, ``s3://bucket/prefix``).
    - ``store_path``: the committer's local store file (on the driver), mirrored to ``mirror_url``
      (+ ``mirror_options``) when given, so a driver that lost its disk resumes from the mirror.
    - ``mode``: only ``"append"``.
    - ``input_column``, ``position_column``: the columns carrying each row's input path and its position in that
      file (:func:`read_inputs` adds both); dropped before writing. An input is sealed only when each position
      ``0 .. rows - 1`` arrived exactly once.
    - ``io_config``: Daft's IOConfig for reading the inputs' parquet footers (row counts), as for reading them.
    - ``row_counts``: the row count of each input, if known (saves the footer reads).
    - ``flush_bytes``: see :data:`FLUSH_BYTES_DEFAULT`.
    - ``check_processed_in_worker``: whether a worker reads an input's claim (``is_processed``: 1 request) before
      writing it, and skips it when sealed. ``None`` (the default): not after :meth:`run`, which adopted and pruned
      just before the read; yes for a DataFrame written by hand (``df.write_sink(sink)``), which may not be pruned.
      After pruning the check only pays when another attempt of the same input sealed it in between (a Ray retry
      of a task whose worker died after sealing, a second driver racing this one): without the check such an
      attempt writes its fragment and then loses the seal (:class:`sinkpoint.SealLost`: the fragment is never
      committed, and the worker deletes it); with it, it skips the write, at 1 request for every input. Either way
      each input is in the table once.

    The sink pickles as its configuration; workers open their handles lazily. After ``finalize`` the driver's
    object holds :attr:`report` (a dict: what was written, skipped, lost, adopted, committed, and the garbage).
    :meth:`collect_orphans` deletes the data files of dropped attempts that the store's garbage ledger names.
    """

    def __init__(
        self,
        uri: str,
        job: str,
        staging_url: str,
        store_path: str,
        *,
        mirror_url: Optional[str] = None,
        mode: str = "append",
        storage_options: Optional[Dict[str, str]] = None,
        staging_options: Optional[Dict[str, str]] = None,
        mirror_options: Optional[Dict[str, str]] = None,
        input_column: str = INPUT_COLUMN,
        position_column: str = POSITION_COLUMN,
        schema: Optional[pa.Schema] = None,
        io_config: Any = None,
        row_counts: Optional[Mapping[str, int]] = None,
        flush_bytes: int = FLUSH_BYTES_DEFAULT,
        open_timeout_s: float = OPEN_TIMEOUT_S_DEFAULT,
        check_processed_in_worker: Optional[bool] = None,
    ) -> None:
        if mode != "append":
            raise ValueError(
                f"LanceSink supports mode='append' only, not {mode!r}: it appends each input exactly once per job, "
                "and a rerun after a crash must add what is missing, not replace the table. To replace the table, "
                "overwrite or delete it first (outside the job), then append with a new job id."
            )
        if not job:
            raise ValueError("job must be a non-empty id")
        if flush_bytes < 1:
            raise ValueError("flush_bytes must be positive")
        self.uri = str(uri)
        self.job = str(job)
        self.staging_url = str(staging_url)
        self.store_path = str(store_path)
        self.mirror_url = mirror_url
        self.mode = mode
        self.storage_options = dict(storage_options) if storage_options else None
        self.staging_options = dict(staging_options) if staging_options else None
        self.mirror_options = dict(mirror_options) if mirror_options else None
        self.input_column = input_column
        self.position_column = position_column
        self.schema_hint = schema
        self.io_config = io_config
        self.row_counts = {daft_path(k): int(v) for k, v in row_counts.items()} if row_counts else None
        self.flush_bytes = int(flush_bytes)
        self.open_timeout_s = float(open_timeout_s)
        self.check_processed_in_worker = check_processed_in_worker
        #: What the workers of the current run do (pickled with the sink): ``check_processed_in_worker``, resolved.
        self._check_in_worker = check_processed_in_worker is None or bool(check_processed_in_worker)
        #: One token per run (``start``): a worker process keys its state by it.
        self._token = uuid.uuid4().hex
        # Driver side only (not pickled).
        self._inputs: Optional[List[str]] = None
        #: The driver :meth:`run` opened, recovered and adopted with, for ``finalize`` to go on with.
        self._prepared: Optional[_Prepared] = None
        self.report: Dict[str, Any] = {}

    # -- pickling: configuration only ------------------------------------------------------------------------

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state["_inputs"] = None
        state["_prepared"] = None
        state["report"] = {}
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        return f"LanceSink({self.uri!r}, job={self.job!r})"

    # -- DataSink --------------------------------------------------------------------------------------------

    def name(self) -> str:
        return "sinkpoint LanceSink"

    def schema(self) -> Any:
        from daft import Schema

        return Schema.from_pyarrow_schema(RESULT_SCHEMA)

    def start(self) -> None:
        """Driver, before the plan runs: a new run token; refuses a Daft configuration that can split one input
        file across tasks; creates the table if ``schema`` is known."""
        self._token = uuid.uuid4().hex
        self.report = {}
        _refuse_input_splitting()
        if self.schema_hint is not None and self._prepared is None:  # run() made sure of the table already
            _lance().create_dataset(self.uri, self.schema_hint, storage_options=self.storage_options)

    def write(self, micropartitions: Iterator[Any]) -> Iterator[WriteResult]:
        run = _run_state(self._token)
        for mp in micropartitions:
            table = mp.to_arrow()
            events: List[Dict[str, Any]] = []
            written_rows = 0
            written_bytes = 0
            for path, rows, positions in self._by_input(table):
                for event in self._add(run, path, rows, positions):
                    if event["event"] == "sealed":
                        written_rows += event["rows"]
                        written_bytes += event.get("bytes", 0)
                    events.append(event)
            yield WriteResult(
                result={"token": self._token, "events": events},
                bytes_written=written_bytes,
                rows_written=written_rows,
            )

    def finalize(self, write_results: List[WriteResult]) -> Any:
        """Driver, after every write: recover, adopt every sealed checkpoint, finish the job; the commits made as
        a MicroPartition of :data:`RESULT_SCHEMA`. Raises :class:`IncompleteInputs` (after committing what is
        complete, without finishing the job) when an input is incomplete or, after :meth:`run`, not written.

        After :meth:`run` it goes on with run's driver (recovered and adopted before the read: one epoch, one
        recovery per run); else it opens the store itself (a new epoch) and recovers first."""
        from daft.recordbatch import MicroPartition

        t0 = time.monotonic()
        seen = _Summary.of(write_results)
        report: Dict[str, Any] = {
            "job": self.job,
            "sealed": len(seen.sealed),
            "rows_sealed": sum(seen.sealed.values()),
            "skipped": len(seen.skipped),
            "lost": {p: w for p, (w, _) in seen.lost.items()},
            "garbage": [f for _, g in seen.lost.values() for f in g],
            "garbage_deleted": list(seen.deleted),
            "incomplete": dict(seen.incomplete),
            "rejected": dict(seen.rejected),
            # Seconds per worker step summed over the inputs sealed in this run: is_processed_s + row_count_s +
            # stage_s + seal_s is what checkpointing costs the workers; fragment_s is the Lance write itself.
            "worker_timings": dict(seen.timings),
        }
        prepared = self._prepared
        if prepared is not None:
            table = self._finish(prepared.driver, seen, report, prepared)
        else:
            with self._open_driver() as driver:
                table = self._finish(driver, seen, report, None)
        report["finalize_s"] = time.monotonic() - t0
        self.report = report
        deleted = set(report["garbage_deleted"])
        left = [f for f in report["garbage"] if f not in deleted]
        if left:
            logger.info("job %s: %d data file(s) of lost attempts are garbage (LanceSink.collect_orphans deletes those "
                        "in the store's ledger): %s", self.job, len(left), left[:5])
        return MicroPartition.from_arrow(table)

    def _finish(self, driver: Any, seen: "_Summary", report: Dict[str, Any], prepared: Optional["_Prepared"]
                ) -> pa.Table:
        """``finalize`` on an open driver: the result table. Recovers first unless ``prepared`` did (run())."""
        if prepared is None:
            rec, commits = self._recover(driver, report)
            if rec.finished:
                # The job's final commit landed before this run: the fast path. Whatever this run sealed must be
                # in it (another driver finishing concurrently adopted it), else it was sealed too late.
                late = [p for p in seen.sealed if not driver.is_processed(p)]
                # Finished before this run, or by this recovery (the final key was in flight: re-sent or found).
                report["already_finished"] = not commits
                report["finished"] = True
                report["committed_keys"] = list(commits)
                self.report = report
                if late:
                    raise IncompleteInputs(
                        f"job {self.job} had finished before this run committed; {len(late)} input(s) this run "
                        f"sealed are not in it (first: {late[:3]}). A finished job takes no more inputs: write them "
                        "under a new job id.",
                        missing=late,
                        report=report,
                    )
                return self._result_table(driver, commits, seen)
            earlier = []
        else:
            # run() recovered this driver (the job was not finished) and adopted before the read; nothing commits
            # through the store meanwhile (its file is ours; a newer driver of a mirrored store fences this one,
            # which its next write below then raises).
            report["recovered"] = dict(prepared.recovered)
            commits = list(prepared.commits)
            earlier = [prepared.adopted]
        adopted = driver.adopt()
        self._at("adopted")
        rounds = earlier + [adopted]
        report["adopted"] = sum(len(a.adopted) for a in rounds)
        report["already_adopted"] = sum(a.already_adopted for a in rounds)
        report["unsealed"] = adopted.unsealed
        report["garbage"] += [f for a in rounds for f in _fragment_files(self.uri, a.cleanup)]
        missing = self._missing_inputs(driver, seen)
        if missing:
            # Zero-row inputs never reach the sink: seal them empty here, then adopt them.
            if self._seal_empty(missing):
                adopted2 = driver.adopt()
                report["adopted"] += len(adopted2.adopted)
                rounds.append(adopted2)
                missing = self._missing_inputs(driver, seen)
        refused = [r for a in rounds for r in a.refused]
        report["missing"] = list(missing)
        report["refused"] = refused
        if seen.incomplete or seen.rejected or missing or refused:
            commits += list(driver.commit_pending().committed_keys)
            report["committed_keys"] = commits
            report["finished"] = False
            self.report = report
            raise IncompleteInputs(_incomplete_message(self.job, seen.incomplete, seen.rejected, missing, refused),
                                   incomplete=seen.incomplete, missing=missing, refused=refused,
                                   rejected=seen.rejected, report=report)
        commits += list(driver.finish().committed_keys)
        report["committed_keys"] = commits
        report["finished"] = True
        return self._result_table(driver, commits, seen)

    def _recover(self, driver: Any, report: Dict[str, Any]) -> tuple:
        """``driver.recover()``, noted in ``report``: (the recovery report, the keys it committed). Raises when the
        commit in flight is blocked (nothing can commit until it is resolved)."""
        rec = driver.recover()
        report["recovered"] = {
            "orphans": list(rec.orphans),
            "marked_landed": rec.marked_landed,
            "recommitted": rec.recommitted,
            "committed_keys": list(rec.committed_keys),
        }
        commits = [k for k in (rec.marked_landed, rec.recommitted) if k is not None]
        commits += list(rec.committed_keys)
        if rec.blocked is not None:
            self.report = report
            raise RuntimeError(
                f"job {self.job}: the commit in flight is blocked ({rec.blocked!r}); nothing more can commit "
                "until it is resolved (rerun later, or an operator resolves it: Driver.resolve)"
            )
        return rec, commits

    # -- convenience: the whole job ----------------------------------------------------------------------------

    def run(self, paths: Sequence[str], *, io_config: Any = None, **read_options: Any) -> Any:
        """The whole job over the parquet files ``paths``. Opens the committer once (one epoch for the whole run)
        and returns at once when the job finished (the fast path of a rerun: nothing is read); else creates the
        table when missing, recovers, adopts what workers sealed before this run, prunes the inputs the store then
        holds (locally: no request per input), reads the rest with :func:`read_inputs` (two columns more:
        :attr:`input_column`, :attr:`position_column`; ``read_options`` go to it), writes it through this sink, and ``finalize`` adopts and commits with the same driver. Returns
        ``write_sink``'s DataFrame (the commits, :data:`RESULT_SCHEMA`); :attr:`report` says the rest. Checks at the
        end that every input of ``paths`` is in the job, on the fast path too (else :class:`IncompleteInputs`: on a
        finished job, the inputs it does not hold, which are not written).

        The store's file stays open (locked) until the run ends, so a second run of the job on the same store waits
        for this one (up to ``open_timeout_s``) instead of racing it; a driver on another machine that opens the
        mirrored store fences this one (its ``finalize`` raises ``Fenced``) and finishes the job itself."""
        import daft

        t0 = time.monotonic()
        _refuse_input_splitting()
        inputs = list(dict.fromkeys(daft_path(p) for p in paths))
        if io_config is not None and self.io_config is None:
            self.io_config = io_config
        with self._open_driver() as driver:
            if driver.is_finished():
                # The fast path of a rerun: the job's final commit landed; nothing is read.
                self.report = {"job": self.job, "already_finished": True, "finished": True, "inputs": len(inputs),
                               "pending": 0, "run_s": time.monotonic() - t0}
                self._refuse_late_inputs(driver, inputs)
                return daft.from_arrow(RESULT_SCHEMA.empty_table())
            # The committer's recovery probes the table: it must exist (created empty when missing).
            self._ensure_table(inputs, io_config, read_options)
            report: Dict[str, Any] = {"job": self.job}
            rec, commits = self._recover(driver, report)
            if rec.finished:
                # Finished before this run (or by this recovery: the final key was in flight): nothing to read.
                self._inputs = inputs
                try:
                    table = self._result_table(driver, commits, _Summary())
                finally:
                    self._inputs = None
                report.update(already_finished=not commits, finished=True, committed_keys=list(commits),
                              inputs=len(inputs), pending=0, run_s=time.monotonic() - t0)
                self.report = report
                self._refuse_late_inputs(driver, inputs)
                return daft.from_arrow(table)
            # Every seal made before now (a crashed run's, a dead worker's) into the store, so that the store alone
            # says what is processed: the commit needs these adoptions anyway.
            adopted = driver.adopt()
            pending = [p for p in inputs if not driver.is_processed(p)]
            prune_s = time.monotonic() - t0
            self._inputs = inputs
            self._prepared = _Prepared(driver, report["recovered"], commits, adopted)
            if self.check_processed_in_worker is None:
                self._check_in_worker = False  # pruned just now: see check_processed_in_worker
            try:
                if not pending:
                    self.start()
                    mp = self.finalize([])
                    out = daft.from_arrow(mp.to_arrow())
                else:
                    df = read_inputs(pending, input_column=self.input_column, position_column=self.position_column,
                                     io_config=io_config, **read_options)
                    out = df.write_sink(self)
            finally:
                self._inputs = None
                self._prepared = None
                self._check_in_worker = self.check_processed_in_worker is None or bool(self.check_processed_in_worker)
        self.report.update(inputs=len(inputs), pending=len(pending), prune_s=prune_s, run_s=time.monotonic() - t0)
        return out

    def _refuse_late_inputs(self, driver: Any, inputs: List[str]) -> None:
        """Raises :class:`IncompleteInputs` naming the inputs of ``inputs`` that the finished job does not hold.
        The driver's store answers each locally (no request per input)."""
        late = [p for p in inputs if not driver.is_processed(p)]
        if late:
            self.report["missing"] = late
            raise IncompleteInputs(
                f"job {self.job} is finished and {len(late)} input(s) of this run are not in it (first: "
                f"{late[:3]}); nothing was written. A finished job takes no more inputs: write them under a new job "
                "id.",
                missing=late,
                report=self.report,
            )

    def _ensure_table(self, inputs: List[str], io_config: Any, read_options: Dict[str, Any]) -> None:
        """Creates the table when it is missing, with ``schema`` or else the schema of the first input's rows (a
        footer read; nothing is executed), so that the committer finds it even when no task writes a row."""
        if self.schema_hint is None:
            import lance

            try:
                lance.dataset(self.uri, storage_options=self.storage_options)
                return
            except (ValueError, OSError):
                pass
            if not inputs:
                return
            df = read_inputs(inputs[:1], input_column=self.input_column, position_column=self.position_column,
                             io_config=io_config, **read_options)
            arrow = df.schema().to_pyarrow_schema()
            self.schema_hint = pa.schema([f for f in arrow if f.name not in (self.input_column, self.position_column)])
        _lance().create_dataset(self.uri, self.schema_hint, storage_options=self.storage_options)

    # -- maintenance -------------------------------------------------------------------------------------------

    def collect_orphans(self, grace_s: float = GRACE_S_DEFAULT, apply: bool = False) -> Any:
        """Collects the job's orphan data files: the fragment files of its dropped attempts (the losers of seals
        found by adoption, checkpoints force-aborted by an operator) that no commit will ever reference, from the
        store's garbage ledger (``sinkpoint.Driver.collect_data_files`` with
        :class:`sinkpoint.lance.LanceDataFiles`). A file the table references (any version still existing), a live
        checkpoint names, or modified less than ``grace_s`` seconds ago is kept. Without ``apply`` (the default)
        it only reports; with it, it deletes what is due and forgets the settled ledger entries. Returns the
        ``sinkpoint.CollectReport``.

        Opens the committer's store like :meth:`run` (waiting up to ``open_timeout_s`` while a run on this machine
        holds its file) under a new epoch, which fences a driver of the job running elsewhere on the mirrored
        store: run it between runs of the job, or after the last. Fragments a worker wrote and never staged (it
        died first) are named nowhere and not collected here; a worker that lost its seal deletes its own."""
        files = _lance().LanceDataFiles(self.uri, storage_options=self.storage_options)
        with self._open_driver() as driver:
            return driver.collect_data_files(files, grace_s=grace_s, apply=apply)

    # -- crash points (no-ops; tests and the example override them) --------------------------------------------

    def _at(self, point: str, path: Optional[str] = None) -> None:
        """Called at named points: ``"written"`` (an input's fragments are written, not staged),
        ``"sealed"`` (its checkpoint is sealed), ``"adopted"`` (the driver adopted, before committing)."""

    def _driver_options(self) -> Dict[str, Any]:
        """More keyword arguments for ``sinkpoint.Driver`` (the example passes ``crash_at``)."""
        return {}

    def _staging(self, role: str) -> Any:
        """The job's shared staging as ``role`` uses it: ``"worker"`` (the sink's writes) or ``"driver"`` (adopt,
        the seals of empty inputs). The example counts each role's requests apart by overriding it."""
        return _sp().SharedStaging(self.staging_url, self.job, storage_options=self.staging_options)

    # -- worker internals --------------------------------------------------------------------------------------

    def _by_input(self, table: pa.Table) -> Iterator[tuple]:
        """(input, rows without the input and position columns, their positions) for each input of ``table``."""
        if table.num_rows == 0:
            return
        absent = [c for c in (self.input_column, self.position_column) if c not in table.column_names]
        if absent:
            raise ValueError(
                f"the rows carry no {' and no '.join(repr(c) for c in absent)} column: read the inputs with "
                f"sinkpoint.daft.read_inputs(paths, input_column={self.input_column!r}, "
                f"position_column={self.position_column!r}) (daft.read_parquet gives no row positions, and without "
                "them an input read twice cannot be told from one read once)"
            )
        column = table.column(self.input_column)
        if column.null_count:
            raise ValueError(f"{column.null_count} row(s) have no input in {self.input_column!r}")
        rows = table.drop_columns([self.input_column, self.position_column])
        positions = table.column(self.position_column)
        values = pc.unique(column)
        if len(values) == 1:
            yield str(values[0].as_py()), rows, positions.combine_chunks()
            return
        for value in values:
            mask = pc.equal(column, value)
            yield str(value.as_py()), rows.filter(mask), positions.filter(mask).combine_chunks()

    def _worker(self, run: _Run) -> Any:
        with run.lock:
            if run.worker is None:
                run.worker = self._staging("worker").worker(_worker_name("daft"))
            return run.worker

    def _add(self, run: _Run, path: str, rows: pa.Table, positions: pa.Array) -> List[Dict[str, Any]]:
        """Adds an input's rows at ``positions``; seals the input once each of its positions arrived once. A
        position that arrived before (here, or after the seal), or beyond the file's rows, is a ``rejected`` event,
        which ``finalize`` raises: an input rejected before its seal is never sealed."""
        inp = run.input(path)
        events: List[Dict[str, Any]] = []
        with inp.lock:
            if inp.status is None:
                t0 = time.perf_counter()
                # Without the check, an input another attempt sealed is written and then loses its seal.
                processed = self._check_in_worker and self._worker(run).is_processed(path)
                t1 = time.perf_counter()
                inp.timings["is_processed_s"] = t1 - t0
                if processed:
                    inp.status = "skipped"
                    events.append({"event": "skipped", "input": path})
                else:
                    inp.expected = self._row_count(path)
                    inp.timings["row_count_s"] = time.perf_counter() - t1
                    inp.status = "collecting"
            if inp.status in ("skipped", "rejected", "failed"):
                # Processed before this run (another attempt's seal holds it), or refused already (reported once).
                inp.dropped += rows.num_rows
                return events
            if inp.status in ("sealed", "lost"):
                # Every position arrived once already: these rows are a second copy.
                inp.dropped += rows.num_rows
                events.append({"event": "rejected", "input": path, "rows": rows.num_rows,
                               "reason": f"{rows.num_rows} row(s) arrived after the input was complete (the input "
                                         "was read twice?); its complete copy was sealed, these were not written"})
                return events
            why = inp.positions.add(positions, inp.expected)
            if why is not None:
                inp.status = "rejected"
                inp.dropped += inp.rows + rows.num_rows
                inp.chunks = []
                events.append({"event": "rejected", "input": path, "rows": rows.num_rows,
                               "reason": f"{why}; nothing of it was sealed"})
                return events
            inp.chunks.append(rows)
            inp.rows += rows.num_rows
            inp.nbytes += rows.nbytes
            if inp.positions.complete(inp.expected):
                assert inp.rows == inp.expected, (inp.path, inp.rows, inp.expected)
                events.append(self._seal(run, inp))
            else:
                if inp.nbytes >= self.flush_bytes:
                    self._stage_part(run, inp)
                events.append({"event": "pending", "input": path, "rows": inp.rows, "expected": inp.expected})
        return events

    def _row_count(self, path: str) -> int:
        if self.row_counts is not None and path in self.row_counts:
            return self.row_counts[path]
        return _row_counts([path], self.io_config)[0]

    def _fragments(self, run: _Run, inp: _Input) -> tuple:
        """Writes the buffered rows of ``inp`` as fragments: (fragments, bytes)."""
        table = pa.concat_tables(inp.chunks) if len(inp.chunks) > 1 else inp.chunks[0]
        table = self._conform(run, table)
        nbytes = table.nbytes
        t0 = time.perf_counter()
        fragments = _lance().write_fragment(self.uri, table, schema=table.schema,
                                            storage_options=self.storage_options)
        inp.timings["fragment_s"] += time.perf_counter() - t0
        inp.chunks = []
        inp.nbytes = 0
        inp.fragments.extend(fragments)
        return fragments, nbytes

    def _conform(self, run: _Run, table: pa.Table) -> pa.Table:
        """``table`` in the dataset's schema; creates the dataset (with ``table``'s schema) when missing."""
        with run.lock:
            schema = run.schema
        if schema is None:
            import lance

            try:
                schema = lance.dataset(self.uri, storage_options=self.storage_options).schema
            except (ValueError, OSError):
                schema = _lance().create_dataset(self.uri, self.schema_hint or table.schema,
                                                 storage_options=self.storage_options).schema
            with run.lock:
                run.schema = schema
        if table.schema.equals(schema, check_metadata=False):
            return table
        missing = [n for n in schema.names if n not in table.column_names]
        extra = [n for n in table.column_names if n not in schema.names]
        if missing or extra:
            raise ValueError(f"the rows do not fit the table {self.uri}: columns missing {missing}, "
                             f"columns not in the table {extra}")
        return table.select(schema.names).cast(schema)

    def _stage_part(self, run: _Run, inp: _Input) -> None:
        fragments, _ = self._fragments(run, inp)
        sp = _sp()
        keys = [inp.path] if inp.parts == 0 else []
        t0 = time.perf_counter()
        _retry_io(lambda: self._worker(run).stage(sp.checkpoint_id_for_key(inp.path), attempt=0, part=inp.parts,
                                                  keys=keys, results=fragments))
        inp.timings["stage_s"] += time.perf_counter() - t0
        inp.parts += 1

    def _seal(self, run: _Run, inp: _Input) -> Dict[str, Any]:
        sp = _sp()
        worker = self._worker(run)
        cid = sp.checkpoint_id_for_key(inp.path)
        nbytes = 0
        try:
            if inp.parts == 0:
                fragments, nbytes = self._fragments(run, inp)
                self._at("written", inp.path)
                t0 = time.perf_counter()
                _retry_io(lambda: worker.stage_and_seal(cid, [inp.path], fragments))
            else:
                self._stage_part(run, inp)
                self._at("written", inp.path)
                t0 = time.perf_counter()
                _retry_io(lambda: worker.seal(cid, inp.parts))
            inp.timings["seal_s"] += time.perf_counter() - t0
        except sp.SealLostError as lost:
            inp.status = "lost"
            garbage = _fragment_files(self.uri, lost.results)
            deleted = self._delete_lost(inp.path, lost.results)
            logger.info("input %s: another attempt sealed it first (%s); %d file(s) of ours are garbage, %d deleted",
                        inp.path, lost.winner, len(garbage), len(deleted))
            return {"event": "lost", "input": inp.path, "winner": str(lost.winner), "garbage": garbage,
                    "deleted": deleted}
        except BaseException:
            inp.status = "failed"
            raise
        inp.status = "sealed"
        self._at("sealed", inp.path)
        return {"event": "sealed", "input": inp.path, "id": cid, "rows": inp.rows, "bytes": nbytes,
                "fragments": len(inp.fragments), "timings": dict(inp.timings)}

    def _delete_lost(self, path: str, results: Sequence[Any]) -> List[str]:
        """Deletes the data files of ``results``, this attempt's own after it lost the seal of input ``path``: in no
        seal, so no commit can ever reference them. Best effort: a file that cannot be deleted is logged and stays
        (it is in the event's ``garbage``); this never fails the task. The files deleted."""
        deleted: List[str] = []
        files = _lance().LanceDataFiles(self.uri, storage_options=self.storage_options)
        for result in results:
            try:
                names = files.files_of(result.format, bytes(result.data))
            except Exception as e:  # a result naming no file of ours: left as garbage
                logger.warning("input %s: could not read the data files of a result of the attempt that lost its "
                               "seal (%s: %s); they stay garbage", path, type(e).__name__, e)
                continue
            for name in names:
                try:
                    files.delete(name)
                    deleted.append(files.path(name))  # spelled as `garbage` spells it: <uri>/data/<file>
                except Exception as e:  # best effort: never fail the task for garbage
                    logger.warning("input %s: could not delete %s of the attempt that lost its seal (%s: %s); it "
                                   "stays garbage", path, name, type(e).__name__, e)
        return deleted

    # -- driver internals --------------------------------------------------------------------------------------

    def _open_driver(self) -> Any:
        """The committer, opened now (claiming a new epoch); waits while another driver holds the store file."""
        sp = _sp()
        if "://" not in self.store_path:
            parent = os.path.dirname(os.path.abspath(self.store_path))
            os.makedirs(parent, exist_ok=True)
        target = sp.LanceTarget(self.uri, storage_options=self.storage_options)
        deadline = time.monotonic() + self.open_timeout_s
        delay = 0.05
        while True:
            driver = sp.Driver(
                self.store_path,
                self.job,
                target,
                target_identity=target.identity,
                mirror=self.mirror_url,
                mirror_options=self.mirror_options,
                staging=self._staging("driver"),
                **self._driver_options(),
            )
            try:
                driver.epoch  # opens it
                return driver
            except sp.AlreadyOpenError:
                try:
                    driver.close()
                except sp.SinkpointError:
                    pass
                if time.monotonic() >= deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    def _missing_inputs(self, driver: Any, seen: "_Summary") -> List[str]:
        """Inputs of :meth:`run` not in the job's store (after adoption)."""
        if not self._inputs:
            return []
        return [p for p in self._inputs
                if p not in seen.incomplete and p not in seen.rejected and not driver.is_processed(p)]

    def _seal_empty(self, paths: List[str]) -> bool:
        """Seals, from the driver, an empty checkpoint for each input of ``paths`` that has no rows (such an input
        never reaches a sink). Whether any was sealed."""
        counts = _row_counts(paths, self.io_config)
        empty = [p for p, n in zip(paths, counts) if n == 0]
        if not empty:
            return False
        sp = _sp()
        worker = self._staging("driver").worker(_worker_name("driver"))
        for p in empty:
            try:
                worker.stage_and_seal(sp.checkpoint_id_for_key(p), [p], [])
            except sp.SealLostError:
                pass
        return True

    def _result_table(self, driver: Any, keys: List[int], seen: "_Summary") -> pa.Table:
        keys = sorted(set(int(k) for k in keys))
        if not keys:
            return RESULT_SCHEMA.empty_table()
        wanted = set(keys)
        by_key: Dict[int, List[str]] = {k: [] for k in keys}
        for info in driver.checkpoints("committed"):
            if info.key is not None and int(info.key) in wanted:
                by_key[int(info.key)].append(str(info.id))
        inputs_by_id = dict(seen.input_of)
        if self._inputs:
            sp = _sp()
            for p in self._inputs:
                inputs_by_id.setdefault(sp.checkpoint_id_for_key(p), p)
        rows_by_id = {seen.id_of[p]: n for p, n in seen.sealed.items() if p in seen.id_of}
        columns: Dict[str, list] = {"key": [], "checkpoints": [], "inputs": [], "rows": []}
        for k in keys:
            ids = sorted(by_key[k])
            columns["key"].append(k)
            columns["checkpoints"].append(ids)
            columns["inputs"].append([inputs_by_id[i] for i in ids if i in inputs_by_id])
            counts = [rows_by_id.get(i) for i in ids]
            columns["rows"].append(sum(counts) if ids and all(c is not None for c in counts) else None)
        return pa.Table.from_pydict(columns, schema=RESULT_SCHEMA)


# ----------------------------------------------------------------------------------------------------------
# Helpers


class _Prepared:
    """What :meth:`LanceSink.run` did on its driver before the read, for ``finalize`` to go on with."""

    __slots__ = ("driver", "recovered", "commits", "adopted")

    def __init__(self, driver: Any, recovered: Dict[str, Any], commits: List[int], adopted: Any) -> None:
        self.driver = driver
        self.recovered = recovered
        self.commits = commits
        self.adopted = adopted


class _Summary:
    """What the write results of one run say, input by input."""

    def __init__(self) -> None:
        self.sealed: Dict[str, int] = {}
        self.id_of: Dict[str, str] = {}
        self.input_of: Dict[str, str] = {}
        self.skipped: set = set()
        self.lost: Dict[str, tuple] = {}
        #: The garbage files the workers deleted (of lost seals).
        self.deleted: List[str] = []
        self.pending: Dict[str, tuple] = {}
        self.incomplete: Dict[str, tuple] = {}
        #: Inputs with rows refused (a position twice, out of range, or after the seal): why, the first time.
        self.rejected: Dict[str, str] = {}
        #: Seconds per worker step, summed over the sealed inputs.
        self.timings: Dict[str, float] = {}

    @classmethod
    def of(cls, write_results: Iterable[Any]) -> "_Summary":
        s = cls()
        for wr in write_results:
            result = getattr(wr, "result", wr)
            for e in (result or {}).get("events", ()):
                kind, path = e["event"], e["input"]
                if kind == "sealed":
                    s.sealed[path] = int(e["rows"])
                    for step, secs in e.get("timings", {}).items():
                        s.timings[step] = s.timings.get(step, 0.0) + float(secs)
                    s.id_of[path] = e["id"]
                    s.input_of[e["id"]] = path
                elif kind == "skipped":
                    s.skipped.add(path)
                elif kind == "lost":
                    s.lost[path] = (e["winner"], list(e.get("garbage", ())))
                    s.deleted += list(e.get("deleted", ()))
                elif kind == "pending":
                    rows, expected = s.pending.get(path, (0, e["expected"]))
                    s.pending[path] = (max(rows, int(e["rows"])), int(e["expected"]))
                elif kind == "rejected":
                    s.rejected.setdefault(path, str(e["reason"]))
        done = set(s.sealed) | s.skipped | set(s.lost) | set(s.rejected)
        s.incomplete = {p: v for p, v in s.pending.items() if p not in done}
        return s


def _refuse_input_splitting() -> None:
    """Raises when Daft may split one parquet file across scan tasks (by row groups)."""
    from daft import context

    cfg = context.get_context().daft_execution_config
    if getattr(cfg, "enable_scan_task_split_and_merge", False) and getattr(cfg, "parquet_split_row_groups_max_files", 0):
        raise ValueError(
            "LanceSink needs every input file read whole by one task, but Daft is configured to split large parquet "
            "files across tasks by row groups (enable_scan_task_split_and_merge=True with "
            f"parquet_split_row_groups_max_files={cfg.parquet_split_row_groups_max_files}); the pieces may run on "
            "different machines, where no process sees all of an input's rows. Turn the splitting off: "
            "daft.set_execution_config(parquet_split_row_groups_max_files=0) (merging small files stays on)."
        )


def _row_counts(paths: List[str], io_config: Any) -> List[int]:
    """The row count of each parquet file of ``paths``, from its footer (Daft's reader, Daft's IOConfig).

    Run on a thread of its own: ``write`` is called on a thread of Daft's runtime, where Daft's blocking reader
    panics ("Cannot start a runtime from within a runtime")."""
    from daft.recordbatch import RecordBatch

    def read() -> List[int]:
        stats = RecordBatch.read_parquet_statistics(list(paths), io_config=io_config).to_pydict()
        return [int(n) for n in stats["row_count"]]

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(read).result()


def _fragment_files(uri: str, results: Iterable[Any]) -> List[str]:
    """The data files of the Lance fragments among ``results`` (WriteResults or FragmentMetadata)."""
    files = []
    for r in results:
        try:
            if hasattr(r, "to_json"):
                meta = r.to_json()
            else:
                meta = json.loads(bytes(r.data).decode())
            for f in meta.get("files", ()):
                files.append(f"{uri.rstrip('/')}/data/{f['path']}")
        except (ValueError, KeyError, TypeError, AttributeError):
            files.append(f"<unreadable result {getattr(r, 'format', type(r).__name__)}>")
    return files


def _retry_io(call: Callable[[], Any]) -> Any:
    """``call`` again after an ``IoError`` (stage and seal are idempotent in one handle), up to _IO_ATTEMPTS."""
    sp = _sp()
    for attempt in range(_IO_ATTEMPTS):
        try:
            return call()
        except sp.TransientIOError:
            if attempt + 1 == _IO_ATTEMPTS:
                raise
            time.sleep(0.2 * 2**attempt)


def _incomplete_message(job: str, incomplete: Mapping[str, tuple], rejected: Mapping[str, str], missing: List[str],
                        refused: List[tuple]) -> str:
    parts = [f"job {job} cannot finish:"]
    if rejected:
        first = "; ".join(f"{p}: {why}" for p, why in list(rejected.items())[:3])
        parts.append(
            f"{len(rejected)} input(s) reached the sink with rows more than once ({first}): every row of an input "
            "must reach the sink once (no duplicate path, no explode or join between the read and the sink)."
        )
    if incomplete:
        first = ", ".join(f"{p} ({r} of {n} rows)" for p, (r, n) in list(incomplete.items())[:3])
        parts.append(
            f"{len(incomplete)} input(s) reached the sink incompletely ({first}): every row of an input must reach "
            "one process (no filter, limit, repartition or join between the read and the sink, and no scan-task "
            "splitting); nothing of them was written to the table."
        )
    if missing:
        parts.append(f"{len(missing)} input(s) were not written by any task (first: {missing[:3]}); rerun the job.")
    if refused:
        parts.append(f"the committer refused {len(refused)} checkpoint(s): {refused[:3]}.")
    parts.append("Everything complete was committed; the job is not finished.")
    return " ".join(parts)
