#!/usr/bin/env python3
"""A Daft job that copies parquet inputs into a Lance table exactly once, through sinkpoint's LanceSink.

    python examples/daft_lance_job.py --dir DIR [--inputs 50 --rows 1000] [--runner native|ray] [--crash-at POINT]

It makes ``--inputs`` parquet files of ``--rows`` rows each in DIR/inputs (ids unique across all inputs, so
duplicates and missing rows can be counted; each file has ``--row-groups`` row groups, so Daft hands every input
to the sink in several pieces), writes them through ``sinkpoint.daft.LanceSink`` into DIR/table.lance, and prints
as its last line, read back with pylance::

    table: N rows, D duplicates, M missing

Run it again after any crash (kill -9 of the whole process group, ``--crash-at``) and it finishes the job with
0 duplicates and 0 missing; run it once more and it does nothing (the job finished).

State: the workers' shared staging is file://DIR/staging, the committer's store DIR/state/committer.redb
(``--store`` to put it elsewhere), mirrored to file://DIR/mirror with ``--mirror``.

``--s3-endpoint URL`` puts the shared staging and the mirror on an S3 API instead (s3://BUCKET/PREFIX/staging and
s3://BUCKET/PREFIX/mirror; ``--s3-bucket``, which must exist, ``--s3-prefix``, default one per DIR; credentials
from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_REGION, else moto's "test"), while the inputs and the table stay in
DIR. The job's object-store requests then go through a counting proxy in this process (one listener per role:
the workers' staging, the driver's staging, the mirror), and the job prints them, per input, on a line starting with
``requests:`` (and as JSON on ``requests-json:``). E.g. with moto (``.ci/moto.sh``)::

    source .ci/moto.sh && moto_start && moto_create_bucket sinkpoint-daft-example
    python examples/daft_lance_job.py --dir /tmp/j --mirror --s3-endpoint "$SINKPOINT_S3_ENDPOINT"

``--check-in-worker`` makes the workers read each input's claim before writing it (LanceSink's
``check_processed_in_worker=True``; off by default after run()'s pruning: 1 request per input).

``--crash-at`` stops the process with exit code 137 (as kill -9 would) at the K-th visit of a named point, counted
across every process and run in DIR (so it fires once; delete DIR/crash-*.count to arm it again):

- ``written:K``: in a worker, once the K-th input it completed has its fragments written, before its seal;
- ``sealed:K``: in a worker, right after its K-th seal;
- ``finalize``: on the driver, when every write is done, before anything is adopted;
- ``adopted``: on the driver, after adopting, before committing;
- ``commit:after-begin-commit``, ``commit:after-target-commit-before-mark``, ``commit:after-mark-unknown``: the
  committer's own crash points (the Rust core's; exit code 86): the intent is durable but Lance was not called,
  or the Lance commit landed but the store does not know yet.

With ``--runner ray`` a worker's crash kills only its Ray actor: Daft re-runs its task on a new one, and the job
goes on (the re-run skips what the dead worker sealed).

``--maintenance`` maintains the table as an operator might, with pylance and without sinkpoint (so without the
store's retention watermark): ``cleanup_old_versions(older_than=timedelta(0))`` (never ``delete_unverified``), then
``optimize.compact_files()``. At the start of the run (before its recovery: as a scheduled maintenance finds a job
that crashed), on the driver once every write is done and before anything is committed (the workers' fragments
are staged then, referenced by no version), and after the run, before the read-back. Lines start with
``maintenance:``. Cleanup comes before compaction: the latest version, where a key that crashed between its Lance
commit and its mark landed, outlives one cleanup, and the run's recovery reads its transaction before the next.
Compaction then cleanup would expire it, and the key would wait for an operator's verdict (``Driver.resolve``): to
maintain a table with a key in flight, ``sinkpoint.LanceTarget.cleanup_old_versions`` with
``Driver.retention_watermark()`` keeps what its probe reads.

``--plain`` writes the same inputs WITHOUT sinkpoint (a plain Lance append: one fragment per micropartition, one
commit in finalize) into DIR/plain.lance; ``--compare`` runs both in one process (plain first, after a warm-up) and
prints the difference per input. The plain write makes one fragment per micropartition (``--row-groups`` per
input) where LanceSink makes one per input, so compare with ``--row-groups 1`` for the same Lance work; the line
"per sealed input, in the workers" times the checkpoint calls themselves in any case. Timings are printed on lines
starting with ``timing:``.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import http.client
import json
import os
import shutil
import sys
import threading
import time
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, Iterator, List, Optional, Tuple
from urllib.parse import urlsplit

import daft
import pyarrow as pa
import pyarrow.parquet as pq
from daft.io.sink import DataSink, WriteResult

from sinkpoint.daft import LanceSink

JOB_DEFAULT = "daft-lance-job"


# ----------------------------------------------------------------------------------------------------------
# Inputs


def make_inputs(directory: str, count: int, rows: int, row_groups: int) -> List[str]:
    """``count`` parquet files of ``rows`` rows (ids ``i * rows ..``), each written atomically; existing files of
    the right size are kept, so a rerun after a crash reads the same inputs."""
    os.makedirs(directory, exist_ok=True)
    paths = []
    group = max(1, -(-rows // max(1, row_groups)))
    for i in range(count):
        path = os.path.join(directory, f"part-{i:05d}.parquet")
        paths.append(path)
        if os.path.exists(path):
            try:
                if pq.read_metadata(path).num_rows == rows:
                    continue
            except (OSError, pa.ArrowInvalid):
                pass
        first = i * rows
        table = pa.table(
            {
                "id": pa.array(range(first, first + rows), pa.int64()),
                "input": pa.array([i] * rows, pa.int32()),
                "value": pa.array([((first + j) * 2654435761 % 1000003) / 1000.0 for j in range(rows)], pa.float64()),
                "text": pa.array([f"row {first + j} of input {i}" for j in range(rows)], pa.string()),
            }
        )
        tmp = f"{path}.tmp-{os.getpid()}"
        pq.write_table(table, tmp, row_group_size=group)
        os.replace(tmp, path)
    return paths


def count_table(uri: str, count: int, rows: int) -> Tuple[int, int, int]:
    """(rows, duplicates, missing) of the table at ``uri`` against the ids ``0 .. count * rows``."""
    import lance
    import pyarrow.compute as pc

    try:
        ids = lance.dataset(uri).to_table(columns=["id"]).column("id")
    except (ValueError, OSError):
        return 0, 0, count * rows
    n = len(ids)
    unique = pc.unique(ids)
    expected = pc.and_(pc.greater_equal(unique, 0), pc.less(unique, count * rows))
    present = pc.sum(expected).as_py() or 0
    return n, n - len(unique), count * rows - present


# ----------------------------------------------------------------------------------------------------------
# Table maintenance


def maintain(uri: str, when: str) -> None:
    """Lance's cleanup of every version older than now (pylance's own: the store's retention watermark is not
    consulted; never ``delete_unverified``, which would delete the fragments staged for the next commit), then
    compaction of the small fragments. Nothing to do while the table does not exist."""
    import lance

    try:
        ds = lance.dataset(uri)
    except (ValueError, OSError):
        print(f"maintenance: {when}: no table yet", flush=True)
        return
    removed = ds.cleanup_old_versions(older_than=timedelta(0))
    compacted = ds.optimize.compact_files()
    print(f"maintenance: {when}: cleanup removed {removed.old_versions} versions; compaction "
          f"{compacted.fragments_removed} fragments into {compacted.fragments_added}; version "
          f"{lance.dataset(uri).version}", flush=True)


# ----------------------------------------------------------------------------------------------------------
# Crash points


def _die(point: str) -> None:
    print(f"crash-at {point}: exiting (pid {os.getpid()})", file=sys.stderr, flush=True)
    os._exit(137)


class JobSink(LanceSink):
    """LanceSink with the example's crash points and an optional delay per micropartition (so that a kill at a
    random moment lands inside the job). A crash point counts its visits across every process of the run in a file
    (``crash_dir``/crash-<point>.count: one byte appended per visit), so ``sealed:K`` is the job's K-th seal with Ray
    too, where each task holds its own copy of this sink."""

    def __init__(self, *args: Any, crash_at: Optional[str] = None, crash_dir: str = ".", delay_s: float = 0.0,
                 driver_staging_options: Optional[Dict[str, str]] = None, maintenance: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.crash_at = crash_at
        #: Maintain the table in ``finalize``, after every write, before the commits.
        self.maintenance = maintenance
        self.crash_dir = crash_dir
        self.delay_s = delay_s
        #: The driver's options for the shared staging, when they differ from the workers' (``staging_options``):
        #: the request counter gives each role its own endpoint.
        self.driver_staging_options = driver_staging_options

    def write(self, micropartitions: Iterator[Any]) -> Iterator[WriteResult]:
        for mp in micropartitions:
            if self.delay_s:
                time.sleep(self.delay_s)
            yield from super().write(iter([mp]))

    def finalize(self, write_results: List[WriteResult]) -> Any:
        self._at("finalize")
        if self.maintenance:
            maintain(self.uri, "writes done, nothing committed yet")
        return super().finalize(write_results)

    def _driver_options(self) -> Dict[str, Any]:
        # The committer's own crash points (the Rust core's; the process exits with code 86 there).
        if self.crash_at and self.crash_at.startswith("commit:"):
            return {"crash_at": self.crash_at[len("commit:"):]}
        return {}

    def _staging(self, role: str) -> Any:
        if role == "driver" and self.driver_staging_options is not None:
            from sinkpoint import SharedStaging

            return SharedStaging(
                self.staging_url,
                self.job,
                storage_options=self.driver_staging_options,
                key_exclusivity=self._key_exclusivity(),
            )
        return super()._staging(role)

    def _at(self, point: str, path: Optional[str] = None) -> None:
        if not self.crash_at:
            return
        name, _, k = self.crash_at.partition(":")
        if name != point:
            return
        counter = os.path.join(self.crash_dir, f"crash-{point}.count")
        fd = os.open(counter, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, b"x")
            visits = os.fstat(fd).st_size
        finally:
            os.close(fd)
        if visits == int(k or 1):
            _die(f"{point}:{visits} ({path})")


# ----------------------------------------------------------------------------------------------------------
# Counting the object-store requests


#: Headers a proxy must not forward (hop by hop), plus the ones it sets itself.
_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade",
        "content-length"}


def request_kind(method: str, target: str) -> str:
    """What an S3 request is, by its method and target: LIST (a GET with ``list-type``), GET, PUT, DELETE, POST
    (S3's bulk delete is a POST with ``?delete``), HEAD."""
    query = urlsplit(target).query
    if method == "GET" and "list-type" in query:
        return "LIST"
    return method


class _Listener(ThreadingHTTPServer):
    #: socketserver's listen backlog is 5: a burst of requests (Daft's checkpoint store commits 1,000 manifests at
    #: once) would find connections reset.
    request_queue_size = 1024


class RequestCounter:
    """A counting HTTP proxy in front of an S3 endpoint: one listener per role, each forwarding every request
    as it came (no retries, no caching) and counting it by :func:`request_kind`. Point a role's object store at
    :meth:`url`; :meth:`counts` says what each role sent."""

    ROLES = ("worker", "driver", "mirror")

    def __init__(self, endpoint: str) -> None:
        parts = urlsplit(endpoint)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"the request counter forwards plain http only, not {endpoint!r}")
        self.upstream = (parts.hostname, parts.port or 80)
        self.lock = threading.Lock()
        self._counts: Dict[str, collections.Counter] = {r: collections.Counter() for r in self.ROLES}
        self._servers: Dict[str, ThreadingHTTPServer] = {}
        for role in self.ROLES:
            server = _Listener(("127.0.0.1", 0), self._handler(role))
            server.daemon_threads = True
            self._servers[role] = server
            threading.Thread(target=server.serve_forever, name=f"requests-{role}", daemon=True).start()

    def url(self, role: str) -> str:
        return f"http://127.0.0.1:{self._servers[role].server_address[1]}"

    def counts(self) -> Dict[str, Dict[str, int]]:
        with self.lock:
            return {role: dict(c) for role, c in self._counts.items()}

    def close(self) -> None:
        for server in self._servers.values():
            server.shutdown()
            server.server_close()

    def _handler(self, role: str) -> type:
        counter = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _body(self) -> bytes:
                if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                    chunks = []
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            return b"".join(chunks)
                        chunks.append(self.rfile.read(size))
                        self.rfile.readline()
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else b""

            def _forward(self) -> None:
                body = self._body()
                with counter.lock:
                    counter._counts[role][request_kind(self.command, self.path)] += 1
                conn = http.client.HTTPConnection(*counter.upstream, timeout=120)
                try:
                    conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                    for name, value in self.headers.items():
                        if name.lower() not in _HOP:
                            conn.putheader(name, value)
                    if body or self.command in ("PUT", "POST"):
                        conn.putheader("Content-Length", str(len(body)))
                    conn.endheaders(body or None)
                    resp = conn.getresponse()
                    data = resp.read()
                    self.send_response_only(resp.status, resp.reason)
                    for name, value in resp.getheaders():
                        if name.lower() not in _HOP:
                            self.send_header(name, value)
                    if self.command == "HEAD":
                        if resp.getheader("Content-Length") is not None:
                            self.send_header("Content-Length", resp.getheader("Content-Length"))
                    elif resp.status >= 200 and resp.status not in (204, 304):
                        self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if self.command != "HEAD" and data:
                        self.wfile.write(data)
                except OSError as e:
                    self.send_error(502, f"upstream: {e}")
                finally:
                    conn.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        return Handler


