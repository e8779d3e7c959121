//! The model test of a job that decides key exclusivity at adoption (`KeyExclusivity::AtAdoption`): each task
//! seals a checkpoint of several inputs (`CheckpointId::for_keys`) with one create and claims no key, and the
//! input split changes between attempts (an engine re-planning its tasks), so two sealed checkpoints can share an
//! input. Over an in-memory object store with injected faults: retried and speculative tasks, zombies that seal
//! late, tasks that die, lost acknowledgements, committers that restart or lose their disk, rounds that adopt and
//! commit later, an operator force-aborting a Sealed checkpoint. The driver then runs what the committer's store
//! holds unprocessed until nothing is. After every case the table must hold each input exactly once, only from the
//! latest seal of a checkpoint that succeeded; the claims hold one generation per seal that succeeded
//! (a seal succeeds again only after the committer released the one before: force-aborted, or refused at adoption
//! and its key freed since); a released seal's file is never committed and is in the garbage ledger, and the
//! latest seal's file is committed or in the ledger.
//!
//! Four shards (`shared_split_model::tasks_of_changing_splits_commit_every_input_exactly_once::shard_N_of_4`).
//! `SINKPOINT_CASES` sets the case count (default 500, split over the shards); `SINKPOINT_SPLIT_SEED` replays a
//! run (the base seed is printed; case `i` runs from the base plus `i`, and a failing case prints its own seed and
//! its log).

use crate::common::sharded;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use object_store::ObjectStore;
use object_store::memory::InMemory;
use object_store::path::Path;
use sinkpoint::mirror::MirrorSettings;
use sinkpoint::shared::{AdoptReport, Inbox, KeyExclusivity, SharedStaging, Worker};
use sinkpoint::testkit::{self, FaultStore, PutFault, Shard, SplitMix64};
use sinkpoint::{
    Attempt, CheckpointId, Committer, DirTable, JobId, Part, StagePart, StateFilter, Store, TargetIdentity,
    TransitionError, WriteResult,
};

/// One attempt of a task: its inputs, its file, and whether it stages and seals in one call.
struct Task {
    id: CheckpointId,
    inputs: Vec<u32>,
    worker: Worker,
    file: String,
    result: WriteResult,
    one_call: bool,
}

struct Case {
    rng: SplitMix64,
    objects: Arc<FaultStore<InMemory>>,
    shared: SharedStaging,
    table: DirTable,
    dir: tempfile::TempDir,
    store: Option<Store>,
    live: Vec<Task>,
    /// Checkpoint → the file (and its write result) of each attempt whose seal succeeded, in order. A seal
    /// succeeds again only after the committer released the claim of the one before (its store dropped it: an
    /// operator's force-abort, or a refusal at adoption whose key was freed since).
    sealed: BTreeMap<CheckpointId, Vec<(String, WriteResult)>>,
    /// Files of attempts told they lost, or that died: none may ever be committed.
    losers: Vec<String>,

    sessions: u128,
    log: Vec<String>,
}

const STEPS_MAX: u64 = 40;
/// The most inputs one task holds.
const TASK_INPUTS_MAX: u64 = 3;
/// The most runs the driver makes after the random steps before every input must be processed.
const DRIVER_RUNS_MAX: usize = 20;

impl Case {
    fn new(seed: u64) -> Self {
        let objects = Arc::new(FaultStore::new(InMemory::new()));
        let dyn_objects: Arc<dyn ObjectStore> = objects.clone();
        let shared = SharedStaging::new(dyn_objects.clone(), "staging", JobId::new("split").unwrap())
            .unwrap()
            .with_key_exclusivity(KeyExclusivity::AtAdoption);
        let table = DirTable::new(dyn_objects, Path::from("table"));
        let (live, sealed, losers, log) = (Vec::new(), BTreeMap::new(), Vec::new(), Vec::new());
        let rng = SplitMix64::new(seed);
        let dir = tempfile::tempdir().unwrap();
        Self { rng, objects, shared, table, dir, store: None, live, sealed, losers, sessions: 0, log }
    }

