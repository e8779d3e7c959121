//! Many worker processes through one store location: W worker processes (8, 16, 32, 64; quick mode 2 and 4) each
//! seal their share of N one-part inputs (4 seals in flight a process) into shared staging on the local filesystem
//! (standing in for the object store every machine sees; in `/dev/shm`, see `objects_dir`), in two shapes: a
//! `for_key` checkpoint per input (Daft's shape: `stage_and_seal` is one create an input), and tasks of 16 inputs, a
//! checkpoint each, with keys decided at adoption (`KeyExclusivity::AtAdoption`: one create a task). Each worker
//! reports its seals on stdout, as an engine's task results reach its driver; they run niced, as a driver has a
//! machine of its own. This process is the committer: it adopts the reported ids in rounds
//! (`Inbox::adopt_expected`) and commits each round. Measured: seals per second over the job, the committer's
//! capacity (inputs adopted and committed per second of its rounds) and lag (inputs reported and not yet adopted, at
//! its peak and at the 99th percentile of its rounds, also in seconds of the workers' seals), and object-store
//! requests per input (the workers' and the committer's, its mirror's included) against a Daft-style store, whose
//! worker puts a staged object and a seal object per input (2 requests) and whose driver then lists and reads them.
//!
//! Workers that do nothing but seal show the committer against the fastest sealing there is. A real worker writes
//! each input's data first: `SINKPOINT_WORKERS_WORK_US` gives each input that many microseconds of CPU work in its
//! worker before the seal (a busy loop standing in for encoding a data file; the Daft jobs measure 0.45–0.65 ms an
//! input of Parquet or Lance writes).
//!
//! The workers run at nice 10. On 2 cores that leaves the committer about half the machine beside 8 workers and an
//! eighth beside 64; `SINKPOINT_WORKERS_NICENESS=19` leaves it about a core at every count (64 × 15 against its
//! 1,024 in the scheduler's weights), closer to a driver on a machine of its own. `SINKPOINT_WORKERS_COUNTS` (such
//! as `64` or `8,64`) runs only those counts.
//!
//! `SINKPOINT_WORKERS_ROUNDS_LOG=FILE` appends a line a committer round to FILE: what a slow round spent its time on.
//!
//! `cargo bench --bench workers` (N = 20,000; `SINKPOINT_WORKERS_INPUTS` sets another); quick mode
//! (`cargo test --bench workers`): 2 and 4 workers, 200 inputs.

#![allow(clippy::disallowed_methods, reason = "benches measure wall time; nothing they decide depends on it")]

#[path = "common/mod.rs"]
mod common;

use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt as _;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use sinkpoint::mirror::MirrorSettings;
use sinkpoint::shared::{Inbox, KeyExclusivity, SharedStaging, Worker};
use sinkpoint::testkit::FaultStore;
use sinkpoint::{CheckpointId, Committer, DirTable, Store};

use common::{Goal, Report, fmt_dur, fmt_rate, job, key, requests, small_result, target};

const CHILD: &str = "SINKPOINT_WORKERS_CHILD";
/// Microseconds of CPU work a worker spends on each input before sealing it (default 0: workers only seal).
const WORK_US: &str = "SINKPOINT_WORKERS_WORK_US";
/// Seals one worker process has in flight at once: its tasks.
const SEALS_IN_FLIGHT_PER_WORKER: usize = 4;
/// Inputs a task: 1 (Daft's shape: a `for_key` checkpoint per input, keys claimed at the seal) and 16 (a
/// checkpoint per task, keys decided at adoption).
const TASK_INPUTS: [u64; 2] = [1, 16];
/// The most ids one committer round adopts.
const ROUND_IDS_MAX: usize = 10_000;
/// The committer keeps up when, at the 99th percentile of its rounds, it is at most this many seconds of the
/// workers' seals behind them, at any size of job: its lag is bounded by its pace, not by the job.
const LAG_SECONDS_OF_SEALS_MAX: f64 = 1.0;
/// A Daft-style store's requests per input: a put of the staged object and a put of the seal, by the worker.
const DAFT_STYLE_REQUESTS_PER_INPUT: f64 = 2.0;

fn counted(objects: &std::path::Path) -> Arc<FaultStore<LocalFileSystem>> {
    Arc::new(FaultStore::new(LocalFileSystem::new_with_prefix(objects).unwrap()))
}

