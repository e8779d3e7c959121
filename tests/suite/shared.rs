//! Workers on many machines (issue 12): workers stage and seal through a shared object store, one committer
//! adopts and commits. Each test names the race it ends with one winner; the table is read back every time.
//! The last tests count the object-store requests of `stage_and_seal` and of a committer round (issue 13: at
//! most 3 per input for a Daft job, so the worker makes 1 and the committer reads each new claim once).

#[allow(dead_code, reason = "the benches' counting store; this file uses only its tallies per area")]
#[path = "../../benches/common/counting.rs"]
mod counting;

use std::sync::Arc;

use futures::{StreamExt as _, TryStreamExt as _};

use object_store::ObjectStore;
use object_store::memory::InMemory;
use object_store::path::Path;
use sinkpoint::mirror::MirrorSettings;
use sinkpoint::shared::{Inbox, KeyExclusivity, SharedStaging, Worker};
use sinkpoint::testkit::{FaultStore, PutFault};
use sinkpoint::{
    Attempt, CheckpointId, Committer, DirTable, ErrorKind, JobId, Part, StagePart, Store, TargetIdentity,
    TransitionError, WriteResult,
};

struct Job {
    objects: Arc<FaultStore<InMemory>>,
    shared: SharedStaging,
    table: DirTable,
    dir: tempfile::TempDir,
}

impl Job {
    fn new() -> Self {
        let objects = Arc::new(FaultStore::new(InMemory::new()));
        let dyn_objects: Arc<dyn ObjectStore> = objects.clone();
        let shared = SharedStaging::new(dyn_objects.clone(), "staging", job_id()).unwrap();
        let table = DirTable::new(dyn_objects, Path::from("table"));
        Self { objects, shared, table, dir: tempfile::tempdir().unwrap() }
    }

    fn worker(&self, name: &str) -> Worker {
        Worker::new(self.shared.clone(), name).unwrap()
    }

    /// The committer's store: a local file mirrored into the same object store.
    async fn committer(&self) -> Store {
        let objects: Arc<dyn ObjectStore> = self.objects.clone();
        Store::builder(job_id(), TargetIdentity::new("dir:table").unwrap())
            .path(self.dir.path().join("committer.redb"))
            .mirror(objects, Path::from("mirror"), MirrorSettings::default())
            .open()
            .await
            .unwrap()
    }

    /// Writes input `n`'s data file (one row naming the attempt) and returns its result.
    async fn write(&self, n: u32, attempt: &str) -> WriteResult {
        self.table.write_data_file(&format!("in-{n}-{attempt}"), format!("row-{n}\n").into_bytes()).await.unwrap()
    }

    async fn adopt_and_commit(&self, store: &Store) -> sinkpoint::shared::AdoptReport {
        let report = Inbox::new(self.shared.clone()).adopt(store).await.unwrap();
        Committer::new(store, &self.table).commit_pending().await.unwrap();
        report
    }

    /// Each input's row count in the table.
    async fn counts(&self, inputs: u32) -> Vec<usize> {
        let rows = self.table.rows().await.unwrap();
        (0..inputs).map(|n| rows.iter().filter(|r| **r == format!("row-{n}")).count()).collect()
    }
}

fn job_id() -> JobId {
    JobId::new("shared-job").unwrap()
}

fn input(n: u32) -> Vec<u8> {
    format!("s3://in/{n:04}.parquet").into_bytes()
}

