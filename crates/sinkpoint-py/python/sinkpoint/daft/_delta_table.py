"""The Delta side of ``DeltaSink``, in ``df.write_deltalake``'s terms: the write modes (which can be exactly-once),
the table's creation with the job's name on it, its partitioning, and the worker's Parquet data files with the
Delta ``Add`` each is committed as (``{"v": 1, "add": {...}}``, tagged ``"delta"``: what ``sinkpoint.DeltaTarget``
commits)."""

from __future__ import annotations

import datetime
import json
import os
import uuid
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple
from urllib.parse import quote, unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ._common import _sp

#: The key of the ``commitInfo`` of the commit that creates a table for a job: the job's id. ``mode="error"``
#: accepts an existing table only when this names its own job (or, once that first commit file was cleaned up,
#: when the table holds a key of the job: its txn).
CREATED_BY_PROPERTY = "sinkpoint.created_by"

#: The Delta application id of a job's txn is this prefix and the job id (``sinkpoint_delta::fence::app_id``).
APP_ID_PREFIX = "sinkpoint.job."

#: ``df.write_deltalake``'s modes that DeltaSink writes exactly once.
MODES = ("append", "error")

#: ``df.write_deltalake``'s modes (and options) that cannot be exactly-once here, each with why and what to do
#: instead.
REFUSED_MODES: Dict[str, str] = {
    "overwrite": (
        "an overwrite removes every file of the table in the commit that adds the new ones, but DeltaSink commits "
        "each sealed input as it is ready, so a rerun after a crash would either remove the rows an earlier run "
        "committed or leave the table holding part of the new data; overwrite or delete the table first (outside "
        "the job), then write with mode='error' or 'append' under a new job id"
    ),
    "ignore": (
        "'ignore' writes nothing when the table exists, but the table a crashed run of the job created exists on "
        "the rerun, which must go on writing; use mode='error' (the job creates the table and a rerun accepts only "
        "the table this job created) or check for the table before the job"
    ),
}

#: The partition column types DeltaSink writes, each with how Delta spells a value in ``partitionValues``.
_PARTITION_TYPES = "integers, strings, booleans and dates"

#: Where Delta puts the rows whose partition value is null.
_NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"


def _invalid(message: str) -> Exception:
    return _sp().InvalidInputError(message)


def check_mode(
    mode: str,
    *,
    schema_mode: Optional[str],
    custom_metadata: Any,
    dynamo_table_name: Optional[str],
    allow_unsafe_rename: bool,
    checkpoint: Any,
) -> None:
    """Raises ``InvalidInputError`` for a mode or option that cannot be exactly-once, saying why and what to do."""
    if mode in REFUSED_MODES:
        raise _invalid(f"DeltaSink cannot write mode={mode!r} exactly once: {REFUSED_MODES[mode]}")
    if mode not in MODES:
        raise _invalid(f"DeltaSink has no mode={mode!r}: it writes mode='append' or mode='error'")
    if schema_mode is not None:
        raise _invalid(
            f"DeltaSink cannot write with schema_mode={schema_mode!r}: a schema change is one commit for the whole "
            "write, and DeltaSink commits input by input; rows are cast to the table's schema (change the schema "
            "outside the job)"
        )
    if custom_metadata:
        raise _invalid(
            "DeltaSink does not take custom_metadata: each commit's commitInfo carries sinkpoint's own record "
            "(the job, the key, the epoch, the checkpoints), which its probe reads; drop the argument"
        )
    if dynamo_table_name is not None or allow_unsafe_rename:
        raise _invalid(
            "DeltaSink does not take dynamo_table_name or allow_unsafe_rename: its commit is fenced by a "
            "put-if-absent of the next log version, which a DynamoDB lock or an unsafe rename does not give"
        )
    if checkpoint is not None:
        raise _invalid(
            "DeltaSink does not take checkpoint=: that is Daft's own checkpointing (daft.IdempotentCommit), which "
            "would run beside sinkpoint's; DeltaSink checkpoints each input itself, so drop the argument"
        )


def table_arg(table: Any) -> Tuple[str, Optional[Dict[str, str]]]:
    """write_deltalake's ``table`` (a path, a ``pathlib.Path`` or a ``deltalake.DeltaTable``) as (URI, the
    storage options a ``DeltaTable`` carries); refused unless local (a path or ``file://``): the wheel's delta-rs
    reaches local tables only."""
    options = None
    if hasattr(table, "table_uri"):
        uri = str(table.table_uri)
        options = dict(getattr(table, "_storage_options", None) or {}) or None
    elif isinstance(table, (str, os.PathLike)):
        uri = os.path.expanduser(os.fspath(table))
    else:
        raise TypeError(f"table must be a path or a deltalake.DeltaTable, not {type(table).__name__}: {table!r}")
    if "://" in uri and not uri.startswith("file://"):
        raise _invalid(
            f"DeltaSink writes local Delta tables only (a path or file:// URL), not {uri!r}: the wheel's delta-rs "
            "has no cloud storage compiled in"
        )
    return uri, options


