//! The operator's mirror collection (`gc::find_mirror_garbage`/`delete_mirror_garbage`, what `sinkpoint gc --mirror` runs)
//! over random jobs on an in-memory mirror: stages of several attempts, seals, restarts, aborts, commits, clean
//! reopens, crashes at a random I/O point of the process (local file and mirror alike), failed puts of
//! segments, snapshots and manifests (a snapshot whose manifest never lands is garbage no manifest names),
//! takeovers by a new machine (a new epoch, whose older manifests are superseded), and the writer's own
//! collection now and then. Once every writer is stopped, a collection with a minimum age of 0 must:
//!
//! - leave a mirror whose restore is exactly the restore before it (every checkpoint and its state, every
//!   processed key, every commit key, the summary, the verified counts), both read-only and by a real takeover;
//! - delete every object it reported as due and nothing else (the listing after is the listing before less
//!   exactly those), and report nothing outside the mirror's objects nor the newest manifest;
//! - tell its progress truly (the objects it listed, each delete);
//! - leave nothing for a second collection to find.
//!
//! Four shards (`mirror_gc_model::gc_after_any_job_keeps_every_restore_exactly_and_deletes_exactly_what_it_reports::
//! shard_N_of_4`) that the test harness runs in parallel. `SINKPOINT_CASES` sets the case count (default 64, split
//! over the shards); `SINKPOINT_GC_SEED` replays a run (the base seed is printed; case `i` runs from the base plus
//! `i`, and a failing case prints its own seed and its log); `SINKPOINT_GC_LOG` prints every case's log and the
//! objects before its collection.
//!
//! Seen failing on planted bugs: `find_mirror_garbage` also reporting the newest manifest (the restore after gc finds
//! no manifest), and reporting the base's own WAL slot as superseded (the restore after gc finds a gap).

use crate::common;
use common::sharded;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use object_store::ObjectStore;
use object_store::memory::InMemory;
use object_store::path::Path;
use sinkpoint::gc::{MirrorReason, Progress, delete_mirror_garbage, find_mirror_garbage, no_progress};
use sinkpoint::inspect::Inspector;
use sinkpoint::mirror::MirrorSettings;
use sinkpoint::testkit::{self, CrashBackend, FaultStore, ManualClock, ProcessCrash, PutFault, Shard, SplitMix64};
use sinkpoint::{
    Attempt, CheckpointId, Clock as _, Committer, DirTable, Format, JobId, Part, StagePart, StateFilter, Store,
    SystemClock, TargetIdentity, WriteResult,
};

const STEPS_MAX: u64 = 60;
const PREFIX: &str = "jobs/gc-model";

fn job() -> JobId {
    JobId::new("gc-model").unwrap()
}

fn target() -> TargetIdentity {
    TargetIdentity::new("dir:table").unwrap()
}

fn id(input: u32) -> CheckpointId {
    CheckpointId::new(format!("input-{input:03}")).unwrap()
}

fn key(input: u32) -> Vec<u8> {
    format!("s3://in/{input:03}.csv").into_bytes()
}

/// One job's world: the bucket holding the mirror, the table, the writer's clock, and the process running now.
struct Case {
    rng: SplitMix64,
    /// The bucket, as the operator and every new process reach it.
    bucket: Arc<dyn ObjectStore>,
    /// The running process's view of the bucket: its injected put failures, and its crash point.
    faults: FaultStore<Arc<dyn ObjectStore>>,
    process: ProcessCrash,
    /// The running process's local file.
    backend: CrashBackend,
    store: Option<Store>,
    table: DirTable,
    clock: ManualClock,
    settings: MirrorSettings,
    inputs: u32,
    files: u32,
    log: Vec<String>,
}

