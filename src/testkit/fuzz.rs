//! The logic of the fuzz targets, kept in the crate so that the cargo-fuzz wrappers in `fuzz/` and the plain
//! `cargo test` shim (`tests/suite/fuzz_corpus.rs`, which replays the committed corpora and saved crashers on
//! stable) run the same code.
//!
//! Each function panics when it finds a bug, which is how a fuzzer notices; for any input that is not a bug it
//! returns normally.

mod restore;

pub use restore::{RESTORE_MIRROR_MUTATIONS_MAX, restore_mirror, restore_mirror_seeds};

use crate::mirror::MirrorMode;
use crate::state::CheckpointRecord;
use crate::testkit::crash::{Op, SNAPSHOTS_OFF, Stall, System, Workload, runtime};
use crate::testkit::{CommitFault, ProbeFault};
use crate::types::{CheckpointId, Format, SourceKey, WriteResult};
use crate::wal::frame::{self, FRAME_HEADER_BYTES, FRAME_TRAILER_BYTES};
use crate::wal::record::{Record, decode_value, encode_value};
use crate::wal::tables::{CommitValue, Meta, PartValue};

/// Feeds arbitrary bytes into every decoder: the frame decoders, the record decoder and the table-value decoder
/// for each value type, each on the raw bytes and again with the CRC32 fixed up so the checks behind it are
/// reached. Every decoder must return an error, never panic, and whatever decodes must re-encode to exactly the
/// bytes it came from (one encoding per value, so byte comparisons of frames and parts are sound).
///
/// # Panics
///
/// When a decoder panics, or a decoded value does not re-encode to its bytes.
pub fn decode_record(data: &[u8]) {
    frame_round_trip(data);
    if let Some(fixed) = with_frame_crc(data) {
        frame_round_trip(&fixed);
    }
    record_round_trip(data);
    let mut sealed = data.to_vec();
    sealed.extend_from_slice(&crc32fast::hash(data).to_le_bytes());
    for bytes in [data, sealed.as_slice()] {
        value_round_trip::<Meta>(bytes);
        value_round_trip::<CheckpointRecord>(bytes);
        value_round_trip::<PartValue>(bytes);
        value_round_trip::<CommitValue>(bytes);
    }
}

/// The bytes with the CRC32 of the frame their header describes recomputed, when the header's length fits.
fn with_frame_crc(data: &[u8]) -> Option<Vec<u8>> {
    let len = u32::from_le_bytes(data.get(0..4)?.try_into().ok()?) as usize;
    let body = FRAME_HEADER_BYTES.checked_add(len)?;
    let end = body.checked_add(FRAME_TRAILER_BYTES)?;
    if end > data.len() {
        return None;
    }
    let mut fixed = data.to_vec();
    let crc = crc32fast::hash(&fixed[..body]);
    fixed[body..end].copy_from_slice(&crc.to_le_bytes());
    Some(fixed)
}

fn frame_round_trip(data: &[u8]) {
    if let Ok((frame, used)) = frame::decode_prefix(data, "fuzz") {
        let again = frame::encode(frame.seq, frame.epoch, frame.payload);
        assert!(again.as_deref().ok() == Some(&data[..used]), "a decoded frame re-encodes to other bytes");
        record_round_trip(frame.payload);
        let exact = frame::decode_exact(data, "fuzz");
        assert_eq!(exact.is_ok(), used == data.len(), "decode_exact disagrees with decode_prefix");
    } else {
        assert!(frame::decode_exact(data, "fuzz").is_err(), "decode_exact accepts what decode_prefix refuses");
    }
}

fn record_round_trip(payload: &[u8]) {
    if let Ok(record) = Record::from_payload(payload, "fuzz") {
        let again = record.to_payload();
        assert!(
            again.as_deref().ok() == Some(payload),
            "record {record:?} decodes from {payload:02x?} but re-encodes to {again:02x?}"
        );
    }
}