/// Worker `k` of `w`: seals inputs `k, k + w, …` below `n` in tasks of `t` inputs (one checkpoint a task; `t` = 1
/// is Daft's shape, one `for_key` checkpoint per input; above 1 the job decides key exclusivity at adoption, so a
/// task's seal is one create), printing each task's inputs as it is sealed, then "requests R".
fn child(k: u64, w: u64, n: u64, t: u64, dir: &std::path::Path) {
    let rt = common::runtime();
    let objects = counted(dir);
    rt.block_on(async {
        let shared = staging(objects.clone(), t);
        let worker = Worker::new(shared, &format!("w{k}")).unwrap();
        let mine: Vec<u64> = (k..n).step_by(w as usize).collect();
        let work = std::time::Duration::from_micros(work_us());
        let seals = mine.chunks(t as usize).map(|task| {
            let worker = &worker;
            async move {
                write_data(work * task.len() as u32);
                let keys: Vec<Vec<u8>> = task.iter().map(|i| key(*i)).collect();
                let id = task_id(task);
                worker.stage_and_seal(&id, keys, vec![small_result(task[0])]).await.unwrap();
                let line: Vec<String> = task.iter().map(u64::to_string).collect();
                let mut out = std::io::stdout().lock();
                writeln!(out, "{}", line.join(",")).unwrap();
                out.flush().unwrap();
            }
        });
        futures::stream::iter(seals).buffer_unordered(SEALS_IN_FLIGHT_PER_WORKER).collect::<Vec<()>>().await;
    });
    println!("requests {}", requests(objects.counts()));
}

