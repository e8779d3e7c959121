//! Proves the invariants hold at every crash point of several scripted workloads. WAL level: for each I/O
//! operation k of a crash-free run, a crash there leaves exactly the state after the last acked call (or the
//! call in flight), every invariant holds, the reopened store answers accordingly, and finishing the workload
//! ends in the crash-free run's state. Whole process (local file + mirror + target, their I/O points counted
//! together): a crash at any point, then recovery and the rest of the job, leaves the table with every sealed
//! checkpoint's write results exactly once, every sealed checkpoint committed, the skip set exactly the
//! committed checkpoints' keys, and (mirrored) a mirror that restores alone to the same state.

use std::io::Write as _;
use std::time::Instant;

use sinkpoint::mirror::MirrorMode;
use sinkpoint::testkit::crash::{Op, OpOutcome, SNAPSHOTS_OFF, Stall, System, Workload, runtime};
use sinkpoint::testkit::{CommitFault, ProbeFault};
use sinkpoint::{CheckpointId, Format, WriteResult};

fn id(s: &str) -> CheckpointId {
    CheckpointId::new(s).unwrap()
}

fn stage(i: &str, part: u32, keys: &[&str], results: &[&str]) -> Op {
    Op::Stage {
        id: id(i),
        part,
        keys: keys.iter().map(|k| k.as_bytes().to_vec()).collect(),
        results: results.iter().map(|r| WriteResult::new(Format::Parquet, r.as_bytes().to_vec()).unwrap()).collect(),
    }
}

fn seal(i: &str, parts: u32) -> Op {
    Op::Seal { id: id(i), parts }
}

fn begin(key: u64, ids: &[&str], final_commit: bool) -> Op {
    Op::BeginCommit { key, ids: ids.iter().map(|i| id(i)).collect(), final_commit }
}

/// Four checkpoints of two parts each, committed under two keys, the second final.
fn multi_checkpoint() -> Workload {
    let mut ops = Vec::new();
    for c in ["in-0", "in-1", "in-2", "in-3"] {
        ops.push(stage(c, 0, &[&format!("{c}/a")], &[&format!("{c}-0.parquet")]));
        ops.push(stage(c, 1, &[&format!("{c}/b")], &[&format!("{c}-1.parquet")]));
        ops.push(seal(c, 2));
    }
    ops.push(begin(0, &["in-0", "in-1"], false));
    ops.push(Op::MarkCommitted { key: 0 });
    ops.push(begin(1, &["in-2", "in-3"], true));
    ops.push(Op::MarkCommitted { key: 1 });
    Workload::new("multi-checkpoint", ops)
}

/// Restarts and reopens: a restarted attempt, a complete orphan sealed, an incomplete orphan restarted and
/// re-staged, and a retried stage of the same bytes.
fn restarts() -> Workload {
    let ops = vec![
        stage("a", 0, &["ka0"], &["a0-old"]),
        stage("a", 1, &["ka1"], &[]),
        Op::Restart { id: id("a") },
        stage("a", 0, &["ka0"], &["a0-new"]),
        stage("a", 0, &["ka0"], &["a0-new"]),
        seal("a", 1),
        stage("b", 0, &["kb0"], &["b0"]),
        stage("c", 0, &["kc0"], &["c0"]),
        Op::Reopen,
        seal("b", 1),
        stage("c", 1, &["kc1"], &["c1"]),
        seal("c", 2),
        Op::Reopen,
        begin(0, &["a", "b", "c"], true),
        Op::MarkCommitted { key: 0 },
    ];
    Workload::new("restarts", ops)
}

/// Aborts: an aborted checkpoint restarted and sealed, a key conflict between two seals, an abort of an
/// aborted checkpoint, and a refused abort of a sealed one.
fn aborts() -> Workload {
    let ops = vec![
        stage("a", 0, &["k1", "k2"], &["a0"]),
        Op::Abort { id: id("a") },
        Op::Abort { id: id("a") },
        Op::Restart { id: id("a") },
        stage("a", 0, &["k1"], &["a0-retry"]),
        seal("a", 1),
        stage("b", 0, &["k1", "k3"], &["b0"]),
        seal("b", 1),
        Op::Abort { id: id("b") },
        Op::Restart { id: id("b") },
        stage("b", 0, &["k3"], &["b0"]),
        seal("b", 1),
        Op::Abort { id: id("a") },
        stage("z", 0, &["kz"], &[]),
        seal("z", 1),
        Op::CommitEmpty { ids: vec![id("z")] },
    ];
    Workload::new("aborts", ops)
}

