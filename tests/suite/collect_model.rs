//! The data-file collector (`sinkpoint::gc::collect_data_files`) over random jobs on the reference table: stages by the
//! current attempt and by duplicated tasks of a stale attempt (refused; the loser discards its file half the
//! time), seals, restarts (also of orphans after a reopen), aborts, force-aborts, commits, collections with and
//! without `apply` at random grace periods, clean reopens, crashes at a random I/O point of the local file (a
//! collection's forget included), and a wall clock that moves. Data files are named uniquely per write, or, in
//! half the cases, by input alone: a data file is written once, so a retried attempt takes the dropped attempt's
//! very name again once the collector deleted it, and a name of its own while the old file is there.
//!
//! After every collection, every file a table commit references must still be readable, and so must every file
//! an acknowledged stage of a checkpoint's current attempt named while the store holds it. At the end the job is
//! finished (every input re-staged as needed, sealed, committed) and collected once more past the grace period:
//!
//! - the table holds each input's row exactly once and every file it references exists (nothing it may
//!   reference later was deleted earlier);
//! - the ledger is empty, and no data file whose stage was acknowledged is left unless the table references it
//!   (every orphan the ledger could name was deleted); the files left are only those whose stage was never
//!   acknowledged (a crash between the write and the stage: named nowhere, out of the collector's reach).
//!
//! Four shards (`collect_model::the_collector_deletes_every_orphan_it_can_name_and_nothing_the_table_may_reference::
//! shard_N_of_4`) that the test harness runs in parallel. `SINKPOINT_CASES` sets the case count (default 64, split
//! over the shards); `SINKPOINT_COLLECT_SEED` replays a run (the base seed is printed; case `i` runs from the base
//! plus `i`, and a failing case prints its own seed and its log).

use crate::common;
use common::sharded;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use futures::TryStreamExt as _;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt as _};
use sinkpoint::gc::{CollectSettings, collect_data_files};
use sinkpoint::testkit::{self, CrashBackend, ManualClock, ProcessCrash, Shard, SplitMix64};
use sinkpoint::{
    Attempt, CheckpointId, CheckpointState, Clock as _, Committer, DirTable, JobId, Part, StagePart, Store,
    SystemClock, TargetIdentity, TransitionError,
};

const STEPS_MAX: u64 = 80;
const HOUR_MS: u64 = 3_600_000;

fn id(input: u32) -> CheckpointId {
    CheckpointId::new(format!("input-{input:03}")).unwrap()
}

struct Case {
    rng: SplitMix64,
    process: ProcessCrash,
    backend: CrashBackend,
    store: Option<Store>,
    table: DirTable,
    objects: Arc<InMemory>,
    clock: ManualClock,
    inputs: u32,
    /// Files named by input alone (a retried attempt rewrites the name) rather than uniquely per write.
    reuse_names: bool,
    writes: u32,
    /// Files whose stage (or discard) was acknowledged: the ledger or a live part names them.
    acknowledged: BTreeSet<String>,
    /// The files each acknowledged stage named, by input and attempt.
    staged: BTreeMap<(u32, u32), BTreeSet<String>>,
    log: Vec<String>,
}

impl Case {
    fn new(seed: u64) -> Self {
        let mut rng = SplitMix64::new(seed);
        let inputs = rng.below(5) as u32 + 2;
        let reuse_names = rng.below(2) == 0;
        let objects = Arc::new(InMemory::new());
        let table = DirTable::new(objects.clone(), Path::from("table"));
        let process = ProcessCrash::new();
        let backend = CrashBackend::new();
        backend.attach(&process);
        let log = vec![format!("{inputs} inputs, names {}", if reuse_names { "reused" } else { "unique" })];
        let clock = ManualClock::new(SystemClock.wall_ms());
        Self {
            rng,
            process,
            backend,
            store: None,
            table,
            objects,
            clock,
            inputs,
            reuse_names,
            writes: 0,
            acknowledged: BTreeSet::new(),
            staged: BTreeMap::new(),
            log,
        }
    }

