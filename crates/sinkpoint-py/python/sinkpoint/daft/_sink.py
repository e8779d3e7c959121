"""The sinks' shared half and :class:`LanceSink`.

``_InputSink`` is what :class:`LanceSink` and :class:`sinkpoint.daft.DeltaSink` share, whatever the table: sinkpoint's
own configuration, the ``DataSink`` calls Daft makes (``start`` and ``finalize`` on the driver, ``write`` where the
plan runs), and the worker side of ``write``: each input's rows buffered until every position arrived once, written
as uncommitted data files, staged and sealed. A sink adds the table side through a few hooks (``_target``,
``_open_table``, ``_table_layout``, ``_write_files``, ``_files_of``, ``_data_files``, ``_orphan_files``).
:class:`LanceSink` is the Lance one (``write_lance``'s arguments and modes, ``_table.py``); ``DeltaSink`` is in
``_delta_sink.py``. The driver side of ``finalize`` and ``run`` are in ``_runner.py``."""

from __future__ import annotations

import collections
import os
import threading
import time
import uuid
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Union

import pyarrow as pa
import pyarrow.compute as pc
from daft.io.sink import DataSink, WriteResult

from . import _table
from ._common import RESULT_SCHEMA, _fragment_files, _lance, _retry_io, _sp, _worker_name, logger
from ._reader import (
    INPUT_COLUMN,
    POSITION_COLUMN,
    _check_inputs_per,
    _footer_rows_read,
    _Ranges,
    _refuse_input_splitting,
    _row_counts,
    daft_path,
)
from ._runner import OPEN_TIMEOUT_S_DEFAULT, _JobRunner, _Prepared, _Summary

#: An input's rows are buffered until it is complete; past this many bytes the buffer is written as data files
#: and staged as one part of the input's checkpoint (memory stays bounded for large inputs).
FLUSH_BYTES_DEFAULT = 256 * 1024 * 1024

#: The number of runs whose per-input state a worker process keeps (a long-lived Ray actor serves many).
_RUNS_KEPT = 8


class _Input:
    """One input as this process has seen it in one run."""

    __slots__ = (
        "path",
        "lock",
        "status",
        "expected",
        "rows",
        "positions",
        "chunks",
        "nbytes",
        "parts",
        "results",
        "dropped",
        "timings",
    )

    def __init__(self, path: str) -> None:
        self.path = path
        self.lock = threading.Lock()
        #: None (not seen yet), "collecting", "complete" (every position arrived; its seal is due when the write
        #: call ends), "sealed", "skipped" (processed before), "lost", "rejected" (a row position arrived twice or out
        #: of range before the seal: never sealed), "failed"
        self.status: Optional[str] = None
        self.expected = 0
        self.rows = 0
        #: The row positions collected so far; the input is sealed when they are exactly 0 .. expected - 1.
        self.positions = _Ranges()
        self.chunks: List[pa.Table] = []
        self.nbytes = 0
        #: Parts staged so far (a large input flushes parts before it is complete).
        self.parts = 0
        #: The write results staged so far (Lance fragments, Delta Adds), for the garbage report of a lost seal.
        self.results: List[Any] = []
        self.dropped = 0
        #: Seconds spent per step (is_processed_s, row_count_s, fragment_s, stage_s, seal_s): the report's costs.
        #: ``fragment_s`` is the table's own write (Lance fragments, Delta Parquet files).
        self.timings: Dict[str, float] = collections.defaultdict(float)