    /// The committer's store, reopened if it crashed (an open that fails is a crash too: it runs again).
    async fn store(&mut self) -> &Store {
        let mut tries = 0;
        while self.store.is_none() {
            tries += 1;
            assert!(tries < 20, "the committer could not reopen in 20 tries\n{}", self.log.join("\n"));
            let objects: Arc<dyn ObjectStore> = self.objects.clone();
            let opened = Store::builder(JobId::new("split").unwrap(), TargetIdentity::new("dir:table").unwrap())
                .path(self.dir.path().join("committer.redb"))
                .mirror(objects, Path::from("mirror"), MirrorSettings::default())
                .open()
                .await;
            match opened {
                Ok(store) => self.store = Some(store),
                Err(e) => self.log.push(format!("committer open failed: {e}")),
            }
        }
        self.store.as_ref().unwrap()
    }

    /// A task attempt over `inputs` starts: it writes its file, and stages it unless it will stage and seal in
    /// one call.
    async fn start(&mut self, inputs: Vec<u32>) {
        self.sessions += 1;
        let worker = Worker::with_session(self.shared.clone(), &format!("t{}", self.sessions), self.sessions).unwrap();
        let file = format!("t{}", self.sessions);
        let rows: String = inputs.iter().map(|i| format!("row-{i}\n")).collect();
        let result = self.table.write_data_file(&file, rows.into_bytes()).await.unwrap();
        let keys: Vec<Vec<u8>> = inputs.iter().map(|i| key(*i)).collect();
        let id = CheckpointId::for_keys(&keys.iter().map(Vec::as_slice).collect::<Vec<_>>());
        let one_call = self.rng.below(2) == 0;
        self.log.push(format!("{file} starts on {inputs:?} as {id}"));
        let task = Task { id, inputs, worker, file, result, one_call };
        if !one_call {
            let part = StagePart::new(Attempt::FIRST, Part::FIRST).keys(keys).results(vec![task.result.clone()]);
            if let Err(e) = task.worker.stage(&task.id, part).await {
                // An injected failure: the task fails and is retried as a new attempt.
                self.log.push(format!("stage of {} failed: {e}", task.file));
                self.losers.push(task.file);
                return;
            }
        }
        self.live.push(task);
    }

    /// A random task: 1 to `TASK_INPUTS_MAX` distinct inputs of the job, done or not (a retry, a re-split).
    async fn start_random(&mut self, inputs: u32) {
        let size = (self.rng.below(TASK_INPUTS_MAX) + 1).min(u64::from(inputs));
        let mut chosen = BTreeSet::new();
        while (chosen.len() as u64) < size {
            chosen.insert(self.rng.below(u64::from(inputs)) as u32);
        }
        self.start(chosen.into_iter().collect()).await;
    }

    async fn seal(&mut self, at: usize) {
        let task = self.live.swap_remove(at);
        let outcome = seal_call(&task).await;
        match outcome {
            Ok(()) => {
                self.log.push(format!("{} sealed {}", task.file, task.id));
                self.sealed.entry(task.id.clone()).or_default().push((task.file.clone(), task.result.clone()));
            }
            Err(e) if matches!(e.transition(), Some(TransitionError::SealLost { .. })) => {
                self.log.push(format!("{} lost: {e}", task.file));
                self.losers.push(task.file);
            }
            Err(e) => panic!("seal of {}: {e}\n{}", task.file, self.log.join("\n")),
        }
    }

    /// One adoption round, and a commit in half of them; a failure (an injected fault) is a committer crash: it reopens
    /// next round.
    async fn commit_round(&mut self, finish: bool) -> bool {
        let inbox = Inbox::new(self.shared.clone());
        let table = self.table.clone();
        // Half the rounds read the claims of the checkpoints the tasks reported (as a driver does), half list.
        let expected: Option<Vec<CheckpointId>> =
            (self.rng.below(2) == 0 && !finish).then(|| self.sealed.keys().cloned().collect());
        // Some rounds adopt and leave the commit to a later one: their checkpoints stay Sealed meanwhile.
        let commit = self.rng.below(2) == 0;
        let store = self.store().await;
        let outcome = async {
            let report: AdoptReport = match &expected {
                Some(ids) => inbox.adopt_expected(store, ids).await?,
                None => inbox.adopt(store).await?,
            };
            let committer = Committer::new(store, &table);
            if finish {
                committer.finish().await?;
            } else if commit {
                committer.commit_pending().await?;
            }
            Ok::<_, sinkpoint::Error>(report)
        }
        .await;
        match outcome {
            Ok(report) => {
                let refused: Vec<&CheckpointId> = report.refused.iter().map(|r| &r.id).collect();
                self.log.push(format!("round: adopted {:?}, refused {refused:?}", report.adopted));
                true
            }
            Err(e) => {
                self.log.push(format!("committer failed: {e}; it restarts"));
                self.restart_committer(false).await;
                false
            }
        }
    }

