//! The shared-staging model test (issue 12): simulated workers on many machines and one committer over an
//! in-memory object store with injected faults: duplicate and speculative attempts, zombies that seal late,
//! workers paused inside their seal (its put held at the store's gate while the job goes on), workers that die
//! after staging, puts whose acknowledgement is lost, committers that restart or lose their
//! disk mid-job. Half the attempts stage then seal (an inbox entry, then the claim), half call
//! `stage_and_seal` (the claim alone: the committer finds it only by listing the claims). After every case the
//! table must hold each input exactly once, written by the attempt whose seal succeeded, and nothing of any
//! attempt that lost.
//!
//! Four shards (`shared_model::workers_and_a_restarting_committer_commit_every_input_exactly_once::shard_N_of_4`)
//! that the test harness runs in parallel. `SINKPOINT_CASES` sets the case count (default 1,000, split over the
//! shards); `SINKPOINT_SHARED_SEED` replays a run (the base seed is printed; case `i` runs from the base plus `i`,
//! and a failing case prints its own seed and its log).

use crate::common::sharded;

use std::collections::BTreeMap;
use std::sync::Arc;

use object_store::ObjectStore;
use object_store::memory::InMemory;
use object_store::path::Path;
use sinkpoint::mirror::MirrorSettings;
use sinkpoint::shared::{Inbox, SharedStaging, Worker};
use sinkpoint::testkit::{self, FaultStore, PutFault, Shard, SplitMix64};
use sinkpoint::{CheckpointId, Committer, DirTable, JobId, Store, TargetIdentity, TransitionError, WriteResult};

/// One attempt of one input's task, staged and not yet sealed (or dead).
struct Live {
    input: u32,
    worker: Worker,
    file: String,
    /// For an attempt that calls `stage_and_seal`: its write result, staged by that call (nothing staged yet).
    one_call: Option<WriteResult>,
}

struct Case {
    rng: SplitMix64,
    objects: Arc<FaultStore<InMemory>>,
    shared: SharedStaging,
    table: DirTable,
    dir: tempfile::TempDir,
    store: Option<Store>,
    live: Vec<Live>,
    /// input → the data file of the attempt whose seal succeeded.
    winners: BTreeMap<u32, String>,
    /// Data files of attempts told they lost, or that died: none may ever be committed.
    losers: Vec<String>,
    sessions: u128,
    log: Vec<String>,
    /// A seal started with its claim's put held, and the input it is for.
    paused: Option<tokio::task::JoinHandle<(Live, sinkpoint::Result<()>)>>,
    paused_on: Option<u32>,
}

const STEPS_MAX: u64 = 40;

impl Case {
    fn new(seed: u64) -> Self {
        let objects = Arc::new(FaultStore::new(InMemory::new()));
        let dyn_objects: Arc<dyn ObjectStore> = objects.clone();
        let shared = SharedStaging::new(dyn_objects.clone(), "staging", JobId::new("model").unwrap()).unwrap();
        let table = DirTable::new(dyn_objects, Path::from("table"));
        let dir = tempfile::tempdir().unwrap();
        let (store, live, winners, losers, log) = (None, Vec::new(), BTreeMap::new(), Vec::new(), Vec::new());
        let (paused, paused_on) = (None, None);
        let rng = SplitMix64::new(seed);
        Self { rng, objects, shared, table, dir, store, live, winners, losers, sessions: 0, log, paused, paused_on }
    }

