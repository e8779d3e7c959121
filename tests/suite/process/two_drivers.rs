//! Proves that two drivers running the same job at once against the same mirror and table — a zombie and its
//! retry, each with its own local file as on two machines — leave every row in the table exactly once: the
//! newer writer fences the older one, whose late writes and commits are refused. (Daft's checkpoint store,
//! without fencing, commits 18,000–22,000 duplicate rows of 50,000 in this scenario.)
//!
//! The second driver starts once the first has put a number of groups into the mirror (observed on disk, so the
//! overlap does not hang on timing); what is asserted holds whichever driver gets how far.

use crate::common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use sinkpoint::DirTable;

const INPUTS: usize = 250;
const ROWS: usize = 200;
const FENCED_EXIT_CODE: i32 = 5;

fn driver(shared: &Path, local: &Path, log: &Path) -> Child {
    let log = std::fs::File::create(log).unwrap();
    Command::new(common::job_binary())
        .args(["--dir", shared.to_str().unwrap(), "--local", local.to_str().unwrap()])
        .args(["--inputs", &INPUTS.to_string(), "--rows", &ROWS.to_string()])
        .args(["--workers", "4", "--work-ms", "4", "--commit-every", "50"])
        .stdout(Stdio::from(log.try_clone().unwrap()))
        .stderr(Stdio::from(log))
        .spawn()
        .unwrap()
}

fn mirror_slots(shared: &Path) -> usize {
    std::fs::read_dir(shared.join("mirror/demo-job/wal")).map(|d| d.count()).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_drivers_at_once_write_every_row_exactly_once() {
    let root = tempfile::tempdir().unwrap();
    let shared = root.path().join("shared");
    let (local_a, local_b) = (root.path().join("machine-a"), root.path().join("machine-b"));
    let mut a = driver(&shared, &local_a, &root.path().join("a.log"));
    // Let the first driver get going: it has put 40 groups into the mirror, or it has finished.
    for _ in 0..3000 {
        if mirror_slots(&shared) >= 40 || a.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut b = driver(&shared, &local_b, &root.path().join("b.log"));
    let (status_a, status_b) = (a.wait().unwrap(), b.wait().unwrap());
    let log_a = std::fs::read_to_string(root.path().join("a.log")).unwrap();
    let log_b = std::fs::read_to_string(root.path().join("b.log")).unwrap();
    println!("driver A: {status_a:?}\n{log_a}\ndriver B: {status_b:?}\n{log_b}");
    assert!(
        status_a.success() || status_a.code() == Some(FENCED_EXIT_CODE),
        "driver A neither finished nor was fenced: {status_a:?}\n{log_a}"
    );
    assert!(status_b.success(), "driver B failed: {status_b:?}\n{log_b}");

    let table = DirTable::local(shared.join("table")).unwrap();
    let rows = table.rows().await.unwrap();
    let mut sorted = rows.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(rows.len() - sorted.len(), 0, "duplicate rows in the table");
    assert_eq!(sorted.len(), INPUTS * ROWS, "missing rows in the table");
    // Every commit in the table came from a writer that was the newest when it committed: epochs never go back.
    let epochs: Vec<u64> = table.commits().await.unwrap().iter().map(|c| c.epoch).collect();
    assert!(epochs.windows(2).all(|w| w[0] <= w[1]), "a fenced writer's commit landed after a newer one: {epochs:?}");
}
