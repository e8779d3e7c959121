"""The Lance side of :class:`LanceSink`, in ``df.write_lance``'s terms: the write modes (which can be exactly-once),
the table's storage options, the writer settings, and the table's creation with the job's name on it."""

from __future__ import annotations

from typing import Any, Dict, Optional

import pyarrow as pa

from ._common import _lance, _sp

#: The transaction property of the commit that creates a table for a job: the job's id. ``mode="create"``
#: accepts an existing table only when this names its own job (or, once that first version was cleaned up, when
#: the manifest carries the job's mark: a key of the job landed).
CREATED_BY_PROPERTY = "sinkpoint.created_by"

#: The prefix of the job's mark in the manifest's table metadata (set by every commit of ``LanceTarget``).
_MARK_PREFIX = "sinkpoint.job."

#: ``df.write_lance``'s modes that LanceSink writes exactly once.
MODES = ("append", "create")

#: ``df.write_lance``'s modes (and options) that cannot be exactly-once here, each with why and what to do instead.
REFUSED_MODES: Dict[str, str] = {
    "overwrite": (
        "an overwrite replaces the table in one commit, but LanceSink commits each sealed input as it is ready, so "
        "a rerun after a crash would either replace the rows an earlier run committed or leave the table holding "
        "part of the new data; overwrite or delete the table first (outside the job), then write with "
        "mode='create' or 'append' under a new job id"
    ),
    "insert_overwrite": (
        "the rows to replace must be deleted once, against one version, in the same commit as all the new rows, "
        "and LanceSink commits input by input; delete the rows matching the predicate first (outside the job), "
        "then write with mode='append'"
    ),
    "merge": (
        "a merge backfills columns of existing rows by row address: its inputs are the table's fragments, not "
        "input files, so there is nothing to checkpoint per input; use df.write_lance(mode='merge')"
    ),
}

#: The writer settings of ``lance.fragment.write_fragments`` that LanceSink passes on, with write_lance's defaults.
WRITER_DEFAULTS: Dict[str, Any] = {
    "max_rows_per_file": 1024 * 1024,
    "max_rows_per_group": 1024,
    "max_bytes_per_file": 90 * 1024**3,
}


def _invalid(message: str) -> Exception:
    return _sp().InvalidInputError(message)


def check_mode(mode: str, *, use_mem_wal: bool, checkpoint: Any) -> None:
    """Raises ``InvalidInputError`` for a mode or option that cannot be exactly-once, saying why and what to do."""
    if mode in REFUSED_MODES:
        raise _invalid(f"LanceSink cannot write mode={mode!r} exactly once: {REFUSED_MODES[mode]}")
    if mode not in MODES:
        raise _invalid(f"LanceSink has no mode={mode!r}: it writes mode='append' or mode='create'")
    if use_mem_wal:
        raise _invalid(
            "LanceSink cannot write with use_mem_wal=True exactly once: the MemWAL makes rows durable as they are "
            "written, before any input is sealed, so a retried task writes them again; leave use_mem_wal off"
        )
    if checkpoint is not None:
        raise _invalid(
            "LanceSink does not take checkpoint=: that is Daft's own checkpointing (daft.IdempotentCommit), which "
            "would run beside sinkpoint's; LanceSink checkpoints each input itself, so drop the argument"
        )


def arrow_schema(schema: Any) -> Optional[pa.Schema]:
    """``schema`` (a ``pyarrow.Schema``, a ``daft.Schema`` or ``None``) as a ``pyarrow.Schema``."""
    if schema is None or isinstance(schema, pa.Schema):
        return schema
    if hasattr(schema, "to_pyarrow_schema"):
        return schema.to_pyarrow_schema()
    raise TypeError(f"schema must be a pyarrow.Schema or a daft.Schema, not {type(schema).__name__}")


def table_storage_options(
    uri: str, storage_options: Optional[Dict[str, str]], io_config: Any
) -> Optional[Dict[str, str]]:
    """The table's storage options as write_lance layers them for a plain URI: ``storage_options`` when given
    (even empty), else those Daft derives from ``io_config`` for the URI's scheme."""
    if storage_options is not None:
        return dict(storage_options)
    if io_config is None:
        return None
    from daft.io.object_store_options import io_config_to_storage_options

    return io_config_to_storage_options(io_config, uri)