def s3_options(endpoint: str) -> Dict[str, str]:
    """object_store's options for an S3 API at ``endpoint`` (credentials from the environment, else moto's)."""
    return {
        "aws_endpoint": endpoint,
        "aws_allow_http": "true",
        "aws_access_key_id": os.environ.get("AWS_ACCESS_KEY_ID", "test"),
        "aws_secret_access_key": os.environ.get("AWS_SECRET_ACCESS_KEY", "test"),
        "aws_region": os.environ.get("AWS_REGION", "us-east-1"),
    }


def requests_lines(counts: Dict[str, Dict[str, int]], inputs: int) -> List[str]:
    """The ``requests:`` line (per role and in all, per input) and the ``requests-json:`` line."""
    def part(role: str, c: Dict[str, int]) -> str:
        n = sum(c.values())
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(c.items()))
        return f"{role} {n} ({kinds or 'none'}) = {n / max(1, inputs):.2f}/input"

    total = sum(sum(c.values()) for c in counts.values())
    line = (f"requests: {inputs} inputs: " + "; ".join(part(r, counts.get(r, {})) for r in RequestCounter.ROLES)
            + f"; total {total} = {total / max(1, inputs):.2f}/input")
    data = {"inputs": inputs, "total": total, **{r: counts.get(r, {}) for r in RequestCounter.ROLES}}
    return [line, "requests-json: " + json.dumps(data, sort_keys=True)]


