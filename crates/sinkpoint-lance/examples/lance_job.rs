//! The quick-start job on a real Lance dataset: workers turn inputs into Arrow batches, write uncommitted
//! fragments, stage and seal; the driver commits them through sinkpoint into `DIR/table.lance`. Crash it at a
//! named point (exit code 86), run it again, and the read-back line shows 0 duplicates, 0 missing:
//!
//! ```text
//! cargo run -p sinkpoint-lance --example lance_job -- --fresh --crash-at after-target-commit-before-mark
//! cargo run -p sinkpoint-lance --example lance_job                # the rerun recovers (F1)
//! ```
//!
//! With `--maintenance` the job commits after each input and then maintains the table as an operator might:
//! Lance's cleanup of every version older than now (alternately honouring the store's retention watermark and
//! ignoring it; never `delete_unverified`), then compaction of the small fragments. It does so once at the start
//! too, before recovery, as a scheduled maintenance finds a job that crashed.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use arrow_array::{RecordBatch, RecordBatchIterator, StringArray};
use arrow_schema::{DataType, Field, Schema};
use futures::TryStreamExt;
use lance::Dataset;
use lance::dataset::cleanup::CleanupPolicyBuilder;
use lance::dataset::optimize::{CompactionOptions, compact_files};
use lance::dataset::{WriteMode, WriteParams};
use sinkpoint::Committer;
use sinkpoint::commit::{CrashHook, crash_points};
use sinkpoint::mirror::MirrorSettings;
use sinkpoint::{
    Attempt, CheckpointId, CommitKey, CommitOutcome, JobId, Part, ProbeOutcome, StagePart, Store, Target, TargetCommit,
    TargetIdentity,
};
use sinkpoint_lance::{LanceTarget, write_fragments};

/// The exit code of a simulated crash (the quick-start job's).
const CRASH_EXIT_CODE: i32 = 86;
/// The crash points the flag accepts.
const POINTS: [&str; 5] =
    ["after-stage", "after-seal", "after-begin-commit", "after-target-commit-before-mark", "unknown-outcome"];

struct Args {
    dir: PathBuf,
    inputs: usize,
    rows: usize,
    crash_at: Option<String>,
    fresh: bool,
    maintenance: bool,
}

fn usage() -> ! {
    eprintln!(
        "usage: lance_job [--dir DIR] [--inputs N] [--rows R] [--fresh] [--maintenance]\n           \
         [--crash-at after-stage|after-seal|after-begin-commit|after-target-commit-before-mark|unknown-outcome]"
    );
    std::process::exit(2)
}

fn parse() -> Args {
    let mut args = Args {
        dir: PathBuf::from("target/lance-job"),
        inputs: 8,
        rows: 100,
        crash_at: None,
        fresh: false,
        maintenance: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| usage());
        match flag.as_str() {
            "--dir" => args.dir = PathBuf::from(value()),
            "--inputs" => args.inputs = value().parse().unwrap_or_else(|_| usage()),
            "--rows" => args.rows = value().parse().unwrap_or_else(|_| usage()),
            "--crash-at" => args.crash_at = Some(value()),
            "--fresh" => args.fresh = true,
            "--maintenance" => args.maintenance = true,
            _ => usage(),
        }
    }
    if args.inputs == 0 || args.crash_at.as_deref().is_some_and(|p| !POINTS.contains(&p)) {
        usage();
    }
    args
}

fn crash(point: &str) -> ! {
    println!("crash: stopping the process at {point}");
    std::process::exit(CRASH_EXIT_CODE)
}

/// The unknown outcome of the crash flag: the commit of key `key` lands, its ack is lost, and the probe right
/// after fails.
struct LoseAckThenProbeFails {
    inner: LanceTarget,
    key: u64,
    probe_fails: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl Target for LoseAckThenProbeFails {
    async fn version(&self) -> sinkpoint::Result<Option<u64>> {
        self.inner.version().await
    }

    async fn commit(&self, commit: &TargetCommit<'_>) -> CommitOutcome {
        let landed = self.inner.commit(commit).await;
        if commit.key.n != self.key {
            return landed;
        }
        self.probe_fails.store(true, std::sync::atomic::Ordering::SeqCst);
        println!("target: key {} {landed:?}, but the ack is lost", commit.key.n);
        CommitOutcome::Unknown { reason: "ack lost".into() }
    }

    async fn probe(&self, key: &CommitKey, prepared_version: Option<u64>) -> ProbeOutcome {
        if self.probe_fails.swap(false, std::sync::atomic::Ordering::SeqCst) {
            return ProbeOutcome::Unknown { reason: "probe failed".into() };
        }
        self.inner.probe(key, prepared_version).await
    }
}

fn schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![Field::new("row", DataType::Utf8, false)]))
}

