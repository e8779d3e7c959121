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