impl Case {
    fn new(seed: u64) -> Self {
        let mut rng = SplitMix64::new(seed);
        let bucket: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let settings = MirrorSettings {
            // Frequent snapshots, so bases move and leave superseded segments and snapshots behind.
            snapshot_interval_records: rng.below(6) + 2,
            snapshot_log_ratio_percent: 0,
            // Sometimes the writer collects after its clock moved on, sometimes never (it "died first").
            gc_age_ms_min: if rng.below(2) == 0 { 1_000 } else { u64::MAX },
            request_timeout_ms: 10_000,
            ..MirrorSettings::default()
        };
        let inputs = rng.below(6) as u32 + 2;
        let table = DirTable::new(Arc::new(InMemory::new()), Path::from("table"));
        let process = ProcessCrash::new();
        let backend = CrashBackend::new();
        backend.attach(&process);
        let faults = FaultStore::new(bucket.clone());
        faults.attach(&process);
        let log = vec![format!(
            "snapshot every {} records, writer gc after {} ms, {inputs} inputs",
            settings.snapshot_interval_records, settings.gc_age_ms_min
        )];
        let clock = ManualClock::new(0);
        Self { rng, bucket, faults, process, backend, store: None, table, clock, settings, inputs, files: 0, log }
    }

    /// A new process on the same machine (`local` the file it finds) or on a new one (an empty file: it restores
    /// from the mirror and takes it over with a new epoch).
    fn new_process(&mut self, local: CrashBackend) {
        self.process = ProcessCrash::new();
        self.backend = local;
        self.backend.attach(&self.process);
        self.faults = self.faults.fresh();
        self.faults.attach(&self.process);
    }

    /// The open store, opened (and recovered, as a job does first) if there is none. An open or a recovery
    /// that fails is a crash of that process: a new one tries again.
    async fn store(&mut self) -> &Store {
        let mut tries = 0;
        while self.store.is_none() {
            tries += 1;
            assert!(tries < 10, "the job could not open in 10 tries\n{}", self.log.join("\n"));
            let opened = Store::builder(job(), target())
                .backend(self.backend.clone())
                .mirror(Arc::new(self.faults.clone()), Path::from(PREFIX), self.settings.clone())
                .clock(Arc::new(self.clock.clone()))
                .open()
                .await;
            let store = match opened {
                Ok(store) => store,
                Err(e) => {
                    self.failed("open", &e).await;
                    continue;
                }
            };
            self.log.push(format!("opened at epoch {}", store.epoch()));
            match Committer::new(&store, &self.table).recover().await {
                Ok(_) => self.store = Some(store),
                Err(e) => {
                    self.store = Some(store);
                    self.failed("recover", &e).await;
                }
            }
        }
        self.store.as_ref().unwrap()
    }

    /// What a job does when a call fails: a refusal of the call is its answer; anything else ends the process,
    /// and the job runs again (on the crash image, if the process died mid-write).
    async fn failed(&mut self, what: &str, e: &sinkpoint::Error) {
        if common::process_ends_after(what, e, &mut self.log) {
            self.end_process().await;
        }
    }

    /// Ends the running process: what its local file durably holds is what the next process on this machine
    /// finds (all of it after a clean end).
    async fn end_process(&mut self) {
        match self.store.take() {
            // A dead process's store cannot reach anything any more: dropping it is all that is left.
            Some(store) if self.process.is_dead() => drop(store),
            Some(store) => store.close_async().await,
            None => {}
        }
        // The process may also die while it closes (its crash point was still ahead).
        let local = if self.backend.is_dead() { self.backend.crash_image() } else { self.backend.clone() };
        self.new_process(local);
    }

    async fn call<T>(&mut self, what: String, result: sinkpoint::Result<T>) {
        match result {
            Ok(_) => self.log.push(what),
            Err(e) => self.failed(&what, &e).await,
        }
    }