/// Commit keys: unknown outcomes, a probe that found nothing, a reopen while a key is in flight, an empty
/// commit, out-of-sequence keys refused, and a final key.
fn commit_keys() -> Workload {
    let ops = vec![
        stage("a", 0, &["ka"], &["a0"]),
        seal("a", 1),
        stage("b", 0, &["kb"], &["b0"]),
        seal("b", 1),
        stage("e", 0, &["ke"], &[]),
        seal("e", 1),
        Op::CommitEmpty { ids: vec![id("e")] },
        begin(1, &["a"], false),
        begin(0, &["a"], false),
        Op::MarkUnknown { key: 0 },
        Op::Reopen,
        Op::MarkNotCommitted { key: 0 },
        Op::MarkUnknown { key: 0 },
        Op::MarkCommitted { key: 0 },
        begin(1, &["b"], true),
        Op::Reopen,
        Op::MarkCommitted { key: 1 },
    ];
    Workload::new("commit-keys", ops)
}

/// A longer job: wide parts (several keys and results), a reopen with a key in flight, orphans of two epochs,
/// an unknown outcome resolved by a probe, empty commits of several checkpoints, and a final key.
fn mixed_job() -> Workload {
    let ops = vec![
        stage("p-0", 0, &["s3://in/0", "s3://in/1", "s3://in/2"], &["p0-a", "p0-b"]),
        stage("p-1", 0, &["s3://in/3"], &["p1-a", "p1-b", "p1-c"]),
        stage("p-0", 1, &[], &["p0-c"]),
        seal("p-0", 2),
        stage("p-2", 0, &["s3://in/4"], &[]),
        stage("p-3", 0, &["s3://in/5"], &[]),
        Op::Reopen,
        seal("p-1", 1),
        stage("p-2", 1, &["s3://in/6"], &[]),
        seal("p-2", 2),
        seal("p-3", 1),
        Op::CommitEmpty { ids: vec![id("p-2"), id("p-3")] },
        begin(0, &["p-0", "p-1"], false),
        Op::Reopen,
        Op::MarkUnknown { key: 0 },
        Op::MarkCommitted { key: 0 },
        stage("p-4", 0, &["s3://in/7", "s3://in/8"], &["p4-a"]),
        Op::Restart { id: id("p-4") },
        stage("p-4", 0, &["s3://in/7", "s3://in/8"], &["p4-a2"]),
        seal("p-4", 1),
        begin(1, &["p-4"], true),
        Op::MarkCommitted { key: 1 },
    ];
    Workload::new("mixed-job", ops)
}

fn commit(final_commit: bool) -> Op {
    Op::CommitPending { final_commit }
}

/// A job through the committer: checkpoints of one and two parts committed under several keys, an empty
/// checkpoint (committed without a target commit), a reopen with a sealed checkpoint that recovery commits,
/// and an orphan restarted and re-staged after a reopen; the last key final.
fn protocol_ops() -> Vec<Op> {
    vec![
        Op::Recover,
        stage("in-0", 0, &["in-0/a"], &["in-0-0"]),
        stage("in-0", 1, &["in-0/b"], &["in-0-1"]),
        seal("in-0", 2),
        stage("in-1", 0, &["in-1/a"], &["in-1-0"]),
        seal("in-1", 1),
        commit(false),
        stage("in-2", 0, &["in-2/a"], &["in-2-0"]),
        seal("in-2", 1),
        stage("e-0", 0, &["e-0/a"], &[]),
        seal("e-0", 1),
        commit(false),
        stage("in-3", 0, &["in-3/a"], &["in-3-0"]),
        seal("in-3", 1),
        stage("in-4", 0, &["in-4/a"], &["in-4-0"]),
        Op::Reopen,
        Op::Recover,
        stage("in-4", 1, &["in-4/b"], &["in-4-1"]),
        seal("in-4", 2),
        commit(true),
    ]
}