def writer_settings(
    max_rows_per_file: int,
    max_rows_per_group: int,
    max_bytes_per_file: int,
    data_storage_version: Optional[str],
    enable_stable_row_ids: bool,
) -> Dict[str, Any]:
    """The writer settings, checked (positive sizes); plain data, pickled with the sink."""
    sizes = {
        "max_rows_per_file": max_rows_per_file,
        "max_rows_per_group": max_rows_per_group,
        "max_bytes_per_file": max_bytes_per_file,
    }
    for name, value in sizes.items():
        if int(value) < 1:
            raise _invalid(f"{name} must be positive, not {value}")
    settings: Dict[str, Any] = {name: int(value) for name, value in sizes.items()}
    settings["data_storage_version"] = None if data_storage_version is None else str(data_storage_version)
    settings["enable_stable_row_ids"] = bool(enable_stable_row_ids)
    return settings


def open_table(uri: str, storage_options: Optional[Dict[str, str]]) -> Any:
    """The Lance dataset at ``uri``, or ``None`` when there is none."""
    import lance

    try:
        return lance.dataset(uri, storage_options=storage_options)
    except (ValueError, OSError):
        return None


def ensure_table(
    uri: str,
    schema: Optional[pa.Schema],
    *,
    job: str,
    mode: str,
    storage_options: Optional[Dict[str, str]],
    settings: Dict[str, Any],
) -> Any:
    """The table at ``uri``: opened, or created empty with ``schema`` (and the job's name on the create) when it is
    missing and ``schema`` is known; ``None`` when it is missing and ``schema`` is not. With ``mode="create"`` an
    existing table must be this job's own (:func:`check_created_by`); either way its storage version must be the
    one asked for. Safe in every process of a job: when two create it at once, one wins and the others open it."""
    dataset = open_table(uri, storage_options)
    if dataset is None:
        if schema is None:
            return None
        dataset = _create(uri, schema, job=job, storage_options=storage_options, settings=settings)
    if mode == "create":
        check_created_by(dataset, job, uri)
    _check_settings(dataset, settings, uri)
    return dataset


def _create(
    uri: str, schema: pa.Schema, *, job: str, storage_options: Optional[Dict[str, str]], settings: Dict[str, Any]
) -> Any:
    options = {k: settings[k] for k in ("data_storage_version", "enable_stable_row_ids") if settings.get(k)}
    return _lance().create_dataset(
        uri,
        schema,
        storage_options=storage_options,
        transaction_properties={CREATED_BY_PROPERTY: job},
        **options,
    )


def created_by(dataset: Any) -> Optional[str]:
    """The job whose create made ``dataset`` (its version 1's transaction property), or ``None`` when another
    writer created it or version 1 is gone."""
    try:
        transaction = dataset.read_transaction(1)
    except (ValueError, OSError):
        return None
    properties = getattr(transaction, "transaction_properties", None) or {}
    return properties.get(CREATED_BY_PROPERTY)


def check_created_by(dataset: Any, job: str, uri: str) -> None:
    """Raises ``InvalidInputError`` unless the table is this job's own: its version 1 names the job, or (version 1
    cleaned up) the manifest carries the job's mark (a commit of the job landed)."""
    first = min(int(v["version"]) for v in dataset.versions())
    creator = created_by(dataset) if first == 1 else None
    if creator == job or (first != 1 and f"{_MARK_PREFIX}{job}" in (dataset.metadata or {})):
        return
    whose = f"job {creator!r}" if creator is not None else "another writer"
    raise _invalid(
        f"mode='create': the Lance table {uri} exists and was created by {whose}, not by job {job!r}; write to a "
        "new URI, or use mode='append' to add to the existing table"
    )


def _check_settings(dataset: Any, settings: Dict[str, Any], uri: str) -> None:
    """Raises ``InvalidInputError`` when the table's storage version or row ids differ from those asked for:
    both are set when a table is created, for all of it."""
    wanted = settings.get("data_storage_version")
    wanted = {"legacy": "0.1"}.get(wanted, wanted)
    if wanted is not None and wanted not in ("stable", "next") and str(dataset.data_storage_version) != wanted:
        raise _invalid(
            f"data_storage_version={wanted!r} does not match the table {uri}, which holds version "
            f"{dataset.data_storage_version}: a table has one storage version (leave data_storage_version unset "
            "to write the table's)"
        )
    if settings.get("enable_stable_row_ids") and not dataset.has_stable_row_ids:
        raise _invalid(
            f"enable_stable_row_ids=True, but the table {uri} was created without stable row ids: they are set "
            "when a table is created (leave enable_stable_row_ids unset to write this one)"
        )


def fragment_options(dataset: Any, settings: Dict[str, Any]) -> Dict[str, Any]:
    """The keyword arguments for ``write_fragments`` into ``dataset``: the size settings, and the table's own
    storage version and row ids (so that every fragment fits the table)."""
    options = {k: settings[k] for k in WRITER_DEFAULTS}
    options["data_storage_version"] = str(dataset.data_storage_version)
    options["enable_stable_row_ids"] = bool(dataset.has_stable_row_ids)
    return options