def local_dir(uri: str) -> str:
    """The table's directory on this machine."""
    return uri[len("file://") :] if uri.startswith("file://") else uri


def open_table(uri: str, storage_options: Optional[Dict[str, str]]) -> Any:
    """The ``deltalake.DeltaTable`` at ``uri``, or ``None`` when there is none."""
    import deltalake
    from deltalake.exceptions import TableNotFoundError

    try:
        return deltalake.DeltaTable(uri, storage_options=storage_options)
    except TableNotFoundError:
        return None


def ensure_table(
    uri: str,
    schema: Optional[pa.Schema],
    *,
    job: str,
    mode: str,
    partition_cols: Optional[List[str]],
    storage_options: Optional[Dict[str, str]],
    create_options: Dict[str, Any],
) -> Any:
    """The table at ``uri``: opened, or created empty with ``schema``, ``partition_cols`` and the job's name in its
    first commit when it is missing and ``schema`` is known; ``None`` when it is missing and ``schema`` is not. With
    ``mode="error"`` an existing table must be this job's own (:func:`check_created_by`); either way its partition
    columns must be ``partition_cols`` when given, and of a type DeltaSink writes. Safe in every process of a job:
    when two create it at once, one wins and the others open it."""
    import deltalake

    table = open_table(uri, storage_options)
    if table is None:
        if schema is None:
            return None
        try:
            table = deltalake.DeltaTable.create(
                uri,
                schema,
                mode="error",
                partition_by=partition_cols or None,
                storage_options=storage_options,
                commit_properties=deltalake.CommitProperties(custom_metadata={CREATED_BY_PROPERTY: job}),
                **create_options,
            )
        except deltalake.exceptions.DeltaError:
            # Another process of the job created it first; anything else raises on the open below.
            table = open_table(uri, storage_options)
            if table is None:
                raise
    if mode == "error":
        check_created_by(table, job, uri)
    existing = list(table.metadata().partition_columns)
    if partition_cols is not None and list(partition_cols) != existing:
        raise _invalid(
            f"partition_cols={list(partition_cols)} does not match the table {uri}, partitioned by {existing} "
            "(leave partition_cols out to write the table's)"
        )
    _check_partition_types(arrow_schema_of(table), existing, uri)
    return table


def arrow_schema_of(table: Any) -> pa.Schema:
    """The table's schema as a ``pyarrow.Schema`` (deltalake 1.x gives an arro3 schema; pyarrow reads it through
    the Arrow C interface)."""
    return pa.schema(table.schema().to_arrow())


def created_by(uri: str) -> Optional[str]:
    """The job whose create made the table (its first commit's ``commitInfo``), or ``None`` when another writer
    created it or the first commit file is gone (log cleanup)."""
    first = os.path.join(local_dir(uri), "_delta_log", "0" * 20 + ".json")
    try:
        with open(first, encoding="utf-8") as f:
            for line in f:
                action = json.loads(line)
                if "commitInfo" in action:
                    found = action["commitInfo"].get(CREATED_BY_PROPERTY)
                    return None if found is None else str(found)
    except (OSError, ValueError):
        return None
    return None


def check_created_by(table: Any, job: str, uri: str) -> None:
    """Raises ``InvalidInputError`` unless the table is this job's own: its first commit names the job, or (that
    commit file cleaned up) the table holds a key of the job (its txn)."""
    creator = created_by(uri)
    if creator == job:
        return
    if creator is None and table.transaction_version(APP_ID_PREFIX + job) is not None:
        return
    whose = f"job {creator!r}" if creator is not None else "another writer"
    raise _invalid(
        f"mode='error': the Delta table {uri} exists and was created by {whose}, not by job {job!r}; write to a new "
        "path, or use mode='append' to add to the existing table"
    )


def _partition_type_ok(dtype: pa.DataType) -> bool:
    return (
        pa.types.is_integer(dtype)
        or pa.types.is_string(dtype)
        or pa.types.is_large_string(dtype)
        or pa.types.is_boolean(dtype)
        or pa.types.is_date32(dtype)
    )


def _check_partition_types(schema: pa.Schema, partition_cols: List[str], uri: str) -> None:
    bad = [(c, str(schema.field(c).type)) for c in partition_cols if not _partition_type_ok(schema.field(c).type)]
    if bad:
        raise _invalid(
            f"DeltaSink writes partition columns of {_PARTITION_TYPES}; the table {uri} is partitioned by {bad}, "
            "whose values it does not spell as Delta does (write it with df.write_deltalake)"
        )


def _partition_value(value: Any) -> Optional[str]:
    """A partition value as Delta's ``partitionValues`` spells it."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime.date):
        return value.isoformat()
    return str(value)


def _groups(table: pa.Table, partition_cols: List[str]) -> Iterator[Tuple[Dict[str, Optional[str]], pa.Table]]:
    """(partition values, the rows without the partition columns) for each partition of ``table``."""
    if not partition_cols:
        yield {}, table
        return
    keys = table.select(partition_cols).group_by(partition_cols).aggregate([]).to_pylist()
    for key in keys:
        mask = None
        for column, value in key.items():
            test = pc.is_null(table.column(column)) if value is None else pc.equal(table.column(column), value)
            mask = test if mask is None else pc.and_(mask, test)
        rows = table.filter(mask).drop_columns(partition_cols)
        yield {c: _partition_value(key[c]) for c in partition_cols}, rows


def _bounded_type(kind: pa.DataType) -> bool:
    """Whether a column's Parquet statistics are its Delta stats as they are: integers, strings, dates."""
    return (
        pa.types.is_integer(kind)
        or pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or (pa.types.is_date32(kind))
    )


