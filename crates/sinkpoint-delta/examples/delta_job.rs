//! The quick-start job on a real Delta table: workers turn inputs into Arrow batches, write Parquet data files
//! into the table's directory (invisible until committed), stage their `Add`s and seal; the driver commits them
//! through sinkpoint into `DIR/table`. Crash it at a named point (exit code 86), run it again, and the
//! read-back line shows 0 duplicates, 0 missing:
//!
//! ```text
//! cargo run -p sinkpoint-delta --example delta_job -- --fresh --crash-at after-target-commit-before-mark
//! cargo run -p sinkpoint-delta --example delta_job                # the rerun recovers (F1)
//! ```
//!
//! With `--maintenance` the job commits after each input and then maintains the table's log as an operator
//! might: a checkpoint, then the removal of every commit file before it, whatever its age. It does so once at the
//! start too, before recovery, as a scheduled maintenance finds a job that crashed. The job's `txn` lives on in
//! the checkpoint, so the probe stays exact.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use arrow_array::{RecordBatch, StringArray};
use arrow_schema::{DataType as ArrowType, Field, Schema};
use deltalake::checkpoints::{cleanup_expired_logs_for, create_checkpoint};
use deltalake::kernel::{DataType, StructField};
use deltalake::logstore::object_store::ObjectStoreExt as _;
use deltalake::{DeltaTable, DeltaTableError};
use futures::TryStreamExt as _;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use sinkpoint::Committer;
use sinkpoint::commit::{CrashHook, crash_points};
use sinkpoint::mirror::MirrorSettings;
use sinkpoint::{
    Attempt, CheckpointId, CommitKey, CommitOutcome, JobId, Part, ProbeOutcome, StagePart, Store, Target, TargetCommit,
    TargetIdentity,
};
use sinkpoint_delta::{DeltaTarget, write_data_file};

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
        "usage: delta_job [--dir DIR] [--inputs N] [--rows R] [--fresh] [--maintenance]\n           \
         [--crash-at after-stage|after-seal|after-begin-commit|after-target-commit-before-mark|unknown-outcome]"
    );
    std::process::exit(2)
}

fn parse() -> Args {
    let mut args = Args {
        dir: PathBuf::from("target/delta-job"),
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
    inner: DeltaTarget,
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
    Arc::new(Schema::new(vec![Field::new("row", ArrowType::Utf8, false)]))
}

/// A delta-rs failure as the target's error (not `Io`: a refused write is not fixed by retrying it).
fn delta_error(what: &str) -> impl Fn(DeltaTableError) -> sinkpoint::Error + '_ {
    move |e| sinkpoint::Error::target_with_source(what.to_owned(), e)
}

/// The table, created empty with its schema on the first run.
async fn open_or_create(dir: &std::path::Path) -> sinkpoint::Result<DeltaTarget> {
    std::fs::create_dir_all(dir)?;
    let target = DeltaTarget::new(dir.to_string_lossy());
    if target.open().await.is_ok() {
        return Ok(target);
    }
    let url = deltalake::ensure_table_uri(target.uri()).map_err(delta_error("the table's URL"))?;
    let table = DeltaTable::try_from_url(url).await.map_err(delta_error("opening the table's location"))?;
    let columns = [StructField::new("row", DataType::STRING, false)];
    table.create().with_columns(columns).await.map_err(delta_error("creating the table"))?;
    Ok(target)
}

/// One worker: make input `i`'s rows, write them as one Parquet data file, stage its `Add`, seal.
async fn work(
    store: &Store,
    target: &DeltaTarget,
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
        // A task of a dead attempt (an older epoch) never mixes its files with ours: begin a new attempt.
        Some(info) if store.orphans().contains(&id) || info.state == sinkpoint::CheckpointState::Aborted => {
            store.restart(&id).await?;
            info.attempt.next()
        }
        Some(info) => info.attempt,
    };
    let values: Vec<String> = (0..rows).map(|r| format!("{i}:{r}")).collect();
    let batch = RecordBatch::try_new(schema(), vec![Arc::new(StringArray::from(values))])
        .map_err(|e| sinkpoint::Error::invalid_input(format!("a batch of input {i}: {e}")))?;
    let storage = target.object_store().map_err(delta_error("opening the table's storage"))?;
    let result = write_data_file(storage, &[batch]).await?;
    store.stage(&id, StagePart::new(attempt, Part::FIRST).keys(vec![key]).results(vec![result])).await?;
    if crash_at == Some("after-stage") {
        crash("after-stage");
    }
    store.seal(&id, 1).await?;
    if crash_at == Some("after-seal") {
        crash("after-seal");
    }
    Ok(())
}

/// One pass of log maintenance: a checkpoint of the latest version, then the removal of every commit file
/// before it, whatever its age.
async fn maintain(target: &DeltaTarget, pass: usize) -> sinkpoint::Result<()> {
    let table = target.open().await.map_err(delta_error("opening the table"))?;
    create_checkpoint(&table, None).await.map_err(delta_error("checkpointing"))?;
    let version = table.version().unwrap_or_default();
    let removed = cleanup_expired_logs_for(version, table.log_store().as_ref(), i64::MAX, None)
        .await
        .map_err(delta_error("cleaning up the log"))?;
    println!("maintenance {pass}: checkpoint at version {version}, {removed} log files removed");
    Ok(())
}