fn value_round_trip<T>(bytes: &[u8])
where
    T: serde::Serialize + for<'de> serde::Deserialize<'de> + std::fmt::Debug,
{
    if let Ok(value) = decode_value::<T>(bytes, &|| "fuzz".into()) {
        let again = encode_value(&value);
        assert!(
            again.as_deref().ok() == Some(bytes),
            "value {value:?} decodes from {bytes:02x?} but re-encodes to {again:02x?}"
        );
    }
}

/// The most operations one `crash_replay` input is turned into, so that each run stays in milliseconds.
pub const CRASH_REPLAY_OPS_MAX: usize = 24;

const IDS: [&str; 3] = ["a", "b", "c"];
const KEYS: [&[u8]; 4] = [b"k0", b"k1", b"k2", b"k3"];

fn ids(mask: u8) -> Vec<CheckpointId> {
    IDS.iter()
        .enumerate()
        .filter(|(i, _)| mask & (1 << i) != 0)
        .filter_map(|(_, s)| CheckpointId::new(*s).ok())
        .collect()
}

fn keys(mask: u8) -> Vec<SourceKey> {
    KEYS.iter().enumerate().filter(|(i, _)| mask & (1 << i) != 0).map(|(_, k)| k.to_vec()).collect()
}

fn results(selector: u8) -> Vec<WriteResult> {
    match selector % 4 {
        0 => Vec::new(),
        n => WriteResult::new(Format::Parquet, format!("file-{n}").into_bytes()).into_iter().collect(),
    }
}

/// The system an input's first byte chooses (see [`workload_from_bytes`]).
fn system_from_byte(b: u8) -> Option<System> {
    const FIRST: [CommitFault; 5] = [
        CommitFault::Pass,
        CommitFault::FailBeforeCommit,
        CommitFault::LandThenLoseAck,
        CommitFault::UnknownNotLanded,
        CommitFault::LandLateAfterUnknown,
    ];
    const SECOND: [CommitFault; 4] = [
        CommitFault::Pass,
        CommitFault::LandThenLoseAck,
        CommitFault::UnknownNotLanded,
        CommitFault::LandLateAfterUnknown,
    ];
    let variant = b & 0x80 != 0;
    let faults = vec![
        FIRST.get(usize::from((b >> 2) & 7)).copied().unwrap_or(CommitFault::Pass),
        SECOND[usize::from((b >> 5) & 3)],
    ];
    let system = match b & 3 {
        0 => return None,
        1 => {
            let probes = if variant { vec![ProbeFault::Pass, ProbeFault::Unknown] } else { Vec::new() };
            return Some(System::target().with_faults(faults, probes));
        }
        2 => {
            let system = System::mirrored(MirrorMode::Synchronous, SNAPSHOTS_OFF);
            if variant { system.losing_local_file() } else { system }
        }
        _ => {
            let mode = MirrorMode::Asynchronous { lag_batches_max: 2, lag_ms_max: u64::MAX };
            if variant { System::mirrored(mode, 4).losing_local_file() } else { System::mirrored(mode, SNAPSHOTS_OFF) }
        }
    };
    Some(system.with_faults(faults, Vec::new()))
}

