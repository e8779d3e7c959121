//! The quick-start job: a Daft-like write of N inputs into a directory table through sinkpoint, on the
//! embedded defaults (a local redb file and a local directory). Run it, crash it at a named point, run it again:
//! the table ends with every row exactly once. It reads the table back at the end and prints rows, duplicates
//! and missing rows, computed from the table itself.
//!
//! ```text
//! cargo run --example job                                   # a clean run
//! cargo run --example job -- --crash-at after-target-commit-before-mark
//! cargo run --example job                                   # the rerun recovers (F1)
//! ```
//!
//! By default the WAL is mirrored to `DIR/mirror` (a local directory standing in for object storage): delete
//! `DIR/sink.redb` between runs and the next run restores it from the mirror. `--local DIR2` keeps the local
//! file elsewhere (a second machine); `--no-mirror` runs on the local file alone.
//!
//! `--worker-processes N` runs the distributed shape on one machine: N worker processes stage and seal through
//! `DIR/shared` (standing in for the object store every machine sees), this process adopts and commits; kill
//! any of them (or this one) and run again.
//!
//! Each of the `--workers` tasks runs the worker loop a job should: skip what is processed, write, stage and queue
//! the seal in its own `SealWindow`, flush the window before its inputs count as done.
//!
//! Crash points (`--help` lists them with what each simulates): after-stage, after-seal, after-begin-commit,
//! after-target-commit-before-mark, unknown-outcome. A crash is a real process exit with code 86, with no clean
//! shutdown; every other end of a run closes the store, so its file is left clean.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use sinkpoint::Committer;
use sinkpoint::DirTable;
use sinkpoint::commit::{Blocked, RecoveryReport};
use sinkpoint::commit::{CrashHook, crash_points};
use sinkpoint::mirror::MirrorSettings;
use sinkpoint::shared::{Inbox, SharedStaging, Worker};
use sinkpoint::{Attempt, Part, SealWindow, SealWindowSettings, StagePart};
use sinkpoint::{
    CheckpointId, CheckpointState, CommitKey, CommitOutcome, JobId, ProbeOutcome, StateFilter, Store, Target,
    TargetCommit, TargetIdentity,
};

/// The exit code of a simulated crash.
const CRASH_EXIT_CODE: i32 = 86;
/// The exit code of a writer fenced by a newer one.
const FENCED_EXIT_CODE: u8 = 5;

struct Args {
    dir: PathBuf,
    local: Option<PathBuf>,
    mirror: bool,
    inputs: usize,
    rows: usize,
    workers: usize,
    commit_every: usize,
    crash_at: Option<String>,
    fresh: bool,
    work_ms: u64,
    /// Workers as child processes staging through `DIR/shared` (0: tasks in this process).
    worker_processes: usize,
    /// Set in a worker child: its index and the worker count.
    worker_of: Option<(usize, usize)>,
    /// Stage through this bucket of the S3-API server at `SINKPOINT_S3_ENDPOINT` instead of `DIR/shared`.
    shared_s3: Option<String>,
}

/// The crash points `--crash-at` takes, with what each one simulates.
const CRASH_POINTS: [(&str, &str); 5] = [
    ("after-stage", "mid-job, right after an input's part is staged, before its seal"),
    ("after-seal", "mid-job, right after an input's seal is queued (a seal counts once its window flushed it)"),
    ("after-begin-commit", "F2: a commit key is recorded, its table commit never sent"),
    ("after-target-commit-before-mark", "F1: the table commit landed, the store never told"),
    ("unknown-outcome", "U: the table commit lands, its ack is lost, the probe fails, the process dies"),
];

const USAGE: &str = "usage: job [--dir DIR] [--local DIR] [--no-mirror] [--inputs N] [--rows R] [--workers W] \
                     [--commit-every K] [--work-ms MS] [--fresh]\n           \
                     [--worker-processes N] [--shared-s3 BUCKET] [--crash-at POINT]";

