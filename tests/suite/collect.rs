//! The orphan data-file collector (`sinkpoint::gc::collect_data_files`) on the reference table: the garbage ledger takes what
//! `restart`, `abort`, `force_abort` and `discard` drop; a collection deletes exactly the ledger's files that no
//! live checkpoint and no table commit names and that are past the grace period, then forgets their entries;
//! the ledger is mirrored and restored like every table.

use crate::mirror_support;

use std::collections::BTreeSet;
use std::sync::Arc;

use async_trait::async_trait;
use mirror_support::{Bucket, Kind, builder, digest, sync_settings};
use object_store::ObjectStoreExt;
use object_store::memory::InMemory;
use object_store::path::Path;
use sinkpoint::Committer;
use sinkpoint::gc::{
    CollectReport, CollectSettings, DataFiles, FileStat, Verdict, collect_data_files, preview_data_files,
};
use sinkpoint::inspect::Inspector;
use sinkpoint::testkit::{ManualClock, RawLedger};
use sinkpoint::{
    Attempt, CheckpointId, CheckpointState, Clock, DirTable, ErrorKind, JobId, Part, StagePart, Store, SystemClock,
    TargetIdentity, WriteResult,
};

const HOUR_MS: u64 = 3_600_000;

struct Job {
    _dir: tempfile::TempDir,
    store: Store,
    table: DirTable,
    objects: Arc<InMemory>,
    /// Reads wall time as the test sets it: starts at the real time, so the files just written are fresh.
    clock: ManualClock,
}

async fn job() -> Job {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::builder(JobId::new("job").unwrap(), TargetIdentity::new("mem://t").unwrap())
        .path(dir.path().join("s.redb"))
        .open()
        .await
        .unwrap();
    let objects = Arc::new(InMemory::new());
    let table = DirTable::new(objects.clone(), Path::from("t"));
    Job { _dir: dir, store, table, objects, clock: ManualClock::new(SystemClock.wall_ms()) }
}

fn id(name: &str) -> CheckpointId {
    CheckpointId::new(name).unwrap()
}

impl Job {
    /// Writes data file `file` and stages it as part 0 of `attempt` of `name`.
    async fn stage(&self, name: &str, attempt: u32, file: &str) -> WriteResult {
        let result = self.table.write_data_file(file, format!("{file}\n").into_bytes()).await.unwrap();
        let part = StagePart::new(Attempt::new(attempt), Part::FIRST)
            .keys(vec![name.as_bytes().to_vec()])
            .results(vec![result.clone()]);
        self.store.stage(&id(name), part).await.unwrap();
        result
    }

    async fn exists(&self, file: &str) -> bool {
        self.objects.head(&Path::from(format!("t/data/{file}"))).await.is_ok()
    }

    async fn collect(&self, grace_ms: u64, apply: bool) -> CollectReport {
        let settings = CollectSettings { grace_ms, apply };
        collect_data_files(&self.store, &self.table, &self.clock, &settings).await.unwrap()
    }
}

fn verdicts(report: &CollectReport) -> Vec<(String, Verdict)> {
    let mut out: Vec<_> = report.files.iter().map(|f| (f.file.clone(), f.verdict)).collect();
    out.sort();
    out
}