    /// An operator force-aborts one Sealed checkpoint of the committer's store (its inputs are read again, and the
    /// next adoption round releases its claim); a failure is a committer crash.
    async fn force_abort(&mut self) {
        let store = self.store().await;
        let sealed = store.list(StateFilter::Sealed).unwrap();
        if sealed.is_empty() {
            return;
        }
        let id = sealed[self.rng.below(sealed.len() as u64) as usize].id.clone();
        let store = self.store.as_ref().unwrap();
        match store.operator().force_abort(std::slice::from_ref(&id), "the split model").await {
            Ok(_) => {
                self.log.push(format!("operator force-aborts {id}"));
            }
            Err(e) => {
                self.log.push(format!("force-abort of {id} failed: {e}; the committer restarts"));
                self.restart_committer(false).await;
            }
        }
    }

    async fn restart_committer(&mut self, lose_disk: bool) {
        if let Some(store) = self.store.take() {
            store.close_async().await;
        }
        if lose_disk {
            let _ = std::fs::remove_file(self.dir.path().join("committer.redb"));
        }
        self.log.push(format!("committer restarts (disk lost: {lose_disk})"));
    }

    async fn step(&mut self, inputs: u32) {
        match self.rng.below(11) {
            0..=2 => self.start_random(inputs).await,
            3..=5 if !self.live.is_empty() => {
                let at = self.rng.below(self.live.len() as u64) as usize;
                self.seal(at).await;
            }
            6 if !self.live.is_empty() => {
                let at = self.rng.below(self.live.len() as u64) as usize;
                let dead = self.live.swap_remove(at);
                self.log.push(format!("{} died", dead.file));
                self.losers.push(dead.file);
            }
            7 => {
                self.commit_round(false).await;
            }
            8 => {
                let lose_disk = self.rng.below(2) == 0;
                self.restart_committer(lose_disk).await;
            }
            9 => self.force_abort().await,
            _ => {
                let fault = if self.rng.below(2) == 0 { PutFault::FailAfter } else { PutFault::FailBefore };
                let place = ["claims", "inbox", "mirror", "table/_commits"][self.rng.below(4) as usize];
                self.objects.fail_puts(fault, place, 1);
                self.log.push(format!("next put under {place} fails {fault:?}"));
            }
        }
    }

    /// The random steps, the zombies' seals, then the driver's runs: each adopts everything (a listing round),
    /// commits, and runs what the committer's store holds unprocessed, in new tasks of a new split.
    async fn run(&mut self, inputs: u32) {
        for _ in 0..self.rng.below(STEPS_MAX) + 1 {
            self.step(inputs).await;
        }
        self.log.push("-- zombies seal, then the driver runs the job to completion".into());
        while !self.live.is_empty() {
            self.seal(0).await;
        }
        for run in 0.. {
            assert!(run < DRIVER_RUNS_MAX, "not done in {DRIVER_RUNS_MAX} runs\n{}", self.log.join("\n"));
            if !self.commit_round(true).await {
                continue;
            }
            let store = self.store().await;
            let rest: Vec<u32> = (0..inputs).filter(|i| !store.is_processed(&key(*i)).unwrap()).collect();
            if rest.is_empty() {
                return;
            }
            self.log.push(format!("driver run {run}: {rest:?} unprocessed"));
            for chunk in rest.chunks(self.rng.below(TASK_INPUTS_MAX) as usize + 1) {
                self.start(chunk.to_vec()).await;
            }
            while !self.live.is_empty() {
                self.seal(0).await;
            }
        }
    }

