#!/usr/bin/env python3
"""Daft 0.7.26's own checkpointed ``write_deltalake`` against sinkpoint's ``DeltaSink``: one job, one run.

    python examples/delta_head_to_head.py --dir DIR [--inputs 50 --rows 1000] [--phases cost,drivers,kill]
        [--reps 3] [--runners native,ray] [--driver-trials 3] [--trials 5] [--seed S] [--engines daft,sinkpoint]
        [--s3-endpoint URL [--s3-bucket B]]

The job: ``--inputs`` parquet files of ``--rows`` rows (``examples/daft_lance_job.py``'s inputs: ids unique across
all inputs, so duplicates and missing rows can be counted), appended to a Delta table (created empty first, the
same for every engine) and read back with the Python ``deltalake`` reader. Three engines write it:

- ``plain``: ``daft.read_parquet(paths).write_deltalake(table)``, no checkpoint (the baseline);
- ``daft``: Daft's own checkpointing, as its docs show it: ``daft.read_parquet(paths,
  checkpoint=daft.CheckpointConfig(store, on="input"))`` (``input``, the column naming each row's input file, is the
  source key) then ``write_deltalake(table, checkpoint=daft.IdempotentCommit(store, "h2h-job"))``, with
  ``store = daft.CheckpointStore(DIR/.../daft-store)``. Ray runner only (Daft requires it), append only;
- ``sinkpoint``: ``sinkpoint.daft.DeltaSink(table, job, staging_url, store_path, mirror_url=...).run(paths)``, native
  and Ray runners. When ``DeltaSink`` does not import (an older wheel), its rows say so and are skipped: no number
  is made up for it.

Phases (``--phases``, all by default), each in its own child processes (Daft's runner is set once per process):

- ``cost``: per runner, a warm-up run of every engine on a few inputs, then ``--reps`` repetitions of every engine,
  the order rotated each repetition, each into a fresh table and store. The checkpoint cost per input is
  (engine's wall time - plain's wall time of the same repetition) / inputs; the median and the range over the
  repetitions are printed, and the plain runs' own range per input (what the comparison can resolve). With
  ``--s3-endpoint``, one more run of each checkpointing engine puts its checkpoint state on that S3 API (Daft's
  ``CheckpointStore``; sinkpoint's shared staging and the committer's mirror) through a counting proxy in the child
  (``daft_lance_job.RequestCounter``): object-store requests per input, by kind (a counted run that fails is
  reported as such, its counts partial). The inputs and the table stay on local disk (their requests are the same
  for every engine and not counted). A line says where DeltaSink's time went per input (its ``report``: the
  workers' data-file writes and checkpoint calls, the driver's pruning and finalize).
- ``drivers``: two processes run the same job at once on the same table (a retry launched while the first still
  runs, a second machine): for Daft, the same ``CheckpointStore`` and idempotence key; for sinkpoint, the same
  staging and mirror, each driver with its own store file (two machines: the mirror fences the older driver). Both
  start their write together (a barrier after Ray's start-up). Duplicates and missing rows read back.
- ``kill``: per engine, one run measured to completion (the calibration: its write time T, and a single driver's
  duplicates and missing), then ``--trials`` trials: start the job in its own session, wait for its write to start,
  sleep ``u * T`` with ``u`` uniform in [0, 1) drawn from ``--seed`` (the same ``u`` for every engine; the seed is
  printed), kill -9 the whole process group and every process left in its session (Ray's too), then rerun the job
  to completion and read back: duplicates and missing, per trial and in all.

It prints one summary table and, as its last line, the figures as JSON (``h2h-json:``). Every child's output is
in DIR/<phase>/.../log. E.g. with moto (``.ci/moto.sh``)::

    source .ci/moto.sh && moto_start && moto_create_bucket sinkpoint-h2h
    python examples/delta_head_to_head.py --dir /tmp/h2h --s3-endpoint "$SINKPOINT_S3_ENDPOINT" \
        --s3-bucket sinkpoint-h2h

Daft's Delta writer imports pyiceberg (``daft/io/writer.py`` imports its Iceberg writer), so ``daft[iceberg]``'s
``pyiceberg`` must be installed for any ``write_deltalake`` on Daft 0.7.26, checkpointed or not.
"""