/// Turns bytes into a crash selector and a workload over three ids, four keys and three commit keys.
///
/// The first byte chooses what the workload runs against: bits 0–1 are 0 for the local file alone, 1 for a
/// target (a `DirTable` behind a scripted `FaultyTarget`), 2 for a target and a synchronous mirror, 3 for a
/// target and an asynchronous one (two groups of lag); bits 2–4 choose the target's first commit fault (pass,
/// fail before, land and lose the ack, unknown and not landed, land late; 5–7 pass), bits 5–6 its second (pass,
/// land and lose the ack, unknown, land late); bit 7 a variant: the target's second probe is unknown, the local
/// file is lost at the crash (synchronous mirror), or a snapshot every four records and the local file lost at
/// the crash (asynchronous mirror: the rerun redoes what the mirror lacked).
///
/// The next two bytes, little-endian, choose the fault class in their top two bits and, in the other fourteen,
/// the crash point (modulo the run's I/O points, which with a system are those of the local file, the mirror and
/// the target together). With a mirror the class is: 0 a plain crash; 1 and 2 the stall class
/// ([`Stall::AfterSuccessorOpen`], [`Stall::AfterSuccessorEnd`]: the puts the crash stopped land late); 3 the
/// stale-mirror class (no crash: the fourteen bits choose the prefix of the mirror's history a rerun restores
/// from, see [`Workload::run_stale_mirror`]). Without a mirror every class is a plain crash. Then each operation is one byte choosing it (modulo
/// 11) followed by its argument bytes (missing bytes read as 0):
///
/// | byte % 11 | operation | argument bytes |
/// |---|---|---|
/// | 0, 1, 2 | stage | id (% 3), part (% 3), key mask (4 bits), result (% 4, 0 = none) |
/// | 3 | seal | id, parts (1 + % 3) |
/// | 4 | restart | id |
/// | 5 | abort | id |
/// | 6 | begin_commit; with a system, commit_pending | key (% 3), id mask (3 bits, 0 = all), final (bit 0) |
/// | 7 | commit_empty; with a system, commit_pending (not final) | id mask |
/// | 8, 9, 10 | mark_committed, mark_unknown, mark_not_committed; with a system, recover; a reopen instead when the argument is ≥ 192 (with a system, followed by a recover) | key (% 3) |
///
/// With a system the workload begins with a recover, as a job does after it opened the store.
pub fn workload_from_bytes(data: &[u8]) -> (u16, Workload) {
    let class = data.get(2).copied().unwrap_or(0) >> 6;
    let system = system_from_byte(data.first().copied().unwrap_or(0)).map(|s| match (class, s.mirror.is_some()) {
        (1, true) => s.stalling(Stall::AfterSuccessorOpen),
        (2, true) => s.stalling(Stall::AfterSuccessorEnd),
        _ => s,
    });
    let selector = u16::from_le_bytes([data.get(1).copied().unwrap_or(0), data.get(2).copied().unwrap_or(0)]);
    let mut bytes = data.iter().copied().skip(3);
    let mut ops = Vec::new();
    if system.is_some() {
        ops.push(Op::Recover);
    }
    while ops.len() < CRASH_REPLAY_OPS_MAX {
        let Some(op) = bytes.next() else { break };
        let mut arg = || bytes.next().unwrap_or(0);
        let id = |b: u8| CheckpointId::new(IDS[usize::from(b % 3)]).ok();
        let mask = |b: u8| if b.is_multiple_of(8) { 7 } else { b % 8 };
        let next = match (op % 11, system.is_some()) {
            (0..=2, _) => {
                let (i, part, k, r) = (arg(), arg(), arg(), arg());
                id(i).map(|id| Op::Stage { id, part: u32::from(part % 3), keys: keys(k % 16), results: results(r) })
            }
            (3, _) => {
                let (i, parts) = (arg(), arg());
                id(i).map(|id| Op::Seal { id, parts: 1 + u32::from(parts % 3) })
            }
            (4, _) => id(arg()).map(|id| Op::Restart { id }),
            (5, _) => id(arg()).map(|id| Op::Abort { id }),
            (6, false) => {
                let (key, m, f) = (arg(), arg(), arg());
                Some(Op::BeginCommit { key: u64::from(key % 3), ids: ids(mask(m)), final_commit: f & 1 == 1 })
            }
            (6, true) => {
                let (_, _, f) = (arg(), arg(), arg());
                Some(Op::CommitPending { final_commit: f & 1 == 1 })
            }
            (7, false) => Some(Op::CommitEmpty { ids: ids(mask(arg())) }),
            (7, true) => {
                arg();
                Some(Op::CommitPending { final_commit: false })
            }
            (n, with_system) => {
                let key = arg();
                let k = u64::from(key % 3);
                Some(match (key >= 192, n, with_system) {
                    (true, _, true) => {
                        ops.push(Op::Reopen);
                        Op::Recover
                    }
                    (true, _, false) => Op::Reopen,
                    (false, _, true) => Op::Recover,
                    (false, 8, false) => Op::MarkCommitted { key: k },
                    (false, 9, false) => Op::MarkUnknown { key: k },
                    (false, _, false) => Op::MarkNotCommitted { key: k },
                })
            }
        };
        ops.extend(next);
    }
    let workload = Workload::new("crash_replay", ops);
    (
        selector,
        match system {
            Some(system) => workload.with_system(system),
            None => workload,
        },
    )
}