/// The protocol job on the target alone.
fn protocol_keys() -> Workload {
    Workload::new("protocol-keys", protocol_ops()).with_system(System::target())
}

/// Unknown outcomes from a scripted target: a commit that did not land (its probe proves it, so it is sent again
/// at once), whose second send landed and lost its ack (and whose probe is unknown, so the job is blocked until
/// the next call), one refused, one that lands late.
fn protocol_unknown() -> Workload {
    let ops = vec![
        Op::Recover,
        stage("a", 0, &["ka"], &["a-0"]),
        seal("a", 1),
        commit(false),
        stage("b", 0, &["kb"], &["b-0"]),
        seal("b", 1),
        commit(false),
        commit(false),
        stage("c", 0, &["kc"], &["c-0"]),
        seal("c", 1),
        commit(false),
        commit(true),
    ];
    let commits = vec![
        CommitFault::UnknownNotLanded,
        CommitFault::LandThenLoseAck,
        CommitFault::FailBeforeCommit,
        CommitFault::Pass,
        CommitFault::LandLateAfterUnknown,
    ];
    // The first probe is recovery's check of key 0 on a new store (remembered, so none again before key 0 is
    // begun), the second follows the unknown outcome, the third the lost ack.
    let probes = vec![ProbeFault::Pass, ProbeFault::Pass, ProbeFault::Unknown];
    Workload::new("protocol-unknown", ops).with_system(System::target().with_faults(commits, probes))
}

/// A shorter job for the mirrored runs (the mirror's requests add points): two keys, a reopen with a sealed
/// checkpoint and an orphan.
fn mirrored_ops() -> Vec<Op> {
    vec![
        Op::Recover,
        stage("m-0", 0, &["m-0/a"], &["m-0-0"]),
        stage("m-0", 1, &["m-0/b"], &["m-0-1"]),
        seal("m-0", 2),
        commit(false),
        stage("m-1", 0, &["m-1/a"], &["m-1-0"]),
        seal("m-1", 1),
        stage("m-2", 0, &["m-2/a"], &["m-2-0"]),
        Op::Reopen,
        Op::Recover,
        stage("m-2", 1, &["m-2/b"], &[]),
        seal("m-2", 2),
        window(&["m-3", "m-4"]),
        commit(true),
    ]
}

/// A worker's window of one-part seals and its flush, sharing one batch: under a synchronous mirror the flush
/// is acknowledged only once the mirror holds the seals, which every crash point after it checks.
fn window(names: &[&str]) -> Op {
    let seal = |name: &&str| {
        let result = WriteResult::new(Format::Parquet, format!("{name}-0").into_bytes()).unwrap();
        (id(name), vec![format!("{name}/a").into_bytes()], vec![result])
    };
    Op::WindowSeals { seals: names.iter().map(seal).collect() }
}

fn mirror_sync() -> Workload {
    Workload::new("mirror-sync", mirrored_ops()).with_system(System::mirrored(MirrorMode::Synchronous, SNAPSHOTS_OFF))
}

/// The local file is lost with every crash: recovery restores it from the mirror alone.
fn mirror_sync_disk_lost() -> Workload {
    let system = System::mirrored(MirrorMode::Synchronous, SNAPSHOTS_OFF).losing_local_file();
    Workload::new("mirror-sync-disk-lost", mirrored_ops()).with_system(system)
}

/// An asynchronous mirror two groups behind at most, with snapshots every six records, and a target that
/// loses an ack.
fn mirror_async() -> Workload {
    let mode = MirrorMode::Asynchronous { lag_batches_max: 2, lag_ms_max: u64::MAX };
    let system = System::mirrored(mode, 6).with_faults(vec![CommitFault::LandThenLoseAck], Vec::new());
    Workload::new("mirror-async", mirrored_ops()).with_system(system)
}