/// `--help`: what the flags do and the crash points, on stdout; exit 0.
fn help() -> ! {
    println!(
        "The quick-start job: --inputs inputs of --rows rows each, written into a directory table exactly once through a \
         sinkpoint store.\n\n{USAGE}\n\n\
         \x20 --dir DIR              the job's directory (default target/sinkpoint-demo): table/, sink.redb, mirror/demo-job/, shared/\n\
         \x20 --local DIR            keep sink.redb in DIR instead (another machine's disk)\n\
         \x20 --no-mirror            no mirror: the local file alone (default: mirrored to DIR/mirror/demo-job)\n\
         \x20 --inputs N --rows R    the job's size (default 50 x 1000); a rerun must give the same values\n\
         \x20 --workers W            worker tasks in this process (default 8)\n\
         \x20 --commit-every K       a table commit every K inputs (default: one, at the end)\n\
         \x20 --work-ms MS           sleep MS per input, standing in for reading it: a run long enough to kill or watch\n\
         \x20 --fresh                delete DIR first\n\
         \x20 --worker-processes N   N worker processes stage and seal through DIR/shared; this process adopts and commits\n\
         \x20 --shared-s3 BUCKET     stage through BUCKET on the S3-API server at SINKPOINT_S3_ENDPOINT, not DIR/shared\n\
         \x20 --crash-at POINT       stop the process at POINT (exit code {CRASH_EXIT_CODE}, no clean shutdown); run again to recover:"
    );
    for (point, what) in CRASH_POINTS {
        println!("      {point:<33} {what}");
    }
    println!(
        "\nexit codes: 0 the table holds every row once, 1 it does not, 2 usage, 3 blocked (run again later), 4 error, \
         {FENCED_EXIT_CODE} fenced by a newer writer, {CRASH_EXIT_CODE} a crash point"
    );
    std::process::exit(0)
}

/// A bad command line: what is wrong, then the usage, on stderr; exit 2.
fn bad_usage(problem: &str) -> ! {
    eprintln!("job: {problem}\n{USAGE}\n(--help says what each flag does)");
    std::process::exit(2)
}

fn number<T: std::str::FromStr>(flag: &str, value: &str) -> T {
    value.parse().unwrap_or_else(|_| bad_usage(&format!("{flag} takes a number, not {value:?}")))
}

fn parse() -> Args {
    let mut args = Args {
        dir: PathBuf::from("target/sinkpoint-demo"),
        local: None,
        mirror: true,
        inputs: 50,
        rows: 1000,
        workers: 8,
        commit_every: 0,
        crash_at: None,
        fresh: false,
        work_ms: 0,
        worker_processes: 0,
        worker_of: None,
        shared_s3: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| bad_usage(&format!("{flag} needs a value")));
        match flag.as_str() {
            "--help" | "-h" => help(),
            "--dir" => args.dir = PathBuf::from(value()),
            "--local" => args.local = Some(PathBuf::from(value())),
            "--no-mirror" => args.mirror = false,
            "--inputs" => args.inputs = number(&flag, &value()),
            "--rows" => args.rows = number(&flag, &value()),
            "--workers" => args.workers = number(&flag, &value()),
            "--commit-every" => args.commit_every = number(&flag, &value()),
            "--crash-at" => args.crash_at = Some(value()),
            "--fresh" => args.fresh = true,
            "--work-ms" => args.work_ms = number(&flag, &value()),
            "--shared-s3" => args.shared_s3 = Some(value()),
            "--worker-processes" => args.worker_processes = number(&flag, &value()),
            "--worker-of" => {
                let v = value();
                let (k, n) = v.split_once('/').unwrap_or_else(|| bad_usage("--worker-of takes K/N"));
                args.worker_of = Some((number(&flag, k), number(&flag, n)));
            }
            _ => bad_usage(&format!("unknown flag {flag}")),
        }
    }
    if let Some(point) = &args.crash_at
        && !CRASH_POINTS.iter().any(|(p, _)| p == point)
    {
        let points: Vec<&str> = CRASH_POINTS.iter().map(|(p, _)| *p).collect();
        bad_usage(&format!("unknown crash point {point}; one of {}", points.join(", ")));
    }
    if args.inputs == 0 || args.workers == 0 {
        bad_usage("--inputs and --workers must be at least 1");
    }
    args
}

/// The unknown outcome of the crash flag: the commit lands but its ack is lost, and the one probe right after it
/// fails too, so the key is left CommitUnknown when the process dies. Every other call passes through.
struct LoseAckThenProbeFails<T> {
    inner: T,
    probe_fails: std::sync::atomic::AtomicBool,
}

