"""The reader of a Daft job's inputs: every row carries its input and its position in it (:func:`read_inputs`),
and the positions that arrived of one input, kept as runs (:class:`_Ranges`); plus the inputs' row counts from
their parquet footers and the Daft settings that would split one input across tasks."""

from __future__ import annotations

import bisect
import collections
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, AsyncIterator, Iterable, List, Optional

import pyarrow as pa
import pyarrow.compute as pc
from daft.io.source import DataSource, DataSourceTask
from daft.schema import Schema

#: The column that carries each row's input (:func:`read_inputs` adds it); it is not written to the table.
INPUT_COLUMN = "_sinkpoint_input"

#: The column that carries each row's position in its input (0 for the file's first row; :func:`read_inputs` adds
#: it); it is not written to the table. An input is sealed only when positions ``0 .. rows - 1`` have each arrived
#: once.
POSITION_COLUMN = "_sinkpoint_row"


#: Rows per batch :func:`read_inputs` reads (one MicroPartition each on the way to the sink).
READ_BATCH_ROWS_DEFAULT = 65536

#: The most input files one task of :func:`read_inputs` reads (``inputs_per_task``); a sink's checkpoint of a
#: task's inputs stays far below the core's keys per stage call (``STAGE_KEYS_MAX``).
INPUTS_PER_TASK_MAX = 1024

#: The most disjoint runs of positions one input may have arrived as before it is complete (see :class:`_Ranges`):
#: an input read in order is one run; a run costs about 100 bytes, so this bounds one input's tracking at a few MiB.
POSITION_RUNS_MAX = 65536


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


def read_inputs(
    paths: Iterable[str],
    *,
    input_column: str = INPUT_COLUMN,
    position_column: str = POSITION_COLUMN,
    io_config: Any = None,
    batch_rows: int = READ_BATCH_ROWS_DEFAULT,
    inputs_per_task: int = 1,
) -> Any:
    """A Daft DataFrame of the parquet files ``paths``, one scan task per ``inputs_per_task`` files (consecutive in
    ``paths``), each row with two columns more: its
    input (``input_column``, spelled as :func:`daft_path` spells it: the checkpoint key) and its position in that
    file (``position_column``, int64, from 0). Write it with ``df.write_sink(sink)``: :class:`LanceSink` seals an
    input only when each position arrived exactly once. ``io_config`` is Daft's IOConfig for the files.

    Daft 0.7.26's ``read_parquet`` gives the file path (``file_path_column``) but no row position, so this reads
    the files itself (pyarrow, through the filesystem Daft derives from ``io_config``), ``batch_rows`` rows at a
    time; the schema is the first file's. A task's small files share a batch (up to ``batch_rows`` rows): Daft
    hands a sink one batch per ``write`` call, so a sink built with ``inputs_per_checkpoint=k`` seals a task's
    inputs as one checkpoint when the task reads ``k`` of them."""
    _refuse_single_path(paths)
    if batch_rows < 1:
        raise ValueError("batch_rows must be positive")
    _check_inputs_per(inputs_per_task, "inputs_per_task")
    inputs = [str(p) for p in paths]
    if not inputs:
        raise ValueError("read_inputs needs at least one path")
    return _InputSource(inputs, input_column, position_column, io_config, int(batch_rows), inputs_per_task).read()


