"""The job runner of the sinks (:class:`LanceSink`, ``DeltaSink``), on the driver: :meth:`run` (the whole job on
one driver), the recovery, adoption and commits ``finalize`` goes on with, :func:`prune_inputs`, and the maintenance
(:meth:`collect_orphans`). The sink's ``start``/``write``/``finalize`` are in ``_sink.py``."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, Iterable, List, Optional, Sequence

import pyarrow as pa

from ._common import RESULT_SCHEMA, _sp, _worker_name
from ._errors import IncompleteInputsError, _incomplete_message
from ._reader import _refuse_input_splitting, _refuse_single_path, _row_counts, daft_path, read_inputs

#: The grace period of :meth:`LanceSink.collect_orphans`, in seconds (the core's default: a day). It must exceed
#: any task's time from writing a fragment to staging it.
GRACE_S_DEFAULT = 86400.0

#: How long ``finalize`` waits for another driver that holds the store's file (AlreadyOpen).
OPEN_TIMEOUT_S_DEFAULT = 300.0

#: Concurrent claim reads of :func:`prune_inputs` (each call releases the GIL).
_PRUNE_CONCURRENCY = 16


def prune_inputs(
    paths: Iterable[str],
    *,
    driver: Any = None,
    staging_url: Optional[str] = None,
    job: Optional[str] = None,
    staging_options: Optional[Dict[str, str]] = None,
    concurrency: int = _PRUNE_CONCURRENCY,
) -> List[str]:
    """The inputs of ``paths`` still to write, in their order, without duplicates, spelled as Daft spells them
    (:func:`daft_path`): read only these, so inputs already processed are not even scanned.

    With ``driver`` (a ``sinkpoint.Driver``): nothing at all when the job's final commit landed
    (``driver.is_finished()``: the fast path of a rerun), else the inputs its store does not hold. With
    ``staging_url`` and ``job`` (also, or instead): the inputs no worker has sealed yet (one claim read each, up to
    ``concurrency`` at once), which also catches seals the committer has not adopted yet.

    :meth:`LanceSink.run` does not need it: it adopts every seal into its driver's store first (a listing, and the
    claim reads the commit needs anyway), then prunes by the store alone (no request per input). This is for a
    DataFrame built by hand, by a caller that holds no driver.

    The claim reads find inputs sealed one a checkpoint only: an input a sink sealed in a checkpoint of several
    (``inputs_per_checkpoint > 1``) has no claim of its own and stays in the list (its second copy would be refused
    by the driver's adoption). Give ``driver`` for such a job.
    """
    if driver is None and (staging_url is None or job is None):
        raise ValueError("prune_inputs needs a driver, or staging_url and job (or all three)")
    inputs = list(dict.fromkeys(daft_path(p) for p in paths))
    if driver is not None:
        if driver.is_finished():
            return []
        inputs = [p for p in inputs if not driver.is_processed(p)]
    if staging_url is not None and job is not None and inputs:
        sp = _sp()
        staging = sp.SharedStaging(staging_url, job, storage_options=staging_options)
        worker = staging.worker(_worker_name("prune"))
        with ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(inputs)))) as pool:
            done = list(pool.map(worker.is_processed, inputs))
        inputs = [p for p, d in zip(inputs, done) if not d]
    return inputs


class _JobRunner:
    """The driver side of the sinks (their base class), whatever the table: the whole job (:meth:`run`), the
    recovery, adoption and commits of ``finalize``, and the maintenance. It reads the sink's configuration
    (``uri``, ``job``, ``store_path``, ...), its table side (``_target``, ``_open_table``, ``_files_of``,
    ``_orphan_files``) and the overridable hooks ``_at``, ``_driver_options`` and ``_staging``."""

    def run(self, paths: Sequence[str], *, io_config: Any = None, **read_options: Any) -> Any:
        """The whole job over the parquet files ``paths``. Opens the committer once (one epoch for the whole run)
        and returns at once when the job finished (the fast path of a rerun: nothing is read); else creates the
        table when missing, recovers, adopts what workers sealed before this run, prunes the inputs the store then
        holds (locally: no request per input), reads the rest with :func:`read_inputs` (two columns more:
        :attr:`input_column`, :attr:`position_column`; ``read_options`` go to it, and ``io_config``, the inputs'
        IOConfig, else the sink's), writes it through this sink, and ``finalize`` adopts and commits with the
        same driver. Returns ``write_sink``'s DataFrame (the commits, :data:`RESULT_SCHEMA`); :attr:`report` says
        the rest. Checks at the end that every input of ``paths`` is in the job, on the fast path too (else
        :class:`IncompleteInputsError`: on a finished job, the inputs it does not hold, which are not written).

        The store's file stays open (locked) until the run ends, so a second run of the job on the same store waits
        for this one (up to ``open_timeout_s``) instead of racing it; a driver on another machine that opens the
        mirrored store fences this one (its ``finalize`` raises ``FencedError``) and finishes the job itself. Two
        drivers with separate store files and no mirror are not fenced: both can commit the same inputs, and rows
        can land twice.

        ``row_counts`` given to the sink are checked against the pending inputs' footers before anything is read
        (one batched footer read): a count that contradicts its file raises ``ValueError`` and nothing is written."""
        t0 = time.monotonic()
        _refuse_single_path(paths)
        _refuse_input_splitting()
        inputs = list(dict.fromkeys(daft_path(p) for p in paths))
        if io_config is not None and self.input_io_config is None:
            self.input_io_config = io_config
        with self._open_driver() as driver:
            if driver.is_finished():
                # The fast path of a rerun: the job's final commit landed; nothing is read.
                self.report = {"job": self.job, "already_finished": True, "finished": True}
                return self._finished(driver, inputs, RESULT_SCHEMA.empty_table(), t0)
            # The committer's recovery probes the table: it must exist (created empty when missing).
            self._ensure_table(inputs, io_config, read_options)
            report: Dict[str, Any] = {"job": self.job}
            rec, commits = self._recover(driver, report)
            if rec.finished:
                # Finished before this run (or by this recovery: the final key was in flight): nothing to read.
                self._inputs = inputs
                try:
                    table = self._result_table(driver, commits, _Summary())
                finally:
                    self._inputs = None
                report.update(already_finished=not commits, finished=True, committed_keys=list(commits))
                self.report = report
                return self._finished(driver, inputs, table, t0)
            # Every seal made before now (a crashed run's, a dead worker's) into the store, so that the store alone
            # says what is processed: the commit needs these adoptions anyway.
            adopted = driver.adopt()
            pending = [p for p in inputs if not driver.is_processed(p)]
            self._check_row_counts(pending)
            prune_s = time.monotonic() - t0
            self._prepared = _Prepared(driver, report["recovered"], commits, adopted)
            out = self._write_pending(inputs, pending, io_config, read_options)
        self.report.update(inputs=len(inputs), pending=len(pending), prune_s=prune_s, run_s=time.monotonic() - t0)
        return out

    def _finished(self, driver: Any, inputs: List[str], table: pa.Table, t0: float) -> Any:
        """:meth:`run` on a finished job: the commits of ``table`` as a DataFrame, after checking that the job
        holds every input (:meth:`_refuse_late_inputs`)."""
        import daft

        self.report.update(inputs=len(inputs), pending=0, run_s=time.monotonic() - t0)
        self._refuse_late_inputs(driver, inputs)
        return daft.from_arrow(table)

    def _check_row_counts(self, pending: List[str]) -> None:
        """Raises ``ValueError`` when a ``row_counts`` entry of a pending input contradicts its parquet footer: a
        count below the file's would seal the input before its last rows arrive, and they would be rejected."""
        given = [p for p in pending if self.row_counts and p in self.row_counts]
        if not given:
            return
        footers = _row_counts(given, self.input_io_config)
        wrong = [(p, self.row_counts[p], n) for p, n in zip(given, footers) if self.row_counts[p] != n]
        if wrong:
            raise ValueError(
                f"row_counts contradicts the parquet footer of {len(wrong)} input(s) (path, given, footer; first: "
                f"{wrong[:3]}): nothing was written; fix row_counts or leave it out"
            )

    def _write_pending(
        self, inputs: List[str], pending: List[str], io_config: Any, read_options: Dict[str, Any]
    ) -> Any:
        """:meth:`run`'s write: reads the ``pending`` inputs and writes them through this sink (``finalize`` goes on
        with the driver :meth:`run` prepared); with none pending, only ``finalize`` (it commits what earlier runs
        sealed and finishes the job). ``write_sink``'s DataFrame."""
        import daft

        self._inputs = inputs
        if self.check_processed_in_worker is None:
            self._check_in_worker = False  # pruned just now: see check_processed_in_worker
        read_options.setdefault("inputs_per_task", self.inputs_per_checkpoint)
        try:
            if not pending:
                self.start()
                return daft.from_arrow(self.finalize([]).to_arrow())
            df = read_inputs(
                pending,
                input_column=self.input_column,
                position_column=self.position_column,
                io_config=io_config if io_config is not None else self.input_io_config,
                **read_options,
            )
            return df.write_sink(self)
        finally:
            self._inputs = None
            self._prepared = None
            self._check_in_worker = self._default_check_in_worker()

    def _refuse_late_inputs(self, driver: Any, inputs: List[str]) -> None:
        """Raises :class:`IncompleteInputsError` naming the inputs of ``inputs`` that the finished job does not hold.
        The driver's store answers each locally (no request per input)."""
        late = [p for p in inputs if not driver.is_processed(p)]
        if late:
            self.report["missing"] = late
            raise IncompleteInputsError(
                f"job {self.job} is finished and {len(late)} input(s) of this run are not in it (first: "
                f"{late[:3]}); nothing was written. A finished job takes no more inputs: write them under a new job "
                "id.",
                missing=late,
                report=self.report,
            )

    def _ensure_table(self, inputs: List[str], io_config: Any, read_options: Dict[str, Any]) -> None:
        """Makes sure of the table before the committer's recovery probes it: opens it (with ``mode="create"``,
        checks that it is this job's own) or creates it, with ``schema`` or else the schema of the first input's
        rows (a footer read; nothing is executed), so that the committer finds it even when no task writes a row."""
        if self._open_table(self.schema_hint) is not None or not inputs:
            return
        df = read_inputs(
            inputs[:1],
            input_column=self.input_column,
            position_column=self.position_column,
            io_config=io_config,
            **read_options,
        )
        arrow = df.schema().to_pyarrow_schema()
        self._open_table(pa.schema([f for f in arrow if f.name not in (self.input_column, self.position_column)]))

    def _finish(
        self, driver: Any, seen: "_Summary", report: Dict[str, Any], prepared: Optional["_Prepared"]
    ) -> pa.Table:
        """``finalize`` on an open driver: the result table. Recovers first unless ``prepared`` did (run())."""
        if prepared is None:
            rec, commits = self._recover(driver, report)
            if rec.finished:
                # The job's final commit landed before this run: the fast path. Whatever this run sealed must be
                # in it (another driver finishing concurrently adopted it), else it was sealed too late.
                late = [p for p in seen.sealed if not driver.is_processed(p)]
                # Finished before this run, or by this recovery (the final key was in flight: re-sent or found).
                report["already_finished"] = not commits
                report["finished"] = True
                report["committed_keys"] = list(commits)
                self.report = report
                if late:
                    raise IncompleteInputsError(
                        f"job {self.job} had finished before this run committed; {len(late)} input(s) this run "
                        f"sealed are not in it (first: {late[:3]}). A finished job takes no more inputs: write them "
                        "under a new job id.",
                        missing=late,
                        report=report,
                    )
                return self._result_table(driver, commits, seen)
            earlier = []
        else:
            # run() recovered this driver (the job was not finished) and adopted before the read; nothing commits
            # through the store meanwhile (its file is ours; a newer driver of a mirrored store fences this one,
            # which its next write below then raises).
            report["recovered"] = dict(prepared.recovered)
            commits = list(prepared.commits)
            earlier = [prepared.adopted]
        # After run()'s listing round, finalize reads only the claims of this run's inputs (its cost follows the
        # run, not the job's history); without run(), it lists the job's claims once, finding every seal.
        this_run = [driver.adopt()] if prepared is None else self._adopt_expected(driver, seen)
        rounds = earlier + this_run
        if prepared is not None and self.inputs_per_checkpoint > 1 and self._missing_inputs(driver, seen):
            # An input no write result names has no id the driver can derive (its checkpoint's other inputs name
            # it): one listing round finds every seal.
            rounds.append(driver.adopt())
        self._at("adopted")
        report["adopted"] = sum(len(a.adopted) for a in rounds)
        report["already_adopted"] = sum(a.already_adopted for a in rounds)
        report["unsealed"] = this_run[-1].unsealed
        report["garbage"] += [f for a in rounds for f in self._files_of(a.cleanup)]
        missing = self._missing_inputs(driver, seen)
        if missing:
            # Zero-row inputs never reach the sink: seal them empty here, then adopt them.
            if self._seal_empty(missing):
                adopted2 = driver.adopt(expected=[_sp().checkpoint_id_for_key(p) for p in missing])
                report["adopted"] += len(adopted2.adopted)
                rounds.append(adopted2)
                missing = self._missing_inputs(driver, seen)
        refused = [r for a in rounds for r in a.refused]
        report["missing"] = list(missing)
        report["refused"] = refused
        if seen.incomplete or seen.rejected or missing or refused:
            commits += list(driver.commit_pending().committed_keys)
            report["committed_keys"] = commits
            report["finished"] = False
            self.report = report
            raise IncompleteInputsError(
                _incomplete_message(self.job, seen.incomplete, seen.rejected, missing, refused),
                incomplete=seen.incomplete,
                missing=missing,
                refused=refused,
                rejected=seen.rejected,
                report=report,
            )
        commits += list(driver.finish().committed_keys)
        report["committed_keys"] = commits
        report["finished"] = True
        return self._result_table(driver, commits, seen)

    def _adopt_expected(self, driver: Any, seen: "_Summary") -> List[Any]:
        """Adoption rounds of the seals this run waits for, by id: the inputs of :meth:`run` and those its write
        results name, that the driver's store does not hold processed (local reads). Lists none of the job's
        claims. One round per ``ADOPT_EXPECTED_IDS_MAX`` ids (one when none is left: the inbox's parts)."""
        sp = _sp()
        named = [*seen.sealed, *seen.skipped, *seen.lost, *seen.pending, *seen.rejected, *(self._inputs or ())]
        pending = [p for p in dict.fromkeys(named) if not driver.is_processed(p)]
        ids = list(dict.fromkeys(seen.id_of.get(p) or sp.checkpoint_id_for_key(p) for p in pending))
        step = sp.ADOPT_EXPECTED_IDS_MAX
        return [driver.adopt(expected=ids[i : i + step]) for i in range(0, max(len(ids), 1), step)]

    def _recover(self, driver: Any, report: Dict[str, Any]) -> tuple:
        """``driver.recover()``, noted in ``report``: (the recovery report, the keys it committed). Raises when the
        commit in flight is blocked (nothing can commit until it is resolved)."""
        rec = driver.recover()
        report["recovered"] = {
            "orphans": list(rec.orphans),
            "marked_landed": rec.marked_landed,
            "recommitted": rec.recommitted,
            "committed_keys": list(rec.committed_keys),
        }
        commits = [k for k in (rec.marked_landed, rec.recommitted) if k is not None]
        commits += list(rec.committed_keys)
        if rec.blocked is not None:
            self.report = report
            raise RuntimeError(
                f"job {self.job}: the commit in flight is blocked ({rec.blocked!r}); nothing more can commit "
                "until it is resolved (rerun later, or an operator resolves it: Driver.resolve)"
            )
        return rec, commits

    def _open_driver(self) -> Any:
        """The committer, opened now (claiming a new epoch); waits while another driver holds the store file."""
        sp = _sp()
        if "://" not in self.store_path:
            parent = os.path.dirname(os.path.abspath(self.store_path))
            os.makedirs(parent, exist_ok=True)
        target = self._target()
        deadline = time.monotonic() + self.open_timeout_s
        delay = 0.05
        while True:
            driver = sp.Driver(
                self.store_path,
                self.job,
                target,
                target_identity=target.identity,
                mirror=self.mirror_url,
                mirror_options=self.mirror_options,
                staging=self._staging("driver"),
                **self._driver_options(),
            )
            try:
                _ = driver.epoch  # opens it
                return driver
            except sp.AlreadyOpenError:
                try:
                    driver.close()
                except sp.SinkpointError:
                    pass
                if time.monotonic() >= deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    def _missing_inputs(self, driver: Any, seen: "_Summary") -> List[str]:
        """Inputs of :meth:`run` not in the job's store (after adoption)."""
        if not self._inputs:
            return []
        return [
            p
            for p in self._inputs
            if p not in seen.incomplete and p not in seen.rejected and not driver.is_processed(p)
        ]

    def _seal_empty(self, paths: List[str]) -> bool:
        """Seals, from the driver, an empty checkpoint for each input of ``paths`` that has no rows (such an input
        never reaches a sink). Whether any was sealed."""
        counts = _row_counts(paths, self.input_io_config)
        empty = [p for p, n in zip(paths, counts) if n == 0]
        if not empty:
            return False
        sp = _sp()
        worker = self._staging("driver").worker(_worker_name("driver"))
        for p in empty:
            try:
                worker.stage_and_seal(sp.checkpoint_id_for_key(p), [p], [])
            except sp.SealLostError:
                pass
        return True

    def _result_table(self, driver: Any, keys: List[int], seen: "_Summary") -> pa.Table:
        keys = sorted(set(int(k) for k in keys))
        if not keys:
            return RESULT_SCHEMA.empty_table()
        wanted = set(keys)
        by_key: Dict[int, List[str]] = {k: [] for k in keys}
        for info in driver.checkpoints("committed"):
            if info.key is not None and int(info.key) in wanted:
                by_key[int(info.key)].append(str(info.id))
        inputs_by_id = {i: list(ps) for i, ps in seen.input_of.items()}
        if self._inputs:
            sp = _sp()
            for p in self._inputs:
                inputs_by_id.setdefault(sp.checkpoint_id_for_key(p), [p])
        rows_by_id: Dict[str, int] = {}
        for p, n in seen.sealed.items():
            if p in seen.id_of:
                rows_by_id[seen.id_of[p]] = rows_by_id.get(seen.id_of[p], 0) + n
        columns: Dict[str, list] = {"key": [], "checkpoints": [], "inputs": [], "rows": []}
        for k in keys:
            ids = sorted(by_key[k])
            columns["key"].append(k)
            columns["checkpoints"].append(ids)
            columns["inputs"].append([p for i in ids for p in inputs_by_id.get(i, ())])
            counts = [rows_by_id.get(i) for i in ids]
            columns["rows"].append(sum(counts) if ids and all(c is not None for c in counts) else None)
        return pa.Table.from_pydict(columns, schema=RESULT_SCHEMA)

    # -- maintenance -------------------------------------------------------------------------------------------

    def collect_orphans(self, grace_s: float = GRACE_S_DEFAULT, apply: bool = False) -> Any:
        """Collects the job's orphan data files: the data files of its dropped attempts (the losers of seals found by
        adoption, checkpoints force-aborted by an operator) that no commit will ever reference, from the store's
        garbage ledger (``sinkpoint.Driver.collect_data_files`` with :class:`sinkpoint.lance.LanceDataFiles`, or a
        ``sinkpoint.DeltaTarget`` for a Delta table). A file the table references (any version still existing), a live
        checkpoint names, or modified less than ``grace_s`` seconds ago is kept. Without ``apply`` (the default)
        it only reports; with it, it deletes what is due and forgets the settled ledger entries. Returns the
        ``sinkpoint.CollectReport``.

        Opens the committer's store like :meth:`run` (waiting up to ``open_timeout_s`` while a run on this machine
        holds its file) under a new epoch, which fences a driver of the job running elsewhere on the mirrored
        store: run it between runs of the job, or after the last. Data files a worker wrote and never staged (it
        died first) are named nowhere and not collected here; a worker that lost its seal deletes its own."""
        files = self._orphan_files()
        with self._open_driver() as driver:
            return driver.collect_data_files(files, grace_s=grace_s, apply=apply)

    # -- crash points (no-ops; tests and the example override them) --------------------------------------------

    def _at(self, point: str, path: Optional[str] = None) -> None:
        """Called at named points: ``"written"`` (an input's data files are written, not staged),
        ``"sealed"`` (its checkpoint is sealed), ``"adopted"`` (the driver adopted, before committing)."""

    def _driver_options(self) -> Dict[str, Any]:
        """More keyword arguments for ``sinkpoint.Driver`` (the example passes ``crash_at``)."""
        return {}

    def _staging(self, role: str) -> Any:
        """The job's shared staging as ``role`` uses it: ``"worker"`` (the sink's writes) or ``"driver"`` (adopt,
        the seals of empty inputs). The example counts each role's requests apart by overriding it."""
        return _sp().SharedStaging(
            self.staging_url, self.job, storage_options=self.staging_options, key_exclusivity=self._key_exclusivity()
        )

    def _key_exclusivity(self) -> str:
        """Where the job's keys are decided: at adoption when checkpoints hold several inputs (a seal is then one
        request, whatever its inputs), else at the seal."""
        return "adoption" if self.inputs_per_checkpoint > 1 else "seal"


class _Prepared:
    """What :meth:`LanceSink.run` did on its driver before the read, for ``finalize`` to go on with."""

    __slots__ = ("driver", "recovered", "commits", "adopted")

    def __init__(self, driver: Any, recovered: Dict[str, Any], commits: List[int], adopted: Any) -> None:
        self.driver = driver
        self.recovered = recovered
        self.commits = commits
        self.adopted = adopted


class _Summary:
    """What the write results of one run say, input by input."""

    def __init__(self) -> None:
        self.sealed: Dict[str, int] = {}
        #: The checkpoint id of each input sealed or lost in this run (several inputs may share one).
        self.id_of: Dict[str, str] = {}
        #: The inputs of each checkpoint id sealed in this run.
        self.input_of: Dict[str, List[str]] = {}
        self.skipped: set = set()
        self.lost: Dict[str, tuple] = {}
        #: The garbage files the workers deleted (of lost seals).
        self.deleted: List[str] = []
        self.pending: Dict[str, tuple] = {}
        self.incomplete: Dict[str, tuple] = {}
        #: Inputs with rows refused (a position twice, out of range, or after the seal): why, the first time.
        self.rejected: Dict[str, str] = {}
        #: Seconds per worker step, summed over the sealed inputs.
        self.timings: Dict[str, float] = {}

    @classmethod
    def of(cls, write_results: Iterable[Any]) -> "_Summary":
        s = cls()
        for wr in write_results:
            result = getattr(wr, "result", wr)
            for e in (result or {}).get("events", ()):
                kind, path = e["event"], e["input"]
                if kind == "sealed":
                    s.sealed[path] = int(e["rows"])
                    for step, secs in e.get("timings", {}).items():
                        s.timings[step] = s.timings.get(step, 0.0) + float(secs)
                    s.id_of[path] = e["id"]
                    s.input_of.setdefault(e["id"], []).append(path)
                elif kind == "skipped":
                    s.skipped.add(path)
                elif kind == "lost":
                    s.lost[path] = (e["winner"], list(e.get("garbage", ())))
                    if "id" in e:
                        s.id_of[path] = e["id"]
                    s.deleted += list(e.get("deleted", ()))
                elif kind == "pending":
                    rows, expected = s.pending.get(path, (0, e["expected"]))
                    s.pending[path] = (max(rows, int(e["rows"])), int(e["expected"]))
                elif kind == "rejected":
                    s.rejected.setdefault(path, str(e["reason"]))
        done = set(s.sealed) | s.skipped | set(s.lost) | set(s.rejected)
        s.incomplete = {p: v for p, v in s.pending.items() if p not in done}
        return s