    /// The committer's store, reopened if it crashed; an open that fails (an injected fault) is a crash of
    /// the committer process, which is run again.
    async fn store(&mut self) -> &Store {
        let mut tries = 0;
        while self.store.is_none() {
            tries += 1;
            assert!(tries < 20, "the committer could not reopen in 20 tries\n{}", self.log.join("\n"));
            let objects: Arc<dyn ObjectStore> = self.objects.clone();
            let opened = Store::builder(JobId::new("model").unwrap(), TargetIdentity::new("dir:table").unwrap())
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

    async fn start(&mut self, input: u32) {
        self.sessions += 1;
        let worker = Worker::with_session(self.shared.clone(), &format!("w{input}"), self.sessions).unwrap();
        let file = format!("in-{input}-{}", self.sessions);
        let result = self.table.write_data_file(&file, format!("row-{input}\n").into_bytes()).await.unwrap();
        if self.rng.below(2) == 0 {
            // It will stage and seal in one call: nothing goes to the object store before its seal.
            self.live.push(Live { input, worker, file, one_call: Some(result) });
            return;
        }
        let id = CheckpointId::for_key(&key(input));
        let part = sinkpoint::StagePart::new(sinkpoint::Attempt::FIRST, sinkpoint::Part::FIRST)
            .keys(vec![key(input)])
            .results(vec![result]);
        match worker.stage(&id, part).await {
            Ok(_) => self.live.push(Live { input, worker, file, one_call: None }),
            // An injected failure before the put landed: the task fails and will be retried.
            Err(e) => {
                self.log.push(format!("stage of {file} failed: {e}"));
                self.losers.push(file);
            }
        }
    }

    async fn seal(&mut self, at: usize) {
        let live = self.live.swap_remove(at);
        let outcome = seal_call(&live).await;
        self.record(live, outcome);
    }

    /// Starts a live attempt's seal with its claim's put held at the object store's gate: a worker paused
    /// mid-request (a GC pause, a partition) while the rest of the job goes on.
    fn pause(&mut self, at: usize) {
        let live = self.live.swap_remove(at);
        let hash = CheckpointId::for_key(&key(live.input)).as_str()[2..].to_owned();
        self.objects.hold_puts_under(&format!("claims/{hash}"));
        self.log.push(format!("{} pauses inside its seal", live.file));
        self.paused_on = Some(live.input);
        self.paused = Some(tokio::spawn(async move {
            let outcome = seal_call(&live).await;
            (live, outcome)
        }));
    }

    async fn resume(&mut self) {
        if let Some(paused) = self.paused.take() {
            self.paused_on = None;
            self.objects.hold_puts(false);
            let (live, outcome) = paused.await.unwrap();
            self.log.push(format!("{} resumes", live.file));
            self.record(live, outcome);
        }
    }

    fn record(&mut self, live: Live, outcome: sinkpoint::Result<()>) {
        match outcome {
            Ok(()) => {
                self.log.push(format!("{} sealed", live.file));
                let earlier = self.winners.insert(live.input, live.file.clone());
                assert!(
                    earlier.is_none(),
                    "two seals of input {} succeeded: {earlier:?} and {}",
                    live.input,
                    live.file
                );
            }
            Err(e) if matches!(e.transition(), Some(TransitionError::SealLost { .. })) => {
                self.log.push(format!("{} lost: {e}", live.file));
                self.losers.push(live.file);
            }
            Err(e) => panic!("seal of {}: {e}\n{}", live.file, self.log.join("\n")),
        }
    }

    /// The input whose seal is paused, if one is: no other attempt of it may seal inline meanwhile (its
    /// create would wait at the same gate, and the schedule with it).
    fn paused_input(&self) -> Option<u32> {
        self.paused_on
    }

    /// One committer round; any failure (an injected one) is a committer crash: it reopens next round. The round
    /// lists the claims, or reads those of the job's inputs (`adopt_expected`, as a runner that knows its inputs).
    async fn commit_round(&mut self, inputs: u32) {
        let inbox = Inbox::new(self.shared.clone());
        let table = self.table.clone();
        let expected = self.expected(inputs);
        let store = self.store().await;
        let outcome = async {
            let report = adopt(&inbox, store, expected.as_deref()).await?;
            Committer::new(store, &table).commit_pending().await?;
            Ok::<_, sinkpoint::Error>(report)
        }
        .await;
        match outcome {
            Ok(report) => {
                self.log.push(format!("round: adopted {:?}, {} cleanup", report.adopted, report.cleanup.len()))
            }
            Err(e) => {
                self.log.push(format!("committer failed: {e}; it restarts"));
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
        // Attempts that may seal inline now: none of the paused input (its create would wait at the gate).
        let sealable: Vec<usize> =
            (0..self.live.len()).filter(|&i| Some(self.live[i].input) != self.paused_input()).collect();
        match self.rng.below(12) {
            // A task attempt starts: any input, done or not (a retry, a speculative copy).
            0..=2 => {
                let input = self.rng.below(u64::from(inputs)) as u32;
                self.start(input).await;
            }
            // A live attempt seals (a zombie seals whenever the schedule reaches it).
            3..=5 if !sealable.is_empty() => {
                let at = sealable[self.rng.below(sealable.len() as u64) as usize];
                self.seal(at).await;
            }
            9 if self.paused.is_none() && !sealable.is_empty() => {
                let at = sealable[self.rng.below(sealable.len() as u64) as usize];
                self.pause(at);
            }
            10 => self.resume().await,
            // A worker dies after staging (its parts stay in the inbox), or after writing its file and before its
            // `stage_and_seal` (nothing of it is in the object store but the file).
            6 if !self.live.is_empty() => {
                let at = self.rng.below(self.live.len() as u64) as usize;
                let dead = self.live.swap_remove(at);
                self.log.push(format!("{} died", dead.file));
                self.losers.push(dead.file);
            }
            7 => self.commit_round(inputs).await,
            8 => {
                let lose_disk = self.rng.below(2) == 0;
                self.restart_committer(lose_disk).await;
            }
            _ => {
                // The next put under one of these paths lands and then fails (a lost acknowledgement) or fails.
                let fault = if self.rng.below(2) == 0 { PutFault::FailAfter } else { PutFault::FailBefore };
                let place = ["claims", "inbox", "mirror", "table/_commits"][self.rng.below(4) as usize];
                self.objects.fail_puts(fault, place, 1);
                self.log.push(format!("next put under {place} fails {fault:?}"));
            }
        }
    }

    /// Runs the job to the end: the random steps, then every unfinished input run cleanly and a final commit.
    async fn run(&mut self, inputs: u32) {
        let steps = self.rng.below(STEPS_MAX) + 1;
        for _ in 0..steps {
            self.step(inputs).await;
        }
        self.log.push("-- the job is retried to completion".into());
        self.resume().await;
        // Zombies still alive seal at the end, after their inputs may have been re-run.
        while !self.live.is_empty() {
            self.seal(0).await;
        }
        for input in 0..inputs {
            while !self.winners.contains_key(&input) {
                let probe = Worker::new(self.shared.clone(), "probe").unwrap();
                assert!(!probe.is_processed(&key(input)).await.unwrap(), "input {input} is processed without a winner");
                let before = self.live.len();
                self.start(input).await; // An injected fault still pending may fail it: then it runs again.
                if self.live.len() > before {
                    self.seal(before).await;
                }
            }
        }
        // Faults still pending fail some rounds; each failed round is a committer crash and a restart.
        for round in 0.. {
            assert!(round < 10, "the committer did not finish in 10 rounds\n{}", self.log.join("\n"));
            let (table, inbox) = (self.table.clone(), Inbox::new(self.shared.clone()));
            let expected = self.expected(inputs);
            let store = self.store().await;
            let done = async {
                adopt(&inbox, store, expected.as_deref()).await?;
                Committer::new(store, &table).finish().await
            }
            .await;
            match done {
                Ok(_) => break,
                Err(e) => {
                    self.log.push(format!("final round failed: {e}"));
                    self.restart_committer(false).await;
                }
            }
        }
    }

    async fn check(&self, inputs: u32) {
        let commits = self.table.commits().await.unwrap();
        let files: Vec<&String> = commits.iter().flat_map(|c| c.files.iter()).collect();
        for input in 0..inputs {
            let winner = &self.winners[&input];
            let of_input: Vec<&&String> = files.iter().filter(|f| f.starts_with(&format!("in-{input}-"))).collect();
            assert_eq!(of_input, vec![&winner], "input {input}: committed {of_input:?}, the winner wrote {winner}");
        }
        for loser in &self.losers {
            assert!(!files.contains(&loser), "{loser} lost its seal or died, and was committed");
        }
    }
}

impl Case {
    /// The ids a committer round expects: every input's (half the rounds), or none (the round lists the claims).
    fn expected(&mut self, inputs: u32) -> Option<Vec<CheckpointId>> {
        let read_each = self.rng.below(2) == 0;
        self.log.push(format!("round {}", if read_each { "reads the inputs' claims" } else { "lists the claims" }));
        read_each.then(|| (0..inputs).map(|i| CheckpointId::for_key(&key(i))).collect())
    }
}

/// One adoption round: `adopt_expected` of `expected` when given, else `adopt`.
async fn adopt(
    inbox: &Inbox,
    store: &Store,
    expected: Option<&[CheckpointId]>,
) -> sinkpoint::Result<sinkpoint::shared::AdoptReport> {
    match expected {
        Some(ids) => inbox.adopt_expected(store, ids).await,
        None => inbox.adopt(store).await,
    }
}

/// One seal call (`seal`, or `stage_and_seal` for an attempt that stages in it), retried while it is `Io` (an
/// unsettled create under stacked faults: the call is idempotent).
async fn seal_call(live: &Live) -> sinkpoint::Result<()> {
    let id = CheckpointId::for_key(&key(live.input));
    crate::common::retry_io(|| async {
        match &live.one_call {
            Some(result) => live.worker.stage_and_seal(&id, vec![key(live.input)], vec![result.clone()]).await,
            None => live.worker.seal(&id, 1).await,
        }
    })
    .await
}

fn key(input: u32) -> Vec<u8> {
    format!("s3://in/{input:03}.parquet").into_bytes()
}

/// The suite's cases when `SINKPOINT_CASES` is not set.
const CASES_DEFAULT: u64 = 1000;

sharded!(mod workers_and_a_restarting_committer_commit_every_input_exactly_once => run_shard);

/// One shard: its share of the cases, case `i` from seed base + `i`.
fn run_shard(shard: Shard) {
    let cases = testkit::cases(CASES_DEFAULT);
    let base = testkit::seed("SINKPOINT_SHARED_SEED");
    shard.announce("shared model", cases, "SINKPOINT_SHARED_SEED", base);
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
                    "case seed {seed} failed (replay: SINKPOINT_SHARED_SEED={seed} SINKPOINT_CASES=1); its log:\n{}",
                    case.log.join("\n")
                );
                std::panic::resume_unwind(panic);
            }
        });
    }
}