class _Run:
    """What one process holds for one run of a sink: the worker handle, the table's schema, the inputs."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.worker: Any = None
        self.schema: Optional[pa.Schema] = None
        #: What the sink's ``_write_files`` needs to know of the table (set with ``schema``).
        self.write_options: Dict[str, Any] = {}
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


class _InputSink(_JobRunner, DataSink):
    """What :class:`LanceSink` and ``DeltaSink`` share: a Daft DataSink that checkpoints each whole input file once
    per job, whatever the table. Its worker side buffers an input's rows until each position arrived once, writes
    them as the table's data files (``_write_files``), and stages and seals them in shared staging; its driver side
    (:class:`_JobRunner`) adopts the seals and commits them through the sink's target. A sink is its table side:
    its constructor (the table's arguments, then :meth:`_init_job` with sinkpoint's own) and the hooks below."""

    def _init_job(
        self,
        job: str,
        staging_url: str,
        store_path: str,
        *,
        io_config: Any = None,
        mirror_url: Optional[str] = None,
        staging_options: Optional[Dict[str, str]] = None,
        mirror_options: Optional[Dict[str, str]] = None,
        input_column: str = INPUT_COLUMN,
        position_column: str = POSITION_COLUMN,
        input_io_config: Any = None,
        row_counts: Optional[Mapping[str, int]] = None,
        flush_bytes: int = FLUSH_BYTES_DEFAULT,
        open_timeout_s: float = OPEN_TIMEOUT_S_DEFAULT,
        check_processed_in_worker: Optional[bool] = None,
        inputs_per_checkpoint: int = 1,
    ) -> None:
        """sinkpoint's own configuration (the job, the staging, the committer's store, the inputs' columns and
        reading) and the per-run state: every keyword argument of a sink after its table's own (see
        :class:`LanceSink`). ``io_config`` is the table's, which the inputs are read with too unless
        ``input_io_config`` is given."""
        if not job:
            raise ValueError("job must be a non-empty id")
        if not isinstance(job, str):
            raise TypeError(f"job must be a str (the job's id), not {type(job).__name__}")
        if flush_bytes < 1:
            raise ValueError("flush_bytes must be positive")
        _check_inputs_per(inputs_per_checkpoint, "inputs_per_checkpoint")
        if inputs_per_checkpoint > 1 and check_processed_in_worker:
            raise _sp().InvalidInputError(
                "check_processed_in_worker=True needs inputs_per_checkpoint=1: a worker's check reads an input's own "
                "claim, and an input sealed in a checkpoint of several has none. Leave the check out (the driver "
                "refuses a checkpoint whose input another holds: run() prunes first), or seal one input a checkpoint"
            )
        self.job = job
        self.staging_url = _uri_arg(staging_url, "staging_url", "the shared staging's URL")
        self.store_path = _uri_arg(store_path, "store_path", "the committer's store file")
        self.mirror_url = None if mirror_url is None else _uri_arg(mirror_url, "mirror_url", "the store's mirror")
        self.staging_options = _options_arg(staging_options, "staging_options") or None
        self.mirror_options = _options_arg(mirror_options, "mirror_options") or None
        #: One token per run (``start``): a worker process keys its state by it.
        self._token = uuid.uuid4().hex
        # Driver side only (not pickled).
        self._inputs: Optional[List[str]] = None
        #: The driver :meth:`run` opened, recovered and adopted with, for ``finalize`` to go on with.
        self._prepared: Optional[_Prepared] = None
        self.report: Dict[str, Any] = {}
        self.input_column = input_column
        self.position_column = position_column
        #: The inputs' IOConfig (footers and reads): ``input_io_config``, else ``io_config``.
        self.input_io_config = input_io_config if input_io_config is not None else io_config
        self.row_counts = _row_counts_arg(row_counts)
        self.flush_bytes = int(flush_bytes)
        self.open_timeout_s = float(open_timeout_s)
        self.check_processed_in_worker = check_processed_in_worker
        #: The most inputs one checkpoint seals (those a ``write`` call completes; see :class:`LanceSink`).
        self.inputs_per_checkpoint = inputs_per_checkpoint
        #: What the workers of the current run do (pickled with the sink): ``check_processed_in_worker``, resolved.
        self._check_in_worker = self._default_check_in_worker()

    def _default_check_in_worker(self) -> bool:
        """``check_processed_in_worker`` resolved outside :meth:`run`: yes unless turned off, or unless checkpoints
        hold several inputs (an input then has no claim of its own to read)."""
        if self.check_processed_in_worker is None:
            return self.inputs_per_checkpoint == 1
        return bool(self.check_processed_in_worker)

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
        return f"{type(self).__name__}({self.uri!r}, job={self.job!r}, mode={self.mode!r})"

    # -- DataSink --------------------------------------------------------------------------------------------

    def name(self) -> str:
        """The sink's name, as Daft shows it."""
        return f"sinkpoint {type(self).__name__}"

    def schema(self) -> Any:
        """The schema of what ``finalize`` returns (:data:`RESULT_SCHEMA`), as a ``daft.Schema``."""
        from daft import Schema

        return Schema.from_pyarrow_schema(RESULT_SCHEMA)

    def start(self) -> None:
        """Driver, before the plan runs: a new run token; refuses a Daft configuration that can split one input
        file across tasks; opens the table (with ``mode="create"``, refuses one that is not this job's) or creates
        it when ``schema`` is known (else the first worker creates it with the rows' schema)."""
        self._token = uuid.uuid4().hex
        self.report = {}
        _refuse_input_splitting()
        if self._prepared is None:  # run() made sure of the table already
            self._open_table(self.schema_hint)

    def write(self, micropartitions: Iterator[Any]) -> Iterator[WriteResult]:
        """Where the plan runs, per MicroPartition: adds each input's rows at their positions, and writes and seals
        an input once each position arrived once. Yields one ``WriteResult`` per MicroPartition, its events
        (sealed, pending, skipped, lost, rejected) for ``finalize``."""
        run = _run_state(self._token)
        # The inputs this call completed, not sealed yet: sealed together (one checkpoint) when the call ends, or
        # sooner when they hold inputs_per_checkpoint inputs or flush_bytes.
        batch: List[_Input] = []
        for mp in micropartitions:
            table = mp.to_arrow()
            events: List[Dict[str, Any]] = []
            for path, rows, positions in self._by_input(table):
                events += self._add(run, path, rows, positions, batch)
            k = self.inputs_per_checkpoint
            while len(batch) >= k:
                events += self._seal_batch(run, batch[:k])
                batch = batch[k:]
            if batch and sum(i.nbytes for i in batch) >= self.flush_bytes:
                events += self._seal_batch(run, batch)
                batch = []
            yield self._write_result(events)
        if batch:
            yield self._write_result(self._seal_batch(run, batch))

    def _write_result(self, events: List[Dict[str, Any]]) -> WriteResult:
        """The ``WriteResult`` carrying ``events`` to ``finalize``, with the rows and bytes they sealed."""
        sealed = [e for e in events if e["event"] == "sealed"]
        return WriteResult(
            result={"token": self._token, "events": events},
            bytes_written=sum(e.get("bytes", 0) for e in sealed),
            rows_written=sum(e["rows"] for e in sealed),
        )

    def finalize(self, write_results: List[WriteResult]) -> Any:
        """Driver, after every write: recover, adopt every sealed checkpoint, finish the job; the commits made as
        a MicroPartition of :data:`RESULT_SCHEMA`. Raises :class:`IncompleteInputsError` (after committing what is
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
            logger.info(
                "job %s: %d data file(s) of lost attempts are garbage (LanceSink.collect_orphans deletes those "
                "in the store's ledger): %s",
                self.job,
                len(left),
                left[:5],
            )
        return MicroPartition.from_arrow(table)

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

    def _add(
        self, run: _Run, path: str, rows: pa.Table, positions: pa.Array, batch: List[_Input]
    ) -> List[Dict[str, Any]]:
        """Adds an input's rows at ``positions``; once each of its positions arrived once, the input joins
        ``batch`` (the call's inputs to seal), or is sealed now when it was staged in parts already. A position that
        arrived before (here, or after the input was complete), or beyond the file's rows, is a ``rejected`` event,
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
            if inp.status in ("complete", "sealed", "lost"):
                # Every position arrived once already: these rows are a second copy.
                inp.dropped += rows.num_rows
                events.append(
                    {
                        "event": "rejected",
                        "input": path,
                        "rows": rows.num_rows,
                        "reason": f"{rows.num_rows} row(s) arrived after the input was complete (the input "
                        "was read twice?); its complete copy was sealed, these were not written",
                    }
                )
                return events
            why = inp.positions.add(positions, inp.expected)
            if why is not None:
                inp.status = "rejected"
                inp.dropped += inp.rows + rows.num_rows
                inp.chunks = []
                events.append(
                    {
                        "event": "rejected",
                        "input": path,
                        "rows": rows.num_rows,
                        "reason": f"{why}; nothing of it was sealed",
                    }
                )
                return events
            inp.chunks.append(rows)
            inp.rows += rows.num_rows
            inp.nbytes += rows.nbytes
            if inp.positions.complete(inp.expected):
                assert inp.rows == inp.expected, (inp.path, inp.rows, inp.expected)
                if inp.parts:
                    events.append(self._seal(run, inp))  # its parts are staged under its own id
                else:
                    inp.status = "complete"
                    batch.append(inp)
            else:
                if inp.nbytes >= self.flush_bytes:
                    self._stage_part(run, inp)
                events.append({"event": "pending", "input": path, "rows": inp.rows, "expected": inp.expected})
        return events

    def _row_count(self, path: str) -> int:
        """The input's row count: given in ``row_counts``, else read by this process's reader from the footer it
        opened (no second read), else read from the footer now (rows of another process's reader)."""
        if self.row_counts is not None and path in self.row_counts:
            return self.row_counts[path]
        cached = _footer_rows_read(path)
        if cached is not None:
            return cached
        return _row_counts([path], self.input_io_config)[0]

    def _write_buffered(self, run: _Run, inp: _Input) -> tuple:
        """Writes the buffered rows of ``inp`` as the table's data files (``_write_files``: one or several):
        (their write results, bytes)."""
        table = pa.concat_tables(inp.chunks) if len(inp.chunks) > 1 else inp.chunks[0]
        table = self._conform(run, table)
        nbytes = table.nbytes
        t0 = time.perf_counter()
        results = self._write_files(run, table)
        inp.timings["fragment_s"] += time.perf_counter() - t0
        inp.chunks = []
        inp.nbytes = 0
        inp.results.extend(results)
        return results, nbytes

    def _conform(self, run: _Run, table: pa.Table) -> pa.Table:
        """``table`` in the table's schema; the table is opened once per run and process (and created, with
        ``schema`` or else ``table``'s schema, when missing)."""
        with run.lock:
            schema = run.schema
        if schema is None:
            schema, options = self._table_layout(self.schema_hint or table.schema)
            with run.lock:
                run.write_options = options
                run.schema = schema
        if table.schema.equals(schema, check_metadata=False):
            return table
        missing = [n for n in schema.names if n not in table.column_names]
        extra = [n for n in table.column_names if n not in schema.names]
        if missing or extra:
            raise ValueError(
                f"the rows do not fit the table {self.uri}: columns missing {missing}, columns not in the table {extra}"
            )
        return table.select(schema.names).cast(schema)

    def _stage_part(self, run: _Run, inp: _Input) -> None:
        results, _ = self._write_buffered(run, inp)
        sp = _sp()
        keys = [inp.path] if inp.parts == 0 else []
        t0 = time.perf_counter()
        _retry_io(
            lambda: self._worker(run).stage(
                sp.checkpoint_id_for_key(inp.path), attempt=0, part=inp.parts, keys=keys, results=results
            )
        )
        inp.timings["stage_s"] += time.perf_counter() - t0
        inp.parts += 1

    def _seal(self, run: _Run, inp: _Input) -> Dict[str, Any]:
        sp = _sp()
        worker = self._worker(run)
        cid = sp.checkpoint_id_for_key(inp.path)
        nbytes = 0
        try:
            if inp.parts == 0:
                results, nbytes = self._write_buffered(run, inp)
                self._at("written", inp.path)
                t0 = time.perf_counter()
                _retry_io(lambda: worker.stage_and_seal(cid, [inp.path], results))
            else:
                self._stage_part(run, inp)
                self._at("written", inp.path)
                t0 = time.perf_counter()
                _retry_io(lambda: worker.seal(cid, inp.parts))
            inp.timings["seal_s"] += time.perf_counter() - t0
        except sp.SealLostError as lost:
            inp.status = "lost"
            garbage = self._files_of(lost.results)
            deleted = self._delete_lost(inp.path, lost.results)
            logger.info(
                "input %s: another attempt sealed it first (%s); %d file(s) of ours are garbage, %d deleted",
                inp.path,
                lost.winner,
                len(garbage),
                len(deleted),
            )
            return {
                "event": "lost",
                "input": inp.path,
                "id": cid,
                "winner": str(lost.winner),
                "garbage": garbage,
                "deleted": deleted,
            }
        except BaseException:
            inp.status = "failed"
            raise
        inp.status = "sealed"
        self._at("sealed", inp.path)
        return {
            "event": "sealed",
            "input": inp.path,
            "id": cid,
            "rows": inp.rows,
            "bytes": nbytes,
            "files": len(inp.results),
            "timings": dict(inp.timings),
        }

    def _seal_batch(self, run: _Run, batch: List[_Input]) -> List[Dict[str, Any]]:
        """Seals the complete inputs of ``batch`` as one checkpoint: their rows written as one set of data files,
        staged and sealed in one call under ``checkpoint_id_for_keys`` of their paths (an input alone keeps
        ``checkpoint_id_for_key``). A retried task completes the same inputs in its call, so its attempts race on one
        id. Their events, one per input."""
        if len(batch) == 1:
            with batch[0].lock:
                return [self._seal(run, batch[0])]
        sp = _sp()
        worker = self._worker(run)
        paths = [inp.path for inp in batch]
        cid = sp.checkpoint_id_for_keys(paths)
        timings: Dict[str, float] = collections.defaultdict(float)
        for inp in batch:
            for step, secs in inp.timings.items():
                timings[step] += secs
        try:
            table = self._conform(run, pa.concat_tables([c for inp in batch for c in inp.chunks]))
            nbytes = table.nbytes
            t0 = time.perf_counter()
            results = self._write_files(run, table)
            timings["fragment_s"] += time.perf_counter() - t0
            for inp in batch:
                inp.chunks, inp.nbytes, inp.results = [], 0, list(results)
                self._at("written", inp.path)
            t0 = time.perf_counter()
            _retry_io(lambda: worker.stage_and_seal(cid, paths, results))
            timings["seal_s"] += time.perf_counter() - t0
        except sp.SealLostError as lost:
            return self._lost_batch(batch, cid, lost)
        except BaseException:
            self._set_status(batch, "failed")
            raise
        self._set_status(batch, "sealed")
        for inp in batch:
            self._at("sealed", inp.path)
        first = batch[0]
        return [
            {
                "event": "sealed",
                "input": inp.path,
                "id": cid,
                "rows": inp.rows,
                # The checkpoint's bytes, files and worker timings once, on its first input.
                "bytes": nbytes if inp is first else 0,
                "files": len(results) if inp is first else 0,
                "timings": dict(timings) if inp is first else {},
            }
            for inp in batch
        ]

    def _lost_batch(self, batch: List[_Input], cid: str, lost: Any) -> List[Dict[str, Any]]:
        """The inputs of ``batch`` after another attempt sealed their checkpoint ``cid`` first: our data files are
        garbage (deleted here, best effort). Their events, the files named once."""
        self._set_status(batch, "lost")
        garbage = self._files_of(lost.results)
        deleted = self._delete_lost(batch[0].path, lost.results)
        logger.info(
            "inputs %s and %d more: another attempt sealed their checkpoint first (%s); %d file(s) of ours are "
            "garbage, %d deleted",
            batch[0].path,
            len(batch) - 1,
            lost.winner,
            len(garbage),
            len(deleted),
        )
        return [
            {
                "event": "lost",
                "input": inp.path,
                "id": cid,
                "winner": str(lost.winner),
                "garbage": garbage if i == 0 else [],
                "deleted": deleted if i == 0 else [],
            }
            for i, inp in enumerate(batch)
        ]

    @staticmethod
    def _set_status(batch: List[_Input], status: str) -> None:
        for inp in batch:
            with inp.lock:
                inp.status = status

    def _delete_lost(self, path: str, results: Sequence[Any]) -> List[str]:
        """Deletes the data files of ``results``, this attempt's own after it lost the seal of input ``path``: in no
        seal, so no commit can ever reference them. Best effort: a file that cannot be deleted is logged and stays
        (it is in the event's ``garbage``); this never fails the task. The files deleted."""
        deleted: List[str] = []
        files = self._data_files()
        for result in results:
            try:
                names = files.files_of(result.format, bytes(result.data))
            except Exception as e:  # a result naming no file of ours: left as garbage
                logger.warning(
                    "input %s: could not read the data files of a result of the attempt that lost its "
                    "seal (%s: %s); they stay garbage",
                    path,
                    type(e).__name__,
                    e,
                )
                continue
            for name in names:
                try:
                    files.delete(name)
                    deleted.append(files.path(name))  # spelled as `garbage` spells it
                except Exception as e:  # best effort: never fail the task for garbage
                    logger.warning(
                        "input %s: could not delete %s of the attempt that lost its seal (%s: %s); it stays garbage",
                        path,
                        name,
                        type(e).__name__,
                        e,
                    )
        return deleted

    # -- the table side (each sink's own) --------------------------------------------------------------------

    def _target(self) -> Any:
        """The sinkpoint target the driver commits through (``sinkpoint.LanceTarget``, ``sinkpoint.DeltaTarget``)."""
        raise NotImplementedError

    def _open_table(self, schema: Optional[pa.Schema]) -> Any:
        """The table, opened or created with ``schema`` (in the sink's mode); ``None`` when it is missing and
        ``schema`` is ``None``. Safe in every process of a job: when two create it at once, one wins."""
        raise NotImplementedError

    def _table_layout(self, schema: pa.Schema) -> tuple:
        """(the table's Arrow schema, what ``_write_files`` needs to know of the table), the table opened or created
        with ``schema``: once per run and process, on the first rows."""
        raise NotImplementedError

    def _write_files(self, run: _Run, table: pa.Table) -> List[Any]:
        """Writes ``table`` (in the table's schema) as data files no reader sees yet; their write results."""
        raise NotImplementedError

    def _files_of(self, results: Iterable[Any]) -> List[str]:
        """The data files the write results ``results`` name, as the report spells them."""
        raise NotImplementedError

    def _data_files(self) -> Any:
        """The table's data files as the worker deletes a lost attempt's: ``files_of(format, data)``, ``path(name)``
        (spelled as :meth:`_files_of` spells it) and ``delete(name)``."""
        raise NotImplementedError

    def _orphan_files(self) -> Any:
        """What ``Driver.collect_data_files`` collects the job's orphan data files from (:meth:`collect_orphans`)."""
        return self._data_files()


class LanceSink(_InputSink):
    """A Daft DataSink that writes whole input files to the Lance table at ``uri`` exactly once per ``job``.

    It takes ``df.write_lance``'s arguments (``uri``, ``mode``, ``io_config``, ``schema`` and the writer settings),
    plus sinkpoint's own (``job``, ``staging_url``, ``store_path``, ...). The modes:

    =======================  ============  ===========================================================================
    mode / option            exactly-once  why
    =======================  ============  ===========================================================================
    ``"append"`` (default)   yes           each input is one checkpoint, committed once as an Append under a fenced
                                           key; a rerun adds only what is missing. A missing table is created
                                           (write_lance raises there).
    ``"create"``             yes           the job creates the table empty (its create commit names the job), then
                                           appends each input once; a rerun accepts the table only when this job
                                           created it, any other existing table is refused. The table has one
                                           version more than commits, where write_lance makes one version in all.
    ``"overwrite"``          no: refused   one commit replaces the table, but inputs commit as they are sealed: a
                                           rerun would replace rows committed before, or leave part of the new data.
    ``"insert_overwrite"``   no: refused   the deletion must be one commit with all the new rows, at one version.
    ``"merge"``              no: refused   a column backfill by row address: no input files to checkpoint.
    ``use_mem_wal=True``     no: refused   the MemWAL makes rows durable before any seal: a retried task writes
                                           them again.
    ``checkpoint=...``       no: refused   Daft's own checkpointing (``IdempotentCommit``), beside sinkpoint's.
    =======================  ============  ===========================================================================

    A refused mode raises ``sinkpoint.InvalidInputError`` at construction, saying what to do instead.

    - ``uri``: the Lance table (a path or URI). ``storage_options``: pylance's options for it; when not given,
      Daft derives them from ``io_config`` (as write_lance does).
    - ``job``: the job id; one job writes each input once, ever. A new batch of inputs is a new job.
    - ``staging_url`` (+ ``staging_options``): the object store prefix workers and the driver share
      (``file:///abs/dir``, ``s3://bucket/prefix``).
    - ``store_path``: the committer's local store file (on the driver), mirrored to ``mirror_url``
      (+ ``mirror_options``) when given, so a driver that lost its disk resumes from the mirror. Safe deployments:
      one store file for the job, or a store file on each machine with one mirror. Two drivers with separate
      store files and no mirror are not fenced: both can commit the same inputs, and rows can land twice.
    - ``io_config``: Daft's IOConfig, as write_lance means it (the table's storage options), and for reading the
      inputs and their parquet footers unless ``input_io_config`` is given.
    - ``schema`` (a ``pyarrow.Schema`` or ``daft.Schema``): the table's schema when the sink creates it; else the
      schema of the rows. Rows are cast to the table's schema by column name.
    - ``max_rows_per_file``, ``max_rows_per_group``, ``max_bytes_per_file``: Lance's writer settings, per
      fragment (an input may become several fragments, all in its one checkpoint). ``data_storage_version`` and
      ``enable_stable_row_ids``: the table's settings, used when the sink creates it; an existing table with others
      is refused (``InvalidInputError``); fragments are always written in the table's storage version.
    - ``input_column``, ``position_column``: the columns carrying each row's input path and its position in that
      file (:func:`read_inputs` adds both); dropped before writing. An input is sealed only when each position
      ``0 .. rows - 1`` arrived exactly once.
    - ``row_counts``: the row count of each input, if known (saves the footer reads).
    - ``flush_bytes``: see :data:`FLUSH_BYTES_DEFAULT`.
    - ``inputs_per_checkpoint`` (1 .. ``INPUTS_PER_TASK_MAX``, default 1): with ``k > 1``, :meth:`run` reads the
      inputs in tasks of ``k`` files, and a worker seals the inputs one ``write`` call completes as one checkpoint
      (one set of data files, one request: the job's staging decides keys at adoption). A checkpoint holding an
      input another checkpoint holds is refused by the driver, and ``finalize`` raises
      :class:`IncompleteInputsError` for its other inputs (a rerun writes them); the workers' check below is
      then unavailable.
    - ``check_processed_in_worker``: whether a worker reads an input's claim (``is_processed``: 1 request) before
      writing it, and skips it when sealed. ``None`` (the default): not after :meth:`run`, which adopted and pruned
      just before the read; yes for a DataFrame written by hand (``df.write_sink(sink)``), which may not be pruned.
      After pruning the check only pays when another attempt of the same input sealed it in between (a Ray retry
      of a task whose worker died after sealing, a second driver racing this one): without the check such an
      attempt writes its fragment and then loses the seal (:class:`sinkpoint.SealLostError`: the fragment is never
      committed, and the worker deletes it); with it, it skips the write, at 1 request for every input. Either way
      each input is in the table once.

    The sink pickles as its configuration; workers open their handles lazily. After ``finalize`` the driver's
    object holds :attr:`report` (a dict: what was written, skipped, lost, adopted, committed, and the garbage).
    :meth:`collect_orphans` deletes the data files of dropped attempts that the store's garbage ledger names.

    >>> from sinkpoint.daft import LanceSink
    >>> LanceSink("/tmp/t.lance", "job-1", "file:///tmp/staging", "/tmp/job.redb", mode="create")
    LanceSink('/tmp/t.lance', job='job-1', mode='create')
    >>> LanceSink("/tmp/t.lance", "job-1", "file:///tmp/staging", "/tmp/job.redb", mode="overwrite")
    Traceback (most recent call last):
    sinkpoint.InvalidInputError: LanceSink cannot write mode='overwrite' exactly once: ...
    """

    def __init__(
        self,
        uri: Union[str, "os.PathLike[str]"],
        job: str,
        staging_url: str,
        store_path: str,
        *,
        mode: str = "append",
        io_config: Any = None,
        schema: Any = None,
        storage_options: Optional[Dict[str, str]] = None,
        max_rows_per_file: int = _table.WRITER_DEFAULTS["max_rows_per_file"],
        max_rows_per_group: int = _table.WRITER_DEFAULTS["max_rows_per_group"],
        max_bytes_per_file: int = _table.WRITER_DEFAULTS["max_bytes_per_file"],
        data_storage_version: Optional[str] = None,
        enable_stable_row_ids: bool = False,
        use_mem_wal: bool = False,
        checkpoint: Any = None,
        **options: Any,
    ) -> None:
        _table.check_mode(mode, use_mem_wal=use_mem_wal, checkpoint=checkpoint)
        self.uri = _uri_arg(uri, "uri")
        self.mode = mode
        #: The table's IOConfig as given (write_lance's ``io_config``).
        self.io_config = io_config
        #: The table's storage options, resolved: ``storage_options``, else derived from ``io_config``.
        self.storage_options = _table.table_storage_options(
            self.uri, _options_arg(storage_options, "storage_options"), io_config
        )
        self.schema_hint = _table.arrow_schema(schema)
        #: The writer settings (plain data): the fragments' sizes, the created table's storage version and row ids.
        self.writer_settings = _table.writer_settings(
            max_rows_per_file, max_rows_per_group, max_bytes_per_file, data_storage_version, enable_stable_row_ids
        )
        self._init_job(job, staging_url, store_path, io_config=io_config, **options)

    # -- the Lance table (the hooks of _InputSink) ---------------------------------------------------------------

    def _target(self) -> Any:
        return _sp().LanceTarget(self.uri, storage_options=self.storage_options)

    def _open_table(self, schema: Optional[pa.Schema]) -> Any:
        return _table.ensure_table(
            self.uri,
            schema,
            job=self.job,
            mode=self.mode,
            storage_options=self.storage_options,
            settings=self.writer_settings,
        )

    def _table_layout(self, schema: pa.Schema) -> tuple:
        dataset = self._open_table(schema)
        return dataset.schema, _table.fragment_options(dataset, self.writer_settings)

    def _write_files(self, run: _Run, table: pa.Table) -> List[Any]:
        return _lance().write_fragment(
            self.uri, table, schema=table.schema, storage_options=self.storage_options, **run.write_options
        )

    def _files_of(self, results: Iterable[Any]) -> List[str]:
        return _fragment_files(self.uri, results)

    def _data_files(self) -> Any:
        return _lance().LanceDataFiles(self.uri, storage_options=self.storage_options)


def _uri_arg(value: Any, name: str, what: str = "the Lance dataset's path or URI") -> str:
    """``value`` as a ``str`` path or URL; a ``TypeError`` naming the argument unless it is one (``uri=0`` would
    otherwise create a dataset at ``./0``)."""
    from ..lance import _uri_arg as checked

    return checked(value, name, what)


def _options_arg(value: Any, name: str) -> Optional[Dict[str, str]]:
    """``value`` as a ``dict`` of ``str`` to ``str`` (``None`` stays ``None``); a ``TypeError`` naming the argument
    otherwise (a list given as options is refused, never read as pairs)."""
    from ..lance import _options_arg as checked

    return checked(value, name)


def _row_counts_arg(row_counts: Any) -> Optional[Dict[str, int]]:
    """``row_counts`` keyed as :func:`daft_path` spells each input, each an ``int >= 0``; a ``TypeError`` or
    ``ValueError`` naming the entry otherwise."""
    if not row_counts:
        return None
    if not isinstance(row_counts, Mapping):
        raise TypeError(f"row_counts must be a mapping of input path to row count, not {type(row_counts).__name__}")
    out: Dict[str, int] = {}
    for key, value in row_counts.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"row_counts[{key!r}] = {value!r}: a row count is an int >= 0")
        out[daft_path(_uri_arg(key, "a row_counts key", "an input's path"))] = value
    return out