/// Turns bytes into a workload and a crash point ([`workload_from_bytes`]), plays it once without a crash, then
/// crashes it at that point and checks what the crash-point runner checks ([`crate::testkit::crash`]): for the
/// local file alone, the crash image is the state after the last acked call or the call in flight, every
/// invariant holds, the reopened store answers as the image says, and finishing the workload ends where the
/// crash-free run ended; with a system, the crash leaves a consistent local file and mirror, and recovery
/// plus the rest of the job leaves every sealed checkpoint's results in the table exactly once (and, in the
/// stall class, still does after the crashed process's late puts land). In the stale-mirror class, a rerun
/// restored from a prefix of the mirror's history is refused as behind the table or agrees with it.
///
/// # Panics
///
/// When any of those checks fails, or the store panics.
pub fn crash_replay(data: &[u8]) {
    let (selector, workload) = workload_from_bytes(data);
    let stale = selector >> 14 == 3 && workload.system.as_ref().is_some_and(|s| s.mirror.is_some());
    let point = selector & 0x3fff;
    let result = runtime().and_then(|rt| {
        let trace = workload.trace(&rt)?;
        if stale {
            return workload.stale_at(&rt, &trace, usize::from(point)).map(drop);
        }
        let k = 1 + u64::from(point) % trace.io_ops().max(1);
        workload.crash_at(&rt, &trace, k, true).map(drop)
    });
    if let Err(e) = result {
        panic!("crash_replay: {e}\nsystem: {:?}\nworkload: {:#?}", workload.system, workload.ops);
    }
}

fn hex_frame(record: &Record, seq: u64, epoch: u64) -> Option<Vec<u8>> {
    frame::encode(seq, epoch, &record.to_payload().ok()?).ok()
}

/// Small hand-made inputs for `decode_record`: a frame of each record type, the bare payloads, and table-value
/// bodies (the target appends their CRC32) of each value type.
pub fn decode_record_seeds() -> Vec<Vec<u8>> {
    let (Ok(a), Ok(b)) = (CheckpointId::new("a"), CheckpointId::new("b-1")) else { return Vec::new() };
    let result = WriteResult::new(Format::Other("csv".into()), b"s3://t/part-0.csv".to_vec()).into_iter().collect();
    let records = [
        Record::Open { writer_tag: u128::MAX - 7 },
        Record::Stage { id: a.clone(), attempt: 1, part: 2, keys: vec![b"k".to_vec()], results: result },
        Record::Seal { id: a.clone(), parts: 300 },
        Record::Restart { id: b.clone() },
        Record::BeginCommit {
            key: 70_000,
            ids: vec![a.clone(), b.clone()],
            target_version: Some(9),
            final_commit: true,
        },
        Record::MarkUnknown { key: 3, reason: "timeout".into() },
        Record::ForceAbort { ids: vec![b], reason: "operator".into() },
    ];
    let mut seeds: Vec<Vec<u8>> = records.iter().filter_map(|r| hex_frame(r, 1 << 20, 3)).collect();
    seeds.extend(records.iter().filter_map(|r| r.to_payload().ok()));
    let record = CheckpointRecord {
        state: crate::CheckpointState::Committing { key: 5 },
        attempt: 2,
        epoch: 7,
        parts: 3,
        results: 4,
    };
    let bodies = [
        encode_value(&record),
        encode_value(&PartValue { keys: vec![b"k0".to_vec(), b"k1".to_vec()], results: Vec::new() }),
        encode_value(&CommitValue {
            ids: vec![a],
            target_version: None,
            final_commit: false,
            epoch: 2,
            state: crate::CheckpointState::CommitUnknown { key: 1 },
        }),
    ];
    for body in bodies.into_iter().flatten() {
        // Both the whole value and its body without the CRC32, which the target appends itself.
        seeds.push(body[..body.len() - 4].to_vec());
        seeds.push(body);
    }
    seeds
}