/// A restarted attempt, an aborted checkpoint and a force-aborted one leave one ledger entry each; a dry run
/// reports them (young inside the grace period, due past it) and deletes nothing, and so does the read-only
/// preview; the collection deletes exactly
/// them, never a live or committed file, forgets them, and a second collection finds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_attempts_files_are_collected_past_the_grace_period_and_nothing_else() {
    let job = job().await;
    job.stage("a", 0, "a-0").await;
    assert_eq!(job.store.restart(&id("a")).await.unwrap().len(), 1);
    job.stage("a", 1, "a-1").await;
    job.store.seal(&id("a"), 1).await.unwrap();
    job.stage("b", 0, "b-0").await;
    job.store.abort(&id("b")).await.unwrap();
    job.stage("c", 0, "c-0").await;
    job.store.seal(&id("c"), 1).await.unwrap();
    job.store.operator().force_abort(&[id("c")], "a test").await.unwrap();
    job.stage("d", 0, "d-0").await;
    job.store.seal(&id("d"), 1).await.unwrap();
    Committer::new(&job.store, &job.table).commit_pending().await.unwrap();
    job.stage("e", 0, "e-0").await; // Staged: live.

    let ledger = job.store.garbage(None, 100).unwrap();
    let named: Vec<(String, u32)> = ledger.iter().map(|g| (g.id.to_string(), g.attempt.get())).collect();
    assert_eq!(named, [("a".into(), 0), ("b".into(), 0), ("c".into(), 0)]);

    let young = job.collect(HOUR_MS, false).await;
    let dropped = ["a-0", "b-0", "c-0"];
    assert_eq!(verdicts(&young), dropped.map(|f| (f.to_owned(), Verdict::Young)));
    job.clock.advance(2 * HOUR_MS);
    let dry = job.collect(HOUR_MS, false).await;
    assert_eq!(verdicts(&dry), dropped.map(|f| (f.to_owned(), Verdict::Due)));
    assert_eq!(dry.tally(Verdict::Due), (3, 12), "three files of 4 bytes");
    assert_eq!(dry.forgotten, 0);
    for file in dropped {
        assert!(job.exists(file).await, "a dry run deleted {file}");
    }
    // The read-only preview judges alike, through an inspector of the running store's file (read from a copy).
    let inspector = Inspector::open_file(job._dir.path().join("s.redb")).unwrap();
    assert_eq!(preview_data_files(&inspector, &job.table, &job.clock, HOUR_MS).await.unwrap(), dry);

    let done = job.collect(HOUR_MS, true).await;
    assert_eq!(verdicts(&done), dropped.map(|f| (f.to_owned(), Verdict::Deleted)));
    assert_eq!((done.entries, done.forgotten), (3, 3));
    for file in dropped {
        assert!(!job.exists(file).await, "{file} was not deleted");
    }
    for file in ["a-1", "d-0", "e-0"] {
        assert!(job.exists(file).await, "the live or committed {file} was deleted");
    }
    let mut rows = job.table.rows().await.unwrap();
    rows.sort();
    assert_eq!(rows, ["a-1", "d-0"]);
    assert!(job.store.garbage(None, 100).unwrap().is_empty());
    assert_eq!(job.collect(0, true).await, CollectReport::default(), "a second collection finds nothing");
    job.store.close();
}

/// A retried attempt that staged the dropped attempt's very file (its write result, without writing it again):
/// the ledger names a live file. It is kept (and the entry forgotten); once committed it is the table's.
/// Deleting it would lose a row. Writing that name again is refused: a data file is written once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_a_retried_attempt_staged_again_is_kept_and_its_name_is_never_rewritten() {
    let job = job().await;
    let result = job.stage("a", 0, "a").await;
    job.store.restart(&id("a")).await.unwrap();
    let rewrite = job.table.write_data_file("a", b"a\n".to_vec()).await.unwrap_err();
    assert_eq!(rewrite.kind(), ErrorKind::InvalidInput, "{rewrite}");
    let part = StagePart::new(Attempt::new(1), Part::FIRST).keys(vec![b"a".to_vec()]).results(vec![result]);
    job.store.stage(&id("a"), part).await.unwrap();
    job.clock.advance(2 * HOUR_MS);
    let report = job.collect(0, true).await;
    assert_eq!(verdicts(&report), [("a".to_owned(), Verdict::Live)]);
    assert_eq!(report.forgotten, 1, "a live file is not this entry's to delete");
    assert!(job.exists("a").await);
    job.store.seal(&id("a"), 1).await.unwrap();
    Committer::new(&job.store, &job.table).finish().await.unwrap();
    assert_eq!(job.table.rows().await.unwrap(), ["a"]);
    job.store.close();
}