# ----------------------------------------------------------------------------------------------------------
# The same job without sinkpoint


class PlainLanceSink(DataSink):
    """A plain Lance append: one fragment per micropartition in ``write``, one Append commit in ``finalize``."""

    def __init__(self, uri: str, schema: pa.Schema, drop: str) -> None:
        self.uri = uri
        self.arrow_schema = schema
        self.drop = drop

    def name(self) -> str:
        return "plain Lance append"

    def schema(self) -> Any:
        return daft.Schema.from_pyarrow_schema(pa.schema([("fragments", pa.int64())]))

    def start(self) -> None:
        import lance

        lance.write_dataset(self.arrow_schema.empty_table(), self.uri, schema=self.arrow_schema, mode="create")

    def write(self, micropartitions: Iterator[Any]) -> Iterator[WriteResult]:
        from lance.fragment import write_fragments

        for mp in micropartitions:
            table = mp.to_arrow()
            if self.drop in table.column_names:
                table = table.drop_columns([self.drop])
            table = table.select(self.arrow_schema.names).cast(self.arrow_schema)
            fragments = write_fragments(table, self.uri, schema=self.arrow_schema)
            yield WriteResult(result=fragments, bytes_written=table.nbytes, rows_written=table.num_rows)

    def finalize(self, write_results: List[WriteResult]) -> Any:
        import lance
        from daft.recordbatch import MicroPartition

        fragments = [f for r in write_results for f in r.result]
        version = lance.dataset(self.uri).version
        lance.LanceDataset.commit(self.uri, lance.LanceOperation.Append(fragments), read_version=version)
        return MicroPartition.from_pydict({"fragments": [len(fragments)]})