from __future__ import annotations

import argparse
import collections
import inspect
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time
import uuid
from typing import Any, Dict, List, Optional, Sequence, Tuple

import daft
import pyarrow.parquet as pq
from daft_lance_job import RequestCounter, make_inputs, s3_options

JOB = "h2h-job"
#: The engines: the baseline first.
ENGINES = ("plain", "daft", "sinkpoint")
#: Inputs each warm-up run writes.
WARMUP_INPUTS = 4
#: The line a child prints its result on.
RESULT = "h2h-json: "


# ----------------------------------------------------------------------------------------------------------
# The table


def create_table(uri: str, input_path: str) -> None:
    """An empty Delta table with the inputs' schema (every engine then appends to it)."""
    import deltalake

    shutil.rmtree(uri, ignore_errors=True)
    deltalake.write_deltalake(uri, pq.read_schema(input_path).empty_table(), mode="error")


def read_back(uri: str, inputs: int, rows: int) -> Dict[str, int]:
    """Rows, duplicates and missing rows of the Delta table at ``uri`` against the ids ``0 .. inputs * rows``, read
    with the Python ``deltalake`` reader."""
    import deltalake
    import numpy as np
    from pyarrow import fs

    # Through Arrow's local filesystem, as examples/daft_delta_job.py reads (deltalake's default, a Python one, can
    # abort the process at its exit: delta-io/delta-rs#2184).
    local = fs.SubTreeFileSystem(uri, fs.LocalFileSystem())
    ids = deltalake.DeltaTable(uri).to_pyarrow_table(columns=["id"], filesystem=local).column("id").to_numpy()
    distinct = np.unique(ids)
    wanted = int(np.count_nonzero((distinct >= 0) & (distinct < inputs * rows)))
    return {"rows": int(ids.size), "duplicates": int(ids.size - distinct.size), "missing": inputs * rows - wanted}


# ----------------------------------------------------------------------------------------------------------
# The engines (in a child process, its runner set)


class Where:
    """Where one run keeps its table and checkpoint state: DIR/table, DIR/daft-store, DIR/sinkpoint/...; with a
    request counter, the checkpoint state on S3 instead (s3://BUCKET/h2h/<a fresh id>/...), through its roles."""

    def __init__(
        self, directory: str, counter: Optional[RequestCounter] = None, bucket: str = "", driver: int = 0
    ) -> None:
        self.directory = directory
        self.table = os.path.join(directory, "table")
        self.counter = counter
        self.driver = driver
        if counter is None:
            base = "file://" + directory
        else:
            base = f"s3://{bucket}/h2h/{uuid.uuid4().hex[:12]}"
        self.daft_store = base + "/daft-store"
        self.staging = base + "/sinkpoint/staging"
        self.mirror = base + "/sinkpoint/mirror"
        # Each driver its own store file (two machines), all one mirror.
        self.store = os.path.join(directory, "sinkpoint", f"store-{driver}.redb")

    def options(self, role: str) -> Optional[Dict[str, str]]:
        return None if self.counter is None else s3_options(self.counter.url(role))

    def daft_io_config(self) -> Any:
        if self.counter is None:
            return None
        from daft.io import IOConfig, S3Config

        o = s3_options(self.counter.url("daft"))
        return IOConfig(
            s3=S3Config(
                endpoint_url=o["aws_endpoint"],
                key_id=o["aws_access_key_id"],
                access_key=o["aws_secret_access_key"],
                region_name=o["aws_region"],
                use_ssl=False,
                # moto behind the proxy answers a burst (mark_committed's put per checkpoint, all at once) slowly
                # on a loaded machine: Daft's 30 s read timeout failed a 1,000-input run.
                read_timeout_ms=300_000,
            )
        )


class Counter(RequestCounter):
    """The request counter's roles here: Daft's checkpoint store; sinkpoint's shared staging (its workers and its
    driver) and the committer's mirror."""

    ROLES = ("daft", "staging", "mirror")


def delta_sink() -> Tuple[Any, Optional[str]]:
    """``sinkpoint.daft.DeltaSink``, or None and why not."""
    try:
        from sinkpoint.daft import DeltaSink
    except ImportError as e:
        return None, f"sinkpoint.daft.DeltaSink does not import from this sinkpoint ({e}): the sinkpoint rows skipped"
    return DeltaSink, None