impl<T> LoseAckThenProbeFails<T> {
    fn new(inner: T) -> Self {
        Self { inner, probe_fails: std::sync::atomic::AtomicBool::new(false) }
    }
}

#[async_trait::async_trait]
impl<T: Target> Target for LoseAckThenProbeFails<T> {
    async fn version(&self) -> sinkpoint::Result<Option<u64>> {
        self.inner.version().await
    }

    async fn commit(&self, commit: &TargetCommit<'_>) -> CommitOutcome {
        let landed = match self.inner.commit(commit).await {
            CommitOutcome::Committed => "landed".to_owned(),
            CommitOutcome::NotLanded { reason } => format!("did not land ({reason})"),
            CommitOutcome::Unknown { reason } => format!("has an unknown outcome ({reason})"),
        };
        self.probe_fails.store(true, std::sync::atomic::Ordering::SeqCst);
        println!("target: the table commit of key {} {landed}, but its ack is lost", commit.key.n);
        CommitOutcome::Unknown { reason: "ack lost".into() }
    }

    async fn probe(&self, key: &CommitKey, prepared_version: Option<u64>) -> ProbeOutcome {
        if self.probe_fails.swap(false, std::sync::atomic::Ordering::SeqCst) {
            return ProbeOutcome::Unknown { reason: "probe failed".into() };
        }
        self.inner.probe(key, prepared_version).await
    }
}

/// Stops the process at crash point `point` (its `--crash-at` name), as a crash would: no store closed.
fn crash(point: &str) -> ! {
    println!("crash: stopping the process at {point} (exit code {CRASH_EXIT_CODE}, no clean shutdown)");
    std::process::exit(CRASH_EXIT_CODE)
}

fn input_id(i: usize) -> CheckpointId {
    CheckpointId::new(format!("input-{i:05}")).unwrap_or_else(|e| panic!("valid id: {e}"))
}

fn input_key(i: usize) -> Vec<u8> {
    format!("source://inputs/{i:05}.csv").into_bytes()
}

/// One input of a worker: read input `i` (here: make its rows), write a data file, stage its one part and queue
/// its seal in the worker's window.
async fn work(
    store: &Store,
    window: &mut SealWindow<'_>,
    table: &DirTable,
    i: usize,
    rows: usize,
    work_ms: u64,
    crash_at: Option<&str>,
) -> sinkpoint::Result<bool> {
    if store.is_processed(&input_key(i))? {
        return Ok(false);
    }
    let id = input_id(i);
    let attempt = match store.get(&id)? {
        None => Attempt::FIRST,
        // A task of a dead attempt (an older epoch) never mixes its rows with ours: begin a new attempt.
        Some(info) if store.orphans().contains(&id) || info.state == sinkpoint::CheckpointState::Aborted => {
            store.restart(&id).await?;
            info.attempt.next()
        }
        Some(info) => info.attempt,
    };
    let data: String = (0..rows).map(|r| format!("{i}:{r}\n")).collect();
    if work_ms > 0 {
        // Stands in for reading and transforming the input, so that runs overlap in the two-driver test.
        tokio::time::sleep(std::time::Duration::from_millis(work_ms)).await;
    }
    // Like Lance fragments, data file names are unique per writer: a zombie never overwrites a live file.
    let name = format!("input-{i:05}-e{}-a{attempt}.rows", store.epoch());
    let result = table.write_data_file(&name, data.into_bytes()).await?;
    let part = StagePart::new(attempt, Part::FIRST).keys(vec![input_key(i)]).results(vec![result]);
    if crash_at == Some("after-stage") {
        store.stage(&id, part).await?;
        crash("after-stage");
    }
    // The one part and the seal in one commit, queued: the worker goes on to its next input while the store
    // commits, and one fsync serves half a window of seals. A seal counts once the window's flush reports it.
    window.stage_and_seal(&id, part, 1).await?;
    if crash_at == Some("after-seal") {
        crash("after-seal");
    }
    Ok(true)
}

