//! Workers on many machines, as real processes on one machine (issue 12): the quick-start job with
//! `--worker-processes 4` (a driver and four worker processes sharing `DIR/shared`), SIGKILL of random workers
//! and of the driver at seeded moments, runs until done, the table read back; and a zombie worker (SIGSTOP mid
//! task, its inputs re-run to completion, SIGCONT) whose seal is refused. Seeds are printed
//! (`SINKPOINT_KILL_SEED` replays one); no assertion depends on timing.

use crate::common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use sinkpoint::DirTable;
use sinkpoint::testkit::SplitMix64;

const INPUTS: usize = 200;
const ROWS: usize = 20;
const KILLS: usize = 12;

fn driver(dir: &Path, work_ms: u64) -> Command {
    driver_with(dir, work_ms, &[])
}

fn driver_with(dir: &Path, work_ms: u64, extra: &[&str]) -> Command {
    let mut cmd = Command::new(common::job_binary());
    cmd.args(extra);
    let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.with_extension("log")).unwrap();
    cmd.args(["--dir", dir.to_str().unwrap(), "--inputs", &INPUTS.to_string(), "--rows", &ROWS.to_string()])
        .args(["--worker-processes", "4", "--work-ms", &work_ms.to_string()])
        .stdout(Stdio::from(log.try_clone().unwrap()))
        .stderr(Stdio::from(log));
    cmd
}

/// The worker processes of a driver.
fn workers_of(driver: &Child) -> Vec<u32> {
    let out = Command::new("pgrep").args(["-P", &driver.id().to_string()]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| l.trim().parse().ok()).collect()
}

fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill").args([sig, &pid.to_string()]).status();
}

/// Kills every process still running on `dir` (workers orphaned by a killed driver).
fn kill_all_on(dir: &Path) {
    let _ = Command::new("pkill").args(["-9", "-f", dir.to_str().unwrap()]).status();
}

async fn assert_every_row_once(dir: &Path, context: &str) {
    let rows = DirTable::local(dir.join("table")).unwrap().rows().await.unwrap();
    let mut sorted = rows.clone();
    sorted.sort();
    sorted.dedup();
    let log = std::fs::read_to_string(dir.with_extension("log")).unwrap_or_default();
    assert_eq!(rows.len() - sorted.len(), 0, "duplicates in the table ({context}); log:\n{log}");
    let mut expected: Vec<String> = (0..INPUTS).flat_map(|i| (0..ROWS).map(move |r| format!("{i}:{r}"))).collect();
    expected.sort();
    assert_eq!(sorted, expected, "missing rows ({context}); log:\n{log}");
}

fn seed() -> u64 {
    #[expect(clippy::disallowed_methods, reason = "real processes are killed on the wall clock; the seed is printed")]
    let now = std::time::SystemTime::now();
    std::env::var("SINKPOINT_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| now.duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64)
}

/// Runs the job with `extra` flags, killing random workers or the driver `KILLS` times at seeded moments,
/// then to completion; the table must hold every row once.
async fn kill_loop(extra: &[&str]) {
    let seed = seed();
    println!("shared kill test seed {seed} (replay with SINKPOINT_KILL_SEED={seed}), flags {extra:?}");
    let mut rng = SplitMix64::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let mut kills = (0, 0);
    for _ in 0..KILLS {
        let mut child = driver_with(dir.path(), 40, extra).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(50 + rng.below(300)));
        if child.try_wait().unwrap().is_some() {
            break;
        }
        let workers = workers_of(&child);
        if workers.is_empty() || rng.below(3) == 0 {
            // The driver dies; its workers run on, orphaned, racing the next driver's workers.
            child.kill().unwrap();
            kills.0 += 1;
        } else {
            // A worker dies; the driver starts it again. Then the driver too, so the next round starts anew.
            signal(workers[rng.below(workers.len() as u64) as usize], "-KILL");
            kills.1 += 1;
            std::thread::sleep(Duration::from_millis(rng.below(200)));
            child.kill().unwrap();
        }
        child.wait().unwrap();
    }
    let status = driver_with(dir.path(), 0, extra).status().unwrap();
    kill_all_on(dir.path());
    println!("{} driver kills, {} worker kills", kills.0, kills.1);
    let log = std::fs::read_to_string(dir.path().with_extension("log")).unwrap_or_default();
    assert!(status.success(), "the final run failed: {status:?} (seed {seed}); log:\n{log}");
    // Each run works at most 350 ms of the ~2 s the job needs (200 inputs, 40 ms each, 4 workers), so several
    // kills land however slow the machine is; a run that finishes early only ends the loop sooner.
    assert!(kills.0 + kills.1 >= KILLS / 4, "too few kills landed to test anything (seed {seed}): {kills:?}");
    assert_every_row_once(dir.path(), &format!("seed {seed}")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_and_driver_killed_at_random_moments_leave_every_row_once() {
    kill_loop(&[]).await;
}

/// The same on the S3 API (moto in CI): the shared staging in a bucket, conditional creates over HTTP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_s3_api_workers_and_driver_killed_at_random_moments_leave_every_row_once() {
    let Some(endpoint) = sinkpoint::testkit::s3_endpoint() else { return };
    #[expect(clippy::disallowed_methods, reason = "a unique bucket name per run")]
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let bucket = format!("shared-kill-{nanos}");
    sinkpoint::testkit::create_s3_bucket(&endpoint, &bucket).unwrap();
    kill_loop(&["--shared-s3", &bucket]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zombie_worker_resumed_after_its_inputs_reran_is_refused_and_adds_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // Slow tasks (200 ms between writing a data file and sealing it), so the stop lands mid task.
    let mut first = driver(dir.path(), 200).spawn().unwrap();
    let mut zombie = None;
    for _ in 0..100 {
        std::thread::sleep(Duration::from_millis(50));
        if let Some(&pid) = workers_of(&first).first() {
            zombie = Some(pid);
            break;
        }
    }
    let zombie = zombie.expect("the driver started no worker");
    std::thread::sleep(Duration::from_millis(300));
    signal(zombie, "-STOP");
    let siblings: Vec<u32> = workers_of(&first).into_iter().filter(|p| *p != zombie).collect();
    first.kill().unwrap();
    first.wait().unwrap();
    // A new driver re-runs everything to completion while the zombie sleeps (its siblings are killed too).
    for pid in siblings {
        signal(pid, "-KILL");
    }
    let status = driver(dir.path(), 0).status().unwrap();
    assert!(status.success(), "the rerun failed: {status:?}");
    assert_every_row_once(dir.path(), "before the zombie resumes").await;
    // The zombie wakes up, seals its task and exits; then the job is run once more: nothing changes.
    signal(zombie, "-CONT");
    for _ in 0..200 {
        if !Path::new(&format!("/proc/{zombie}")).exists()
            || std::fs::read_to_string(format!("/proc/{zombie}/stat")).is_ok_and(|s| s.contains(") Z "))
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = driver(dir.path(), 0).status().unwrap();
    kill_all_on(dir.path());
    assert!(status.success(), "the last run failed: {status:?}");
    let log = std::fs::read_to_string(dir.path().with_extension("log")).unwrap_or_default();
    assert!(log.contains("seal lost for input"), "the zombie's seal was refused, naming the winner; log:\n{log}");
    assert_every_row_once(dir.path(), "after the zombie resumed").await;
}