    async fn store(&mut self) -> &Store {
        let mut tries = 0;
        while self.store.is_none() {
            tries += 1;
            assert!(tries < 10, "the job could not open in 10 tries\n{}", self.log.join("\n"));
            let opened = Store::builder(JobId::new("collect-model").unwrap(), TargetIdentity::new("dir:t").unwrap())
                .backend(self.backend.clone())
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

    async fn failed(&mut self, what: &str, e: &sinkpoint::Error) {
        if common::process_ends_after(what, e, &mut self.log) {
            self.end_process().await;
        }
    }

    async fn end_process(&mut self) {
        match self.store.take() {
            Some(store) if self.process.is_dead() => drop(store),
            Some(store) => store.close_async().await,
            None => {}
        }
        let local = if self.backend.is_dead() { self.backend.crash_image() } else { self.backend.clone() };
        self.process = ProcessCrash::new();
        self.backend = local;
        self.backend.attach(&self.process);
    }

    /// Writes a data file for `input` and stages it as part 0 of `attempt`; an orphan is restarted and staged
    /// again as its retried task would. A refused stale attempt (a duplicated task) discards its file now and
    /// then. Returns whether the stage was acknowledged.
    async fn write_and_stage(&mut self, input: u32, attempt: u32) -> bool {
        self.writes += 1;
        // A data file is written once: a reused name is taken again only once the collector deleted it.
        let reused = format!("in{input:03}");
        let fresh = format!("in{input:03}-w{:04}", self.writes);
        let mut name = if self.reuse_names { reused } else { fresh.clone() };
        if let Err(e) = self.table.write_data_file(&name, format!("{input} {name}").into_bytes()).await {
            assert_eq!(e.kind(), sinkpoint::ErrorKind::InvalidInput, "{e}");
            name = fresh;
            self.table.write_data_file(&name, format!("{input} {name}").into_bytes()).await.unwrap();
        }
        // A new file under the name: what an earlier stage of the name acknowledged was deleted with the old one.
        self.acknowledged.remove(&name);
        let result =
            sinkpoint::WriteResult::new(sinkpoint::Format::Other("dir-table".into()), name.clone().into()).unwrap();
        let part = |a: u32| {
            StagePart::new(Attempt::new(a), Part::FIRST)
                .keys(vec![format!("in-{input}").into_bytes()])
                .results(vec![result.clone()])
        };
        let mut used = attempt;
        let staged = self.store().await.stage(&id(input), part(attempt)).await;
        let staged = match staged {
            Err(e) if matches!(e.transition(), Some(TransitionError::Orphaned { .. })) => {
                let restarted = self.store().await.restart(&id(input)).await;
                used = attempt + 1;
                match restarted {
                    Ok(_) => self.store().await.stage(&id(input), part(used)).await,
                    Err(e) => Err(e),
                }
            }
            Err(e) if matches!(e.transition(), Some(TransitionError::StaleAttempt { .. })) => {
                self.log.push(format!("stage {input} attempt {attempt} refused as stale: {name}"));
                if self.rng.below(2) == 0 {
                    let r = self.store().await.discard(&id(input), Attempt::new(attempt), vec![result.clone()]).await;
                    let ok = r.is_ok();
                    self.call(format!("discard {name}"), r).await;
                    if ok {
                        self.acknowledged.insert(name);
                    }
                }
                return false;
            }
            other => other,
        };
        let ok = staged.is_ok();
        self.call(format!("stage {input} attempt {used}: {name}"), staged).await;
        if ok {
            self.staged.entry((input, used)).or_default().insert(name.clone());
            self.acknowledged.insert(name);
        }
        ok
    }

    /// Every file an acknowledged stage of a checkpoint's current attempt named still exists while the store
    /// holds that attempt's parts (Staged, Sealed, Committing, CommitUnknown).
    async fn check_live_files(&mut self) {
        for input in 0..self.inputs {
            let Some(info) = self.store().await.get(&id(input)).unwrap() else { continue };
            if matches!(info.state, CheckpointState::Committed { .. } | CheckpointState::Aborted) {
                continue;
            }
            for name in self.staged.get(&(input, info.attempt.get())).into_iter().flatten() {
                let path = Path::from(format!("table/data/{name}"));
                assert!(
                    self.objects.head(&path).await.is_ok(),
                    "{name}, named by the {:?} attempt {} of input {input}, was deleted\n{}",
                    info.state,
                    info.attempt,
                    self.log.join("\n")
                );
            }
        }
    }

    async fn call<T>(&mut self, what: String, result: sinkpoint::Result<T>) {
        match result {
            Ok(_) => self.log.push(what),
            Err(e) => self.failed(&what, &e).await,
        }
    }

    async fn collect(&mut self, grace_ms: u64, apply: bool) {
        let settings = CollectSettings { grace_ms, apply };
        let (table, clock) = (self.table.clone(), self.clock.clone());
        let r = collect_data_files(self.store().await, &table, &clock, &settings).await;
        let what = match &r {
            Ok(report) => format!(
                "collect (grace {grace_ms} ms, apply {apply}): {} entries, {:?}",
                report.entries,
                report.files.iter().map(|f| (f.file.as_str(), f.verdict)).collect::<Vec<_>>()
            ),
            Err(_) => format!("collect (grace {grace_ms} ms, apply {apply})"),
        };
        self.call(what, r).await;
        if let Err(e) = self.table.rows().await {
            panic!("a file the table references is gone after a collection: {e}\n{}", self.log.join("\n"));
        }
        if self.store.is_some() {
            self.check_live_files().await;
        }
    }

    async fn step(&mut self) {
        let input = self.rng.below(u64::from(self.inputs)) as u32;
        match self.rng.below(16) {
            0..=3 => {
                let current = self.store().await.get(&id(input)).unwrap().map_or(0, |info| info.attempt.get());
                let attempt = current.saturating_sub(u32::from(self.rng.below(4) == 0));
                self.write_and_stage(input, attempt).await;
            }
            4 | 5 => {
                let r = self.store().await.seal(&id(input), 1).await;
                self.call(format!("seal {input}"), r).await;
            }
            6 => {
                let r = self.store().await.restart(&id(input)).await;
                self.call(format!("restart {input}"), r).await;
            }
            7 => {
                let r = self.store().await.abort(&id(input)).await;
                self.call(format!("abort {input}"), r).await;
            }
            8 => {
                let r = self.store().await.operator().force_abort(&[id(input)], "the model").await;
                self.call(format!("force_abort {input}"), r).await;
            }
            9 | 10 => {
                let table = self.table.clone();
                let r = Committer::new(self.store().await, &table).commit_pending().await;
                self.call("commit".into(), r).await;
            }
            11 | 12 => {
                let grace = if self.rng.below(2) == 0 { 0 } else { HOUR_MS };
                let apply = self.rng.below(4) != 0;
                self.collect(grace, apply).await;
            }
            13 => {
                let k = self.process.ops() + self.rng.below(25) + 1;
                self.log.push(format!("the process will die at I/O point {k}"));
                self.process.crash_at(Some(k));
            }
            14 => {
                self.log.push("the job stops and runs again".into());
                self.end_process().await;
            }
            _ => {
                let ms = self.rng.below(2 * HOUR_MS);
                self.log.push(format!("the clock moves {ms} ms"));
                self.clock.advance(ms);
            }
        }
        if self.process.is_dead() && self.store.is_some() {
            self.log.push("the process died".into());
            self.end_process().await;
        }
    }

    /// Finishes the job in a clean process: every input not Sealed or later is (re)staged and sealed.
    async fn finish(&mut self) {
        self.log.push("-- finish: a clean process".into());
        self.end_process().await;
        for input in 0..self.inputs {
            let info = self.store().await.get(&id(input)).unwrap();
            let attempt = match info.map(|i| (i.state, i.attempt.get())) {
                None => 0,
                Some((CheckpointState::Staged | CheckpointState::Aborted, a)) => {
                    self.store().await.restart(&id(input)).await.unwrap();
                    a + 1
                }
                Some(_) => continue,
            };
            assert!(self.write_and_stage(input, attempt).await, "{}", self.log.join("\n"));
            self.store().await.seal(&id(input), 1).await.unwrap();
        }
        let table = self.table.clone();
        Committer::new(self.store().await, &table).finish().await.unwrap();
        self.clock.advance(2 * HOUR_MS);
        self.collect(HOUR_MS, true).await;
    }

    async fn check(&mut self) {
        let log = self.log.join("\n");
        let rows = self.table.rows().await.unwrap_or_else(|e| panic!("{e}\n{log}"));
        let mut per_input: BTreeMap<u32, u32> = BTreeMap::new();
        for row in &rows {
            let input: u32 = row.split(' ').next().unwrap().parse().unwrap();
            *per_input.entry(input).or_default() += 1;
        }
        let expected: BTreeMap<u32, u32> = (0..self.inputs).map(|i| (i, 1)).collect();
        assert_eq!(per_input, expected, "each input's row once\n{log}");
        assert!(self.store().await.garbage(None, 10).unwrap().is_empty(), "the ledger is not empty\n{log}");
        let referenced: BTreeSet<String> =
            self.table.commits().await.unwrap().into_iter().flat_map(|c| c.files).collect();
        let data = Path::from("table/data");
        let left: Vec<String> = self
            .objects
            .list(Some(&data))
            .map_ok(|m| m.location.filename().unwrap().to_owned())
            .try_collect()
            .await
            .unwrap();
        for file in left {
            assert!(
                referenced.contains(&file) || !self.acknowledged.contains(&file),
                "orphan {file} was staged (so dropped into the ledger) but not collected\n{log}"
            );
        }
        self.end_process().await;
    }
}

/// The suite's cases when `SINKPOINT_CASES` is not set.
const CASES_DEFAULT: u64 = 64;

sharded!(mod the_collector_deletes_every_orphan_it_can_name_and_nothing_the_table_may_reference => run_shard);

/// One shard: its share of the cases, case `i` from seed base + `i`.
fn run_shard(shard: Shard) {
    let cases = testkit::cases(CASES_DEFAULT);
    let base = testkit::seed("SINKPOINT_COLLECT_SEED");
    shard.announce("collect model", cases, "SINKPOINT_COLLECT_SEED", base);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (mut deleted, mut kept_live) = (0usize, 0usize);
    for i in shard.range(cases) {
        let seed = base.wrapping_add(i);
        rt.block_on(async {
            let mut case = Case::new(seed);
            let run = std::panic::AssertUnwindSafe(async {
                let steps = case.rng.below(STEPS_MAX) + 1;
                for _ in 0..steps {
                    case.step().await;
                }
                case.finish().await;
                case.check().await;
            });
            let outcome = futures::FutureExt::catch_unwind(run).await;
            deleted += case.log.iter().map(|l| l.matches("Deleted").count()).sum::<usize>();
            kept_live += case.log.iter().map(|l| l.matches("Live").count()).sum::<usize>();
            if let Err(panic) = outcome {
                eprintln!(
                    "case seed {seed} failed (replay: SINKPOINT_COLLECT_SEED={seed} SINKPOINT_CASES=1); its log:"
                );
                eprintln!("{}", case.log.join("\n"));
                std::panic::resume_unwind(panic);
            }
        });
    }
    let ran = shard.range(cases).end - shard.range(cases).start;
    eprintln!("collect model, shard {shard}: {deleted} files deleted, {kept_live} kept as live, over {ran} cases");
    // A replay of one case may well delete nothing; a shard of 8 cases or more that never does means the model
    // does not exercise the collector.
    assert!(ran < 8 || deleted > 0, "no case deleted anything: the model does not exercise the collector");
}