def _stats(metadata: Any, schema: pa.Schema) -> str:
    """The ``stats`` of a data file from its Parquet footer: ``numRecords``, and for each top-level column of a
    type whose Parquet statistics are its Delta values (integers, strings, dates) ``nullCount``, ``minValues`` and
    ``maxValues``. Other columns get none: a wrong bound would make a reader skip a file it must read."""
    stats: Dict[str, Any] = {"numRecords": metadata.num_rows, "minValues": {}, "maxValues": {}, "nullCount": {}}
    groups = [metadata.row_group(i) for i in range(metadata.num_row_groups) if metadata.row_group(i).num_rows]
    for index, field in enumerate(schema):
        kind = field.type
        if not _bounded_type(kind):
            continue
        columns = [g.column(index) for g in groups]
        if not columns or not all(c.is_stats_set for c in columns):
            continue
        stats["nullCount"][field.name] = sum(c.statistics.null_count for c in columns)
        bounded = [c.statistics for c in columns if c.statistics.has_min_max]
        if bounded:
            low, high = min(s.min for s in bounded), max(s.max for s in bounded)
            if pa.types.is_date32(kind):
                low, high = low.isoformat(), high.isoformat()
            stats["minValues"][field.name] = low
            stats["maxValues"][field.name] = high
    return json.dumps(stats)


def write_files(uri: str, table: pa.Table, partition_cols: List[str]) -> List[Any]:
    """Writes ``table`` (in the table's schema) as one Parquet data file per partition in the table's directory
    (``<col>=<value>/`` for a partitioned table, as delta-rs names them), each under a name no other write takes,
    created only if absent; returns their ``Add`` actions as ``"delta"`` write results. Readers see none of it until
    the driver commits them."""
    sp = _sp()
    root = local_dir(uri)
    results = []
    for values, rows in _groups(table, partition_cols):
        directory = "/".join(
            f"{quote(c, safe='')}={_NULL_PARTITION if v is None else quote(v, safe='')}" for c, v in values.items()
        )
        name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
        relative = f"{directory}/{name}" if directory else name
        path = os.path.join(root, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        # Created only if absent ("x"): a data file is written once (the collector relies on it).
        with open(path, "xb") as f:
            pq.write_table(rows, f, compression="snappy")
        metadata = pq.read_metadata(path)
        info = os.stat(path)
        add = {
            # The log names a file by its URI-encoded path: a partition directory's escapes are escaped again.
            "path": quote(relative),
            "size": info.st_size,
            "partitionValues": values,
            "modificationTime": int(info.st_mtime * 1000),
            "dataChange": True,
            "stats": _stats(metadata, rows.schema),
        }
        results.append(sp.WriteResult("delta", json.dumps({"v": 1, "add": add}).encode()))
    return results


def _add_of(data: bytes) -> Dict[str, Any]:
    envelope = json.loads(bytes(data).decode())
    if envelope.get("v") != 1 or "add" not in envelope:
        raise ValueError("not a Delta Add write result of version 1")
    return envelope["add"]


def files_of(uri: str, results: Iterable[Any]) -> List[str]:
    """The data files of the Delta write results among ``results``, as ``<uri>/<path>``."""
    files = []
    for r in results:
        try:
            files.append(f"{uri.rstrip('/')}/{unquote(_add_of(r.data)['path'])}")
        except (ValueError, KeyError, TypeError, AttributeError):
            files.append(f"<unreadable result {getattr(r, 'format', type(r).__name__)}>")
    return files


class DeltaFiles:
    """The table's data files as a worker deletes those of an attempt that lost its seal: the file an ``Add``
    names, its spelling in the report, its deletion."""

    def __init__(self, uri: str) -> None:
        self.uri = uri

    def files_of(self, format: str, data: bytes) -> List[str]:
        """The file (relative to the table's root, decoded) of a ``"delta"`` write result."""
        if format != "delta":
            raise ValueError(f"a Delta table names the files of Delta Adds only, not of {format!r}")
        relative = unquote(_add_of(data)["path"])
        if relative.startswith("/") or ".." in relative.split("/"):
            raise ValueError(f"{relative!r} is not a file inside the table")
        return [relative]

    def path(self, name: str) -> str:
        """``name`` as the report spells it: ``<uri>/<name>``."""
        return f"{self.uri.rstrip('/')}/{name}"

    def delete(self, name: str) -> None:
        """Deletes the file; one already gone is not an error."""
        try:
            os.remove(os.path.join(local_dir(self.uri), name))
        except FileNotFoundError:
            pass