/// Small hand-made inputs for `crash_replay` (see [`workload_from_bytes`] for the encoding). On the local file
/// alone: a checkpoint through a full commit, two checkpoints with a reopen (orphans), a restart and an abort,
/// a commit whose outcome is unknown, and a key conflict. With a system: commits over two keys on the target
/// with a lost ack; the same on a synchronous mirror; on a synchronous mirror with the local file lost; on an
/// asynchronous mirror with snapshots and a reopen; two of the stall class and one of the stale-mirror class.
pub fn crash_replay_seeds() -> Vec<Vec<u8>> {
    // Operation bytes: stage 0, seal 3, restart 4, abort 5, begin 6, empty 7, marks 8/9/10, reopen 8 + 200;
    // with a system, 6 and 7 are commit_pending and 8 is recover.
    let local = [
        // Stage a/0 with k0 and a result, seal a with 1 part, begin key 0 over a (final), mark it committed.
        vec![7, 0, 0, 0, 0, 1, 1, 3, 0, 0, 6, 0, 1, 1, 8, 0],
        // Stage a/0, a/1 and b/0; reopen; stage a/2 (an orphan: restarted and re-staged), seal a with 3, seal b.
        vec![40, 0, 0, 0, 0, 1, 1, 0, 0, 1, 2, 2, 0, 1, 0, 4, 3, 8, 200, 0, 0, 2, 8, 1, 3, 0, 2, 3, 1, 0],
        // Stage a/0, restart a, stage a/0 with other bytes, seal; stage b/0, abort b, restart b, stage b/0.
        vec![3, 1, 0, 0, 0, 1, 1, 4, 0, 0, 0, 0, 2, 2, 3, 0, 0, 0, 1, 0, 4, 0, 5, 1, 4, 1, 0, 1, 0, 4, 0],
        // Stage and seal a and b, begin key 0 over both, unknown, not committed, committed.
        vec![90, 0, 0, 0, 0, 1, 1, 0, 1, 0, 2, 2, 3, 0, 0, 3, 1, 0, 6, 0, 3, 0, 9, 0, 10, 0, 8, 0],
        // Stage a and b with the same key k0 and c with k3, none with results; seal all three (b is a key
        // conflict); commit c empty.
        vec![11, 0, 0, 0, 0, 1, 0, 0, 1, 0, 1, 0, 0, 2, 0, 8, 0, 3, 0, 0, 3, 1, 0, 3, 2, 0, 7, 4],
    ];
    // Stage and seal a, commit; stage and seal b, stage c (not sealed), reopen and recover; seal c, commit final.
    let job = [0, 0, 0, 1, 1, 3, 0, 0, 7, 0, 0, 1, 0, 2, 2, 3, 1, 0, 0, 2, 0, 4, 3, 8, 200, 3, 2, 0, 6, 0, 0, 1];
    let with = |system: u8, selector: [u8; 2]| {
        let mut input = vec![system, selector[0], selector[1]];
        input.extend_from_slice(&job);
        input
    };
    let mut seeds: Vec<Vec<u8>> = local
        .into_iter()
        .map(|old| {
            // Inputs of the local file alone: a zero system byte before the selector and operations.
            let mut input = vec![0];
            input.extend(old);
            input
        })
        .collect();
    // Target with a lost ack on its first commit (fault 2 in bits 2-4).
    seeds.push(with(1 | (2 << 2), [77, 0]));
    // Synchronous mirror, the second commit unknown and not landed (fault 2 in bits 5-6).
    seeds.push(with(2 | (2 << 5), [150, 0]));
    // Synchronous mirror, the local file lost at the crash.
    seeds.push(with(2 | 0x80, [33, 1]));
    // Asynchronous mirror with snapshots, the first commit landing late.
    seeds.push(with(3 | (4 << 2) | 0x80, [201, 0]));
    // The stall class: a synchronous mirror, the puts stopped by the crash landing after the successor opened.
    seeds.push(with(2, [10, 1 << 6]));
    // The stall class on an asynchronous mirror, the late puts landing after the successor finished.
    seeds.push(with(3, [13, 2 << 6]));
    // The stale-mirror class: a rerun restored from the first 9 changes of a synchronous mirror's history.
    seeds.push(with(2, [9, 3 << 6]));
    seeds
}