fn sealed_lost(e: &sinkpoint::Error) -> (String, Vec<WriteResult>) {
    match e.transition() {
        Some(TransitionError::SealLost { winner, results, .. }) => (winner.clone(), results.clone()),
        _ => panic!("expected SealLost, got {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_workers_and_one_committer_commit_every_input_once() {
    let job = Job::new();
    let store = job.committer().await;
    let inputs = 40u32;
    let workers: Vec<Worker> = (0..4).map(|w| job.worker(&format!("w{w}"))).collect();
    let mut tasks = Vec::new();
    for (w, worker) in workers.iter().enumerate() {
        let job = &job;
        tasks.push(async move {
            for n in (0..inputs).filter(|n| *n as usize % 4 == w) {
                let id = CheckpointId::for_key(&input(n));
                assert!(!worker.is_processed(&input(n)).await.unwrap());
                let result = job.write(n, "a").await;
                worker.stage_and_seal(&id, vec![input(n)], vec![result]).await.unwrap();
                assert!(worker.is_processed(&input(n)).await.unwrap());
            }
        });
    }
    // The committer adopts while the workers run, then once more after.
    let (_, first) = tokio::join!(futures::future::join_all(tasks), job.adopt_and_commit(&store));
    let second = job.adopt_and_commit(&store).await;
    assert_eq!(first.adopted.len() + second.adopted.len(), inputs as usize, "{first:?} {second:?}");
    assert!(first.cleanup.is_empty() && second.cleanup.is_empty());
    Committer::new(&store, &job.table).finish().await.unwrap();
    assert_eq!(job.counts(inputs).await, vec![1; inputs as usize]);
    // A later round reads nothing: it lists the claims (40, one page, every one settled in the store, so none
    // is read) and the inbox (empty: stage_and_seal puts no entry). Two list requests, nothing else.
    let idle = Inbox::new(job.shared.clone()).adopt(&store).await.unwrap();
    assert_eq!((idle.adopted.len(), idle.unsealed, idle.requests), (0, 0, 2), "{idle:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_attempts_of_one_checkpoint_sealing_at_once_end_with_one_winner_every_round() {
    let job = Job::new();
    let store = job.committer().await;
    let rounds = 24u32;
    for n in 0..rounds {
        let (a, b) = (job.worker("first-attempt"), job.worker("speculative"));
        let id = CheckpointId::for_key(&input(n));
        let (ra, rb) = (job.write(n, "a").await, job.write(n, "b").await);
        let (x, y) = tokio::join!(
            a.stage_and_seal(&id, vec![input(n)], vec![ra.clone()]),
            b.stage_and_seal(&id, vec![input(n)], vec![rb.clone()])
        );
        let (winner, loser_err, loser_result, winner_session) = match (x, y) {
            (Ok(()), Err(e)) => ("a", e, rb, a.session()),
            (Err(e), Ok(())) => ("b", e, ra, b.session()),
            (x, y) => panic!("round {n}: not exactly one winner: {x:?} / {y:?}"),
        };
        let (named, returned) = sealed_lost(&loser_err);
        println!("round {n}: {winner} won; loser told: {loser_err}");
        assert!(named.contains(&format!("{winner_session:032x}")), "round {n}: the winner is named: {named}");
        assert_eq!(returned, vec![loser_result], "round {n}: the loser gets its own results back");
        assert_eq!(loser_err.kind(), ErrorKind::IllegalTransition);
    }
    let report = job.adopt_and_commit(&store).await;
    assert_eq!(report.adopted.len(), rounds as usize);
    assert_eq!(job.counts(rounds).await, vec![1; rounds as usize]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zombie_worker_that_wakes_after_its_task_reran_elsewhere_never_reaches_the_table() {
    let job = Job::new();
    let store = job.committer().await;
    let id = CheckpointId::new("task-7").unwrap();
    let zombie = job.worker("zombie");
    let first = job.write(7, "zombie").await;
    zombie
        .stage(&id, StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![input(7)]).results(vec![first.clone()]))
        .await
        .unwrap();
    // The zombie pauses; the engine re-runs its task on another worker, which finishes and is committed.
    let retry = job.worker("retry");
    let second = job.write(7, "retry").await;
    retry.stage_and_seal(&id, vec![input(7)], vec![second]).await.unwrap();
    let report = job.adopt_and_commit(&store).await;
    assert_eq!(report.adopted, vec![id.clone()]);
    assert_eq!(report.cleanup, vec![first.clone()], "the zombie's staged part is reported for cleanup");
    // And it is in the committer's garbage ledger, for the data-file collector, before its entry is gone.
    let ledger: Vec<_> = store.garbage(None, 10).unwrap().into_iter().map(|g| (g.id, g.result)).collect();
    assert_eq!(ledger, vec![(id.clone(), first.clone())], "the zombie's part is in the ledger");
    // It wakes up: more parts, then its seal, refused, naming the winner.
    let more = job.write(8, "zombie").await;
    zombie.stage(&id, StagePart::new(Attempt::FIRST, Part::new(1)).results(vec![more.clone()])).await.unwrap();
    let err = zombie.seal(&id, 2).await.unwrap_err();
    let (winner, results) = sealed_lost(&err);
    assert!(winner.contains("retry"), "{winner}");
    assert_eq!(results, vec![first, more]);
    let after = job.adopt_and_commit(&store).await;
    assert!(after.adopted.is_empty(), "{after:?}");
    Committer::new(&store, &job.table).finish().await.unwrap();
    assert_eq!(job.counts(9).await, vec![0, 0, 0, 0, 0, 0, 0, 1, 0], "row 7 once, nothing of the zombie");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_owned_by_another_checkpoint_refuses_the_seal_across_workers() {
    let job = Job::new();
    let (a, b) = (job.worker("a"), job.worker("b"));
    let (one, two) = (CheckpointId::new("split-1").unwrap(), CheckpointId::new("split-2").unwrap());
    let ra = job.write(1, "a").await;
    a.stage_and_seal(&one, vec![input(1), input(2)], vec![ra]).await.unwrap();
    let rb = job.write(2, "b").await;
    let err = b.stage_and_seal(&two, vec![input(2), input(3)], vec![rb]).await.unwrap_err();
    match err.transition() {
        Some(TransitionError::KeyConflict { owner, .. }) => assert_eq!(owner, &one),
        _ => panic!("expected KeyConflict, got {err}"),
    }
    assert!(b.is_processed(&input(1)).await.unwrap() && b.is_processed(&input(2)).await.unwrap());
    assert!(!b.is_processed(&input(3)).await.unwrap(), "the refused checkpoint's other key is not processed");
    // An id named for one key holds exactly that key: refused before anything is written.
    let puts = job.objects.counts().puts;
    let r = job.write(4, "c").await;
    let err = a.stage_and_seal(&CheckpointId::for_key(&input(4)), vec![input(5)], vec![r.clone()]).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    assert_eq!(job.objects.counts().puts, puts + 1, "the data file only: no claim, no inbox entry");
    // Nothing was recorded either: the corrected call seals (the file written once, staged now).
    a.stage_and_seal(&CheckpointId::for_key(&input(4)), vec![input(4)], vec![r]).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seal_whose_acknowledgement_was_lost_is_settled_as_ours_by_reading_it_back() {
    let job = Job::new();
    let worker = job.worker("w");
    let id = CheckpointId::for_key(&input(1));
    job.objects.fail_puts(PutFault::FailAfter, "claims", 1);
    let r = job.write(1, "a").await;
    worker.stage_and_seal(&id, vec![input(1)], vec![r.clone()]).await.unwrap();
    assert!(worker.sealed_by(&id).await.unwrap().is_some_and(|s| s.session == worker.session()));
    // Sealing again is a no-op, not a loss; so is the whole call again.
    worker.seal(&id, 1).await.unwrap();
    let puts = job.objects.counts().puts;
    worker.stage_and_seal(&id, vec![input(1)], vec![r]).await.unwrap();
    assert_eq!(job.objects.counts().puts, puts, "nothing is put again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committer_that_lost_its_disk_restores_from_the_mirror_and_commits_each_checkpoint_once() {
    let job = Job::new();
    let worker = job.worker("w");
    let store = job.committer().await;
    for n in 0..6 {
        let r = job.write(n, "a").await;
        worker.stage_and_seal(&CheckpointId::for_key(&input(n)), vec![input(n)], vec![r]).await.unwrap();
    }
    let report = Inbox::new(job.shared.clone()).adopt(&store).await.unwrap();
    assert_eq!(report.adopted.len(), 6);
    // The driver's machine dies after adopting (the inbox is cleared), before committing.
    store.close_async().await;
    std::fs::remove_file(job.dir.path().join("committer.redb")).unwrap();
    for n in 6..9 {
        let r = job.write(n, "a").await;
        worker.stage_and_seal(&CheckpointId::for_key(&input(n)), vec![input(n)], vec![r]).await.unwrap();
    }
    let store = job.committer().await;
    assert!(!store.created(), "restored from the mirror");
    let report = job.adopt_and_commit(&store).await;
    assert_eq!(report.adopted.len(), 3, "{report:?}");
    Committer::new(&store, &job.table).finish().await.unwrap();
    assert_eq!(job.counts(9).await, vec![1; 9]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_attempt_seals_its_new_parts_and_the_dropped_ones_come_back_for_cleanup() {
    let job = Job::new();
    let store = job.committer().await;
    let worker = job.worker("w");
    let id = CheckpointId::new("multi-part").unwrap();
    let old = job.write(1, "old").await;
    worker
        .stage(&id, StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![input(1)]).results(vec![old.clone()]))
        .await
        .unwrap();
    assert_eq!(worker.restart(&id).await.unwrap(), vec![old]);
    let stale =
        worker.stage(&id, StagePart::new(Attempt::FIRST, Part::new(1)).results(vec![job.write(2, "x").await])).await;
    assert!(matches!(stale.unwrap_err().transition(), Some(TransitionError::StaleAttempt { .. })));
    let next = Attempt::new(1);
    worker
        .stage(&id, StagePart::new(next, Part::FIRST).keys(vec![input(1)]).results(vec![job.write(1, "new").await]))
        .await
        .unwrap();
    worker
        .stage(&id, StagePart::new(next, Part::new(1)).keys(vec![input(2)]).results(vec![job.write(2, "new").await]))
        .await
        .unwrap();
    let missing = worker.seal(&id, 3).await.unwrap_err();
    assert!(matches!(missing.transition(), Some(TransitionError::MissingParts { .. })), "{missing}");
    worker.seal(&id, 2).await.unwrap();
    let err = worker.abort(&id).await.unwrap_err();
    assert!(matches!(err.transition(), Some(TransitionError::SealedCannotAbort { .. })), "{err}");
    let report = job.adopt_and_commit(&store).await;
    assert_eq!(report.adopted, vec![id]);
    assert_eq!(job.counts(3).await, vec![0, 1, 1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_driver_fences_the_old_committer_and_every_sealed_checkpoint_is_committed_once() {
    let job = Job::new();
    let worker = job.worker("w");
    let seal = |n: u32| {
        let (job, worker) = (&job, &worker);
        async move {
            let r = job.write(n, "a").await;
            worker.stage_and_seal(&CheckpointId::for_key(&input(n)), vec![input(n)], vec![r]).await.unwrap();
        }
    };
    let old = job.committer().await;
    for n in 0..3 {
        seal(n).await;
    }
    assert_eq!(Inbox::new(job.shared.clone()).adopt(&old).await.unwrap().adopted.len(), 3);
    // A new driver on another machine: its own local file, the same mirror; it takes over.
    let objects: Arc<dyn ObjectStore> = job.objects.clone();
    let other_disk = tempfile::tempdir().unwrap();
    let new = Store::builder(job_id(), TargetIdentity::new("dir:table").unwrap())
        .path(other_disk.path().join("committer.redb"))
        .mirror(objects, Path::from("mirror"), MirrorSettings::default())
        .open()
        .await
        .unwrap();
    for n in 3..6 {
        seal(n).await;
    }
    // The old driver, still running, tries a round: fenced before it clears anything.
    let err = Inbox::new(job.shared.clone()).adopt(&old).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Fenced, "{err}");
    let report = job.adopt_and_commit(&new).await;
    assert_eq!(report.adopted.len(), 3, "the new driver finds what the fenced one could not clear: {report:?}");
    Committer::new(&new, &job.table).finish().await.unwrap();
    assert_eq!(job.counts(6).await, vec![1; 6]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_claimed_by_an_attempt_that_lost_its_seal_is_not_processed_unless_the_winner_holds_it() {
    use sha2::{Digest as _, Sha256};
    let job = Job::new();
    let id = CheckpointId::new("task-9").unwrap();
    // The first attempt claims its keys {x, y}; its seal's create then fails every time (the job's store is
    // unreachable for that request): it does not seal.
    let seal_hash: String = Sha256::new()
        .chain_update(b"id\0")
        .chain_update(id.as_str().as_bytes())
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    job.objects.fail_puts(PutFault::FailBefore, &format!("claims/{seal_hash}"), 5);
    let first = job.worker("first");
    let r1 = job.write(9, "first").await;
    let err = first.stage_and_seal(&id, vec![input(1), input(2)], vec![r1]).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Io, "{err}");
    // A retry of the task reads other inputs this time ({x, z}) and seals.
    let retry = job.worker("retry");
    let r2 = job.write(9, "retry").await;
    retry.stage_and_seal(&id, vec![input(1), input(3)], vec![r2]).await.unwrap();
    assert!(retry.is_processed(&input(1)).await.unwrap() && retry.is_processed(&input(3)).await.unwrap());
    assert!(
        !retry.is_processed(&input(2)).await.unwrap(),
        "y is claimed by the checkpoint, but its seal does not hold it: skipping y would lose it"
    );
}

/// A job whose shared staging, committer mirror and table are on one request-counting store, each in its own
/// area (`staging/…`, `mirror/…`, `table/…`).
struct Counted {
    objects: Arc<dyn ObjectStore>,
    counts: counting::Counts,
    shared: SharedStaging,
    table: DirTable,
    dir: tempfile::TempDir,
}

impl Counted {
    fn new() -> Self {
        let store = counting::CountingStore::new(InMemory::new());
        let counts = store.counts();
        let objects: Arc<dyn ObjectStore> = Arc::new(store);
        let shared = SharedStaging::new(objects.clone(), "staging", job_id()).unwrap();
        let table = DirTable::new(objects.clone(), Path::from("table"));
        Self { objects, counts, shared, table, dir: tempfile::tempdir().unwrap() }
    }

    async fn committer(&self) -> Store {
        Store::builder(job_id(), TargetIdentity::new("dir:table").unwrap())
            .path(self.dir.path().join("committer.redb"))
            .mirror(self.objects.clone(), Path::from("mirror"), MirrorSettings::default())
            .open()
            .await
            .unwrap()
    }

    fn staging(&self) -> counting::Tally {
        self.counts.area("staging")
    }

    /// Each of the first `inputs` inputs' row count in the table.
    async fn counts_rows(&self, inputs: u32) -> Vec<usize> {
        let rows = self.table.rows().await.unwrap();
        (0..inputs).map(|n| rows.iter().filter(|r| **r == format!("row-{n}")).count()).collect()
    }

    /// Input `n` sealed by a worker of its own (a task), as a Daft job does: one checkpoint per input.
    async fn seal_input(&self, n: u32) {
        let result = self.table.write_data_file(&format!("in-{n}"), format!("row-{n}\n").into_bytes()).await.unwrap();
        let worker = Worker::new(self.shared.clone(), &format!("task-{n}")).unwrap();
        worker.stage_and_seal(&CheckpointId::for_key(&input(n)), vec![input(n)], vec![result]).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stage_and_seal_costs_a_worker_one_request_per_input_and_the_committer_one_read() {
    let job = Counted::new();
    let store = job.committer().await;
    let inputs = 24u32;
    let before = job.staging();
    futures::future::join_all((0..inputs).map(|n| job.seal_input(n))).await;
    let workers = job.staging().since(&before);
    // One conditional create per input (the seal is the key's claim); no inbox entry, no read.
    assert_eq!((workers.puts, workers.requests()), (u64::from(inputs), u64::from(inputs)), "{workers:?}");

    let before = job.staging();
    let report = Inbox::new(job.shared.clone()).adopt(&store).await.unwrap();
    let round = job.staging().since(&before);
    assert_eq!(report.adopted.len(), inputs as usize, "{report:?}");
    // One read per new claim, and two listings (the claims: 24, one page; the inbox: empty). Nothing to delete.
    assert_eq!((round.gets, round.lists, round.puts, round.deletes), (u64::from(inputs), 2, 0, 0), "{round:?}");
    assert_eq!(report.requests, round.requests(), "the report counts what the store was asked: {report:?}");
    Committer::new(&store, &job.table).finish().await.unwrap();
    let rows = job.table.rows().await.unwrap();
    assert_eq!(rows.len(), inputs as usize);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_read_once_is_never_read_again_by_this_or_a_new_inbox_handle() {
    let job = Counted::new();
    let store = job.committer().await;
    for n in 0..5 {
        job.seal_input(n).await;
    }
    // A checkpoint of two keys: its seal and two key claims, three claims in all.
    let pair = CheckpointId::new("pair").unwrap();
    let result = job.table.write_data_file("pair", b"row-5\nrow-6\n".to_vec()).await.unwrap();
    let worker = Worker::new(job.shared.clone(), "pair").unwrap();
    worker.stage_and_seal(&pair, vec![input(5), input(6)], vec![result]).await.unwrap();
    // An input the committer's store already holds under another checkpoint (claims bypassed: it was staged
    // into the store directly): the worker's seal of it is refused at adoption and aborted in the store.
    let local = CheckpointId::new("local-7").unwrap();
    let part = StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![input(7)]);
    store.stage_and_seal(&local, part, 1).await.unwrap();
    job.seal_input(7).await;

    let inbox = Inbox::new(job.shared.clone());
    let before = job.staging();
    let first = inbox.adopt(&store).await.unwrap();
    let round = job.staging().since(&before);
    assert_eq!((first.adopted.len(), first.refused.len()), (6, 1), "{first:?}");
    assert_eq!((round.gets, round.lists), (5 + 3 + 1, 2), "each of the 9 claims read once: {round:?}");

    // The next round knows every claim: the store settled the seals (adopted, or refused and aborted), this
    // handle remembers the key claims. It lists and reads nothing.
    let before = job.staging();
    let second = inbox.adopt(&store).await.unwrap();
    let round = job.staging().since(&before);
    assert_eq!((second.adopted.len(), second.already_adopted, second.refused.len()), (0, 0, 0), "{second:?}");
    assert_eq!((round.gets, round.lists, second.requests), (0, 2, 2), "{round:?}");

    // A new handle (a new driver process on the same store) reads only the two key claims and the refused
    // seal (its checkpoint is Aborted in the store, so it could be one to release: its key is owned by local-7,
    // so it is not), not the adopted seals.
    let before = job.staging();
    let fresh = Inbox::new(job.shared.clone()).adopt(&store).await.unwrap();
    let round = job.staging().since(&before);
    assert_eq!((fresh.adopted.len(), round.gets, round.lists), (0, 2 + 1, 2), "{fresh:?} {round:?}");
    assert!(fresh.released.is_empty() && fresh.held_back.is_empty(), "{fresh:?}");
    // And that handle's next round reads nothing either.
    let again = Inbox::new(job.shared.clone());
    again.adopt(&store).await.unwrap();
    let before = job.staging();
    again.adopt(&store).await.unwrap();
    assert_eq!(job.staging().since(&before).gets, 0);

    // A new input sealed after all that is the only claim read.
    job.seal_input(8).await;
    let before = job.staging();
    let last = inbox.adopt(&store).await.unwrap();
    let round = job.staging().since(&before);
    assert_eq!((last.adopted.len(), round.gets), (1, 1), "{last:?} {round:?}");
    Committer::new(&store, &job.table).finish().await.unwrap();
    let rows = job.table.rows().await.unwrap();
    let count = |n: u32| rows.iter().filter(|r| **r == format!("row-{n}")).count();
    assert_eq!((0..9).map(count).collect::<Vec<_>>(), vec![1, 1, 1, 1, 1, 1, 1, 0, 1], "input 7 was refused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committer_finds_every_new_claim_past_a_page_of_claims_it_already_holds() {
    // 1,005 checkpoints: the claims listing is two pages; the five newest are past the first page in no
    // particular order, and a listing cut at the first page would miss some. The round reads only new ones.
    let job = Counted::new();
    let store = job.committer().await;
    let worker = Worker::new(job.shared.clone(), "bulk").unwrap();
    let result =
        |n: u32| sinkpoint::WriteResult::new(sinkpoint::Format::Parquet, format!("f{n}").into_bytes()).unwrap();
    let seal = |n: u32| {
        let worker = &worker;
        async move { worker.stage_and_seal(&CheckpointId::for_key(&input(n)), vec![input(n)], vec![result(n)]).await }
    };
    futures::stream::iter((0..1_000).map(seal)).buffer_unordered(32).try_collect::<Vec<()>>().await.unwrap();
    let inbox = Inbox::new(job.shared.clone());
    assert_eq!(inbox.adopt(&store).await.unwrap().adopted.len(), 1_000);
    futures::stream::iter((1_000..1_005).map(seal)).buffer_unordered(5).try_collect::<Vec<()>>().await.unwrap();
    let before = job.staging();
    let report = Inbox::new(job.shared.clone()).adopt(&store).await.unwrap();
    let round = job.staging().since(&before);
    assert_eq!(report.adopted.len(), 5, "{report:?}");
    assert_eq!((round.gets, round.entries_listed), (5, 1_005), "{round:?}");
    // Two pages of claims and one (empty) listing of the inbox, as the report says.
    assert_eq!((round.lists, report.requests), (3, 3 + 5), "{round:?} {report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_of_expected_ids_lists_no_claim_and_reads_only_the_claims_not_adopted_yet() {
    // 1,000 checkpoints adopted and committed: a listing round would page through their claims.
    let job = Counted::new();
    let store = job.committer().await;
    futures::stream::iter((0..1_000).map(|n| job.seal_input(n))).buffer_unordered(32).collect::<Vec<()>>().await;
    let inbox = Inbox::new(job.shared.clone());
    assert_eq!(inbox.adopt(&store).await.unwrap().adopted.len(), 1_000);
    Committer::new(&store, &job.table).commit_pending().await.unwrap();
    // Five new one-input seals, and a checkpoint of two parts staged through the inbox that nobody expects.
    for n in 1_000..1_005 {
        job.seal_input(n).await;
    }
    let parts = CheckpointId::new("two-parts").unwrap();
    let worker = Worker::new(job.shared.clone(), "parts").unwrap();
    for (part, n) in [(0, 1_005), (1, 1_006)] {
        let result = job.table.write_data_file(&format!("in-{n}"), format!("row-{n}\n").into_bytes()).await.unwrap();
        let staged = StagePart::new(Attempt::FIRST, Part::new(part)).keys(vec![input(n)]).results(vec![result]);
        worker.stage(&parts, staged).await.unwrap();
    }
    worker.seal(&parts, 2).await.unwrap();

    // Expected: three adopted long ago, the five new ones, and one whose task has not sealed yet.
    let mut expected: Vec<CheckpointId> = [7, 500, 999, 1_000, 1_001, 1_002, 1_003, 1_004, 2_000]
        .into_iter()
        .map(|n| CheckpointId::for_key(&input(n)))
        .collect();
    let before = job.staging();
    let report = inbox.adopt_expected(&store, &expected).await.unwrap();
    let round = job.staging().since(&before);
    let mut adopted = report.adopted.clone();
    adopted.sort();
    let mut want: Vec<CheckpointId> = (1_000..1_005).map(|n| CheckpointId::for_key(&input(n))).collect();
    want.push(parts.clone());
    want.sort();
    assert_eq!(adopted, want, "{report:?}");
    // Reads: the 5 new seals, the claim not made yet, the inbox group's claim; the adopted three are not read.
    // One listing, the inbox's (its two entries), none of the claims.
    assert_eq!((round.gets, round.lists, round.entries_listed), (5 + 1 + 1, 1, 2), "{round:?}");
    assert_eq!(report.requests, 7 + 1 + 2, "7 reads, 1 listing, 2 entries deleted: {report:?}");

    // The missing seal arrives; the next round of the same ids reads only its claim.
    job.seal_input(2_000).await;
    let before = job.staging();
    let next = inbox.adopt_expected(&store, &expected).await.unwrap();
    let round = job.staging().since(&before);
    assert_eq!((next.adopted.clone(), round.gets, round.lists), (vec![expected[8].clone()], 1, 1), "{round:?}");
    Committer::new(&store, &job.table).finish().await.unwrap();
    let rows = job.table.rows().await.unwrap();
    for n in (0..1_007).chain([2_000]) {
        assert_eq!(rows.iter().filter(|r| **r == format!("row-{n}")).count(), 1, "input {n}");
    }

    // More ids than a round takes is refused before anything is read.
    expected.resize(sinkpoint::limits::ADOPT_EXPECTED_IDS_MAX + 1, CheckpointId::for_key(b"x"));
    let before = job.staging();
    let err = inbox.adopt_expected(&store, &expected).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    assert!(err.to_string().contains("split them into rounds"), "{err}");
    assert_eq!(job.staging().since(&before).gets, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_of_expected_ids_releases_a_force_aborted_checkpoint_and_adopts_its_rerun() {
    let job = Job::new();
    let store = job.committer().await;
    let id = CheckpointId::for_key(&input(1));
    let (bad, good) = (job.write(1, "bad").await, job.write(1, "good").await);
    job.worker("w1").stage_and_seal(&id, vec![input(1)], vec![bad.clone()]).await.unwrap();
    let inbox = Inbox::new(job.shared.clone());
    assert_eq!(inbox.adopt_expected(&store, std::slice::from_ref(&id)).await.unwrap().adopted, vec![id.clone()]);
    store.operator().force_abort(std::slice::from_ref(&id), "a bad input file").await.unwrap();
    // The expected id is Aborted in the store: its claim is read and released, so the input reads unprocessed.
    let released = inbox.adopt_expected(&store, std::slice::from_ref(&id)).await.unwrap();
    assert_eq!((released.released.clone(), released.cleanup.clone()), (vec![id.clone()], vec![bad]), "{released:?}");
    let rerun = job.worker("w2");
    assert!(!rerun.is_processed(&input(1)).await.unwrap());
    rerun.stage_and_seal(&id, vec![input(1)], vec![good]).await.unwrap();
    let adopted = inbox.adopt_expected(&store, std::slice::from_ref(&id)).await.unwrap();
    assert_eq!(adopted.adopted, vec![id], "{adopted:?}");
    Committer::new(&store, &job.table).finish().await.unwrap();
    assert_eq!(files_of(&job, 1).await, vec!["in-1-good".to_owned()]);
}

/// The committed data files of input `n` (named `in-<n>-<attempt>`), in commit order.
async fn files_of(job: &Job, n: u32) -> Vec<String> {
    let prefix = format!("in-{n}-");
    job.table.commits().await.unwrap().into_iter().flat_map(|c| c.files).filter(|f| f.starts_with(&prefix)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_abort_of_an_adopted_shared_checkpoint_releases_its_claim_and_the_input_is_committed_once() {
    let job = Job::new();
    let store = job.committer().await;
    let (w1, w2) = (job.worker("w1"), job.worker("w2"));
    // Input 1 in a one-key checkpoint; inputs 3 and 4 in one checkpoint of two keys (key claims and a seal).
    let one = CheckpointId::for_key(&input(1));
    let pair = CheckpointId::new("pair-3-4").unwrap();
    let bad = job.write(1, "bad").await;
    w1.stage_and_seal(&one, vec![input(1)], vec![bad.clone()]).await.unwrap();
    w1.stage_and_seal(&pair, vec![input(3), input(4)], vec![job.write(3, "bad").await]).await.unwrap();
    w1.stage_and_seal(&CheckpointId::for_key(&input(2)), vec![input(2)], vec![job.write(2, "a").await]).await.unwrap();
    let report = Inbox::new(job.shared.clone()).adopt(&store).await.unwrap();
    assert_eq!(report.adopted.len(), 3, "{report:?}");
    // The operator finds the sealed files bad and aborts both checkpoints: their inputs are to be read again.
    let dropped = store.operator().force_abort(&[one.clone(), pair.clone()], "bad files").await.unwrap();
    assert_eq!(dropped.len(), 2);
    assert!(!store.is_processed(&input(1)).unwrap());
    // The next adoption round releases their claims: every worker sees the inputs unprocessed.
    let round = Inbox::new(job.shared.clone()).adopt(&store).await.unwrap();
    assert!(round.adopted.is_empty() && round.refused.is_empty(), "{round:?}");
    for n in [1, 3, 4] {
        assert!(!w2.is_processed(&input(n)).await.unwrap(), "input {n} is to be read again");
    }
    assert!(w2.is_processed(&input(2)).await.unwrap(), "input 2 was not aborted");
    assert_eq!(w2.sealed_by(&one).await.unwrap(), None, "the aborted seal no longer counts");
    // The rerun reads them again; its seals win.
    let good = job.write(1, "good").await;
    w2.stage_and_seal(&one, vec![input(1)], vec![good.clone()]).await.unwrap();
    let next = Attempt::FIRST;
    w2.stage(
        &pair,
        StagePart::new(next, Part::FIRST).keys(vec![input(3), input(4)]).results(vec![job.write(3, "good").await]),
    )
    .await
    .unwrap();
    w2.seal(&pair, 1).await.unwrap();
    assert!(w2.is_processed(&input(1)).await.unwrap() && w2.is_processed(&input(4)).await.unwrap());
    // A zombie of the first run (a process of its own) that seals now loses to the rerun.
    let zombie = job.worker("w1-zombie");
    let err = zombie.stage_and_seal(&one, vec![input(1)], vec![bad]).await.unwrap_err();
    assert!(sealed_lost(&err).0.contains("w2"), "{err}");
    let report = job.adopt_and_commit(&store).await;
    let mut adopted = report.adopted.clone();
    adopted.sort();
    let mut want = vec![one.clone(), pair.clone()];
    want.sort();
    assert_eq!(adopted, want, "{report:?}");
    Committer::new(&store, &job.table).finish().await.unwrap();
    assert!(store.is_finished().unwrap());
    assert_eq!(job.counts(5).await, vec![0, 1, 1, 1, 0], "each input once");
    assert_eq!(files_of(&job, 1).await, vec!["in-1-good".to_owned()], "the rerun's rows, not the aborted ones");
    assert_eq!(files_of(&job, 3).await, vec!["in-3-good".to_owned()]);
    // Later rounds adopt nothing more.
    let idle = job.adopt_and_commit(&store).await;
    assert!(idle.adopted.is_empty() && idle.refused.is_empty(), "{idle:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_after_force_abort_of_a_shared_checkpoint_leaves_every_adoption_round_whole() {
    let job = Job::new();
    let store = job.committer().await;
    let (w1, w2) = (job.worker("w1"), job.worker("w2"));
    let one = CheckpointId::for_key(&input(1));
    w1.stage_and_seal(&one, vec![input(1)], vec![job.write(1, "bad").await]).await.unwrap();
    assert_eq!(Inbox::new(job.shared.clone()).adopt(&store).await.unwrap().adopted, vec![one.clone()]);
    store.operator().force_abort(std::slice::from_ref(&one), "bad file").await.unwrap();
    // The operator also restarts it (Aborted -> Staged, the next attempt), before any adoption round ran.
    store.restart(&one).await.unwrap();
    // A healthy input sealed meanwhile.
    let two = CheckpointId::for_key(&input(2));
    w1.stage_and_seal(&two, vec![input(2)], vec![job.write(2, "a").await]).await.unwrap();
    for round in 0..3 {
        let report = Inbox::new(job.shared.clone()).adopt(&store).await;
        let report = report.unwrap_or_else(|e| panic!("adoption round {round} failed: {e}"));
        assert!(report.refused.is_empty(), "{report:?}");
    }
    assert_eq!(store.get(&two).unwrap().map(|i| i.state), Some(sinkpoint::CheckpointState::Sealed));
    assert!(!w2.is_processed(&input(1)).await.unwrap(), "input 1 is to be read again");
    // A new driver (a new epoch: the restarted attempt is an orphan now) and the rerun's seal.
    store.close_async().await;
    let store = job.committer().await;
    w2.stage_and_seal(&one, vec![input(1)], vec![job.write(1, "good").await]).await.unwrap();
    let report = job.adopt_and_commit(&store).await;
    assert_eq!(report.adopted, vec![one.clone()], "{report:?}");
    Committer::new(&store, &job.table).finish().await.unwrap();
    assert_eq!(job.counts(3).await, vec![0, 1, 1]);
    assert_eq!(files_of(&job, 1).await, vec!["in-1-good".to_owned()]);
}

/// Job `counted`'s staging deciding key exclusivity at adoption; a task's checkpoint of `inputs`, its one data
/// file holding a row per input.
async fn seal_task(job: &Counted, shared: &SharedStaging, task: &str, inputs: &[u32]) -> CheckpointId {
    let rows: String = inputs.iter().map(|n| format!("row-{n}\n")).collect();
    let result = job.table.write_data_file(task, rows.into_bytes()).await.unwrap();
    let keys: Vec<Vec<u8>> = inputs.iter().map(|n| input(*n)).collect();
    let id = CheckpointId::for_keys(&keys.iter().map(Vec::as_slice).collect::<Vec<_>>());
    Worker::new(shared.clone(), task).unwrap().stage_and_seal(&id, keys, vec![result]).await.unwrap();
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_of_many_inputs_with_keys_decided_at_adoption_cost_a_tenth_of_a_daft_style_stores_requests() {
    // A Daft-style store makes 2 requests per input (a staged object and a seal object); the goal is a tenth.
    const DAFT_STYLE_REQUESTS_PER_INPUT: f64 = 2.0;
    let (tasks, per_task) = (4u32, 16u32);
    let inputs = tasks * per_task;
    let job = Counted::new();
    let store = job.committer().await;

    // Keys claimed at the seal (the default): a task's seal is a create per key and one for the seal.
    let claimed = SharedStaging::new(job.objects.clone(), "claimed", job_id()).unwrap();
    let before = job.counts.area("claimed");
    seal_task(&job, &claimed, "claimed-0", &(0..per_task).collect::<Vec<_>>()).await;
    assert_eq!(job.counts.area("claimed").since(&before).puts, u64::from(per_task) + 1);

    let shared = job.shared.clone().with_key_exclusivity(KeyExclusivity::AtAdoption);
    let before = job.staging();
    let mut ids = Vec::new();
    for t in 0..tasks {
        let task: Vec<u32> = (t * per_task..(t + 1) * per_task).collect();
        ids.push(seal_task(&job, &shared, &format!("task-{t}"), &task).await);
    }
    let workers = job.staging().since(&before);
    assert_eq!((workers.puts, workers.requests()), (u64::from(tasks), u64::from(tasks)), "{workers:?}");

    let before = job.staging();
    let report = Inbox::new(shared.clone()).adopt_expected(&store, &ids).await.unwrap();
    let round = job.staging().since(&before);
    assert_eq!(report.adopted.len(), tasks as usize, "{report:?}");
    // One read per task's claim and the inbox listing.
    assert_eq!((round.gets, round.lists, round.requests()), (u64::from(tasks), 1, u64::from(tasks) + 1));
    let per_input = (workers.requests() + round.requests()) as f64 / f64::from(inputs);
    assert!(per_input <= DAFT_STYLE_REQUESTS_PER_INPUT / 10.0, "{per_input:.3} requests per input");

    Committer::new(&store, &job.table).finish().await.unwrap();
    let rows = job.table.rows().await.unwrap();
    for n in 0..inputs {
        assert_eq!(rows.iter().filter(|r| **r == format!("row-{n}")).count(), 1, "input {n}");
        assert!(store.is_processed(&input(n)).unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_checkpoints_sharing_a_key_decided_at_adoption_commit_it_once_and_the_refused_ones_inputs_run_again() {
    let job = Counted::new();
    let store = job.committer().await;
    let shared = job.shared.clone().with_key_exclusivity(KeyExclusivity::AtAdoption);
    // The input split changed between runs: input 2 is in both tasks, and both seal (no key is claimed).
    let a = seal_task(&job, &shared, "task-a", &[0, 1, 2]).await;
    let b = seal_task(&job, &shared, "task-b", &[2, 3]).await;
    // A worker cannot tell whether a key of a checkpoint of several is processed, and says so.
    let worker = Worker::new(shared.clone(), "asks").unwrap();
    let err = worker.is_processed(&input(3)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    assert!(err.to_string().contains("Store::is_processed"), "{err}");

    let report = Inbox::new(shared.clone()).adopt(&store).await.unwrap();
    assert_eq!((report.adopted.len(), report.refused.len()), (1, 1), "{report:?}");
    let a_won = report.adopted[0] == a;
    let lost = if a_won { b } else { a };
    assert_eq!(report.refused[0].id, lost);
    // The refused checkpoint's file is garbage, in the ledger as well as the report.
    let ledger = store.garbage(None, 10).unwrap();
    assert_eq!(ledger.iter().map(|g| &g.id).collect::<Vec<_>>(), vec![&lost], "{ledger:?}");
    assert_eq!(report.cleanup, vec![ledger[0].result.clone()]);
    Committer::new(&store, &job.table).finish().await.unwrap();

    // The driver's next run: what the committer's store holds unprocessed, in a new task.
    let rest: Vec<u32> = (0..4).filter(|n| !store.is_processed(&input(*n)).unwrap()).collect();
    assert_eq!(rest, if a_won { vec![3] } else { vec![0, 1] });
    let rerun = seal_task(&job, &shared, "task-rerun", &rest).await;
    let report = Inbox::new(shared).adopt_expected(&store, &[rerun]).await.unwrap();
    assert_eq!(report.adopted.len(), 1, "{report:?}");
    Committer::new(&store, &job.table).finish().await.unwrap();
    assert_eq!(job.counts_rows(4).await, vec![1; 4]);
}

#[tokio::test]
async fn a_one_key_seal_still_answers_is_processed_when_keys_are_decided_at_adoption() {
    let job = Counted::new();
    let shared = job.shared.clone().with_key_exclusivity(KeyExclusivity::AtAdoption);
    let worker = Worker::new(shared, "w").unwrap();
    let result = job.table.write_data_file("one", b"row-0\n".to_vec()).await.unwrap();
    worker.stage_and_seal(&CheckpointId::for_keys(&[&input(0)]), vec![input(0)], vec![result]).await.unwrap();
    assert!(worker.is_processed(&input(0)).await.unwrap(), "its seal is its key's claim");
}
