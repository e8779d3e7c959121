"""What the Daft sink's test files share: the guard for their dependencies and the example job they run."""

from pathlib import Path

import pytest

#: The example job the process-level tests run (``examples/daft_lance_job.py``).
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "daft_lance_job.py"


def require_daft_and_the_binding() -> None:
    """Skips the calling test module unless Daft, pylance and the compiled binding are importable."""
    pytest.importorskip("daft")
    pytest.importorskip("lance")
    try:
        import sinkpoint._sinkpoint  # noqa: F401
    except ImportError:
        pytest.skip("sinkpoint._sinkpoint is not built (maturin develop)", allow_module_level=True)


def set_native_runner() -> None:
    """Daft's native runner for this process (the runner can be set once per process: a second call is a no-op)."""
    import daft

    try:
        daft.set_runner_native()
    except Exception:  # already set in this process
        pass


def make_job_inputs(directory: str, count: int = 5, rows: int = 200, row_groups: int = 2) -> list:
    """``count`` parquet files of ``rows`` rows (``id`` int64 from ``i * rows``, ``input`` int32, ``value`` float64,
    ``text`` string), ``row_groups`` row groups each (so each reaches a sink in several pieces)."""
    import os

    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(directory, exist_ok=True)
    paths = []
    for i in range(count):
        first = i * rows
        ids = range(first, first + rows)
        table = pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "input": pa.array([i] * rows, pa.int32()),
                "value": pa.array([(j * 2654435761 % 1000003) / 1000.0 for j in ids], pa.float64()),
                "text": pa.array([f"row {j} of input {i}" for j in ids], pa.string()),
            }
        )
        path = os.path.join(directory, f"part-{i:05d}.parquet")
        pq.write_table(table, path, row_group_size=max(1, rows // row_groups))
        paths.append(path)
    return paths


def lance_snapshot(uri: str) -> dict:
    """What a comparison of two Lance tables looks at: the schema, the rows as a sorted multiset, the number of
    rows, versions and fragments, and each version's operation (oldest first)."""
    import lance

    dataset = lance.dataset(uri)
    table = dataset.to_table()
    transactions = dataset.get_transactions(len(dataset.versions()))
    return {
        "schema": dataset.schema,
        "rows": sorted(tuple(row.values()) for row in table.to_pylist()),
        "num_rows": table.num_rows,
        "versions": len(dataset.versions()),
        "fragments": len(dataset.get_fragments()),
        "operations": [type(t.operation).__name__ if t is not None else None for t in reversed(transactions)],
    }