    async fn step(&mut self) {
        let input = self.rng.below(u64::from(self.inputs)) as u32;
        match self.rng.below(16) {
            0..=3 => {
                // The current attempt's task, or now and then a stale attempt's (a duplicated task, refused).
                let current = self.store().await.get(&id(input)).unwrap().map_or(0, |info| info.attempt.get());
                let attempt = current.saturating_sub(u32::from(self.rng.below(4) == 0));
                self.files += 1;
                let result =
                    WriteResult::new(Format::Parquet, format!("f{}.parquet", self.files).into_bytes()).unwrap();
                let part =
                    StagePart::new(Attempt::new(attempt), Part::FIRST).keys(vec![key(input)]).results(vec![result]);
                let r = self.store().await.stage(&id(input), part).await;
                self.call(format!("stage {input} attempt {attempt}"), r).await;
            }
            4..=6 => {
                let r = self.store().await.seal(&id(input), 1).await;
                self.call(format!("seal {input}"), r).await;
            }
            7 => {
                let r = self.store().await.restart(&id(input)).await;
                self.call(format!("restart {input}"), r).await;
            }
            8 => {
                let r = self.store().await.abort(&id(input)).await;
                self.call(format!("abort {input}"), r).await;
            }
            9 | 10 => {
                let table = self.table.clone();
                let store = self.store().await;
                let r = Committer::new(store, &table).commit_pending().await;
                self.call("commit".into(), r).await;
            }
            11 => {
                self.log.push("the job stops and runs again on the same machine".into());
                self.end_process().await;
            }
            12 => {
                let k = self.process.ops() + self.rng.below(25) + 1;
                self.log.push(format!("the process will die at I/O point {k}"));
                self.process.crash_at(Some(k));
            }
            13 => {
                // A new machine: its empty file is restored from the mirror, and its claim fences every older epoch.
                self.log.push("the job moves to a new machine (a takeover)".into());
                self.end_process().await;
                self.new_process(CrashBackend::new());
            }
            14 => {
                let fault = if self.rng.below(2) == 0 { PutFault::FailAfter } else { PutFault::FailBefore };
                let place = ["/manifest/", "/snapshot/", "/wal/"][self.rng.below(3) as usize];
                self.log.push(format!("the next put under {place} fails {fault:?}"));
                self.faults.fail_puts(fault, place, 1);
            }
            _ => {
                let ms = self.rng.below(1_500);
                self.log.push(format!("the writer's clock moves {ms} ms"));
                self.clock.advance(ms);
            }
        }
        if self.process.is_dead() && self.store.is_some() {
            self.log.push("the process died".into());
            self.end_process().await;
        }
    }