def run_plain(paths: List[str], uri: str, column: str) -> float:
    """Writes ``paths`` into a fresh table at ``uri`` without sinkpoint; the seconds it took."""
    shutil.rmtree(uri, ignore_errors=True)
    t0 = time.monotonic()
    df = daft.read_parquet(paths, file_path_column=column)
    arrow = df.schema().to_pyarrow_schema()
    schema = pa.schema([f for f in arrow if f.name != column])
    df.write_sink(PlainLanceSink(uri, schema, column))
    return time.monotonic() - t0


# ----------------------------------------------------------------------------------------------------------


#: The drivers story, as the package's docstrings tell it (``--help`` prints it).
DRIVERS = (
    "Two runs of one job at once (a retry, a second machine) are safe with the same --store, or with a --store "
    "each and --mirror (the newer run fences the older through the mirror). With a --store each and no --mirror "
    "they are not fenced: both can commit the same inputs, and rows can land twice."
)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=DRIVERS)
    ap.add_argument("--dir", required=True, help="the job's directory (inputs, table, staging, store)")
    ap.add_argument("--inputs", type=int, default=50)
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--row-groups", type=int, default=4, help="row groups per input (Daft's pieces per input)")
    ap.add_argument("--runner", choices=("native", "ray"), default="native")
    ap.add_argument("--job", default=JOB_DEFAULT)
    ap.add_argument("--store", help="the committer's store file (default DIR/state/committer.redb); several drivers "
                    "of one job: the same --store, or a --store each with --mirror (see below)")
    ap.add_argument("--mirror", action="store_true", help="mirror the store to file://DIR/mirror")
    ap.add_argument("--crash-at", help="written:K | sealed:K | finalize | adopted | commit:<core crash point>")
    ap.add_argument("--delay-ms", type=float, default=0.0, help="sleep per micropartition in the sink")
    ap.add_argument("--maintenance", action="store_true",
                    help="Lance cleanup (older_than 0) and compaction at the run's start, before the commits and after")
    ap.add_argument("--plain", action="store_true",
                    help="only the plain Lance write (no sinkpoint) into DIR/plain.lance")
    ap.add_argument("--compare", action="store_true", help="plain write, then the sinkpoint job; print the cost")
    ap.add_argument("--s3-endpoint", help="put the staging and the mirror on this S3 API (http) and count the requests")
    ap.add_argument("--s3-bucket", default="sinkpoint-daft-example", help="the bucket (it must exist)")
    ap.add_argument("--s3-prefix", help="the prefix in the bucket (default: one per DIR)")
    ap.add_argument("--inputs-per-checkpoint", type=int, default=1,
                    help="seal the inputs of a task of this many as one checkpoint (the sink's inputs_per_checkpoint)")
    ap.add_argument("--check-in-worker", action="store_true",
                    help="workers read each input's claim before writing it (check_processed_in_worker=True)")
    args = ap.parse_args(argv)

    directory = os.path.abspath(args.dir)
    os.makedirs(directory, exist_ok=True)
    if args.runner == "ray":
        daft.set_runner_ray()
    else:
        daft.set_runner_native()

    t0 = time.monotonic()
    paths = make_inputs(os.path.join(directory, "inputs"), args.inputs, args.rows, args.row_groups)
    print(f"inputs: {args.inputs} x {args.rows} rows ({args.row_groups} row groups) in {directory}/inputs, "
          f"runner {args.runner} ({time.monotonic() - t0:.2f} s to prepare)", flush=True)

    column = "_input"
    plain_s = None
    if args.plain or args.compare:
        # Warm-up: Daft's first query pays for imports and the runner.
        daft.read_parquet(paths[:1], file_path_column=column).count_rows()
        plain_uri = os.path.join(directory, "plain.lance")
        plain_s = run_plain(paths, plain_uri, column)
        print(f"timing: plain Lance append: {args.inputs} inputs in {plain_s:.3f} s "
              f"({1000 * plain_s / args.inputs:.2f} ms/input)", flush=True)
        if args.plain:
            n, d, m = count_table(plain_uri, args.inputs, args.rows)
            print(f"table: {n} rows, {d} duplicates, {m} missing", flush=True)
            return 0

    uri = os.path.join(directory, "table.lance")
    counter: Optional[RequestCounter] = None
    s3: Dict[str, Any] = {}
    staging_url = f"file://{directory}/staging"
    mirror_url = f"file://{directory}/mirror" if args.mirror else None
    if args.s3_endpoint:
        counter = RequestCounter(args.s3_endpoint)
        prefix = args.s3_prefix or "daft-example/" + hashlib.sha256(directory.encode()).hexdigest()[:16]
        base = f"s3://{args.s3_bucket}/{prefix.strip('/')}"
        staging_url = f"{base}/staging"
        mirror_url = f"{base}/mirror" if args.mirror else None
        s3 = dict(
            staging_options=s3_options(counter.url("worker")),
            driver_staging_options=s3_options(counter.url("driver")),
            mirror_options=s3_options(counter.url("mirror")) if args.mirror else None,
        )
        print(f"s3: staging {staging_url}, mirror {mirror_url} at {args.s3_endpoint} (requests counted)", flush=True)
    sink = JobSink(
        uri,
        args.job,
        staging_url,
        args.store or os.path.join(directory, "state", "committer.redb"),
        mirror_url=mirror_url,
        input_column=column,
        crash_at=args.crash_at,
        crash_dir=directory,
        delay_s=args.delay_ms / 1000.0,
        check_processed_in_worker=True if args.check_in_worker else None,
        inputs_per_checkpoint=args.inputs_per_checkpoint,
        maintenance=args.maintenance,
        **s3,
    )
    if args.maintenance:
        maintain(uri, "before the run")
    t1 = time.monotonic()
    commits = sink.run(paths).to_pydict()
    took = time.monotonic() - t1
    if args.maintenance:
        maintain(uri, "after the run")
    if counter is not None:
        for line in requests_lines(counter.counts(), args.inputs):
            print(line, flush=True)
        counter.close()
    r = sink.report
    if r.get("already_finished") and not r.get("pending"):
        print(f"sinkpoint: job {args.job} already finished: nothing to do", flush=True)
    else:
        lost = r.get("lost") or {}
        print(
            f"sinkpoint: {r.get('inputs')} inputs, {r.get('pending')} to write after pruning, {r.get('sealed', 0)} "
            f"sealed ({r.get('rows_sealed', 0)} rows), {r.get('skipped', 0)} skipped, {len(lost)} lost to another "
            f"attempt, adopted {r.get('adopted', 0)}, commits {list(zip(commits['key'], commits['rows']))}, "
            f"finished {r.get('finished', False)}",
            flush=True,
        )
        rec = r.get("recovered") or {}
        if rec.get("marked_landed") is not None or rec.get("recommitted") is not None:
            print(f"sinkpoint: recovery resolved the key in flight: marked landed {rec.get('marked_landed')}, "
                  f"re-committed {rec.get('recommitted')}", flush=True)
        if r.get("garbage"):
            deleted = set(r.get("garbage_deleted") or ())
            left = [f for f in r["garbage"] if f not in deleted]
            print(f"sinkpoint: {len(r['garbage'])} data file(s) of lost attempts are garbage, {len(deleted)} deleted "
                  f"by their workers (left: {left[:2]}; LanceSink.collect_orphans deletes those in the store's "
                  "ledger)", flush=True)
    print(f"timing: sinkpoint job: {took:.3f} s ({1000 * took / max(1, args.inputs):.2f} ms/input; prune "
          f"{r.get('prune_s', 0.0):.3f} s, finalize {r.get('finalize_s', 0.0):.3f} s)", flush=True)
    sealed = r.get("sealed") or 0
    if sealed:
        t = {k: 1000 * v / sealed for k, v in (r.get("worker_timings") or {}).items()}
        check = t.get("is_processed_s", 0.0) + t.get("row_count_s", 0.0)
        seal = t.get("stage_s", 0.0) + t.get("seal_s", 0.0)
        print(f"timing: per sealed input, in the workers: checkpoint {check + seal:.2f} ms (is_processed "
              f"{t.get('is_processed_s', 0.0):.2f} + footer row count {t.get('row_count_s', 0.0):.2f} + stage and "
              f"seal {seal:.2f}), Lance fragment write {t.get('fragment_s', 0.0):.2f} ms", flush=True)
    if plain_s is not None:
        print(f"timing: checkpoint cost: {1000 * (took - plain_s) / args.inputs:+.2f} ms/input "
              f"(sinkpoint {took:.3f} s - plain {plain_s:.3f} s, over {args.inputs} inputs)", flush=True)
    n, d, m = count_table(uri, args.inputs, args.rows)
    print(f"table: {n} rows, {d} duplicates, {m} missing", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