/// The collector judges a dropped attempt's file by its age, then deletes it. A newer attempt that writes the
/// same name in between — after the stat, before the delete — would have its file deleted under the commit that
/// names it. A data file is written once: that rewrite is refused while the old file exists, so the newer
/// attempt writes a name of its own and nothing it stages is lost. (Fails with `write_data_file` overwriting:
/// the newer attempt's file is gone and its commit references a missing file.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_rewritten_between_the_collectors_judgement_and_its_delete_is_never_lost() {
    /// The table, with a newer attempt of `a` writing the same name right after the collector's stat of it.
    struct RewriteAfterStat<'j> {
        job: &'j Job,
        rewritten: std::sync::Mutex<Option<sinkpoint::Result<WriteResult>>>,
    }
    #[async_trait]
    impl DataFiles for RewriteAfterStat<'_> {
        fn files_of(&self, result: &WriteResult) -> sinkpoint::Result<Vec<String>> {
            self.job.table.files_of(result)
        }
        async fn referenced(&self) -> sinkpoint::Result<BTreeSet<String>> {
            self.job.table.referenced().await
        }
        async fn stat(&self, file: &str) -> sinkpoint::Result<Option<FileStat>> {
            let stat = self.job.table.stat(file).await;
            let rewrite = self.job.table.write_data_file(file, format!("{file}\n").into_bytes()).await;
            *self.rewritten.lock().unwrap() = Some(rewrite);
            stat
        }
        async fn delete(&self, file: &str) -> sinkpoint::Result<()> {
            self.job.table.delete(file).await
        }
    }
    let job = job().await;
    job.stage("a", 0, "a").await;
    job.store.restart(&id("a")).await.unwrap();
    job.clock.advance(2 * HOUR_MS);
    let table = RewriteAfterStat { job: &job, rewritten: std::sync::Mutex::new(None) };
    let settings = CollectSettings { grace_ms: HOUR_MS, apply: true };
    let report = collect_data_files(&job.store, &table, &job.clock, &settings).await.unwrap();
    assert_eq!(verdicts(&report), [("a".to_owned(), Verdict::Deleted)]);
    // The newer attempt stages whatever its write gave it, or writes a name of its own when refused.
    let rewritten = table.rewritten.lock().unwrap().take().unwrap();
    let result = match rewritten {
        Ok(result) => result,
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
            job.table.write_data_file("a-1", b"a\n".to_vec()).await.unwrap()
        }
    };
    let part = StagePart::new(Attempt::new(1), Part::FIRST).keys(vec![b"a".to_vec()]).results(vec![result]);
    job.store.stage(&id("a"), part).await.unwrap();
    job.store.seal(&id("a"), 1).await.unwrap();
    Committer::new(&job.store, &job.table).finish().await.unwrap();
    let rows = job.table.rows().await;
    assert_eq!(rows.ok(), Some(vec!["a".to_owned()]), "the committed attempt's file was deleted");
    job.store.close();
}

/// Two collections of one store at once are refused: each could judge one file and delete it, the second after a
/// worker created that name again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_collection_while_one_runs_is_refused() {
    /// The table, holding the first collection inside its listing of references until it is let go.
    struct Held<'j> {
        job: &'j Job,
        entered: tokio::sync::Notify,
        go_on: tokio::sync::Notify,
    }
    #[async_trait]
    impl DataFiles for Held<'_> {
        fn files_of(&self, result: &WriteResult) -> sinkpoint::Result<Vec<String>> {
            self.job.table.files_of(result)
        }
        async fn referenced(&self) -> sinkpoint::Result<BTreeSet<String>> {
            self.entered.notify_one();
            self.go_on.notified().await;
            self.job.table.referenced().await
        }
        async fn stat(&self, file: &str) -> sinkpoint::Result<Option<FileStat>> {
            self.job.table.stat(file).await
        }
        async fn delete(&self, file: &str) -> sinkpoint::Result<()> {
            self.job.table.delete(file).await
        }
    }
    let job = job().await;
    let held = Held { job: &job, entered: tokio::sync::Notify::new(), go_on: tokio::sync::Notify::new() };
    let settings = CollectSettings::default();
    let first = collect_data_files(&job.store, &held, &job.clock, &settings);
    let second = async {
        held.entered.notified().await;
        let second = collect_data_files(&job.store, &job.table, &job.clock, &settings).await;
        held.go_on.notify_one();
        second
    };
    let (first, second) = tokio::join!(first, second);
    first.unwrap();
    let second = second.expect_err("the second collection must be refused");
    assert_eq!(second.kind(), ErrorKind::InvalidInput, "{second}");
    assert_eq!(job.collect(0, true).await.entries, 0, "one collection after the other runs");
    job.store.close();
}

