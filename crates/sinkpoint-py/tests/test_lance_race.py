"""Two sinkpoint jobs and a plain pylance appender commit into one Lance dataset at the same moment: every commit
that answered ok is in the table exactly once, and nothing is there twice.

Each trial makes a fresh local dataset and two jobs (each its own store file, job id and shared staging, with one
sealed checkpoint whose fragment a worker wrote with ``write_fragment``), then releases three threads through a
barrier: each job's ``Driver.finish`` and one ``lance.write_dataset(..., mode="append")``. The table is read back
with pylance. ``SINKPOINT_CASES`` sets the number of trials (25 by default); one run of 1000:

    SINKPOINT_CASES=1000 bash crates/sinkpoint-py/ci-python.sh -k racing -s
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

lance = pytest.importorskip("lance")
pa = pytest.importorskip("pyarrow")
try:
    import sinkpoint._sinkpoint  # noqa: F401
except ImportError:
    pytest.skip("sinkpoint._sinkpoint is not built (maturin develop)", allow_module_level=True)

from sinkpoint import Driver, SharedStaging, checkpoint_id_for_key
from sinkpoint.lance import LanceTarget, create_dataset, write_fragment

SCHEMA = pa.schema([("x", pa.int64())])
CASES = int(os.environ.get("SINKPOINT_CASES", "25"))

#: The rows of each writer: disjoint, so the table read back says whose rows are there and how often.
ROWS = {"job-a": [1, 2, 3], "job-b": [4, 5, 6], "appender": [7, 8]}


def _table(values):
    return pa.table({"x": pa.array(values, pa.int64())})


def _job(tmp: Path, uri: str, job: str) -> Driver:
    """A driver of ``job`` whose store holds one sealed checkpoint of ``ROWS[job]`` (adopted, not committed)."""
    staging = SharedStaging(f"file://{tmp}/staging-{job}", job)
    fragments = write_fragment(uri, _table(ROWS[job]), schema=SCHEMA)
    key = f"in-{job}"
    staging.worker("w").stage_and_seal(checkpoint_id_for_key(key), [key], fragments)
    driver = Driver(str(tmp / f"{job}.redb"), job, LanceTarget(uri), staging=staging)
    assert driver.recover().blocked is None
    assert len(driver.adopt().adopted) == 1
    return driver


def _trial(tmp: Path) -> tuple[list[str], list[int], list[str], dict]:
    """One trial: the writers that answered ok and whose rows are not in the table exactly once, the rows found
    more than once, the writers that did not answer ok, and every answer."""
    uri = str(tmp / "t.lance")
    create_dataset(uri, SCHEMA)
    drivers = {job: _job(tmp, uri, job) for job in ("job-a", "job-b")}
    barrier = threading.Barrier(3)
    answers: dict[str, object] = {}

    def finish(job: str) -> None:
        barrier.wait()
        try:
            answers[job] = drivers[job].finish()
        except Exception as e:  # an answer that is not ok; its rows may be missing, never doubled
            answers[job] = e

    def append() -> None:
        barrier.wait()
        try:
            lance.write_dataset(_table(ROWS["appender"]), uri, mode="append")
            answers["appender"] = "ok"
        except Exception as e:
            answers["appender"] = e

    threads = [threading.Thread(target=finish, args=(job,)) for job in drivers]
    threads.append(threading.Thread(target=append))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ok = {w for w, a in answers.items() if not isinstance(a, Exception)}
    for job, driver in drivers.items():
        if job in ok:
            assert driver.is_finished()
        driver.close()

    counts = Counter(lance.dataset(uri).to_table().column("x").to_pylist())
    lost = [w for w in sorted(ok) if any(counts[v] != 1 for v in ROWS[w])]
    doubled = sorted(v for v, c in counts.items() if c > 1)
    return lost, doubled, sorted(set(answers) - ok), answers


def test_racing_jobs_and_an_appender_each_land_exactly_once(tmp_path):
    started = time.monotonic()
    failures = []
    lost_by = Counter()
    not_ok = Counter()
    for trial in range(CASES):
        tmp = tmp_path / f"trial-{trial}"
        tmp.mkdir()
        lost, doubled, refused, answers = _trial(tmp)
        lost_by.update(lost)
        not_ok.update(refused)
        if lost or doubled:
            failures.append((trial, f"answers {answers}; lost: {lost}; doubled rows: {doubled}"))
    elapsed = time.monotonic() - started
    print(
        f"{CASES} racing trials in {elapsed:.1f}s: {len(failures)} lost or doubled a commit "
        f"(lost, by writer: {dict(lost_by)}); answers not ok (rows absent, allowed): {dict(not_ok)}"
    )
    assert not failures, f"{len(failures)} of {CASES} trials lost or doubled a commit; first: {failures[0]}"