/// The CPU work per input the workers do before each seal (`SINKPOINT_WORKERS_WORK_US`).
fn work_us() -> u64 {
    std::env::var(WORK_US).ok().and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// Stands in for writing a task's data files: `work` of CPU, on the worker's thread.
fn write_data(work: std::time::Duration) {
    let started = Instant::now();
    while started.elapsed() < work {
        std::hint::spin_loop();
    }
}

/// The job's shared staging for tasks of `t` inputs: keys decided at adoption above one input a task.
fn staging(objects: Arc<FaultStore<LocalFileSystem>>, t: u64) -> SharedStaging {
    let keys = if t > 1 { KeyExclusivity::AtAdoption } else { KeyExclusivity::AtSeal };
    SharedStaging::new(objects, "staging", job()).unwrap().with_key_exclusivity(keys)
}

/// The checkpoint of a task of `inputs`.
fn task_id(inputs: &[u64]) -> CheckpointId {
    let keys: Vec<Vec<u8>> = inputs.iter().map(|i| key(*i)).collect();
    CheckpointId::for_keys(&keys.iter().map(Vec::as_slice).collect::<Vec<_>>())
}

/// Where the stand-in object store keeps its objects: in memory (`/dev/shm`, where there is one), not on the
/// committer's disk. An object store is a service of its own; on the committer's disk its objects (a claim an
/// input, the mirror's snapshots) pile up as dirty pages that the kernel writes back every 30 s in one burst, and
/// every fsync of the committer's store and table then waits behind that burst (rounds of 1–4 s). With
/// `SINKPOINT_WORKERS_OBJECTS_ON_DISK=1` they stay on the disk beside the committer, as with a mirror in a local
/// directory on the store's own disk.
fn objects_dir() -> tempfile::TempDir {
    let memory = std::path::Path::new("/dev/shm");
    if std::env::var_os("SINKPOINT_WORKERS_OBJECTS_ON_DISK").is_some() || !memory.is_dir() {
        return common::tempdir();
    }
    common::tempdir_in(memory)
}

/// The workers' niceness (see `run`), unless `SINKPOINT_WORKERS_NICENESS` sets another (0 to 19).
const WORKER_NICENESS_DEFAULT: u8 = 10;

fn worker_niceness() -> u8 {
    let niceness = std::env::var("SINKPOINT_WORKERS_NICENESS").ok().map(|v| v.parse::<u8>().unwrap());
    let niceness = niceness.unwrap_or(WORKER_NICENESS_DEFAULT);
    assert!(niceness <= 19, "SINKPOINT_WORKERS_NICENESS is 0 to 19, not {niceness}");
    niceness
}

/// `SINKPOINT_WORKERS_ROUNDS_LOG`: a file to append a line to for each committer round (workers, task inputs,
/// seconds into the run, ids, inputs, adoption ms, commit ms): what a slow round spent its time on.
fn rounds_log() -> Option<std::fs::File> {
    let path = std::env::var_os("SINKPOINT_WORKERS_ROUNDS_LOG")?;
    Some(std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap())
}

/// A line from a worker process.
enum Said {
    /// A task's inputs.
    Sealed(Vec<u64>),
    Requests(u64),
}

/// What one run of `w` workers measured.
struct Run {
    seals_per_s: f64,
    lag_max: u64,
    /// The lag at the 99th percentile of the rounds' starts: what the committer runs behind by when no one stall
    /// (of the disk, or of the scheduler) sets it.
    lag_p99: u64,
    worker_requests: u64,
    committer_requests: u64,
    /// Inputs the committer adopted and committed per second of its rounds (its capacity: it keeps up while this
    /// is above `seals_per_s`).
    committer_per_s: f64,
    /// The committer's rounds, and the slowest (what its lag at its peak waited for).
    rounds: u64,
    slowest_round: std::time::Duration,
}

fn run(w: u64, n: u64, t: u64) -> Run {
    let dir = common::tempdir();
    let objects_dir = objects_dir();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Said>();
    let started = Instant::now();
    let mut children = Vec::new();
    for k in 0..w {
        // The workers run niced: on 2 cores, 64 worker processes would otherwise leave the committer a 65th of the
        // CPU, where a driver has a machine of its own.
        let mut child = Command::new("nice")
            .args(["-n", &worker_niceness().to_string()])
            .arg(std::env::current_exe().unwrap())
            .env(CHILD, format!("{k} {w} {n} {t} {}", objects_dir.path().display()))
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let (stdout, tx) = (child.stdout.take().unwrap(), tx.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let line = line.unwrap();
                let said = match line.strip_prefix("requests ") {
                    Some(r) => Said::Requests(r.parse().unwrap()),
                    None => Said::Sealed(line.split(',').map(|i| i.parse().unwrap()).collect()),
                };
                if tx.send(said).is_err() {
                    return;
                }
            }
        });
        children.push(child);
    }
    drop(tx);
    let rt = common::runtime();
    let objects = counted(objects_dir.path());
    let run = rt.block_on(async {
        let store = Store::builder(job(), target())
            .path(dir.path().join("committer.redb"))
            .mirror(objects.clone(), Path::from("mirror"), MirrorSettings::default())
            .open()
            .await
            .unwrap();
        let table = DirTable::local(dir.path().join("table")).unwrap();
        let inbox = Inbox::new(staging(objects.clone(), t));
        let (mut sealed, mut adopted, mut worker_requests) = (0u64, 0u64, 0u64);
        let mut lags = Vec::new();
        let (mut last_seal, mut busy) = (started.elapsed(), std::time::Duration::ZERO);
        let (mut rounds, mut slowest_round) = (0u64, std::time::Duration::ZERO);
        let (mut round, mut round_inputs): (Vec<CheckpointId>, u64) = (Vec::new(), 0);
        let staging_before = objects.counts();
        let mut rounds_log = rounds_log();
        while adopted < n {
            let Some(first) = rx.recv().await else { panic!("the workers stopped after {adopted} of {n}") };
            let mut next = Some(first);
            while let Some(said) = next.take() {
                match said {
                    Said::Sealed(task) => {
                        sealed += task.len() as u64;
                        round_inputs += task.len() as u64;
                        last_seal = started.elapsed();
                        round.push(task_id(&task));
                    }
                    Said::Requests(r) => worker_requests += r,
                }
                if round.len() < ROUND_IDS_MAX {
                    next = rx.try_recv().ok();
                }
            }
            if round.is_empty() {
                continue;
            }
            // Inputs sealed and not adopted yet: those in this round and those still queued behind it (a queued
            // line is counted as one input: a lower bound for tasks of several).
            lags.push(sealed + rx.len() as u64 - adopted);
            let round_started = Instant::now();
            let report = inbox.adopt_expected(&store, &round).await.unwrap();
            assert_eq!(report.adopted.len(), round.len(), "{report:?}");
            let adopting = round_started.elapsed();
            Committer::new(&store, &table).commit_pending().await.unwrap();
            let took = round_started.elapsed();
            if let Some(log) = rounds_log.as_mut() {
                let at = started.elapsed().as_secs_f64();
                let (adopt_ms, commit_ms) = (adopting.as_secs_f64() * 1e3, (took - adopting).as_secs_f64() * 1e3);
                writeln!(log, "{w},{t},{at:.3},{},{round_inputs},{adopt_ms:.1},{commit_ms:.1}", round.len()).unwrap();
            }
            adopted += round_inputs;
            (round_inputs, round) = (0, Vec::new());
            (busy, rounds, slowest_round) = (busy + took, rounds + 1, slowest_round.max(took));
        }
        let committer_requests = requests(objects.counts()) - requests(staging_before);
        Committer::new(&store, &table).finish().await.unwrap();
        while let Some(said) = rx.recv().await {
            if let Said::Requests(r) = said {
                worker_requests += r;
            }
        }
        store.close_async().await;
        let (seals_per_s, committer_per_s) = (n as f64 / last_seal.as_secs_f64(), n as f64 / busy.as_secs_f64());
        lags.sort_unstable();
        let (lag_p99, lag_max) = (lags[lags.len() * 99 / 100], lags[lags.len() - 1]);
        Run {
            seals_per_s,
            lag_max,
            lag_p99,
            worker_requests,
            committer_requests,
            committer_per_s,
            rounds,
            slowest_round,
        }
    });
    for mut child in children {
        assert!(child.wait().unwrap().success());
    }
    // The run's files are deleted, and the deletes written out, before the next run: the filesystem frees (and
    // discards) their blocks at its next journal commit, a few seconds on, and that commit would otherwise hold
    // up the next run's fsyncs for seconds.
    drop((dir, objects_dir));
    assert!(Command::new("sync").status().unwrap().success());
    run
}

