"""What the sink, the job runner and the reader share: the compiled core and the Lance helpers (imported on first
use), the logger, the result schema, and small helpers over write results."""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from typing import Any, Callable, Iterable, List

import pyarrow as pa

#: The logger of the whole ``sinkpoint.daft`` package (its modules log under this one name).
logger = logging.getLogger("sinkpoint.daft")

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

#: Attempts of a stage or seal call that raised ``TransientIOError`` (they are idempotent in one handle).
_IO_ATTEMPTS = 3


def _sp() -> Any:
    """The compiled core, imported on first use (so the sink pickles as its configuration alone)."""
    from sinkpoint import _sinkpoint

    return _sinkpoint


def _lance() -> Any:
    """``sinkpoint.lance`` (needs pylance), imported on first use."""
    from sinkpoint import lance as sp_lance

    return sp_lance


def _worker_name(role: str) -> str:
    return f"{role}@{socket.gethostname()}:{os.getpid()}"


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
    """``call`` again after a ``TransientIOError`` (stage and seal are idempotent in one handle), up to
    ``_IO_ATTEMPTS``."""
    sp = _sp()
    for attempt in range(_IO_ATTEMPTS):
        try:
            return call()
        except sp.TransientIOError:
            if attempt + 1 == _IO_ATTEMPTS:
                raise
            time.sleep(0.2 * 2**attempt)