/// Whatever the ledger says, a file a table commit references is never deleted (here a discard naming a
/// committed file, as a caller's mistake would).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ledger_entry_naming_a_committed_file_is_kept() {
    let job = job().await;
    let committed = job.stage("a", 0, "a-0").await;
    job.store.seal(&id("a"), 1).await.unwrap();
    Committer::new(&job.store, &job.table).finish().await.unwrap();
    job.store.discard(&id("a"), Attempt::new(9), vec![committed]).await.unwrap();
    job.clock.advance(2 * HOUR_MS);
    let report = job.collect(0, true).await;
    assert_eq!(verdicts(&report), [("a-0".to_owned(), Verdict::Referenced)]);
    assert!(job.exists("a-0").await);
    assert_eq!(job.table.rows().await.unwrap(), ["a-0"]);
    job.store.close();
}

/// Bad calls are refused before anything is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discard_and_forget_refuse_bad_input() {
    let job = job().await;
    let err = job.store.discard(&id("a"), Attempt::FIRST, Vec::new()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    let err = job.store.forget_garbage(&[]).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    // Forgetting an entry that is not there changes nothing.
    let before = job.store.log_frames().unwrap().len();
    job.store.forget_garbage(&[sinkpoint::gc::GarbageRef { seq: 99, index: 0 }]).await.unwrap();
    assert_eq!(job.store.log_frames().unwrap().len(), before, "a no-op forget was logged");
    job.store.close();
}

/// The reference table, except that deleting `fail` fails.
struct FailingDelete {
    table: DirTable,
    fail: &'static str,
}

#[async_trait]
impl DataFiles for FailingDelete {
    fn files_of(&self, result: &WriteResult) -> sinkpoint::Result<Vec<String>> {
        self.table.files_of(result)
    }
    async fn referenced(&self) -> sinkpoint::Result<BTreeSet<String>> {
        self.table.referenced().await
    }
    async fn stat(&self, file: &str) -> sinkpoint::Result<Option<FileStat>> {
        self.table.stat(file).await
    }
    async fn delete(&self, file: &str) -> sinkpoint::Result<()> {
        if file == self.fail {
            return Err(sinkpoint::Error::from(std::io::Error::other("the storage is down")));
        }
        self.table.delete(file).await
    }
}

/// A delete that fails stops the collection with the error; the entries settled before it are forgotten, the
/// failed one and those after it stay for the next run, which finishes the work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_delete_keeps_its_entry_and_the_next_run_finishes() {
    let job = job().await;
    for name in ["a", "b", "c"] {
        job.stage(name, 0, &format!("{name}-0")).await;
        job.store.abort(&id(name)).await.unwrap();
    }
    job.clock.advance(2 * HOUR_MS);
    let failing = FailingDelete { table: job.table.clone(), fail: "b-0" };
    let settings = CollectSettings { grace_ms: 0, apply: true };
    let err = collect_data_files(&job.store, &failing, &job.clock, &settings).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Io, "{err}");
    let left: Vec<String> = job.store.garbage(None, 100).unwrap().into_iter().map(|g| g.id.to_string()).collect();
    assert_eq!(left, ["b", "c"], "a is settled and forgotten; b failed; c comes after the failure");
    assert!(!job.exists("a-0").await && job.exists("b-0").await);
    // c was judged alongside b, so its file may be gone already: the next run then finds it gone.
    let c = if job.exists("c-0").await { Verdict::Deleted } else { Verdict::Gone };
    let report = job.collect(0, true).await;
    assert_eq!(verdicts(&report), [("b-0".into(), Verdict::Deleted), ("c-0".into(), c)]);
    assert!(job.store.garbage(None, 100).unwrap().is_empty());
    job.store.close();
}

