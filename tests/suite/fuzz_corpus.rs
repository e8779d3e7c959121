//! Proves every committed fuzz input still passes on stable: replays each target's seed corpus
//! (`fuzz/corpus/<target>/`) and saved crashers (`fuzz/artifacts/<target>/`, when present) through the same code
//! the fuzz targets run, and checks that the committed seeds are the ones `testkit::fuzz` generates (set
//! `SINKPOINT_BLESS_SEEDS=1` to write them) and that the crash-replay seeds play the workloads they describe.

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::path::PathBuf;

use sinkpoint::testkit::crash::{Op, Stall, runtime};
use sinkpoint::testkit::fuzz::{
    crash_replay, crash_replay_seeds, decode_record, decode_record_seeds, restore_mirror, restore_mirror_seeds,
    workload_from_bytes,
};

fn fuzz_dir() -> PathBuf {
    crate::common::checkout().join("fuzz")
}

/// Replays every file of the target's corpus and artifacts; returns how many there were.
fn replay(target: &str, run: fn(&[u8])) -> usize {
    let mut count = 0;
    for dir in ["corpus", "artifacts"] {
        let dir = fuzz_dir().join(dir).join(target);
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        let mut paths: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).filter(|p| p.is_file()).collect();
        paths.sort();
        for path in paths {
            let bytes = std::fs::read(&path).unwrap();
            if let Err(panic) = catch_unwind(AssertUnwindSafe(|| run(&bytes))) {
                eprintln!("{target}: {} fails", path.display());
                resume_unwind(panic);
            }
            count += 1;
        }
    }
    println!("{target}: replayed {count} inputs");
    count
}

#[test]
fn decode_record_corpus_passes() {
    assert!(replay("decode_record", decode_record) >= decode_record_seeds().len());
}

#[test]
fn crash_replay_corpus_passes() {
    assert!(replay("crash_replay", crash_replay) >= crash_replay_seeds().len());
}

#[test]
fn restore_mirror_corpus_passes() {
    assert!(replay("restore_mirror", restore_mirror) >= restore_mirror_seeds().len());
}

/// A stable name for a seed: FNV-1a of its bytes.
fn seed_name(bytes: &[u8]) -> String {
    let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3));
    format!("seed-{hash:016x}")
}

#[test]
fn committed_seeds_are_the_generated_ones() {
    let bless = std::env::var_os("SINKPOINT_BLESS_SEEDS").is_some();
    let targets = [
        ("decode_record", decode_record_seeds()),
        ("crash_replay", crash_replay_seeds()),
        ("restore_mirror", restore_mirror_seeds()),
    ];
    for (target, seeds) in targets {
        assert!(seeds.len() >= 5, "{target}: only {} seeds", seeds.len());
        let dir = fuzz_dir().join("corpus").join(target);
        for seed in seeds {
            let path = dir.join(seed_name(&seed));
            if bless {
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(&path, &seed).unwrap();
            }
            let committed = std::fs::read(&path).unwrap_or_else(|e| {
                panic!("{}: {e}; run with SINKPOINT_BLESS_SEEDS=1 to write the seeds", path.display())
            });
            assert_eq!(committed, seed, "{}", path.display());
        }
    }
}

#[test]
fn crash_replay_seeds_play_what_they_describe() {
    let rt = runtime().unwrap();
    let seeds = crash_replay_seeds();
    let traces: Vec<_> = seeds
        .iter()
        .map(|s| {
            let (_, workload) = workload_from_bytes(s);
            let trace = workload.trace(&rt).unwrap();
            (workload, trace)
        })
        .collect();
    // The first seed commits one checkpoint under a final key; every call succeeds.
    let (w, t) = &traces[0];
    assert!(matches!(w.ops.last(), Some(Op::MarkCommitted { key: 0 })), "{:?}", w.ops);
    assert!(t.outcomes().iter().all(Result::is_ok), "{:?}", t.outcomes());
    // The second reopens with staged checkpoints; the orphan is restarted and re-staged, then sealed.
    let (w, t) = &traces[1];
    assert!(w.ops.contains(&Op::Reopen), "{:?}", w.ops);
    assert!(t.outcomes().iter().all(Result::is_ok), "{:?}", t.outcomes());
    // The fifth has exactly one key conflict.
    let (_, t) = &traces[4];
    let conflicts = t.outcomes().iter().filter(|o| o.as_ref().err().is_some_and(|e| e == "KeyConflict")).count();
    assert_eq!(conflicts, 1, "{:?}", t.outcomes());
    // The rest run against a system: target calls are crash points, and with a mirror its requests too.
    for (i, (w, t)) in traces.iter().enumerate().skip(5) {
        let [local, mirror, target] = t.points_per_component();
        assert!(w.system.is_some() && local > 0 && target > 0, "seed {i}: {:?}", t.points_per_component());
        assert_eq!(mirror > 0, w.system.as_ref().is_some_and(|s| s.mirror.is_some()), "seed {i}");
        assert!(w.ops.contains(&Op::CommitPending { final_commit: true }), "seed {i}: {:?}", w.ops);
    }
    assert_eq!(traces.iter().filter(|(w, _)| w.system.as_ref().is_some_and(|s| s.mirror.is_some())).count(), 6);
    // The last three: two of the stall class, whose crash stops a mirror put that is then delivered late, and
    // one of the stale-mirror class.
    for (i, stall) in [(9, Stall::AfterSuccessorOpen), (10, Stall::AfterSuccessorEnd)] {
        let (w, t) = &traces[i];
        assert_eq!(w.system.as_ref().map(|s| s.stall), Some(stall), "seed {i}");
        let point = u64::from(u16::from_le_bytes([seeds[i][1], seeds[i][2]]) & 0x3fff);
        let late = w.crash_at(&rt, t, 1 + point % t.io_ops(), true).unwrap();
        assert!(late.delivered > 0, "seed {i}: its crash stops no mirror put");
    }
    assert_eq!(seeds[11][2] >> 6, 3, "the stale-mirror seed");
    for (w, t) in &traces {
        assert!(t.io_ops() > 20, "{}: {} I/O operations", w.name, t.io_ops());
    }
}
