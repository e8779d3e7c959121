""":class:`DeltaSink`: the Delta Lake table side of the shared sink (``_sink._InputSink``), for
``df.write_deltalake`` users. Everything but the table (the inputs, their positions, the seals, the runner) is
:class:`LanceSink`'s."""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Optional

import pyarrow as pa

from . import _delta_table, _table
from ._common import _sp
from ._sink import _InputSink, _options_arg, _Run


class DeltaSink(_InputSink):
    """A Daft DataSink that writes whole input files to the local Delta Lake table ``table`` exactly once per
    ``job``: each input is one checkpoint, its rows written by the worker as Parquet data files in the table's
    directory and sealed in shared staging with their ``Add`` actions; ``finalize`` adopts the seals and commits
    them through ``sinkpoint.DeltaTarget``, each key one append carrying the job's ``txn`` (so no key lands twice,
    whatever retries or races).

    It takes ``df.write_deltalake``'s arguments (``table``, ``partition_cols``, ``mode``, ``io_config``, ``name``,
    ``description``, ``configuration``), a ``schema`` and ``storage_options`` as :class:`LanceSink` takes them,
    then sinkpoint's own, the same as :class:`LanceSink`'s (``job``, ``staging_url``, ``store_path``,
    ``mirror_url``, ``input_column``, ``row_counts``, ``flush_bytes``, ``check_processed_in_worker``, ...). The
    modes:

    ==============================  ============  ====================================================================
    mode / option                   exactly-once  why
    ==============================  ============  ====================================================================
    ``"append"`` (default)          yes           each input is one checkpoint, committed once under a fenced key
                                                  (the job's Delta txn); a rerun adds only what is missing. A missing
                                                  table is created (as write_deltalake does).
    ``"error"``                     yes           the job creates the table empty (its first commit names the job),
                                                  then appends each input once; a rerun accepts the table only when
                                                  this job created it, any other existing table is refused. The
                                                  table has one version more than commits.
    ``"overwrite"``                 no: refused   one commit replaces the table, but inputs commit as they are
                                                  sealed: a rerun would remove rows committed before, or leave part
                                                  of the new data.
    ``"ignore"``                    no: refused   it writes nothing when the table exists, and the table a crashed
                                                  run created exists on the rerun.
    ``schema_mode=...``             no: refused   a schema change is one commit for the whole write.
    ``custom_metadata=...``         no: refused   each commit's commitInfo carries sinkpoint's record.
    ``dynamo_table_name``,          no: refused   the fence is a put-if-absent of the next log version.
    ``allow_unsafe_rename``
    ``checkpoint=...``              no: refused   Daft's own checkpointing (``IdempotentCommit``), beside sinkpoint's.
    ==============================  ============  ====================================================================

    A refused mode raises ``sinkpoint.InvalidInputError`` at construction, saying what to do instead.

    - ``table``: a local path, ``file://`` URL or ``deltalake.DeltaTable`` (the wheel's delta-rs reaches local
      storage only; any other URL is refused).
    - ``partition_cols``: the table's partition columns when the sink creates it; an existing table must have
      these (leave it out to write the table's). Integers, strings, booleans and dates; each input writes one file
      per partition value it holds, under ``<col>=<value>/``.
    - ``name``, ``description``, ``configuration``: the table's metadata when the sink creates it.
    - ``schema``: the table's schema when the sink creates it; else the schema of the rows. Rows are cast to the
      table's schema by column name.
    - Data files carry stats: ``numRecords``, and ``nullCount``, ``minValues``, ``maxValues`` of the integer,
      string and date columns.

    >>> from sinkpoint.daft import DeltaSink
    >>> DeltaSink("/tmp/t", "job-1", "file:///tmp/staging", "/tmp/job.redb", mode="error")
    DeltaSink('/tmp/t', job='job-1', mode='error')
    >>> DeltaSink("/tmp/t", "job-1", "file:///tmp/staging", "/tmp/job.redb", mode="overwrite")
    Traceback (most recent call last):
    sinkpoint.InvalidInputError: DeltaSink cannot write mode='overwrite' exactly once: ...
    """

    def __init__(
        self,
        table: Any,
        job: str,
        staging_url: str,
        store_path: str,
        *,
        partition_cols: Optional[List[str]] = None,
        mode: str = "append",
        schema_mode: Optional[str] = None,
        name: Optional[str] = None,
        description: Optional[str] = None,
        configuration: Optional[Mapping[str, Optional[str]]] = None,
        custom_metadata: Optional[Dict[str, str]] = None,
        dynamo_table_name: Optional[str] = None,
        allow_unsafe_rename: bool = False,
        io_config: Any = None,
        checkpoint: Any = None,
        schema: Any = None,
        storage_options: Optional[Dict[str, str]] = None,
        **options: Any,
    ) -> None:
        _delta_table.check_mode(
            mode,
            schema_mode=schema_mode,
            custom_metadata=custom_metadata,
            dynamo_table_name=dynamo_table_name,
            allow_unsafe_rename=allow_unsafe_rename,
            checkpoint=checkpoint,
        )
        self.uri, carried = _delta_table.table_arg(table)
        self.mode = mode
        self.io_config = io_config
        given = _options_arg(storage_options, "storage_options")
        #: The table's storage options, resolved: ``storage_options``, else those a ``DeltaTable`` carries, else
        #: derived from ``io_config``.
        self.storage_options = _table.table_storage_options(
            self.uri, given if given is not None else carried, io_config
        )
        self.schema_hint = _table.arrow_schema(schema)
        if partition_cols is not None and (
            isinstance(partition_cols, str) or not all(isinstance(c, str) for c in partition_cols)
        ):
            raise TypeError(f"partition_cols must be a list of column names, not {partition_cols!r}")
        self.partition_cols = None if partition_cols is None else list(partition_cols)
        #: The table's metadata when the sink creates it (plain data, pickled with the sink).
        self.create_options = {
            "name": name,
            "description": description,
            "configuration": None if configuration is None else dict(configuration),
        }
        self._init_job(job, staging_url, store_path, io_config=io_config, **options)

    # -- the Delta table (the hooks of _InputSink) ---------------------------------------------------------------

    def _target(self) -> Any:
        return _sp().DeltaTarget(self.uri, storage_options=self.storage_options)

    def _open_table(self, schema: Optional[pa.Schema]) -> Any:
        return _delta_table.ensure_table(
            self.uri,
            schema,
            job=self.job,
            mode=self.mode,
            partition_cols=self.partition_cols,
            storage_options=self.storage_options,
            create_options=self.create_options,
        )

    def _table_layout(self, schema: pa.Schema) -> tuple:
        table = self._open_table(schema)
        return _delta_table.arrow_schema_of(table), {"partition_cols": list(table.metadata().partition_columns)}

    def _write_files(self, run: _Run, table: pa.Table) -> List[Any]:
        return _delta_table.write_files(self.uri, table, run.write_options["partition_cols"])

    def _files_of(self, results: Iterable[Any]) -> List[str]:
        return _delta_table.files_of(self.uri, results)

    def _data_files(self) -> Any:
        return _delta_table.DeltaFiles(self.uri)

    def _orphan_files(self) -> Any:
        # The Rust adapter's collector (DeltaDataFiles): it knows every file the table references.
        return self._target()