/// An asynchronous mirror, the local file lost with every crash: the mirror may lack acknowledged stage calls,
/// seals and marks, and the job reruns from the first operation it lacks; a lost mark leaves its key
/// `Committing`, which recovery finds landed in the table (F1). A lost ack from the target too.
fn mirror_async_disk_lost() -> Workload {
    let mode = MirrorMode::Asynchronous { lag_batches_max: 2, lag_ms_max: u64::MAX };
    let system = System::mirrored(mode, SNAPSHOTS_OFF)
        .with_faults(vec![CommitFault::LandThenLoseAck], Vec::new())
        .losing_local_file();
    Workload::new("mirror-async-disk-lost", mirrored_ops()).with_system(system)
}

/// The same with snapshots every six records: the restore starts from a snapshot the lagging mirror made.
fn mirror_async_snapshots_disk_lost() -> Workload {
    let mode = MirrorMode::Asynchronous { lag_batches_max: 2, lag_ms_max: u64::MAX };
    let system =
        System::mirrored(mode, 6).with_faults(vec![CommitFault::LandThenLoseAck], Vec::new()).losing_local_file();
    Workload::new("mirror-async-snapshots-disk-lost", mirrored_ops()).with_system(system)
}

/// Snapshots every five records, unknown outcomes, and the local file lost with every crash: recovery restores
/// from a snapshot and the slots after it.
fn mirror_snapshots_disk_lost() -> Workload {
    let faults = vec![CommitFault::UnknownNotLanded, CommitFault::LandThenLoseAck];
    let probes = vec![ProbeFault::Pass, ProbeFault::Pass, ProbeFault::Unknown];
    let system = System::mirrored(MirrorMode::Synchronous, 5).with_faults(faults, probes).losing_local_file();
    Workload::new("mirror-snapshots-disk-lost", mirrored_ops()).with_system(system)
}

/// The stall class: the puts a crash stopped are delivered late, after the successor finished the job, as a
/// request stuck in the network or a paused zombie's would be.
fn mirror_sync_stall_after_end() -> Workload {
    let system = System::mirrored(MirrorMode::Synchronous, SNAPSHOTS_OFF).stalling(Stall::AfterSuccessorEnd);
    Workload::new("mirror-sync-stall-after-end", mirrored_ops()).with_system(system)
}

/// The stall class on a successor that lost its disk: the late puts land right after it restored and fenced,
/// before it recovers and finishes.
fn mirror_sync_disk_lost_stall_after_open() -> Workload {
    let system = System::mirrored(MirrorMode::Synchronous, 5).losing_local_file().stalling(Stall::AfterSuccessorOpen);
    Workload::new("mirror-sync-disk-lost-stall-after-open", mirrored_ops()).with_system(system)
}

/// The stall class on an asynchronous mirror with snapshots: the dead process's background uploads land after
/// the successor opened.
fn mirror_async_stall_after_open() -> Workload {
    let mode = MirrorMode::Asynchronous { lag_batches_max: 2, lag_ms_max: u64::MAX };
    let system = System::mirrored(mode, 6).stalling(Stall::AfterSuccessorOpen);
    Workload::new("mirror-async-stall-after-open", mirrored_ops()).with_system(system)
}

fn class(o: &OpOutcome) -> &str {
    match o {
        Ok(()) => "ok",
        Err(e) => e,
    }
}

/// The workloads must exercise what they claim: the crash-free run's outcomes, op by op.
#[test]
fn the_workloads_do_what_they_say() {
    let rt = runtime().unwrap();
    let expect = |w: Workload, errors: &[(usize, &str)]| {
        let trace = w.trace(&rt).unwrap();
        for (i, o) in trace.outcomes().iter().enumerate() {
            let want = errors.iter().find(|(j, _)| *j == i).map_or("ok", |(_, e)| e);
            assert_eq!(class(o), want, "{} op {i} {:?}", w.name, w.ops[i]);
        }
    };
    expect(multi_checkpoint(), &[]);
    expect(restarts(), &[]);
    expect(aborts(), &[(7, "KeyConflict"), (12, "SealedCannotAbort")]);
    expect(commit_keys(), &[(7, "CommitOutOfSequence")]);
    expect(mixed_job(), &[]);
    expect(protocol_keys(), &[]);
    expect(protocol_unknown(), &[(3, "Target"), (6, "Target")]);
    expect(mirror_sync(), &[]);
    expect(mirror_async(), &[]);
    expect(mirror_snapshots_disk_lost(), &[(4, "Target")]);
}

