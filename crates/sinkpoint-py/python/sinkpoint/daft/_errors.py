"""The error a Daft job raises when some inputs were not written exactly once."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional


class IncompleteInputsError(RuntimeError):
    """Some inputs were not written exactly once; everything complete was committed, and the job is not finished.

    - ``incomplete`` maps an input to ``(rows seen, rows it has)`` (never sealed: nothing of it is in the table).
    - ``rejected`` maps an input to why some of its rows were refused (a row position that arrived twice, beyond
      the file's rows, or after the input was sealed: the input was read twice or its rows multiplied on the way).
      An input refused before its seal is never sealed; one sealed before (each row once) is committed, and the
      copies after are not.
    - ``missing`` lists inputs of :meth:`LanceSink.run` that no task wrote, or that a finished job does not hold.
    - ``refused`` lists the (id, reason) pairs the committer refused at adoption.
    - ``report`` is the sink's report of the run.

    ``sinkpoint.daft.IncompleteInputs`` is the same class under its 0.1 name (deprecated).

    >>> from sinkpoint.daft import IncompleteInputsError
    >>> err = IncompleteInputsError("job j cannot finish", missing=["s3://in/0002.parquet"])
    >>> err.missing, err.incomplete
    (['s3://in/0002.parquet'], {})
    """

    def __init__(
        self,
        message: str,
        *,
        incomplete: Optional[Mapping[str, tuple]] = None,
        missing: Optional[List[str]] = None,
        refused: Optional[List[tuple]] = None,
        rejected: Optional[Mapping[str, str]] = None,
        report: Optional[Mapping[str, Any]] = None,
    ) -> None:
        super().__init__(message)
        self.incomplete: Dict[str, tuple] = dict(incomplete or {})
        self.rejected: Dict[str, str] = dict(rejected or {})
        self.missing: List[str] = list(missing or [])
        self.refused: List[tuple] = list(refused or [])
        self.report: Dict[str, Any] = dict(report or {})


# Printed and pickled as the name users import.
IncompleteInputsError.__module__ = "sinkpoint.daft"


def _incomplete_message(
    job: str,
    incomplete: Mapping[str, tuple],
    rejected: Mapping[str, str],
    missing: List[str],
    refused: List[tuple],
) -> str:
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