#: What a Daft write reports: the rows of ``write_deltalake``'s result, one per Add it names. A checkpointed write that
#: finds its key's marker already committed names the Adds it found staged, whoever committed them.
def write_plain(paths: Sequence[str], where: Where) -> Dict[str, Any]:
    out = daft.read_parquet(list(paths)).write_deltalake(where.table)
    return {"reported_files": len(out)}


def write_plain_tasks(paths: Sequence[str], where: Where) -> Dict[str, Any]:
    """Plain ``write_deltalake`` of the DataFrame ``DeltaSink`` writes: ``read_inputs`` in tasks of
    ``INPUTS_PER_CHECKPOINT`` inputs, its two columns dropped. Beside it, sinkpoint's cost is its checkpoints and its
    writer alone, not the task shape (on Ray a task costs milliseconds of its own)."""
    from sinkpoint.daft import INPUT_COLUMN, POSITION_COLUMN, read_inputs

    df = read_inputs(list(paths), inputs_per_task=INPUTS_PER_CHECKPOINT).exclude(INPUT_COLUMN, POSITION_COLUMN)
    out = df.write_deltalake(where.table)
    return {"reported_files": len(out)}


def write_daft(paths: Sequence[str], where: Where) -> Dict[str, Any]:
    io_config = where.daft_io_config()
    store = daft.CheckpointStore(where.daft_store, io_config=io_config)
    df = daft.read_parquet(list(paths), checkpoint=daft.CheckpointConfig(store=store, on="input"))
    out = df.write_deltalake(where.table, checkpoint=daft.IdempotentCommit(store, JOB))
    return {"reported_files": len(out)}


def write_sinkpoint(paths: Sequence[str], where: Where) -> Dict[str, Any]:
    cls, why = delta_sink()
    if cls is None:
        raise RuntimeError(why)
    wanted = {
        "inputs_per_checkpoint": INPUTS_PER_CHECKPOINT if INPUTS_PER_CHECKPOINT > 1 else None,
        "mirror_url": where.mirror,
        "staging_options": where.options("staging"),
        "mirror_options": where.options("mirror"),
    }
    # The keyword arguments this DeltaSink takes (its constructor is LanceSink's shape: table, job, staging_url,
    # store_path, then keywords; sinkpoint's own may come through **options).
    params = inspect.signature(cls).parameters
    takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    kwargs = {k: v for k, v in wanted.items() if (takes_all or k in params) and v is not None}
    os.makedirs(os.path.dirname(where.store), exist_ok=True)
    sink = cls(where.table, JOB, where.staging, where.store, **kwargs)
    sink.run(list(paths))
    report = getattr(sink, "report", {}) or {}
    kept = ("inputs", "pending", "sealed", "adopted", "finished", "prune_s", "finalize_s", "run_s", "worker_timings")
    return {k: report.get(k) for k in kept if k in report}


#: ``DeltaSink``'s ``inputs_per_checkpoint`` (``--inputs-per-checkpoint``).
INPUTS_PER_CHECKPOINT = 1

WRITERS = {"plain": write_plain, "plain-tasks": write_plain_tasks, "daft": write_daft, "sinkpoint": write_sinkpoint}


def set_runner(runner: str) -> None:
    if runner == "ray":
        daft.set_runner_ray()
    else:
        daft.set_runner_native()


def engines_for(runner: str) -> List[str]:
    """The engines that run on ``runner`` here: Daft's checkpointed write needs Ray; sinkpoint's when it imports."""
    out = ["plain"]
    if runner == "ray":
        out.append("daft")
    if delta_sink()[0] is not None:
        out.append("sinkpoint")
        if INPUTS_PER_CHECKPOINT > 1:
            out.append("plain-tasks")
    return out


def timed_run(engine: str, paths: Sequence[str], where: Where, inputs: int, rows: int) -> Dict[str, Any]:
    """One run of ``engine`` into a fresh table and state at ``where``: its wall time and the table read back."""
    shutil.rmtree(where.directory, ignore_errors=True)
    os.makedirs(where.directory)
    create_table(where.table, paths[0])
    t0 = time.monotonic()
    info = WRITERS[engine](paths, where)
    took = time.monotonic() - t0
    return {"engine": engine, "s": took, "info": info, **read_back(where.table, inputs, rows)}