/// Runs every crash point of `workload`, prints what it covered (to the stderr handle, which the test harness
/// does not capture, so every CI log shows the counts) and checks it covered enough to mean something.
#[expect(clippy::disallowed_methods, reason = "the wall time is only printed")]
#[expect(clippy::explicit_write, reason = "the harness captures `eprintln!`, not the stderr handle")]
fn every_crash_point_of(workload: Workload) {
    let started = Instant::now();
    let report = workload.run_exhaustive().unwrap_or_else(|e| panic!("{e}"));
    let [local, mirror, target] = report.per_component;
    let mut late = match report.late_delivered {
        0 => String::new(),
        n => format!(", {n} late puts delivered ({} landed)", report.late_landed),
    };
    if report.ops_redone > 0 || report.marks_lost > 0 {
        late.push_str(&format!(", {} operations redone, {} lost marks found", report.ops_redone, report.marks_lost));
    }
    writeln!(
        std::io::stderr(),
        "{}: {} crash points (local {local}, mirror {mirror}, target {target}) over {} store calls in {:.1?}{late}",
        workload.name,
        report.crash_points,
        report.calls,
        started.elapsed()
    )
    .unwrap();
    assert!(report.crash_points >= 100, "{}: only {} crash points", workload.name, report.crash_points);
    if workload.name.starts_with("mirror-async") && workload.name.ends_with("disk-lost") {
        // The class proves the lagging mark only if some crash point restores a mark the writer had acked.
        assert!(
            report.ops_redone > 0 && report.marks_lost > 0,
            "{}: {} operations redone, {} marks lost",
            workload.name,
            report.ops_redone,
            report.marks_lost
        );
    }
    if workload.name.starts_with("mirror-sync-disk-lost") {
        // A synchronous mirror lacks no acknowledged call but a mark, which never waits: the job goes on from
        // the call in flight, and some crash point must restore a mark the writer had acked. (Not asserted for
        // `mirror-snapshots-disk-lost`, whose count depends on where the linger puts the mark against a
        // snapshot's cut: 2 in one run, 0 in another.)
        assert!(
            report.ops_redone == 0 && report.marks_lost > 0,
            "{}: {} operations redone, {} marks lost",
            workload.name,
            report.ops_redone,
            report.marks_lost
        );
    }
}

/// One test per workload, so that the harness runs them in parallel.
mod every_crash_point_recovers {
    macro_rules! each_workload {
        ($($workload:ident),* $(,)?) => {
            $(
                #[test]
                fn $workload() {
                    super::every_crash_point_of(super::$workload());
                }
            )*
        };
    }

    each_workload!(
        multi_checkpoint,
        restarts,
        aborts,
        commit_keys,
        mixed_job,
        protocol_keys,
        protocol_unknown,
        mirror_sync,
        mirror_sync_disk_lost,
        mirror_async,
        mirror_async_disk_lost,
        mirror_async_snapshots_disk_lost,
        mirror_snapshots_disk_lost,
        mirror_sync_stall_after_end,
        mirror_sync_disk_lost_stall_after_open,
        mirror_async_stall_after_open,
    );
}

/// The stale-mirror class: the store restored from every prefix of the mirror's history, against the table the
/// whole job left, either refuses (`WrongStore`, only when it is behind the table) or agrees with the table.
#[test]
fn every_stale_mirror_is_refused_or_agrees_with_the_table() {
    let mut total = 0;
    for workload in [mirror_sync(), mirror_async(), mirror_snapshots_disk_lost()] {
        let report = workload.run_stale_mirror().unwrap_or_else(|e| panic!("{e}"));
        println!(
            "{}: {} mirror prefixes restored, {} refused as behind the table",
            workload.name, report.prefixes, report.refused
        );
        assert!(report.refused > 0 && report.refused < report.prefixes, "{report:?}");
        total += report.prefixes;
    }
    let _ = writeln!(std::io::stderr(), "{total} stale-mirror prefixes");
}