    /// The random job, then one last run that stops: no writer is left when the operator collects.
    /// Returns what that run's store holds, read before it closed.
    async fn run(&mut self) -> Digest {
        let steps = self.rng.below(STEPS_MAX) + 1;
        for _ in 0..steps {
            self.step().await;
        }
        // The last run: a process of its own (no crash point left from the steps), which then stops.
        self.log.push("-- the last run: a clean process, then the job stops".into());
        self.end_process().await;
        self.store().await;
        if self.rng.below(2) == 0 {
            // It stops with snapshots it could not name: every manifest put fails (after its open) while it writes
            // more than a snapshot interval of records (new inputs, so that none is refused).
            self.log.push("its manifest puts all fail from now on".into());
            self.faults.fail_puts(PutFault::FailBefore, "/manifest/", u32::MAX);
            for n in 0..=self.settings.snapshot_interval_records as u32 {
                let input = self.inputs + n;
                let part = StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key(input)]);
                let r = self.store().await.stage_and_seal(&id(input), part, 1).await;
                let failed = r.is_err();
                self.call(format!("stage and seal {input}"), r).await;
                if failed {
                    break;
                }
            }
        }
        let last = Digest::of_store(self.store().await);
        self.end_process().await;
        last
    }

    async fn keys(&self) -> BTreeSet<String> {
        use futures::TryStreamExt as _;
        self.bucket.list(Some(&Path::from(PREFIX))).map_ok(|m| m.location.to_string()).try_collect().await.unwrap()
    }

    /// The invariant (see the file's docs). Returns how many superseded and stray objects were collected.
    async fn check(&self) -> (usize, usize) {
        let prefix = Path::from(PREFIX);
        let before_keys = self.keys().await;
        let before = Digest::of_mirror(&self.bucket).await.unwrap_or_else(|e| panic!("restore before gc: {e}"));
        if std::env::var_os("SINKPOINT_GC_LOG").is_some() {
            eprintln!("objects before gc: {before_keys:?}");
        }

        // Ages are the store's against this far-off "now", with a minimum age of 0: all garbage is due.
        let now = SystemClock.wall_ms() + 24 * 3600 * 1000;
        let events = Arc::new(Mutex::new(Vec::new()));
        let record = {
            let events = events.clone();
            Arc::new(move |p: Progress| events.lock().unwrap().push(p))
        };
        let garbage = find_mirror_garbage(self.bucket.clone(), prefix.clone(), now, 0, record.clone()).await.unwrap();
        assert!(garbage.young.is_empty(), "young garbage at a minimum age of 0: {:?}", garbage.young);
        let due: BTreeSet<String> = garbage.due.iter().map(|o| o.path.to_string()).collect();
        assert_eq!(due.len(), garbage.due.len(), "an object reported twice: {:?}", garbage.due);
        assert!(due.is_subset(&before_keys), "reported objects that are not there: {:?}", due.difference(&before_keys));
        assert!(!due.contains(garbage.newest_manifest.as_ref()), "the newest manifest was reported as garbage");
        assert_eq!(
            events.lock().unwrap().last(),
            Some(&Progress::Listed(before_keys.len() as u64)),
            "the progress did not count every object listed"
        );

        events.lock().unwrap().clear();
        let deleted = delete_mirror_garbage(self.bucket.clone(), prefix.clone(), &garbage, record).await.unwrap();
        assert_eq!(deleted, due.len() as u64);
        let of = due.len() as u64;
        let deletes: Vec<Progress> = (1..=of).map(|done| Progress::Deleted { done, of }).collect();
        assert_eq!(*events.lock().unwrap(), deletes, "the progress did not tell each delete");
        let after_keys = self.keys().await;
        let expected: BTreeSet<String> = before_keys.difference(&due).cloned().collect();
        assert_eq!(after_keys, expected, "the collection deleted other than exactly what it reported");

        let after = Digest::of_mirror(&self.bucket).await.unwrap_or_else(|e| panic!("restore after gc: {e}"));
        assert_eq!(after, before, "the restore after gc differs from the restore before it");

        let again = find_mirror_garbage(self.bucket.clone(), prefix.clone(), now, 0, no_progress()).await.unwrap();
        assert!(again.due.is_empty() && again.young.is_empty(), "a second gc found {:?}", again.due);

        // A real restore (a takeover into a new file) holds the same state.
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("restored.redb");
        let restored = Store::builder(job(), target())
            .path(&file)
            .mirror(self.bucket.clone(), prefix, self.settings.clone())
            .open()
            .await
            .unwrap_or_else(|e| panic!("a takeover after gc: {e}"));
        restored.close_async().await;
        let taken = Digest::of_inspector(&Inspector::open_file(&file).unwrap()).unwrap();
        assert_eq!(taken.state, before.state, "a takeover after gc restored another state");
        let strays = garbage.due.iter().filter(|o| o.reason == MirrorReason::Stray).count();
        (garbage.due.len() - strays, strays)
    }
}

/// What a restore holds. `state` is what a takeover keeps (it adds its own epoch and `Open` record); `whole`
/// adds the summary and the verified counts, which a read-only restore of an unchanged mirror repeats exactly.
#[derive(PartialEq, Eq, Debug)]
struct Digest {
    state: Vec<String>,
    whole: Vec<String>,
}

