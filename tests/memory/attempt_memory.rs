//! Proves that sealing a large attempt visits its parts one at a time instead of loading them all (red-team
//! finding 6): the seal runs in a child process (this test binary again), which reports its peak resident set
//! (`VmHWM`) above what it held before the seal, and that growth stays near one part, not the attempt. Prints the
//! figure: `cargo test --all-features --test attempt_memory -- --nocapture`. Linux only (it reads
//! `/proc/self/status`).

use sinkpoint::limits::STORE_CACHE_BYTES_MIN;
use sinkpoint::{Attempt, Part, StagePart};
use sinkpoint::{CheckpointId, Format, JobId, Store, TargetIdentity, WriteResult};

const PARTS: u32 = 64;
const PART_BYTES: usize = 1024 * 1024;
const CHILD: &str = "SINKPOINT_ATTEMPT_MEMORY_CHILD";
const TEST: &str = "a_seal_of_a_large_attempt_holds_one_part_at_a_time";

/// A field of `/proc/self/status`, in KiB.
fn status_kib(field: &str) -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

async fn open(path: &std::path::Path) -> Store {
    Store::builder(JobId::new("job").unwrap(), TargetIdentity::new("file:///t").unwrap())
        .path(path)
        .cache_bytes(STORE_CACHE_BYTES_MIN)
        .open()
        .await
        .unwrap()
}

fn id() -> CheckpointId {
    CheckpointId::new("input-a").unwrap()
}

/// In the child: seals the staged attempt and prints the peak resident growth in KiB.
async fn child(path: &str) {
    let store = open(std::path::Path::new(path)).await;
    let rss_before = status_kib("VmRSS:");
    store.seal(&id(), PARTS).await.unwrap();
    println!("PEAK_GROWTH_KIB={}", status_kib("VmHWM:").saturating_sub(rss_before));
    store.close();
}

#[tokio::test]
async fn a_seal_of_a_large_attempt_holds_one_part_at_a_time() {
    if let Ok(path) = std::env::var(CHILD) {
        return child(&path).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let store = open(&path).await;
    for part in 0..PARTS {
        let result = WriteResult::new(Format::Parquet, vec![part as u8; PART_BYTES]).unwrap();
        store
            .stage(
                &id(),
                StagePart::new(Attempt::FIRST, Part::new(part))
                    .keys(vec![format!("key-{part}").into_bytes()])
                    .results(vec![result]),
            )
            .await
            .unwrap();
    }
    store.close();

    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([TEST, "--exact", "--nocapture", "--test-threads", "1"])
        .env(CHILD, &path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let kib: usize =
        stdout.lines().find_map(|l| l.split_once("PEAK_GROWTH_KIB=").map(|(_, k)| k)).unwrap().trim().parse().unwrap();
    let attempt_kib = PARTS as usize * PART_BYTES / 1024;
    println!("seal of {PARTS} parts of {PART_BYTES} bytes: peak resident growth {kib} KiB (attempt {attempt_kib} KiB)");
    assert!(kib < attempt_kib / 4, "seal held {kib} KiB at once of an attempt of {attempt_kib} KiB");
}