/// One round of the in-process job: `--workers` tasks, worker `k` taking every `workers`-th input of the round
/// from its `k`-th, each with its own seal window, flushed before the task ends. Returns the inputs written and
/// those found already processed.
async fn run_round(
    args: &Args,
    store: &Arc<Store>,
    table: &DirTable,
    round: &[usize],
) -> sinkpoint::Result<(usize, usize)> {
    let stage_crash = args.crash_at.as_deref().filter(|p| p.starts_with("after-s"));
    let mut tasks = Vec::new();
    for k in 0..args.workers.min(round.len()) {
        let inputs: Vec<usize> = round.iter().copied().skip(k).step_by(args.workers).collect();
        let (store, table) = (store.clone(), table.clone());
        // Crash at a stage point only in the middle of the job: inputs before it are written, their seals queued
        // and only those a durable point covered kept (a window's seals count once flushed), those after it not
        // begun. The rerun redoes whatever did not land; the table gets nothing twice.
        let (crash_input, crash_point) = (args.inputs / 2, stage_crash.map(str::to_owned));
        let (rows, work_ms) = (args.rows, args.work_ms);
        tasks.push(tokio::spawn(async move {
            let mut window = SealWindow::new(&store, SealWindowSettings::default())?;
            let (mut written, mut skipped) = (0usize, 0usize);
            for i in inputs {
                let crash_here = crash_point.as_deref().filter(|_| i == crash_input);
                match work(&store, &mut window, &table, i, rows, work_ms, crash_here).await? {
                    true => written += 1,
                    false => skipped += 1,
                }
            }
            window.flush().await?;
            Ok::<_, sinkpoint::Error>((written, skipped))
        }));
    }
    // Every task is awaited, a failed one's siblings too: each holds the store, which is closed after the run.
    let (mut written, mut skipped, mut first_error) = (0usize, 0usize, None);
    for task in tasks {
        match task.await.map_err(|e| sinkpoint::Error::from(std::io::Error::other(e.to_string()))) {
            Ok(Ok((w, s))) => (written, skipped) = (written + w, skipped + s),
            Ok(Err(e)) | Err(e) => first_error = first_error.or(Some(e)),
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok((written, skipped)),
    }
}

/// The job's shared staging: `DIR/shared`, a local directory standing in for the object store every machine
/// sees (fsynced puts, conditional creates), or with `--shared-s3 BUCKET` that bucket on the S3-API server at
/// `SINKPOINT_S3_ENDPOINT` (moto in CI).
fn shared_staging(args: &Args) -> sinkpoint::Result<SharedStaging> {
    let objects: Arc<dyn object_store::ObjectStore> = match &args.shared_s3 {
        Some(bucket) => {
            let endpoint = std::env::var("SINKPOINT_S3_ENDPOINT")
                .map_err(|_| sinkpoint::Error::invalid_input("--shared-s3 needs SINKPOINT_S3_ENDPOINT"))?;
            let s3 = object_store::aws::AmazonS3Builder::new()
                .with_endpoint(&endpoint)
                .with_allow_http(true)
                .with_bucket_name(bucket)
                .with_access_key_id("test")
                .with_secret_access_key("test")
                .with_region("us-east-1")
                .build()?;
            Arc::new(s3)
        }
        None => {
            let root = args.dir.join("shared");
            std::fs::create_dir_all(&root)?;
            Arc::new(object_store::local::LocalFileSystem::new_with_prefix(&root)?.with_fsync(true))
        }
    };
    SharedStaging::new(objects, "", JobId::new("demo-job")?)
}

/// A worker process (`--worker-of K/N`): inputs K, K + N, …; each one not yet processed is written and
/// staged-and-sealed from here; a seal lost to another attempt of the same input is reported and dropped.
async fn run_worker(args: &Args, k: usize, n: usize) -> sinkpoint::Result<ExitCode> {
    let shared = shared_staging(args)?;
    let table = DirTable::local(args.dir.join("table"))?;
    let worker = Worker::new(shared, &format!("worker-{k}-pid-{}", std::process::id()))?;
    let (mut sealed, mut skipped, mut lost) = (0, 0, 0);
    for i in (k..args.inputs).step_by(n) {
        if worker.is_processed(&input_key(i)).await? {
            skipped += 1;
            continue;
        }
        let data: String = (0..args.rows).map(|r| format!("{i}:{r}\n")).collect();
        let name = format!("input-{i:05}-s{:032x}.rows", worker.session());
        let result = table.write_data_file(&name, data.into_bytes()).await?;
        if args.work_ms > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(args.work_ms)).await;
        }
        let id = CheckpointId::for_key(&input_key(i));
        match worker.stage_and_seal(&id, vec![input_key(i)], vec![result]).await {
            Ok(()) => sealed += 1,
            Err(e) if matches!(e.transition(), Some(sinkpoint::TransitionError::SealLost { .. })) => {
                println!("worker {k}: seal lost for input {i}: {e}");
                lost += 1;
            }
            Err(e) => return Err(e),
        }
    }
    println!("worker {k}: {sealed} sealed, {skipped} already processed, {lost} lost to another attempt");
    Ok(ExitCode::SUCCESS)
}