/// A Lance failure as the target's error (not `Io`: a refused write is not fixed by retrying it).
fn lance_error(what: &str) -> impl Fn(lance::Error) -> sinkpoint::Error + '_ {
    move |e| sinkpoint::Error::target_with_source(what.to_owned(), e)
}

/// The dataset, created empty with its schema on the first run.
async fn open_or_create(uri: &str) -> sinkpoint::Result<Arc<Dataset>> {
    if let Ok(dataset) = Dataset::open(uri).await {
        return Ok(Arc::new(dataset));
    }
    let reader = RecordBatchIterator::new(Vec::<Result<RecordBatch, _>>::new(), schema());
    let params = WriteParams { mode: WriteMode::Create, ..WriteParams::default() };
    Ok(Arc::new(Dataset::write(reader, uri, Some(params)).await.map_err(lance_error("creating the dataset"))?))
}

/// One worker: make input `i`'s rows, write them as uncommitted fragments, stage, seal.
async fn work(
    store: &Store,
    dataset: Arc<Dataset>,
    i: usize,
    rows: usize,
    crash_at: Option<&str>,
) -> sinkpoint::Result<()> {
    let key = format!("source://inputs/{i:05}.csv").into_bytes();
    if store.is_processed(&key)? {
        return Ok(());
    }
    let id = CheckpointId::new(format!("input-{i:05}"))?;
    let attempt = match store.get(&id)? {
        None => Attempt::FIRST,
        // A task of a dead attempt (an older epoch) never mixes its fragments with ours: begin a new attempt.
        Some(info) if store.orphans().contains(&id) || info.state == sinkpoint::CheckpointState::Aborted => {
            store.restart(&id).await?;
            info.attempt.next()
        }
        Some(info) => info.attempt,
    };
    let values: Vec<String> = (0..rows).map(|r| format!("{i}:{r}")).collect();
    let batch = RecordBatch::try_new(schema(), vec![Arc::new(StringArray::from(values))])
        .map_err(|e| sinkpoint::Error::invalid_input(format!("a batch of input {i}: {e}")))?;
    let results = write_fragments(dataset, vec![batch]).await.map_err(lance_error("writing fragments"))?;
    store.stage(&id, StagePart::new(attempt, Part::FIRST).keys(vec![key]).results(results)).await?;
    if crash_at == Some("after-stage") {
        crash("after-stage");
    }
    store.seal(&id, 1).await?;
    if crash_at == Some("after-seal") {
        crash("after-seal");
    }
    Ok(())
}

/// One pass of table maintenance: Lance's cleanup of every version older than now (pass 0, 2, 4… through
/// [`LanceTarget::cleanup_old_versions`] with the store's retention watermark; pass 1, 3, 5… straight through
/// Lance, ignoring it), then compaction of the small fragments. Never `delete_unverified`: the fragments staged
/// for the next commits are referenced by no version yet.
async fn maintain(uri: &str, store: &Store, pass: usize) -> sinkpoint::Result<()> {
    let policy = CleanupPolicyBuilder::default().before_timestamp(chrono::Utc::now()).build();
    let (watermark, removed) = if pass.is_multiple_of(2) {
        let watermark = store.retention_watermark()?;
        let removed = LanceTarget::new(uri)?
            .cleanup_old_versions(policy, watermark)
            .await
            .map_err(lance_error("cleaning up old versions"))?;
        (format!("{watermark:?}"), removed)
    } else {
        let dataset = Dataset::open(uri).await.map_err(lance_error("opening the dataset"))?;
        let removed = dataset.cleanup_with_policy(policy).await.map_err(lance_error("cleaning up old versions"))?;
        ("ignored".to_owned(), removed)
    };
    let mut dataset = Dataset::open(uri).await.map_err(lance_error("opening the dataset"))?;
    let compacted =
        compact_files(&mut dataset, CompactionOptions::default(), None).await.map_err(lance_error("compacting"))?;
    println!(
        "maintenance {pass}: cleanup (watermark {watermark}) removed {} versions, {} data files; compaction \
         {} fragments into {}; version {}",
        removed.old_versions,
        removed.data_files_removed,
        compacted.fragments_removed,
        compacted.fragments_added,
        dataset.version().version
    );
    Ok(())
}