def child_cost(args: argparse.Namespace, paths: List[str]) -> Dict[str, Any]:
    """The cost phase on one runner: warm-up, ``--reps`` rotated repetitions, then the counted runs."""
    set_runner(args.runner)
    engines = engines_for(args.runner)
    base = os.path.join(args.run_dir)
    for engine in engines:
        warm = paths[:WARMUP_INPUTS]
        timed_run(engine, warm, Where(os.path.join(base, f"warmup-{engine}")), len(warm), args.rows)
    runs: List[Dict[str, Any]] = []
    for rep in range(args.reps):
        order = engines[rep % len(engines) :] + engines[: rep % len(engines)]
        for engine in order:
            r = timed_run(engine, paths, Where(os.path.join(base, f"rep{rep}-{engine}")), len(paths), args.rows)
            r["rep"] = rep
            runs.append(r)
            print(
                f"cost: {args.runner} rep {rep} {engine}: {r['s']:.3f} s, {r['rows']} rows, {r['duplicates']} "
                f"duplicates, {r['missing']} missing",
                flush=True,
            )
    requests: Dict[str, Any] = {}
    if args.s3_endpoint:
        counter = Counter(args.s3_endpoint)
        try:
            for engine in engines:
                if engine.startswith("plain"):
                    continue
                before = counter.counts()
                where = Where(os.path.join(base, f"requests-{engine}"), counter, args.s3_bucket)
                try:
                    requests[engine] = {"run": timed_run(engine, paths, where, len(paths), args.rows)}
                except Exception as e:  # a request that failed (a timeout): the run's counts are partial
                    requests[engine] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
                    print(f"requests: {args.runner} {engine}: the run failed: {requests[engine]['error']}", flush=True)
                requests[engine]["by_role"] = since(before, counter.counts())
                print(f"requests: {args.runner} {engine}: {requests[engine]['by_role']}", flush=True)
        finally:
            counter.close()
    return {"runner": args.runner, "engines": engines, "runs": runs, "requests": requests, "skipped": delta_sink()[1]}


def since(before: Dict[str, Dict[str, int]], after: Dict[str, Dict[str, int]]) -> Dict[str, Dict[str, int]]:
    """The requests counted between two ``RequestCounter.counts()``, by role and kind."""
    return {
        role: {k: n - before[role].get(k, 0) for k, n in c.items() if n > before[role].get(k, 0)}
        for role, c in after.items()
    }


def child_job(args: argparse.Namespace, paths: List[str]) -> Dict[str, Any]:
    """One run of the job (the drivers and kill phases): the runner started (one query), then ``--started``
    written, optionally a barrier (wait until ``--barrier-n`` files exist in ``--barrier``), then the write."""
    set_runner(args.runner)
    daft.read_parquet(paths[:1]).count_rows()
    if args.barrier:
        os.makedirs(args.barrier, exist_ok=True)
        open(os.path.join(args.barrier, f"ready-{args.driver}"), "w").close()
        deadline = time.monotonic() + 600
        while len(os.listdir(args.barrier)) < args.barrier_n and time.monotonic() < deadline:
            time.sleep(0.01)
    if args.started:
        with open(args.started, "w") as f:
            f.write(str(time.time()))
    where = Where(args.run_dir, driver=args.driver)
    t0 = time.monotonic()
    try:
        info = WRITERS[args.engine](paths, where)
        error = None
    except Exception as e:  # the figure is what the table holds; the error is reported beside it
        info, error = {}, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return {"engine": args.engine, "driver": args.driver, "s": time.monotonic() - t0, "info": info, "error": error}


# ----------------------------------------------------------------------------------------------------------
# The parent: children, kills, the summary