/// What the driver of `--worker-processes N` did.
struct Driven {
    restarts: usize,
    adopted: usize,
    cleanup: usize,
    committed_keys: Vec<u64>,
}

/// The driver of `--worker-processes N`: runs N worker processes (a worker that dies is started again), and
/// while they run adopts what they sealed and commits it.
async fn drive_workers(args: &Args, store: &Store, committer: &Committer<'_>) -> sinkpoint::Result<Driven> {
    let inbox = Inbox::new(shared_staging(args)?);
    let n = args.worker_processes;
    let spawn = |k: usize| -> std::io::Result<std::process::Child> {
        let mut cmd = std::process::Command::new(std::env::current_exe()?);
        if let Some(bucket) = &args.shared_s3 {
            cmd.args(["--shared-s3", bucket]);
        }
        cmd.args(["--dir", &args.dir.to_string_lossy(), "--inputs", &args.inputs.to_string()])
            .args(["--rows", &args.rows.to_string(), "--work-ms", &args.work_ms.to_string()])
            .args(["--worker-of", &format!("{k}/{n}")])
            .spawn()
    };
    let mut children: Vec<Option<std::process::Child>> =
        (0..n).map(|k| spawn(k).map(Some)).collect::<Result<_, _>>()?;
    let mut driven = Driven { restarts: 0, adopted: 0, cleanup: 0, committed_keys: Vec::new() };
    let mut running = true;
    while running {
        running = children.iter().any(Option::is_some);
        if running {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        for (k, slot) in children.iter_mut().enumerate() {
            let Some(child) = slot else { continue };
            match child.try_wait()? {
                None => {}
                Some(status) if status.success() => *slot = None,
                Some(status) => {
                    driven.restarts += 1;
                    println!("worker {k} died ({status}); starting it again");
                    if driven.restarts > WORKER_RESTARTS_MAX {
                        return Err(std::io::Error::other("workers keep dying; giving up").into());
                    }
                    *slot = Some(spawn(k)?);
                }
            }
        }
        // One more round once every worker has exited: it adopts their last seals.
        let report = inbox.adopt(store).await?;
        (driven.adopted, driven.cleanup) =
            (driven.adopted + report.adopted.len(), driven.cleanup + report.cleanup.len());
        if !report.adopted.is_empty() && running {
            driven.committed_keys.extend(committer.commit_pending().await?.committed_keys);
        }
    }
    Ok(driven)
}

/// How many times the driver starts dead workers again before it gives up.
const WORKER_RESTARTS_MAX: usize = 100;

/// Table commits in words: "3 table commits (keys 0 to 2)".
fn commits_in_words(keys: &[u64]) -> String {
    let mut keys = keys.to_vec();
    keys.sort_unstable();
    keys.dedup();
    match keys.as_slice() {
        [] => "no table commit".to_owned(),
        [key] => format!("1 table commit (key {key})"),
        [first, .., last] if last - first + 1 == keys.len() as u64 => {
            format!("{} table commits (keys {first} to {last})", keys.len())
        }
        _ => {
            let list: Vec<String> = keys.iter().map(u64::to_string).collect();
            format!("{} table commits (keys {})", keys.len(), list.join(", "))
        }
    }
}

/// What recovery found and did, in words; `unknown` are the keys whose outcome was unknown (U) before it ran.
fn recovery_in_words(report: &RecoveryReport, unknown: &[u64]) -> String {
    let mut done = Vec::new();
    if !report.orphans.is_empty() {
        let n = report.orphans.len();
        let (them, are) = if n == 1 { ("checkpoint", "its input is") } else { ("checkpoints", "their inputs are") };
        done.push(format!("{n} {them} staged by an earlier run and never sealed (orphans): {are} written again"));
    }
    if let Some(key) = report.marked_landed {
        done.push(if unknown.contains(&key) {
            format!("U: key {key}'s outcome was unknown; the probe found it in the table; marked committed")
        } else {
            format!("F1: key {key} had landed in the table but was not marked; marked committed")
        });
    }
    if let Some(key) = report.recommitted {
        done.push(if unknown.contains(&key) {
            format!("U: key {key}'s outcome was unknown; the probe did not find it in the table; committed again under the same key")
        } else {
            format!("F2: key {key} was recorded but had not landed; committed again under the same key")
        });
    }
    if !report.committed_keys.is_empty() {
        done.push(format!(
            "the checkpoints sealed before the restart committed in {}",
            commits_in_words(&report.committed_keys)
        ));
    }
    if done.is_empty() {
        done.push("nothing to recover".to_owned());
    }
    format!("recovery: {}", done.join("; "))
}

fn blocked_in_words(blocked: &Blocked) -> String {
    match blocked {
        Blocked::Unknown { key, reason } => format!(
            "blocked: key {key}'s outcome is still unknown (the probe answered: {reason}); run again when the table answers"
        ),
        Blocked::Mismatch { key, recorded, landed } => format!(
            "blocked: the table holds key {key} with {} checkpoints, not the {} the store recorded: an operator must look \
             (sinkpoint status --store)",
            landed.len(),
            recorded.len()
        ),
    }
}

async fn run(args: Args) -> sinkpoint::Result<ExitCode> {
    if let Some((k, n)) = args.worker_of {
        return run_worker(&args, k, n).await;
    }
    if args.fresh && args.dir.exists() {
        std::fs::remove_dir_all(&args.dir)?;
    }
    std::fs::create_dir_all(&args.dir)?;
    let table_dir = args.dir.join("table");
    let table = DirTable::local(&table_dir)?;
    // The local file: beside the table by default, or in --local (another machine's disk in the two-driver test).
    let local_dir = args.local.clone().unwrap_or_else(|| args.dir.clone());
    std::fs::create_dir_all(&local_dir)?;
    let store_path = local_dir.join("sink.redb");
    let mirror_dir = args.dir.join("mirror");
    let job = JobId::new("demo-job")?;
    // An absolute path: the identity is a URL an operator can hand to `sinkpoint gc --table` as printed.
    let identity = TargetIdentity::new(format!("file://{}", std::fs::canonicalize(&table_dir)?.display()))?;
    println!(
        "sinkpoint job: {} inputs x {} rows, store {}, table {}",
        args.inputs,
        args.rows,
        store_path.display(),
        table_dir.display()
    );
    let mut builder = Store::builder(job, identity).path(&store_path);
    if args.mirror {
        // The mirror: a local directory standing in for S3; every object fsynced before its put returns.
        std::fs::create_dir_all(&mirror_dir)?;
        let fs = object_store::local::LocalFileSystem::new_with_prefix(&mirror_dir)?.with_fsync(true);
        builder = builder.mirror(Arc::new(fs), object_store::path::Path::from("demo-job"), MirrorSettings::default());
        println!("mirror: {} (synchronous)", mirror_dir.join("demo-job").display());
    }
    // The store does not say whether it restored itself from the mirror: a missing file that opens as a store
    // it did not create was restored.
    let file_existed = store_path.exists();
    let store = Arc::new(builder.open().await?);
    if store.created() {
        println!("store: a new job, epoch {}", store.epoch());
    } else if !file_existed {
        println!("store: the local file was missing: restored from the mirror, epoch {}", store.epoch());
    } else {
        println!("store: reopened, epoch {}", store.epoch());
    }

    let ran = run_job(&args, &store, &table).await;
    // The store is closed on every end of a run but a crash point's, an error's too. Dropped instead, inside the
    // runtime, its writer would be detached and the process could exit before it closed the file: the next open
    // repairs it, and `sinkpoint status --store` reads it as left unclean by a crash.
    match Arc::try_unwrap(store) {
        Ok(store) => store.close_async().await,
        Err(_) => eprintln!("store: still in use at the end of the run, so not closed (the next open repairs it)"),
    }
    if let Some(code) = ran? {
        return Ok(code);
    }

    // Read the table back: the truth is what the table holds, not what we counted.
    let rows = table.rows().await?;
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for row in &rows {
        *counts.entry(row.as_str()).or_default() += 1;
    }
    let duplicates: usize = counts.values().map(|c| c - 1).sum();
    let mut missing = 0usize;
    for i in 0..args.inputs {
        for r in 0..args.rows {
            if !counts.contains_key(format!("{i}:{r}").as_str()) {
                missing += 1;
            }
        }
    }
    println!("table: {} rows, {duplicates} duplicates, {missing} missing", rows.len());
    Ok(if duplicates == 0 && missing == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// The job on its open store: recovery, then the writes and commits. Returns the exit code of a run that ends
/// early (blocked), `None` when the table is ready to be read back.
async fn run_job(args: &Args, store: &Arc<Store>, table: &DirTable) -> sinkpoint::Result<Option<ExitCode>> {
    // The target: the table itself, or, for the unknown-outcome crash, the table behind a fault that lands the
    // commit, loses its ack, and fails the probe that follows it.
    let unknown = args.crash_at.as_deref() == Some("unknown-outcome");
    let target: Box<dyn Target> =
        if unknown { Box::new(LoseAckThenProbeFails::new(table.clone())) } else { Box::new(table.clone()) };
    let crash_at = args.crash_at.clone();
    let hook: CrashHook = Arc::new(move |point| {
        // The unknown outcome stops once the key is recorded as CommitUnknown; the others at their own point.
        let (wanted, flag) = match crash_at.as_deref() {
            Some("unknown-outcome") => (crash_points::AFTER_MARK_UNKNOWN, "unknown-outcome"),
            Some(p) => (p, p),
            None => return false,
        };
        if point == wanted {
            crash(flag);
        }
        false
    });
    let committer = Committer::new(store, target.as_ref()).with_crash_hook(hook);

    // The keys whose outcome a crash left unknown (U), so that the report can tell U from F1 and F2.
    let unknown: Vec<u64> = store
        .list(StateFilter::CommitUnknown)?
        .iter()
        .filter_map(|c| match c.state {
            CheckpointState::CommitUnknown { key } => Some(key),
            _ => None,
        })
        .collect();
    let report = committer.recover().await?;
    println!("{}", recovery_in_words(&report, &unknown));
    if report.finished {
        println!("fast path: the job's final commit has landed; nothing to scan or write");
    } else if let Some(blocked) = &report.blocked {
        println!("{}", blocked_in_words(blocked));
        return Ok(Some(ExitCode::from(3)));
    } else if args.worker_processes > 0 {
        let mut driven = drive_workers(args, store, &committer).await?;
        driven.committed_keys.extend(committer.finish().await?.committed_keys);
        println!(
            "workers: {} processes, {} restarted; adopted {} checkpoints sealed by the workers ({} write results of \
             lost attempts to clean up); committed in {}",
            args.worker_processes,
            driven.restarts,
            driven.adopted,
            driven.cleanup,
            commits_in_words(&driven.committed_keys)
        );
    } else {
        let (mut written, mut skipped, mut keys) = (0usize, 0usize, Vec::new());
        // The inputs in rounds of `--commit-every` (all of them without it): the workers write a round, each
        // flushes its window, then the round's seals are committed.
        let round_len = if args.commit_every > 0 { args.commit_every } else { args.inputs };
        for round in (0..args.inputs).collect::<Vec<_>>().chunks(round_len) {
            let (w, s) = run_round(args, store, table, round).await?;
            (written, skipped) = (written + w, skipped + s);
            if args.commit_every > 0 {
                keys.extend(committer.commit_pending().await?.committed_keys);
            }
        }
        // Commits what is left and records the job's end, so every rerun takes the fast path.
        keys.extend(committer.finish().await?.committed_keys);
        println!("inputs: {written} written, {skipped} already processed; committed in {}", commits_in_words(&keys));
    }
    Ok(None)
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = parse();
    match run(args).await {
        Ok(code) => code,
        Err(e) if e.kind() == sinkpoint::ErrorKind::Fenced => {
            eprintln!("fenced: a newer writer took over this job; this one stops ({e})");
            ExitCode::from(FENCED_EXIT_CODE)
        }
        Err(e) => {
            eprintln!("error ({:?}): {e}", e.kind());
            ExitCode::from(4)
        }
    }
}