async fn read_back(uri: &str, args: &Args) -> sinkpoint::Result<bool> {
    let dataset = Dataset::open(uri).await.map_err(lance_error("opening the dataset"))?;
    let batches: Vec<RecordBatch> = dataset
        .scan()
        .try_into_stream()
        .await
        .map_err(lance_error("scanning"))?
        .try_collect()
        .await
        .map_err(lance_error("scanning"))?;
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for batch in &batches {
        let column = batch
            .column(0)
            .as_any()
            .downcast_ref::<StringArray>()
            .ok_or_else(|| sinkpoint::Error::corrupt("the dataset's row column is not a string column"))?;
        for row in column.iter().flatten() {
            *counts.entry(row.to_owned()).or_default() += 1;
        }
    }
    let total: usize = counts.values().sum();
    let duplicates: usize = counts.values().map(|c| c - 1).sum();
    let missing = (0..args.inputs)
        .flat_map(|i| (0..args.rows).map(move |r| format!("{i}:{r}")))
        .filter(|row| !counts.contains_key(row))
        .count();
    println!("table: {total} rows, {duplicates} duplicates, {missing} missing");
    Ok(duplicates == 0 && missing == 0)
}

async fn run(args: Args) -> sinkpoint::Result<ExitCode> {
    if args.fresh && args.dir.exists() {
        std::fs::remove_dir_all(&args.dir)?;
    }
    std::fs::create_dir_all(args.dir.join("mirror"))?;
    let uri = args.dir.join("table.lance").to_string_lossy().into_owned();
    let dataset = open_or_create(&uri).await?;
    let mirror = object_store::local::LocalFileSystem::new_with_prefix(args.dir.join("mirror"))?.with_fsync(true);
    let store = Store::builder(JobId::new("lance-job")?, TargetIdentity::new(format!("file://{uri}"))?)
        .path(args.dir.join("sink.redb"))
        .mirror(Arc::new(mirror), object_store::path::Path::from("lance-job"), MirrorSettings::default())
        .open()
        .await?;
    let mut passes = 0..;
    if args.maintenance {
        maintain(&uri, &store, passes.next().unwrap_or_default()).await?;
    }
    let table = LanceTarget::new(&uri)?;
    let unknown = args.crash_at.as_deref() == Some("unknown-outcome");
    // A commit crash at the job's one key, or, when each input is its own key, at the middle input's key: after
    // some maintenance, with a rerun whose first maintenance meets the key in flight.
    let crash_key = if args.maintenance { (args.inputs / 2) as u64 } else { 0 };
    let target: Box<dyn Target> = if unknown {
        Box::new(LoseAckThenProbeFails { inner: table, key: crash_key, probe_fails: false.into() })
    } else {
        Box::new(table)
    };
    let crash_at = args.crash_at.clone();
    // Each commit point is passed once a key, in key order.
    let hits = std::sync::atomic::AtomicU64::new(0);
    let hook: CrashHook = Arc::new(move |point| {
        // Only key `crash_key` loses its ack, so the first unknown outcome is its own.
        let (wanted, skip) = match crash_at.as_deref() {
            Some("unknown-outcome") => (crash_points::AFTER_MARK_UNKNOWN, 0),
            Some(p) => (p, crash_key),
            None => return false,
        };
        if point == wanted && hits.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == skip {
            crash(point);
        }
        false
    });
    let committer = Committer::new(&store, target.as_ref()).with_crash_hook(hook);
    let report = committer.recover().await?;
    println!(
        "recovery: epoch {}, F1 marked {:?}, F2 re-committed {:?}",
        store.epoch(),
        report.marked_landed,
        report.recommitted
    );
    if report.finished {
        println!("fast path: the job's final commit is in the dataset; nothing to scan or write");
    } else if let Some(blocked) = &report.blocked {
        println!("blocked: {blocked:?}; run again when the dataset answers");
        return Ok(ExitCode::from(3));
    } else {
        let stage_crash = args.crash_at.as_deref().filter(|p| p.starts_with("after-s"));
        for i in 0..args.inputs {
            // A stage crash only in the middle of the job, so some inputs are done and some not.
            work(&store, dataset.clone(), i, args.rows, stage_crash.filter(|_| i == args.inputs / 2)).await?;
            if args.maintenance {
                committer.commit_pending().await?;
                maintain(&uri, &store, passes.next().unwrap_or_default()).await?;
            }
        }
        let commit = committer.finish().await?;
        println!("committed keys {:?}", commit.committed_keys);
    }
    Ok(if read_back(&uri, &args).await? { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(parse()).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error ({:?}): {e}", e.kind());
            ExitCode::from(4)
        }
    }
}