    async fn check(&mut self, inputs: u32) {
        let rows = self.table.rows().await.unwrap();
        let counts: Vec<usize> =
            (0..inputs).map(|i| rows.iter().filter(|r| **r == format!("row-{i}")).count()).collect();
        assert_eq!(counts, vec![1; inputs as usize], "each input's rows in the table");
        let commits = self.table.commits().await.unwrap();
        let committed: BTreeSet<&String> = commits.iter().flat_map(|c| c.files.iter()).collect();
        let winners: BTreeSet<&String> = self.sealed.values().filter_map(|s| s.last()).map(|(file, _)| file).collect();
        for file in &committed {
            assert!(winners.contains(file), "{file} was committed without a seal that succeeded");
        }
        for loser in &self.losers {
            assert!(!committed.contains(loser), "{loser} lost its seal or died, and was committed");
        }
        // Every succeeded seal's file is committed, or garbage the collector will delete.
        let store = self.store().await;
        let ledger = store.garbage(None, usize::MAX).unwrap();
        let results: Vec<WriteResult> = ledger.into_iter().map(|g| g.result).collect();
        // One claim generation per seal that succeeded (no key is claimed, so every claim object is one): two
        // attempts never both win one generation.
        let successes: usize = self.sealed.values().map(Vec::len).sum();
        assert_eq!(self.claim_objects().await, successes, "claim generations vs successful seals {:?}", self.sealed);
        for (id, seals) in &self.sealed {
            let (last, released) = seals.split_last().unwrap();
            for (file, result) in released {
                assert!(!committed.contains(file), "{file}, a released seal of {id}, was committed");
                assert!(results.contains(result), "{file}, a released seal of {id}, is not in the garbage ledger");
            }
            let (file, result) = last;
            assert!(
                committed.contains(file) || results.contains(result),
                "{file}, the seal of {id}, is neither committed nor in the garbage ledger"
            );
        }
    }

    /// How many claim objects (generations of every claim) the job's staging holds.
    async fn claim_objects(&self) -> usize {
        use futures::StreamExt as _;
        self.objects.list(Some(&Path::from("staging/jobs/split/shared/claims"))).count().await
    }
}

/// One seal call, retried while it is `Io` (an unsettled create under stacked faults: the call is idempotent).
async fn seal_call(task: &Task) -> sinkpoint::Result<()> {
    crate::common::retry_io(|| async {
        if task.one_call {
            let keys = task.inputs.iter().map(|i| key(*i)).collect();
            task.worker.stage_and_seal(&task.id, keys, vec![task.result.clone()]).await
        } else {
            task.worker.seal(&task.id, 1).await
        }
    })
    .await
}

fn key(input: u32) -> Vec<u8> {
    format!("s3://in/{input:03}.parquet").into_bytes()
}

/// The suite's cases when `SINKPOINT_CASES` is not set.
const CASES_DEFAULT: u64 = 500;

sharded!(mod tasks_of_changing_splits_commit_every_input_exactly_once => run_shard);

fn run_shard(shard: Shard) {
    let cases = testkit::cases(CASES_DEFAULT);
    let base = testkit::seed("SINKPOINT_SPLIT_SEED");
    shard.announce("split model", cases, "SINKPOINT_SPLIT_SEED", base);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    for i in shard.range(cases) {
        let seed = base.wrapping_add(i);
        rt.block_on(async {
            let mut case = Case::new(seed);
            let inputs = case.rng.below(6) as u32 + 1;
            let run = std::panic::AssertUnwindSafe(async {
                case.run(inputs).await;
                case.check(inputs).await;
            });
            if let Err(panic) = futures::FutureExt::catch_unwind(run).await {
                eprintln!(
                    "case seed {seed} failed (replay: SINKPOINT_SPLIT_SEED={seed} SINKPOINT_CASES=1); its log:\n{}",
                    case.log.join("\n")
                );
                std::panic::resume_unwind(panic);
            }
        });
    }
}