/// Reads every active data file of the table back and counts each row.
async fn read_back(target: &DeltaTarget, args: &Args) -> sinkpoint::Result<bool> {
    let table = target.open().await.map_err(delta_error("opening the table"))?;
    let snapshot = table.snapshot().map_err(delta_error("reading the snapshot"))?;
    let paths: Vec<String> = snapshot
        .snapshot()
        .file_views(table.log_store().as_ref(), None)
        .map_ok(|f| f.path().into_owned())
        .try_collect()
        .await
        .map_err(delta_error("listing the table's files"))?;
    let storage = target.object_store().map_err(delta_error("opening the table's storage"))?;
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for path in &paths {
        let read = |e: deltalake::ObjectStoreError| sinkpoint::Error::target_with_source(format!("reading {path}"), e);
        let bytes =
            storage.get(&deltalake::Path::from(path.as_str())).await.map_err(read)?.bytes().await.map_err(read)?;
        let decode = |e: parquet::errors::ParquetError| sinkpoint::Error::corrupt(format!("{path}: {e}"));
        for batch in ParquetRecordBatchReaderBuilder::try_new(bytes).map_err(decode)?.build().map_err(decode)? {
            let batch = batch.map_err(|e| sinkpoint::Error::corrupt(format!("{path}: {e}")))?;
            let column = batch
                .column(0)
                .as_any()
                .downcast_ref::<StringArray>()
                .ok_or_else(|| sinkpoint::Error::corrupt("the table's row column is not a string column"))?;
            for row in column.iter().flatten() {
                *counts.entry(row.to_owned()).or_default() += 1;
            }
        }
    }
    let total: usize = counts.values().sum();
    let duplicates: usize = counts.values().map(|c| c - 1).sum();
    let missing = (0..args.inputs)
        .flat_map(|i| (0..args.rows).map(move |r| format!("{i}:{r}")))
        .filter(|row| !counts.contains_key(row))
        .count();
    println!("table: version {:?}, {} data files", table.version(), paths.len());
    println!("table: {total} rows, {duplicates} duplicates, {missing} missing");
    Ok(duplicates == 0 && missing == 0)
}

/// The hook of the crash flag: each commit point is passed once a key, in key order; it stops the process at
/// key `crash_key`'s pass (the unknown outcome's own key is the only one that loses its ack).
fn crash_hook(crash_at: Option<String>, crash_key: u64) -> CrashHook {
    let hits = std::sync::atomic::AtomicU64::new(0);
    Arc::new(move |point| {
        let (wanted, skip) = match crash_at.as_deref() {
            Some("unknown-outcome") => (crash_points::AFTER_MARK_UNKNOWN, 0),
            Some(p) => (p, crash_key),
            None => return false,
        };
        if point == wanted && hits.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == skip {
            crash(point);
        }
        false
    })
}

async fn run(args: Args) -> sinkpoint::Result<ExitCode> {
    if args.fresh && args.dir.exists() {
        std::fs::remove_dir_all(&args.dir)?;
    }
    std::fs::create_dir_all(args.dir.join("mirror"))?;
    let table = open_or_create(&args.dir.join("table")).await?;
    let mirror = object_store::local::LocalFileSystem::new_with_prefix(args.dir.join("mirror"))?.with_fsync(true);
    let identity = TargetIdentity::new(format!("delta+file://{}", table.uri()))?;
    let store = Store::builder(JobId::new("delta-job")?, identity)
        .path(args.dir.join("sink.redb"))
        .mirror(Arc::new(mirror), object_store::path::Path::from("delta-job"), MirrorSettings::default())
        .open()
        .await?;
    let mut passes = 0..;
    if args.maintenance {
        maintain(&table, passes.next().unwrap_or_default()).await?;
    }
    // A commit crash at the job's one key, or, when each input is its own key, at the middle input's key.
    let crash_key = if args.maintenance { (args.inputs / 2) as u64 } else { 0 };
    let target: Box<dyn Target> = if args.crash_at.as_deref() == Some("unknown-outcome") {
        Box::new(LoseAckThenProbeFails { inner: table.clone(), key: crash_key, probe_fails: false.into() })
    } else {
        Box::new(table.clone())
    };
    let committer =
        Committer::new(&store, target.as_ref()).with_crash_hook(crash_hook(args.crash_at.clone(), crash_key));
    let report = committer.recover().await?;
    println!(
        "recovery: epoch {}, F1 marked {:?}, F2 re-committed {:?}",
        store.epoch(),
        report.marked_landed,
        report.recommitted
    );
    if report.finished {
        println!("fast path: the job's final commit is in the table; nothing to scan or write");
    } else if let Some(blocked) = &report.blocked {
        println!("blocked: {blocked:?}; run again when the table answers");
        return Ok(ExitCode::from(3));
    } else {
        let stage_crash = args.crash_at.as_deref().filter(|p| p.starts_with("after-s"));
        for i in 0..args.inputs {
            // A stage crash only in the middle of the job, so some inputs are done and some not.
            work(&store, &table, i, args.rows, stage_crash.filter(|_| i == args.inputs / 2)).await?;
            if args.maintenance {
                committer.commit_pending().await?;
                maintain(&table, passes.next().unwrap_or_default()).await?;
            }
        }
        let commit = committer.finish().await?;
        println!("committed keys {:?}", commit.committed_keys);
    }
    Ok(if read_back(&table, &args).await? { ExitCode::SUCCESS } else { ExitCode::FAILURE })
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