/// The ledger is part of the state: a store restored from its mirror (from the log's segments, and from a
/// snapshot) holds the same entries, and a forget is restored too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ledger_is_restored_from_the_mirror_from_segments_and_from_a_snapshot() {
    for snapshot_every in [1_000_000u64, 3] {
        let bucket = Bucket::new(Kind::Memory, &format!("collect-restore-{snapshot_every}"));
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("s.redb");
        let clock = ManualClock::new(0);
        let settings =
            sinkpoint::mirror::MirrorSettings { snapshot_interval_records: snapshot_every, ..sync_settings() };
        let store = builder(&bucket, &file, settings.clone(), &clock).open().await.unwrap();
        let result = |n: u32| WriteResult::new(sinkpoint::Format::Parquet, format!("f-{n}").into_bytes()).unwrap();
        for n in 0..4u32 {
            let name = format!("c{n}");
            let part = StagePart::new(Attempt::FIRST, Part::FIRST)
                .keys(vec![name.clone().into_bytes()])
                .results(vec![result(n)]);
            store.stage(&id(&name), part).await.unwrap();
        }
        store.restart(&id("c0")).await.unwrap();
        store.abort(&id("c1")).await.unwrap();
        store.seal(&id("c2"), 1).await.unwrap();
        store.operator().force_abort(&[id("c2")], "a test").await.unwrap();
        store.discard(&id("c3"), Attempt::new(7), vec![result(9)]).await.unwrap();
        let first = store.garbage(None, 1).unwrap();
        store.forget_garbage(&[first[0].at]).await.unwrap();
        let before = digest(&store);
        assert_eq!(before.matches("garbage ").count(), 3, "{before}");
        store.close();
        std::fs::remove_file(&file).unwrap();
        let store = builder(&bucket, &file, settings, &clock).must_exist().open().await.unwrap();
        assert_eq!(digest(&store), before, "snapshot every {snapshot_every} records: the restored ledger differs");
        assert_eq!(store.get(&id("c2")).unwrap().unwrap().state, CheckpointState::Aborted);
        store.close();
    }
}

/// The figure docs/BENCHMARKS.md quotes for the collector's cost: 10,000 aborted checkpoints' files on a local
/// directory table, found, deleted and forgotten in one collection. Ignored in the default run (it writes 10,000
/// files): `cargo test --features testkit --release --test suite collect:: -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run it by name"]
async fn the_time_to_collect_ten_thousand_orphans_on_a_local_directory() {
    const ORPHANS: u32 = 10_000;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::builder(JobId::new("job").unwrap(), TargetIdentity::new("dir:t").unwrap())
        .path(dir.path().join("s.redb"))
        .open()
        .await
        .unwrap();
    let table = DirTable::local(dir.path().join("table")).unwrap();
    for n in 0..ORPHANS {
        let name = format!("f{n:05}");
        let result = table.write_data_file(&name, vec![b'x'; 100]).await.unwrap();
        let part = StagePart::new(Attempt::FIRST, Part::FIRST).results(vec![result]);
        store.stage(&id(&name), part).await.unwrap();
        store.abort(&id(&name)).await.unwrap();
    }
    let clock = ManualClock::new(SystemClock.wall_ms() + 2 * HOUR_MS);
    let settings = CollectSettings { grace_ms: HOUR_MS, apply: true };
    #[expect(clippy::disallowed_methods, reason = "a measurement of wall time")]
    let started = std::time::Instant::now();
    let report = collect_data_files(&store, &table, &clock, &settings).await.unwrap();
    let elapsed = started.elapsed();
    assert_eq!((report.tally(Verdict::Deleted).0, report.forgotten), (u64::from(ORPHANS), u64::from(ORPHANS)));
    println!(
        "collected {ORPHANS} orphans (stat, delete, forget) on a local directory in {:.2} s: {:.0} µs each",
        elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1e6 / f64::from(ORPHANS)
    );
    store.close();
}