fn main() {
    if let Ok(arg) = std::env::var(CHILD) {
        let parts: Vec<&str> = arg.splitn(5, ' ').collect();
        let number = |i: usize| parts[i].parse::<u64>().unwrap();
        child(number(0), number(1), number(2), number(3), std::path::Path::new(parts[4]));
        return;
    }
    let inputs = std::env::var("SINKPOINT_WORKERS_INPUTS").ok().and_then(|v| v.parse().ok());
    let counts: Option<Vec<u64>> = std::env::var("SINKPOINT_WORKERS_COUNTS").ok().map(|v| {
        v.split(',').map(|c| c.trim().parse().expect("SINKPOINT_WORKERS_COUNTS: numbers, such as 8,64")).collect()
    });
    let (workers, n): (Vec<u64>, u64) = if common::quick() {
        (vec![2, 4], 200)
    } else {
        (counts.unwrap_or_else(|| vec![8, 16, 32, 64]), inputs.unwrap_or(20_000))
    };
    let report = Report::default();
    for (&w, &t) in workers.iter().flat_map(|w| TASK_INPUTS.iter().map(move |t| (w, t))) {
        let r = run(w, n, t);
        let mut shape = if t == 1 { "a checkpoint per input".to_owned() } else { format!("tasks of {t} inputs") };
        if work_us() > 0 {
            shape += &format!(", {} µs of work an input", work_us());
        }
        if worker_niceness() != WORKER_NICENESS_DEFAULT {
            shape += &format!(", workers at nice {}", worker_niceness());
        }
        let (worker_per_input, committer_per_input) =
            (r.worker_requests as f64 / n as f64, r.committer_requests as f64 / n as f64);
        report.add(
            format!(
                "{w} worker processes, {n} inputs, {shape}: requests per input (workers + committer) vs Daft-style"
            ),
            (worker_per_input + committer_per_input) / DAFT_STYLE_REQUESTS_PER_INPUT,
            Goal::AtMost(0.1),
            format!(
                "{:.2} per input by the workers, {:.2} by the committer (its mirror included); Daft-style {:.1}; \
                 seals at {}; committer lag at most {} seals",
                worker_per_input,
                committer_per_input,
                DAFT_STYLE_REQUESTS_PER_INPUT,
                fmt_rate(r.seals_per_s),
                r.lag_max
            ),
        );
        report.add(
            format!("{w} worker processes, {n} inputs, {shape}: the committer's capacity vs the workers' seals"),
            r.committer_per_s / r.seals_per_s,
            Goal::AtLeast(1.0),
            format!(
                "committer {} (inputs adopted and committed per second of its rounds), workers {}; lag at most {} \
                 seals, {} at the 99th percentile of rounds (a round takes at most {ROUND_IDS_MAX}); {} rounds, the \
                 slowest {}",
                fmt_rate(r.committer_per_s),
                fmt_rate(r.seals_per_s),
                r.lag_max,
                r.lag_p99,
                r.rounds,
                fmt_dur(r.slowest_round)
            ),
        );
        report.add(
            format!(
                "{w} worker processes, {n} inputs, {shape}: the committer's lag at the 99th percentile of rounds, in \
                 seconds of the workers' seals (bounded: at most {LAG_SECONDS_OF_SEALS_MAX} s whatever the job's size)"
            ),
            r.lag_p99 as f64 / r.seals_per_s,
            Goal::AtMost(LAG_SECONDS_OF_SEALS_MAX),
            format!(
                "{} seals at the 99th percentile, {} at the peak, at {}; the slowest round {}",
                r.lag_p99,
                r.lag_max,
                fmt_rate(r.seals_per_s),
                fmt_dur(r.slowest_round)
            ),
        );
    }
    report.print("Many worker processes through one store location");
}