impl Digest {
    async fn of_mirror(bucket: &Arc<dyn ObjectStore>) -> sinkpoint::Result<Digest> {
        Digest::of_inspector(&Inspector::open_mirror(bucket.clone(), Path::from(PREFIX)).await?)
    }

    fn of_inspector(inspector: &Inspector) -> sinkpoint::Result<Digest> {
        let mut state = Vec::new();
        for filter in StateFilter::ALL {
            state.extend(inspector.list(filter)?.iter().map(|info| format!("{info:?}")));
        }
        for key in inspector.processed_keys() {
            state.push(format!("key {}", String::from_utf8_lossy(&key?)));
        }
        state.extend(inspector.commits()?.iter().map(|commit| format!("{commit:?}")));
        let summary = inspector.summary()?;
        state.push(format!(
            "next key {} in flight {:?} finished {}",
            summary.next_key, summary.in_flight, summary.finished
        ));
        let whole = vec![format!("{summary:?}"), format!("{:?}", inspector.verify()?)];
        Ok(Digest { state, whole })
    }

    /// The part of `state` a live store answers too (its checkpoints and processed keys), for the harness's own
    /// check that the mirror holds what the last writer held.
    fn of_store(store: &Store) -> Digest {
        let mut state = Vec::new();
        for filter in StateFilter::ALL {
            state.extend(store.list(filter).unwrap().iter().map(|info| format!("{info:?}")));
        }
        for key in store.processed_keys() {
            state.push(format!("key {}", String::from_utf8_lossy(&key.unwrap())));
        }
        Digest { state, whole: Vec::new() }
    }
}

/// The suite's cases when `SINKPOINT_CASES` is not set.
const CASES_DEFAULT: u64 = 64;

sharded!(mod gc_after_any_job_keeps_every_restore_exactly_and_deletes_exactly_what_it_reports => run_shard);

/// One shard: its share of the cases, case `i` from seed base + `i`.
fn run_shard(shard: Shard) {
    let cases = testkit::cases(CASES_DEFAULT);
    let base = testkit::seed("SINKPOINT_GC_SEED");
    shard.announce("mirror gc model", cases, "SINKPOINT_GC_SEED", base);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (mut superseded, mut strays, mut with_strays, mut takeovers) = (0, 0, 0, 0);
    for i in shard.range(cases) {
        let seed = base.wrapping_add(i);
        rt.block_on(async {
            let mut case = Case::new(seed);
            let run = std::panic::AssertUnwindSafe(async {
                let last = case.run().await;
                let mirrored = Digest::of_mirror(&case.bucket).await.unwrap();
                let checkpoints_and_keys = |d: &Digest| -> Vec<String> {
                    d.state
                        .iter()
                        .filter(|l| !l.starts_with("CommitInfo") && !l.starts_with("next key"))
                        .cloned()
                        .collect()
                };
                assert_eq!(checkpoints_and_keys(&mirrored), last.state, "the mirror does not hold what the job held");
                let (s, t) = case.check().await;
                (superseded, strays) = (superseded + s, strays + t);
                with_strays += usize::from(t > 0);
                takeovers += usize::from(case.log.iter().any(|l| l.contains("a takeover")));
            });
            let outcome = futures::FutureExt::catch_unwind(run).await;
            if std::env::var_os("SINKPOINT_GC_LOG").is_some() {
                eprintln!("case seed {seed}:\n{}\n", case.log.join("\n"));
            }
            if let Err(panic) = outcome {
                eprintln!("case seed {seed} failed (replay: SINKPOINT_GC_SEED={seed} SINKPOINT_CASES=1); its log:");
                eprintln!("{}", case.log.join("\n"));
                std::panic::resume_unwind(panic);
            }
        });
    }
    eprintln!(
        "mirror gc model, shard {shard}: {superseded} superseded and {strays} stray objects collected; \
         {with_strays} jobs left strays, {takeovers} moved machines"
    );
}