class Child:
    """A child process of this script in its own session (so that its process group, Ray's processes included,
    can be killed at once), its output in ``log``."""

    def __init__(self, argv: List[str], log: str) -> None:
        self.log = log
        os.makedirs(os.path.dirname(log), exist_ok=True)
        env = dict(os.environ, DAFT_PROGRESS_BAR="0", PYTHONUNBUFFERED="1", RAY_DEDUP_LOGS="0")
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), *argv],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )

    def wait(self, timeout: float = 1800) -> Optional[Dict[str, Any]]:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        return self.result()

    def result(self) -> Optional[Dict[str, Any]]:
        with open(self.log, encoding="utf-8", errors="replace") as f:
            found = [line[len(RESULT) :] for line in f if line.startswith(RESULT)]
        return json.loads(found[-1]) if found else None

    def kill(self) -> int:
        """kill -9 of the child's process group, then of every process left in its session (Ray's raylet, GCS and
        workers, when they are in it); the number of processes killed after the group."""
        sid = self.proc.pid
        try:
            os.killpg(sid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        left = 0
        for _ in range(50):
            pids = session_pids(sid)
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                    left += 1
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        return left


def session_pids(sid: int) -> List[int]:
    """The live processes of session ``sid`` (field 6 of /proc/PID/stat)."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            out.append(int(name))
    return out


def child_argv(args: argparse.Namespace, kind: str, run_dir: str, **more: Any) -> List[str]:
    argv = [
        "--child",
        kind,
        "--dir",
        args.dir,
        "--inputs",
        str(args.inputs),
        "--rows",
        str(args.rows),
        "--row-groups",
        str(args.row_groups),
        "--inputs-per-checkpoint",
        str(args.inputs_per_checkpoint),
        "--run-dir",
        run_dir,
    ]
    for k, v in more.items():
        argv += [f"--{k.replace('_', '-')}", str(v)]
    return argv


def phase_cost(args: argparse.Namespace) -> Dict[str, Any]:
    out = {}
    for runner in [r for r in args.runners.split(",") if r]:
        run_dir = os.path.join(args.dir, "cost", runner)
        shutil.rmtree(run_dir, ignore_errors=True)
        more: Dict[str, Any] = {"runner": runner, "reps": args.reps}
        if args.s3_endpoint:
            more.update(s3_endpoint=args.s3_endpoint, s3_bucket=args.s3_bucket)
        print(f"cost: {runner} runner, {args.reps} repetitions ({run_dir}/log)", flush=True)
        out[runner] = Child(child_argv(args, "cost", run_dir, **more), os.path.join(run_dir, "log")).wait()
        if out[runner] is None:
            print(f"cost: {runner}: the child printed no result: see {run_dir}/log", flush=True)
    return out


def phase_drivers(args: argparse.Namespace, paths: List[str], engines: List[str]) -> Dict[str, Any]:
    out = {}
    for engine in engines:
        trials = []
        for k in range(args.driver_trials):
            run_dir = os.path.join(args.dir, "drivers", engine, f"trial{k}")
            shutil.rmtree(run_dir, ignore_errors=True)
            os.makedirs(run_dir)
            create_table(os.path.join(run_dir, "table"), paths[0])
            barrier = os.path.join(run_dir, "barrier")
            children = [
                Child(
                    child_argv(
                        args, "job", run_dir, runner="ray", engine=engine, driver=i, barrier=barrier, barrier_n=2
                    ),
                    os.path.join(run_dir, f"log-{i}"),
                )
                for i in (1, 2)
            ]
            results = [c.wait() or {} for c in children]
            trial = {
                "drivers": results,
                "exit": [c.proc.returncode for c in children],
                **read_back(os.path.join(run_dir, "table"), args.inputs, args.rows),
            }
            trials.append(trial)
            print(f"drivers: {engine}: trial {k}: {trial}", flush=True)
        out[engine] = {
            "trials": trials,
            "duplicates": [t["duplicates"] for t in trials],
            "missing": [t["missing"] for t in trials],
            # What the drivers that failed raised (its type), "no result" for one that printed none.
            "driver_errors": [
                r.get("error", "").split(":")[0] if r else "no result"
                for t in trials
                for r in t["drivers"]
                if r.get("error") or not r
            ],
        }
    return out


def phase_kill(args: argparse.Namespace, paths: List[str], engines: List[str]) -> Dict[str, Any]:
    out: Dict[str, Any] = {"seed": args.seed}
    rng = random.Random(args.seed)
    fractions = [rng.random() for _ in range(args.trials)]
    print(
        f"kill: seed {args.seed}, moments (fractions of the write time) {[round(f, 3) for f in fractions]}", flush=True
    )
    for engine in engines:
        base = os.path.join(args.dir, "kill", engine)
        shutil.rmtree(base, ignore_errors=True)

        def run(run_dir: str, kill_after: Optional[float], tag: str, engine: str = engine) -> Dict[str, Any]:
            os.makedirs(run_dir, exist_ok=True)
            started = os.path.join(run_dir, f"started-{tag}")
            child = Child(
                child_argv(args, "job", run_dir, runner="ray", engine=engine, started=started),
                os.path.join(run_dir, f"log-{tag}"),
            )
            if kill_after is None:
                result = child.wait() or {}
                return {"s": result.get("s"), "error": result.get("error"), "exit": child.proc.returncode}
            while not os.path.exists(started) and child.proc.poll() is None:
                time.sleep(0.005)
            time.sleep(kill_after)
            if child.proc.poll() is not None:
                return {"killed": False, "exit": child.proc.returncode}
            left = child.kill()
            return {"killed": True, "after_s": kill_after, "session_left": left}

        calib_dir = os.path.join(base, "calibration")
        os.makedirs(calib_dir)
        create_table(os.path.join(calib_dir, "table"), paths[0])
        calib = run(calib_dir, None, "run")
        calib.update(read_back(os.path.join(calib_dir, "table"), args.inputs, args.rows))
        write_s = calib["s"] or 0.0
        print(f"kill: {engine}: calibration run {calib}", flush=True)
        trials = []
        for k, frac in enumerate(fractions):
            run_dir = os.path.join(base, f"trial{k}")
            os.makedirs(run_dir)
            create_table(os.path.join(run_dir, "table"), paths[0])
            killed = run(run_dir, frac * write_s, "killed")
            after_kill = read_back(os.path.join(run_dir, "table"), args.inputs, args.rows)
            rerun = run(run_dir, None, "rerun")
            final = read_back(os.path.join(run_dir, "table"), args.inputs, args.rows)
            trial = {"trial": k, "kill": killed, "rows_at_kill": after_kill["rows"], "rerun": rerun, **final}
            trials.append(trial)
            print(f"kill: {engine}: trial {k}: {trial}", flush=True)
        out[engine] = {
            "calibration": calib,
            "trials": trials,
            "killed": sum(1 for t in trials if t["kill"].get("killed")),
            "duplicates": sum(t["duplicates"] for t in trials),
            "missing": sum(t["missing"] for t in trials),
            "trials_with_duplicates": sum(1 for t in trials if t["duplicates"]),
            "trials_with_missing": sum(1 for t in trials if t["missing"]),
        }
    return out


# ----------------------------------------------------------------------------------------------------------
# The summary


def costs(result: Optional[Dict[str, Any]], inputs: int) -> Dict[str, Any]:
    """Per engine of one runner's cost phase: the per-repetition (engine - plain) / inputs in ms, its median and
    range, and plain's own range per input."""
    if not result:
        return {}
    by_rep: Dict[int, Dict[str, float]] = {}
    for r in result["runs"]:
        by_rep.setdefault(r["rep"], {})[r["engine"]] = r["s"]
    plain = [v["plain"] for v in by_rep.values()]
    out: Dict[str, Any] = {
        "plain_ms_per_input": [1000 * s / inputs for s in plain],
        "plain_range_ms_per_input": 1000 * (max(plain) - min(plain)) / inputs,
    }
    for engine in result["engines"]:
        if engine == "plain":
            continue
        diffs = [1000 * (v[engine] - v["plain"]) / inputs for v in by_rep.values()]
        out[engine] = {"ms_per_input": diffs, "median": statistics.median(diffs), "min": min(diffs), "max": max(diffs)}
    if "plain-tasks" in result["engines"] and "sinkpoint" in out:
        diffs = [1000 * (v["sinkpoint"] - v["plain-tasks"]) / inputs for v in by_rep.values()]
        out["sinkpoint"]["vs_plain_tasks"] = {"median": statistics.median(diffs), "min": min(diffs), "max": max(diffs)}
    parts = [breakdown(r["info"]) for r in result["runs"] if r["engine"] == "sinkpoint"]
    if parts and all(parts):
        out["sinkpoint"]["breakdown_ms_per_input"] = {k: statistics.median(p[k] for p in parts) for k in parts[0]}
    return out


def breakdown(info: Dict[str, Any]) -> Dict[str, float]:
    """Where a DeltaSink run's time went, in ms per sealed input: the workers' data-file writes and seals (their
    other checkpoint calls included), the driver's pruning and finalize (adopt and commit)."""
    sealed = info.get("sealed") or 0
    timings = info.get("worker_timings") or {}
    if not sealed or not timings:
        return {}
    seal = sum(v for k, v in timings.items() if k != "fragment_s")
    return {
        "worker_data_files": 1000 * timings.get("fragment_s", 0.0) / sealed,
        "worker_checkpoint": 1000 * seal / sealed,
        "driver_prune": 1000 * (info.get("prune_s") or 0.0) / sealed,
        "driver_finalize": 1000 * (info.get("finalize_s") or 0.0) / sealed,
    }


def requests_per_input(result: Optional[Dict[str, Any]], inputs: int) -> Dict[str, Any]:
    out = {}
    for engine, r in ((result or {}).get("requests") or {}).items():
        total = sum(sum(c.values()) for c in r["by_role"].values())
        out[engine] = {"total": total, "per_input": total / inputs, "by_role": r["by_role"], "error": r.get("error")}
    return out


def summary(args: argparse.Namespace, found: Dict[str, Any], skipped: Optional[str]) -> Dict[str, Any]:
    n = args.inputs
    cost = {runner: costs(r, n) for runner, r in (found.get("cost") or {}).items()}
    req = {runner: requests_per_input(r, n) for runner, r in (found.get("cost") or {}).items()}
    rows: List[Tuple[str, str, str, str, str]] = []

    def fmt_cost(runner: str, engine: str) -> str:
        c = cost.get(runner, {}).get(engine)
        if not c:
            return "-"
        return (
            f"{c['median']:+.2f} ms ({c['min']:+.2f} .. {c['max']:+.2f}; plain's range "
            f"{cost[runner]['plain_range_ms_per_input']:.2f})"
        )

    def fmt_req(runner: str, engine: str) -> str:
        r = req.get(runner, {}).get(engine)
        if not r:
            return "-"
        return f"{r['per_input']:.2f}" + (" (the run failed: partial)" if r["error"] else "")

    def fmt_drivers(engine: str) -> str:
        d = (found.get("drivers") or {}).get(engine)
        if not d:
            return "-"
        errors = collections.Counter(d["driver_errors"])
        raised = "".join(f"; {v} driver(s) raised {k}" for k, v in sorted(errors.items()))
        return (
            f"{'/'.join(map(str, d['duplicates']))} dup, {'/'.join(map(str, d['missing']))} missing of "
            f"{n * args.rows} ({len(d['trials'])} trials{raised})"
        )

    def fmt_kill(engine: str) -> str:
        k = (found.get("kill") or {}).get(engine)
        if not k:
            return "-"
        return (
            f"{k['duplicates']} dup, {k['missing']} missing over {len(k['trials'])} trials "
            f"({k['killed']} killed mid-run; {k['trials_with_duplicates']} with dup)"
        )

    for engine, runner in (("daft", "ray"), ("sinkpoint", "native"), ("sinkpoint", "ray")):
        rows.append(
            (
                f"{engine} ({runner})",
                fmt_cost(runner, engine),
                fmt_req(runner, engine),
                fmt_drivers(engine) if runner == "ray" else "",
                fmt_kill(engine) if runner == "ray" else "",
            )
        )
    head = (
        "engine (runner)",
        "checkpoint cost / input (median, range)",
        "store requests / input",
        "two drivers at once",
        "kill -9 + rerun",
    )
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    print(f"summary: {n} inputs x {args.rows} rows, {args.reps} repetitions, kill seed {args.seed}", flush=True)
    for r in [head, *rows]:
        print("  " + " | ".join(c.ljust(w) for c, w in zip(r, widths)), flush=True)
    for runner in ("native", "ray"):
        same = cost.get(runner, {}).get("sinkpoint", {}).get("vs_plain_tasks")
        if same:
            print(
                f"summary: sinkpoint ({runner}) - plain write_deltalake of the same tasks ({INPUTS_PER_CHECKPOINT} "
                f"inputs a task): {same['median']:+.2f} ms per input ({same['min']:+.2f} .. {same['max']:+.2f})",
                flush=True,
            )
        parts = cost.get(runner, {}).get("sinkpoint", {}).get("breakdown_ms_per_input")
        if parts:
            print(
                f"summary: sinkpoint ({runner}), medians in ms per input: "
                + ", ".join(f"{k.replace('_', ' ')} {v:.2f}" for k, v in parts.items()),
                flush=True,
            )
    if skipped:
        print(f"summary: {skipped}", flush=True)
    return {
        "inputs": n,
        "rows": args.rows,
        "reps": args.reps,
        "seed": args.seed,
        "cost": cost,
        "requests": req,
        "drivers": found.get("drivers"),
        "kill": found.get("kill"),
        "sinkpoint_skipped": skipped,
    }


# ----------------------------------------------------------------------------------------------------------


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", required=True, help="the run's directory (inputs, tables, state, logs)")
    ap.add_argument("--inputs", type=int, default=50)
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--row-groups", type=int, default=1, help="row groups per input")
    ap.add_argument(
        "--inputs-per-checkpoint",
        type=int,
        default=1,
        help="DeltaSink's inputs_per_checkpoint: the inputs of a task sealed as one checkpoint",
    )
    ap.add_argument("--reps", type=int, default=3, help="repetitions of every engine in the cost phase")
    ap.add_argument("--trials", type=int, default=5, help="kill -9 trials per engine")
    ap.add_argument("--driver-trials", type=int, default=3, help="two-driver trials per engine")
    ap.add_argument("--seed", type=int, help="the kill moments' seed (default: drawn, and printed)")
    ap.add_argument("--phases", default="cost,drivers,kill", help="of cost, drivers, kill")
    ap.add_argument("--runners", default="native,ray", help="the cost phase's runners")
    ap.add_argument("--engines", default="daft,sinkpoint", help="the checkpointing engines of drivers and kill")
    ap.add_argument("--s3-endpoint", help="count the checkpoint state's requests on this S3 API (http)")
    ap.add_argument("--s3-bucket", default="sinkpoint-h2h", help="the bucket (it must exist)")
    # A child's arguments (this script runs itself).
    ap.add_argument("--child", choices=("cost", "job"), help=argparse.SUPPRESS)
    ap.add_argument("--run-dir", help=argparse.SUPPRESS)
    ap.add_argument("--runner", choices=("native", "ray"), default="ray", help=argparse.SUPPRESS)
    ap.add_argument("--engine", choices=ENGINES, help=argparse.SUPPRESS)
    ap.add_argument("--driver", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--barrier", help=argparse.SUPPRESS)
    ap.add_argument("--barrier-n", type=int, default=2, help=argparse.SUPPRESS)
    ap.add_argument("--started", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.dir = os.path.abspath(args.dir)
    global INPUTS_PER_CHECKPOINT
    INPUTS_PER_CHECKPOINT = args.inputs_per_checkpoint

    paths = make_inputs(os.path.join(args.dir, "inputs"), args.inputs, args.rows, args.row_groups)
    if args.child:
        result = (child_cost if args.child == "cost" else child_job)(args, paths)
        print(RESULT + json.dumps(result), flush=True)
        return 0

    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1 << 31)
    phases = [p for p in args.phases.split(",") if p]
    skipped = delta_sink()[1]
    engines = [e for e in args.engines.split(",") if e and not (e == "sinkpoint" and skipped)]
    print(
        f"h2h: {args.inputs} inputs x {args.rows} rows in {args.dir}/inputs; phases {phases}; seed {args.seed}"
        + (f"; {skipped}" if skipped else ""),
        flush=True,
    )
    found: Dict[str, Any] = {}
    t0 = time.monotonic()
    if "cost" in phases:
        found["cost"] = phase_cost(args)
    if "drivers" in phases:
        found["drivers"] = phase_drivers(args, paths, engines)
    if "kill" in phases:
        found["kill"] = phase_kill(args, paths, engines)
    data = summary(args, found, skipped)
    data["wall_s"] = time.monotonic() - t0
    print(RESULT + json.dumps(data, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