def _check_inputs_per(value: Any, name: str) -> int:
    """``value`` as inputs per task (or per checkpoint): an ``int`` in ``1 ..`` :data:`INPUTS_PER_TASK_MAX`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if not 1 <= value <= INPUTS_PER_TASK_MAX:
        raise ValueError(f"{name} = {value}: it must be in 1..{INPUTS_PER_TASK_MAX}")
    return value


def _refuse_single_path(paths: Any) -> None:
    """A ``TypeError`` for one path given where a list of paths belongs (a ``str`` would be read as its
    characters, each a path)."""
    if isinstance(paths, (str, bytes, os.PathLike)):
        raise TypeError(
            f"paths must be a list of parquet paths, not one {type(paths).__name__}: give [{paths!r}] for one input"
        )


def _open_parquet(path: str, io_config: Any) -> Any:
    """A ``pyarrow.parquet.ParquetFile`` of ``path`` (a local path or a URL Daft's IOConfig can reach)."""
    import pyarrow.parquet as pq
    from daft.filesystem import _resolve_paths_and_filesystem

    (resolved,), fs = _resolve_paths_and_filesystem(path, io_config)
    return pq.ParquetFile(fs.open_input_file(resolved))


class _InputSource:
    """What :func:`read_inputs` reads."""

    def __init__(
        self,
        paths: List[str],
        input_column: str,
        position_column: str,
        io_config: Any,
        batch_rows: int,
        inputs_per_task: int = 1,
    ) -> None:
        self.paths = paths
        self.input_column = input_column
        self.position_column = position_column
        self.io_config = io_config
        self.batch_rows = batch_rows
        self.inputs_per_task = inputs_per_task

    def arrow_schema(self) -> pa.Schema:
        schema = _open_parquet(self.paths[0], self.io_config).schema_arrow
        for name in (self.input_column, self.position_column):
            if name in schema.names:
                raise ValueError(f"{self.paths[0]} has a column {name!r} already: choose another name for it")
        return schema.append(pa.field(self.input_column, pa.large_string())).append(
            pa.field(self.position_column, pa.int64())
        )

    def read(self) -> Any:
        return _InputsSource(self).read()


class _InputsSource(DataSource):
    """The inputs as a Daft DataSource: one task per ``inputs_per_task`` files."""

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
        paths, step = self.spec.paths, self.spec.inputs_per_task
        for i in range(0, len(paths), step):
            yield _InputTask(self.spec, paths[i : i + step], self._schema)


class _InputTask(DataSourceTask):
    """Input files read in order, each batch with its rows' inputs and positions; consecutive small files share a
    batch of up to ``batch_rows`` rows."""

    def __init__(self, spec: _InputSource, paths: List[str], schema: Schema) -> None:
        self.spec = spec
        self.paths = paths
        self._schema = schema

    @property
    def schema(self) -> Schema:
        return self._schema

    async def read(self) -> AsyncIterator[Any]:
        from daft.recordbatch import RecordBatch

        # Blocking reads on Daft's event loop, as Daft runs its own Python scan tasks: a read handed to Daft's
        # reader on another thread from here deadlocks, and an abandoned reader thread aborts the process at exit.
        held: List[pa.Table] = []
        rows = 0
        for path in self.paths:
            for table in self._read_file(path):
                held.append(table)
                rows += table.num_rows
                if rows >= self.spec.batch_rows:
                    yield RecordBatch.from_arrow_table(pa.concat_tables(held))
                    held, rows = [], 0
        if held:
            yield RecordBatch.from_arrow_table(pa.concat_tables(held))

    def _read_file(self, path: str) -> Iterable[pa.Table]:
        """The file's rows, ``batch_rows`` at a time, in the task's schema with their input and positions."""
        spec = self.spec
        target = self._schema.to_pyarrow_schema()
        key = daft_path(path)
        position = 0
        parquet = _open_parquet(path, spec.io_config)
        _remember_footer_rows(key, parquet.metadata.num_rows)
        for batch in parquet.iter_batches(batch_size=spec.batch_rows):
            n = batch.num_rows
            table = pa.Table.from_batches([batch])
            table = table.append_column(spec.input_column, pa.array([key] * n, pa.large_string()))
            table = table.append_column(spec.position_column, pa.array(range(position, position + n), pa.int64()))
            position += n
            if not table.schema.equals(target, check_metadata=False):
                table = table.select(target.names).cast(target)
            yield table


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
            return (
                f"row positions {runs[0][0]}..{runs[-1][1] - 1} reach beyond the file's {total} rows "
                "(rows multiplied on the way, or rows of another file)"
            )
        for start, end in runs:
            i = bisect.bisect_right(self.starts, start) - 1
            if (i >= 0 and self.ends[i] > start) or (i + 1 < len(self.starts) and self.starts[i + 1] < end):
                return f"a row position in {start}..{end - 1} arrived twice (the input was read twice?)"
        for start, end in runs:
            self._insert(start, end)
        if len(self.starts) > POSITION_RUNS_MAX:
            return (
                f"its rows arrived as more than {POSITION_RUNS_MAX} disjoint runs of positions (rows filtered "
                "or shuffled on the way)"
            )
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


#: The most footer row counts a process keeps from the inputs it read (a few hundred KiB at most).
FOOTER_ROWS_CACHED_MAX = 4096

_footer_rows: "collections.OrderedDict[str, int]" = collections.OrderedDict()
_footer_rows_lock = threading.Lock()


def _remember_footer_rows(key: str, rows: int) -> None:
    """Keeps the footer's row count of the input ``key`` that this process's reader just opened: the sink in the
    same process then needs no second footer read to know when the input is complete."""
    with _footer_rows_lock:
        _footer_rows[key] = rows
        _footer_rows.move_to_end(key)
        while len(_footer_rows) > FOOTER_ROWS_CACHED_MAX:
            _footer_rows.popitem(last=False)


def _footer_rows_read(key: str) -> Optional[int]:
    """The row count this process's reader found in the footer of input ``key``, if it read it recently."""
    with _footer_rows_lock:
        return _footer_rows.get(key)


def _refuse_input_splitting() -> None:
    """Raises when Daft may split one parquet file across scan tasks (by row groups)."""
    from daft import context

    cfg = context.get_context().daft_execution_config
    if getattr(cfg, "enable_scan_task_split_and_merge", False) and getattr(
        cfg, "parquet_split_row_groups_max_files", 0
    ):
        raise ValueError(
            "sinkpoint's sinks need every input file read whole by one task, but Daft is configured to split large "
            "parquet files across tasks by row groups (enable_scan_task_split_and_merge=True with "
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
