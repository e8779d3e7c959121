//! Proves that a real process killed with SIGKILL at random moments, and restarted until it finishes, leaves
//! the table with every row exactly once. The quick-start job is the child; the kills are seeded (the seed is
//! printed; `SINKPOINT_KILL_SEED` replays one) and bounded in count, and no assertion depends on timing: a kill
//! that lands before the child did anything, or after it finished, is as valid as any other.

use crate::common;

use std::process::{Command, Stdio};
use std::time::Duration;

use sinkpoint::DirTable;
use sinkpoint::testkit::SplitMix64;

const KILLS_MAX: usize = 20;
const INPUTS: usize = 300;
const ROWS: usize = 50;

fn job(dir: &std::path::Path) -> Command {
    let mut cmd = Command::new(common::job_binary());
    let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.with_extension("log")).unwrap();
    cmd.args(["--dir", dir.to_str().unwrap(), "--inputs", &INPUTS.to_string(), "--rows", &ROWS.to_string()])
        .args(["--workers", "4", "--commit-every", "25"])
        .stdout(Stdio::from(log.try_clone().unwrap()))
        .stderr(Stdio::from(log));
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[expect(clippy::disallowed_methods, reason = "a real process is killed on the wall clock; the seed is printed")]
async fn killed_at_random_moments_the_job_still_writes_every_row_once() {
    let seed = std::env::var("SINKPOINT_KILL_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    });
    println!("kill test seed {seed} (replay with SINKPOINT_KILL_SEED={seed})");
    let mut rng = SplitMix64::new(seed);
    // Calibrate: how long one clean run takes here, so the kills spread over a run's whole life. This only
    // moves where the kills land; what is asserted does not depend on it.
    let scratch = tempfile::tempdir().unwrap();
    let started = std::time::Instant::now();
    assert!(job(scratch.path()).status().unwrap().success());
    let run_ms = (started.elapsed().as_millis() as u64).max(20);
    println!("a clean run takes {run_ms} ms");
    let dir = tempfile::tempdir().unwrap();
    let mut kills = 0;
    let mut finished_early = 0;
    // Kill each run within the first half of a clean run's time, so that the job progresses a little per run
    // and is killed many times before it can finish; stop at the first run that finishes on its own.
    while kills < KILLS_MAX && finished_early == 0 {
        let mut child = job(dir.path()).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(rng.below(run_ms / 2 + 1)));
        match child.try_wait().unwrap() {
            Some(status) => {
                // It finished before the kill: a valid outcome; it must have succeeded.
                let log = std::fs::read_to_string(dir.path().with_extension("log")).unwrap_or_default();
                assert!(status.success(), "the job failed on its own: {status:?} (seed {seed}); its output:\n{log}");
                finished_early += 1;
            }
            None => {
                child.kill().unwrap(); // SIGKILL on Unix.
                child.wait().unwrap();
                kills += 1;
            }
        }
    }
    let status = job(dir.path()).status().unwrap();
    let log = std::fs::read_to_string(dir.path().with_extension("log")).unwrap_or_default();
    assert!(status.success(), "the final run failed: {status:?} (seed {seed}); its output:\n{log}");
    println!("{kills} kills, {finished_early} runs finished before their kill");

    let table = DirTable::local(dir.path().join("table")).unwrap();
    let rows = table.rows().await.unwrap();
    let mut sorted = rows.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(rows.len() - sorted.len(), 0, "duplicates in the table (seed {seed})");
    let mut expected: Vec<String> = (0..INPUTS).flat_map(|i| (0..ROWS).map(move |r| format!("{i}:{r}"))).collect();
    expected.sort();
    assert_eq!(sorted, expected, "missing rows (seed {seed})");
}
