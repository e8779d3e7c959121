"""Object-store requests per input of a LanceSink job, on a real S3 API (moto).

examples/daft_lance_job.py runs with the shared staging and the committer's mirror on S3 (s3://BUCKET/PREFIX/...;
the parquet inputs and the Lance table stay on local disk), 50 inputs, native runner. Its requests go through the
example's counting proxy, one listener per role (the workers' staging, the driver's staging, the mirror), and the
totals are checked against moto's own request log (one line per request) when the log is found.

Where each request of a fresh run goes (n inputs; measured at n = 50: 120 requests, 2.40 per input; 167 and 3.34
before ``stage_and_seal`` stopped putting an inbox entry):

- workers: 1 per input: the seal's conditional create (``stage_and_seal``: the seal holds the part, no inbox
  entry). No claim read: run() pruned just before the read (``check_processed_in_worker`` would add 1 per input).
- driver, staging: 1 per input (adopt reads each new claim once) and 3 listings: before pruning, the claims (1
  request per 1,000) and the inbox (empty); in finalize, the inbox alone (finalize reads only the claims of the
  run's inputs, never listing the job's). No deletes: the inbox stays empty.
- mirror: the open of the store under a new epoch (3 listings, 1 read, 2 creates), 1 put per WAL group of the
  adoptions (the core adopts up to 16 seals at once, folded into groups: ~7 for 50), 1 listing of manifests by
  the mirror's upkeep, and 2 puts for the commit (its intent, its mark).

So the requests that grow with n are 2 per input plus the adoption groups (about 0.1 per input); the rest is per run
(2.20 per input at n = 200). A rerun of the finished job opens the store (reading the mirror's WAL
since its last snapshot) and stops: 17 requests at n = 50, none by workers or on the staging.

Needs SINKPOINT_S3_ENDPOINT (``source .ci/moto.sh && moto_start``). Without it the test is skipped with a warning,
or fails when CI=true.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
import warnings
from collections import Counter
from pathlib import Path

import pytest

from _support import EXAMPLE, require_daft_and_the_binding

require_daft_and_the_binding()
ENDPOINT = os.environ.get("SINKPOINT_S3_ENDPOINT")
INPUTS, ROWS = 50, 200
#: The honest bound at 50 inputs (measured 2.40): 2 per input plus the per-run requests listed above. Daft 0.7.26's
#: own checkpointed write makes 3 per input.
FRESH_PER_INPUT_MAX = 2.5
#: A rerun of a finished job: the store's open only (measured 0.34 per input at 50).
RERUN_PER_INPUT_MAX = 0.6
#: The mirror's requests of a fresh run (its open, the adoptions' WAL groups, its upkeep, the commit).
MIRROR_FRESH_MAX = 25
LOG_LINE = re.compile(r'"(?:\x1b\[[0-9;]*m)*([A-Z]+) (\S+) HTTP/[0-9.]+')


@pytest.fixture
def endpoint():
    if not ENDPOINT:
        message = (
            "SINKPOINT_S3_ENDPOINT is unset: the object-store request counts of LanceSink were NOT measured. "
            "Start moto (source .ci/moto.sh && moto_start) and rerun."
        )
        if os.environ.get("CI") == "true":
            pytest.fail(message + " (CI=true: a missing S3 endpoint is a failure)")
        warnings.warn(message, stacklevel=2)
        print(f"\n*** {message}", file=sys.stderr)
        pytest.skip(message)
    return ENDPOINT.rstrip("/")


def _create_bucket(endpoint: str, bucket: str) -> None:
    """moto takes an unsigned path-style PUT /bucket (as .ci/moto.sh's moto_create_bucket)."""
    req = urllib.request.Request(f"{endpoint}/{bucket}", method="PUT", data=b"")
    try:
        urllib.request.urlopen(req, timeout=10).read()
    except urllib.error.HTTPError as e:
        if e.code != 409:
            raise


def _moto_log(endpoint: str):
    """moto's request log (.ci/moto.sh writes it to $SINKPOINT_CACHE/moto-server-PORT.log), or None."""
    candidates = [os.environ.get("MOTO_LOG")]
    port = endpoint.rsplit(":", 1)[-1]
    cache = os.environ.get("SINKPOINT_CACHE") or os.path.expanduser("~/.cache/sinkpoint")
    candidates.append(os.path.join(cache, f"moto-server-{port}.log"))
    for path in candidates:
        if path and os.path.exists(path):
            return path
    return None


def _logged(log: str, offset: int, bucket: str) -> Counter:
    """The requests moto logged after ``offset`` for ``bucket``, by kind (LIST: a GET with list-type)."""
    counts: Counter = Counter()
    with open(log, "rb") as f:
        f.seek(offset)
        for raw in f.read().decode(errors="replace").splitlines():
            m = LOG_LINE.search(raw)
            if not m:
                continue
            method, target = m.groups()
            if not (target == f"/{bucket}" or target.startswith((f"/{bucket}/", f"/{bucket}?"))):
                continue
            counts["LIST" if method == "GET" and "list-type" in target else method] += 1
    return counts


def _run(tmp: Path, endpoint: str, bucket: str, prefix: str, log, *extra: str):
    offset = os.path.getsize(log) if log else 0
    cmd = [
        sys.executable,
        str(EXAMPLE),
        "--dir",
        str(tmp),
        "--inputs",
        str(INPUTS),
        "--rows",
        str(ROWS),
        "--mirror",
        "--s3-endpoint",
        endpoint,
        "--s3-bucket",
        bucket,
        "--s3-prefix",
        prefix,
        *extra,
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    lines = p.stdout.splitlines()
    assert lines[-1] == f"table: {INPUTS * ROWS} rows, 0 duplicates, 0 missing", p.stdout[-2000:]
    summary = next(line for line in lines if line.startswith("requests: "))
    counts = json.loads(next(line for line in lines if line.startswith("requests-json: "))[len("requests-json: ") :])
    print(f"\n{summary}")
    proxied: Counter = Counter()
    for role in ("worker", "driver", "mirror"):
        proxied.update(counts[role])
    if log:
        # moto writes a request's line once it answered: give the last ones a moment.
        deadline = time.monotonic() + 5
        while (logged := _logged(log, offset, bucket)) != proxied and time.monotonic() < deadline:
            time.sleep(0.1)
        assert logged == proxied, f"moto logged {dict(logged)}, the proxy counted {dict(proxied)}"
        print(f"moto's log agrees: {sum(logged.values())} requests {dict(sorted(logged.items()))}")
    else:
        print("moto's log not found (MOTO_LOG or $SINKPOINT_CACHE/moto-server-PORT.log): proxy counts only")
    return counts, p.stdout


def test_requests_per_input_on_s3(tmp_path, endpoint):
    bucket = f"sp-requests-{uuid.uuid4().hex[:12]}"
    _create_bucket(endpoint, bucket)
    log = _moto_log(endpoint)
    n = INPUTS

    fresh, out = _run(tmp_path, endpoint, bucket, "job", log)
    assert "finished True" in out, out[-2000:]
    worker, driver, mirror = fresh["worker"], fresh["driver"], fresh["mirror"]
    # Workers: the seal's create per input, nothing else (no inbox entry: stage_and_seal's seal holds the part;
    # no claim read after run()'s pruning).
    assert worker == {"PUT": n}, fresh
    # Driver: 1 claim read per input (adopt), 3 listings (the claims and the inbox before pruning, the inbox alone in
    # finalize, which reads only the run's claims); the inbox is empty, so nothing to delete. No write.
    assert driver.get("GET") == n and driver.get("LIST") == 3, fresh
    assert set(driver) <= {"GET", "LIST"}, fresh
    assert sum(mirror.values()) <= MIRROR_FRESH_MAX, fresh
    per_input = fresh["total"] / n
    assert per_input <= FRESH_PER_INPUT_MAX, f"{per_input:.2f} requests per input: {fresh}"

    rerun, out = _run(tmp_path, endpoint, bucket, "job", log)
    assert "already finished: nothing to do" in out, out[-2000:]
    assert rerun["worker"] == {} and rerun["driver"] == {}, rerun
    assert rerun["total"] / n <= RERUN_PER_INPUT_MAX, rerun


def test_requests_of_tasks_sealing_ten_inputs_a_checkpoint_on_s3(tmp_path, endpoint):
    bucket = f"sp-requests-{uuid.uuid4().hex[:12]}"
    _create_bucket(endpoint, bucket)
    log = _moto_log(endpoint)
    n, per = INPUTS, 10
    fresh, out = _run(tmp_path, endpoint, bucket, "job", log, "--inputs-per-checkpoint", str(per))
    assert "finished True" in out, out[-2000:]
    # One create per task of ten inputs by the workers, one claim read per checkpoint by the driver, the same three
    # listings.
    assert fresh["worker"] == {"PUT": n // per}, fresh
    assert fresh["driver"].get("GET") == n // per and fresh["driver"].get("LIST") == 3, fresh
    assert set(fresh["driver"]) <= {"GET", "LIST"}, fresh
    print(f"{fresh['total'] / n:.2f} requests per input with {per} inputs a checkpoint")
