//! The logic of the `restore_mirror` fuzz target: a small mirrored store is built once (deterministically),
//! the fuzz input damages copies of its mirror objects, and a restore from the mirror alone — a read-only
//! [`MirrorView`] and a [`Store`] opened on an empty local file — must either be refused as `Corrupt` or
//! `WrongStore`, or restore exactly the state the objects still describe.
//!
//! **What is accepted, and why it is safe.** The mirror's log lives in dense slots and nothing records where
//! it ends (that is what lets a new writer fence the next slot). So objects that are *deleted* from the end of
//! the log cannot be told from ones never written: a restore from the intact slots before the first absent one
//! is the state the store had after that slot — a state the store really passed through, whose every record its
//! writer wrote in order, so every local invariant holds in it. What the lost tail recorded is then either
//! redone (its keys are not processed, so their inputs are read again) or caught by the commit protocol: commit
//! keys are dense and the target holds every key that landed, so a rerun re-committing key n finds it in the
//! target (marked, if the same ids; `CommitMismatch`, if other ids) and never lands it twice. The extreme case
//! is a log (and snapshot) deleted whole under a manifest that starts at slot 0: the store then restores as a
//! new one (`created`), which the committer refuses (`WrongStore`) before it begins key 0 if the target
//! already holds key 0. (Telling a lost tail from a short log would need the manifests to record where the
//! log ended when they were written: a format change, not made here.) Everything else is predicted exactly
//! from which objects are present:
//!
//! - no manifest: `WrongStore` (a missing mirror is never taken for an empty one);
//! - the newest present manifest (with the claim rule below) names a snapshot that is absent, or a slot is present
//!   [`MIRROR_SLOTS_IN_FLIGHT_MAX`] or more slots past the first absent one at or after the manifest's first slot
//!   (a gap no writer's puts in flight leave): `Corrupt`; nearer ones are a stopped writer's torn tail, ignored;
//! - the store (not the view) claims the epoch after the newest present manifest, so when the newest claims
//!   were deleted but their slots are still there, its fence would repeat an epoch: `Corrupt`;
//! - otherwise the state after the slots from the manifest's first slot up to the first absent one (a new,
//!   empty store for the store when there are none and no snapshot).
//!
//! A damaged object (bytes changed, truncated, or another object's bytes: a swap) that the restore reads — the
//! newest present manifest (and, when that is a claim, the one before it, whose higher base replaces a stale
//! claim's), the snapshot it starts from, a slot it replays — must make it fail as `Corrupt`; one it does not
//! read may be ignored. So an `Ok` must always be exactly the predicted state, and never come from a read
//! object that is damaged. Each object is CRC32-checked whole; a mutation that also forged the CRC32s would be
//! outside this model (CRC32 is not a MAC), and is reported like any other acceptance of a damaged object.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt as _, PutPayload};
use tokio::runtime::Runtime;

use crate::error::{Error, ErrorKind};
use crate::limits::MIRROR_SLOTS_IN_FLIGHT_MAX;
use crate::mirror::{Layout, MirrorMode, MirrorSettings, MirrorView, decode_manifest, decode_segment, decode_snapshot};
use crate::store::Store;
use crate::testkit::crash::{Image, Logical, runtime};
use crate::testkit::{CrashBackend, ManualClock};
use crate::types::{CheckpointId, Format, JobId, TargetIdentity, WriteResult};
use crate::{Attempt, Part, StagePart};

/// The most mutations one input applies, so that the fuzzer damages objects instead of rewriting them.
pub const RESTORE_MIRROR_MUTATIONS_MAX: usize = 8;

const PREFIX: &str = "mirror/restore-job";

/// What one manifest references.
#[derive(Clone, Copy, Debug)]
struct ManifestFacts {
    epoch: u64,
    update: u32,
    first_slot: u64,
    snapshot: bool,
}

/// A mirrored store's objects and what a restore of any intact part of them must give.
struct Base {
    /// Every object under the bucket's root, by path.
    objects: BTreeMap<String, Vec<u8>>,
    /// Each manifest's path and what it references.
    manifests: BTreeMap<String, ManifestFacts>,
    /// Each WAL slot's highest frame epoch.
    slot_epochs: BTreeMap<u64, u64>,
    /// Each snapshot slot's writer epoch.
    snapshot_epochs: BTreeMap<u64, u64>,
    /// The state after the slots before `n`, for every `n` the store reached (`None`: no store).
    states: BTreeMap<u64, Option<Logical>>,
}

fn fail(e: impl std::fmt::Display) -> String {
    e.to_string()
}

fn settings() -> MirrorSettings {
    MirrorSettings {
        mode: MirrorMode::Synchronous,
        // Fixed intervals: many snapshots for the restores to start from.
        snapshot_interval_records: 8,
        snapshot_log_ratio_percent: 0,
        gc_age_ms_min: 1000,
        request_timeout_ms: 30_000,
        ..MirrorSettings::default()
    }
}

fn identity() -> Result<(JobId, TargetIdentity), String> {
    Ok((JobId::new("restore-job").map_err(fail)?, TargetIdentity::new("mem://restore").map_err(fail)?))
}

fn layout() -> Layout {
    Layout::new(Path::from(PREFIX))
}

async fn list_all(bucket: &InMemory) -> Result<BTreeMap<String, Vec<u8>>, String> {
    use futures::TryStreamExt as _;
    let metas: Vec<_> = bucket.list(None).try_collect().await.map_err(fail)?;
    let mut out = BTreeMap::new();
    for meta in metas {
        let bytes = bucket.get(&meta.location).await.map_err(fail)?.bytes().await.map_err(fail)?;
        out.insert(meta.location.to_string(), bytes.to_vec());
    }
    Ok(out)
}

/// The slot after the highest WAL slot ever put (collection deletes only old ones).
async fn next_slot(bucket: &InMemory, high: &mut u64) -> Result<u64, String> {
    let layout = layout();
    for path in list_all(bucket).await?.keys() {
        if let Some(slot) = layout.parse_slot(&Path::from(path.as_str()), "wal") {
            *high = (*high).max(slot + 1);
        }
    }
    Ok(*high)
}

fn result(name: &str) -> Result<Vec<WriteResult>, String> {
    Ok(vec![WriteResult::new(Format::Parquet, name.as_bytes().to_vec()).map_err(fail)?])
}

fn id(name: &str) -> Result<CheckpointId, String> {
    CheckpointId::new(name).map_err(fail)
}

/// Builds the base: two epochs of a job (stages, seals, commits, an orphan restarted, an empty commit, an
/// unknown outcome) with snapshots every eight records. Its clock never moves, so nothing is collected.
async fn build() -> Result<Base, String> {
    let (job, target) = identity()?;
    let bucket = Arc::new(InMemory::new());
    let backend = CrashBackend::new();
    let clock = ManualClock::new(0);
    let open = |tag: u128| {
        Store::builder(job.clone(), target.clone())
            .backend(backend.clone())
            .writer_tag(tag)
            .mirror(bucket.clone(), Path::from(PREFIX), settings())
            .clock(Arc::new(clock.clone()))
            .open()
    };
    let mut states = BTreeMap::from([(0, None)]);
    let mut high = 0;
    let store = open(1).await.map_err(fail)?;
    macro_rules! step {
        ($store:expr, $call:expr) => {{
            $call.await.map_err(fail)?;
            // Each call in a slot of its own, the marks too (never waited for, they would join the next call's).
            $store.flush().await.map_err(fail)?;
            let slot = next_slot(&bucket, &mut high).await?;
            states.insert(slot, Image::from_store(&$store)?.map(|i| i.logical()));
        }};
    }
    states.insert(next_slot(&bucket, &mut high).await?, Image::from_store(&store)?.map(|i| i.logical()));
    let (a, b, c, d, e) = (id("a")?, id("b")?, id("c")?, id("d")?, id("e")?);
    step!(
        store,
        store
            .stage(&a, StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![b"ka0".to_vec()]).results(result("fa0")?))
    );
    step!(
        store,
        store.stage(
            &a,
            StagePart::new(Attempt::FIRST, Part::new(1)).keys(vec![b"ka1".to_vec()]).results(result("fa1")?)
        )
    );
    step!(store, store.seal(&a, 2));
    step!(
        store,
        store.stage(&b, StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![b"kb".to_vec()]).results(result("fb")?))
    );
    step!(store, store.seal(&b, 1));
    step!(store, store.protocol().begin_commit(0, &[a.clone(), b.clone()], Some(0), false));
    step!(store, store.protocol().mark_committed(0));
    step!(
        store,
        store.stage(
            &c,
            StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![b"kc".to_vec()]).results(result("fc-old")?)
        )
    );
    store.close();

    let store = open(2).await.map_err(fail)?;
    states.insert(next_slot(&bucket, &mut high).await?, Image::from_store(&store)?.map(|i| i.logical()));
    step!(store, store.restart(&c));
    step!(
        store,
        store.stage(&c, StagePart::new(Attempt::new(1), Part::FIRST).keys(vec![b"kc".to_vec()]).results(result("fc")?))
    );
    step!(store, store.seal(&c, 1));
    step!(store, store.stage(&d, StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![b"kd".to_vec()])));
    step!(store, store.seal(&d, 1));
    step!(store, store.protocol().commit_empty(std::slice::from_ref(&d)));
    step!(store, store.protocol().begin_commit(1, std::slice::from_ref(&c), Some(1), true));
    step!(store, store.protocol().mark_unknown(1, "timeout"));
    step!(store, store.protocol().mark_committed(1));
    step!(
        store,
        store.stage(&e, StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![b"ke".to_vec()]).results(result("fe")?))
    );
    step!(store, store.seal(&e, 1));
    // Closing waits for the uploads, snapshots and deletes still queued, so the objects are final.
    store.close();

    let objects = list_all(&bucket).await?;
    let layout = layout();
    let (mut manifests, mut slot_epochs, mut snapshot_epochs) = (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
    for (path, bytes) in &objects {
        let location = Path::from(path.as_str());
        if let Some(name) = layout.parse_manifest(&location) {
            let body = decode_manifest(bytes, name.epoch, name.update, path).map_err(fail)?;
            let facts = ManifestFacts {
                epoch: name.epoch,
                update: name.update,
                first_slot: body.first_slot,
                snapshot: body.snapshot,
            };
            manifests.insert(path.clone(), facts);
        } else if let Some(slot) = layout.parse_slot(&location, "wal") {
            let segment = decode_segment(bytes, slot, path).map_err(fail)?;
            slot_epochs.insert(slot, segment.epochs.iter().copied().max().unwrap_or(0));
        } else if let Some(slot) = layout.parse_slot(&location, "snapshot") {
            snapshot_epochs.insert(slot, decode_snapshot(bytes, slot, path).map_err(fail)?.0.epoch);
        } else {
            return Err(format!("an object the layout does not name: {path}"));
        }
    }
    if snapshot_epochs.len() < 2 || manifests.len() < 4 || !slot_epochs.contains_key(&0) {
        return Err(format!("the base is not the one described: {:?}", objects.keys()));
    }
    Ok(Base { objects, manifests, slot_epochs, snapshot_epochs, states })
}

/// The base as the mirror's collection leaves it once its newest manifest is old enough: only that manifest,
/// and the snapshot and slots from its first slot on. (Made from the base rather than by the store's own
/// collection, whose timing against the snapshots would make the objects differ from run to run; the
/// collection itself is tested in `tests/suite/mirror_gc.rs`.)
fn collected(base: &Base) -> Result<Base, String> {
    let layout = layout();
    let (newest, facts) = base.manifests.iter().last().ok_or("no manifest")?;
    let keep = |path: &String| {
        let location = Path::from(path.as_str());
        let slot = layout.parse_slot(&location, "wal").or_else(|| layout.parse_slot(&location, "snapshot"));
        path == newest || slot.is_some_and(|s| s >= facts.first_slot)
    };
    Ok(Base {
        objects: base.objects.iter().filter(|(p, _)| keep(p)).map(|(p, b)| (p.clone(), b.clone())).collect(),
        manifests: BTreeMap::from([(newest.clone(), *facts)]),
        slot_epochs: base.slot_epochs.iter().filter(|(s, _)| **s >= facts.first_slot).map(|(s, e)| (*s, *e)).collect(),
        snapshot_epochs: base
            .snapshot_epochs
            .iter()
            .filter(|(s, _)| **s >= facts.first_slot)
            .map(|(s, e)| (*s, *e))
            .collect(),
        states: base.states.clone(),
    })
}

fn bases() -> &'static Result<[Base; 2], String> {
    static BASES: OnceLock<Result<[Base; 2], String>> = OnceLock::new();
    BASES.get_or_init(|| {
        let base = runtime()?.block_on(build())?;
        let collected = collected(&base)?;
        Ok([base, collected])
    })
}

/// Applies the input's mutations to a copy of the base's objects (see [`restore_mirror`] for the encoding).
fn mutate(base: &Base, data: &[u8]) -> BTreeMap<String, Option<Vec<u8>>> {
    let paths: Vec<&String> = base.objects.keys().collect();
    let mut objects: BTreeMap<String, Option<Vec<u8>>> =
        base.objects.iter().map(|(p, b)| (p.clone(), Some(b.clone()))).collect();
    let mut bytes = data.iter().copied();
    for _ in 0..RESTORE_MIRROR_MUTATIONS_MAX {
        let Some(kind) = bytes.next() else { break };
        let mut arg = || bytes.next().unwrap_or(0);
        let path = paths[usize::from(arg()) % paths.len()].clone();
        match kind % 4 {
            0 => {
                let (lo, hi, value) = (arg(), arg(), arg());
                if let Some(Some(object)) = objects.get_mut(&path)
                    && !object.is_empty()
                {
                    let at = usize::from(u16::from_le_bytes([lo, hi])) % object.len();
                    object[at] ^= value;
                }
            }
            1 => {
                let (lo, hi) = (arg(), arg());
                if let Some(Some(object)) = objects.get_mut(&path) {
                    let len = usize::from(u16::from_le_bytes([lo, hi])) % (object.len() + 1);
                    object.truncate(len);
                }
            }
            2 => drop(objects.insert(path, None)),
            _ => {
                let other = paths[usize::from(arg()) % paths.len()].clone();
                let a = objects.get(&path).cloned().flatten();
                let b = objects.get(&other).cloned().flatten();
                objects.insert(path, b);
                objects.insert(other, a);
            }
        }
    }
    objects
}

/// What a restore of the mutated objects must do, as far as which objects are present tells.
#[derive(Debug)]
struct Prediction {
    /// `Err(kind)`: refused with that kind; `Ok(state)`: the state it restores.
    outcome: Result<Option<Logical>, ErrorKind>,
    /// The objects it reads (a damaged one among them must make it fail).
    reads: Vec<String>,
}

fn predict(base: &Base, objects: &BTreeMap<String, Option<Vec<u8>>>, store: bool) -> Prediction {
    let present = |p: &String| objects.get(p).is_some_and(Option::is_some);
    let layout = layout();
    let manifests: Vec<(&String, &ManifestFacts)> = base.manifests.iter().filter(|(p, _)| present(p)).collect();
    let refuse = |kind, reads| Prediction { outcome: Err(kind), reads };
    // Manifest paths sort in (epoch, update) order: the newest present one is read; for a claim (update 0), also
    // the one before it, whose higher base replaces a stale claim's (`mirror::read::read_newest`). Superseded
    // manifests are never read, so their damage changes nothing.
    let Some((newest_path, newest)) = manifests.last() else { return refuse(ErrorKind::WrongStore, Vec::new()) };
    let mut reads: Vec<String> = vec![(*newest_path).clone()];
    let mut newest = **newest;
    if newest.update == 0
        && let Some((older_path, older)) = manifests.len().checked_sub(2).and_then(|i| manifests.get(i))
    {
        reads.push((*older_path).clone());
        if older.first_slot > newest.first_slot {
            newest.first_slot = older.first_slot;
            newest.snapshot = older.snapshot;
        }
    }
    let floor = manifests.iter().map(|(_, m)| m.epoch).max().unwrap_or(0);
    let mut epoch = 0;
    if newest.snapshot {
        let path = layout.snapshot(newest.first_slot).to_string();
        if !present(&path) {
            return refuse(ErrorKind::Corrupt, reads);
        }
        epoch = base.snapshot_epochs.get(&newest.first_slot).copied().unwrap_or(0);
        reads.push(path);
    }
    let mut end = newest.first_slot;
    while present(&layout.wal(end).to_string()) {
        reads.push(layout.wal(end).to_string());
        epoch = epoch.max(base.slot_epochs.get(&end).copied().unwrap_or(0));
        end += 1;
    }
    let gap =
        base.slot_epochs.keys().any(|s| *s >= end + MIRROR_SLOTS_IN_FLIGHT_MAX && present(&layout.wal(*s).to_string()));
    if gap || (store && epoch > floor) {
        return refuse(ErrorKind::Corrupt, reads);
    }
    let state = match base.states.get(&end) {
        // No store in the slots read: the store path creates a new one, whose state is the first open's.
        Some(None) if store => base.states.get(&1).cloned().flatten(),
        Some(state) => state.clone(),
        None => return refuse(ErrorKind::Bug, reads),
    };
    Prediction { outcome: Ok(state), reads }
}

async fn restore(
    objects: &BTreeMap<String, Option<Vec<u8>>>,
    store: bool,
) -> Result<Result<Option<Logical>, Error>, String> {
    let bucket = Arc::new(InMemory::new());
    for (path, bytes) in objects {
        if let Some(bytes) = bytes {
            bucket.put(&Path::from(path.as_str()), PutPayload::from(bytes.clone())).await.map_err(fail)?;
        }
    }
    if !store {
        return match MirrorView::open(bucket, Path::from(PREFIX)).await {
            Ok(view) => Ok(Ok(Image::from_database(view.database())?.map(|i| i.logical()))),
            Err(e) => Ok(Err(e)),
        };
    }
    let (job, target) = identity()?;
    let builder = Store::builder(job, target)
        .backend(CrashBackend::new())
        .writer_tag(u128::MAX)
        .mirror(bucket, Path::from(PREFIX), settings())
        .clock(Arc::new(ManualClock::new(0)))
        .must_exist();
    match builder.open().await {
        Ok(store) => {
            let image = Image::from_store(&store);
            store.close();
            let image = image?;
            if let Some(i) = &image {
                i.check().map_err(|e| format!("the restored store breaks an invariant: {e}"))?;
            }
            Ok(Ok(image.map(|i| i.logical())))
        }
        Err(e) => Ok(Err(e)),
    }
}

fn judge(
    base: &Base,
    objects: &BTreeMap<String, Option<Vec<u8>>>,
    store: bool,
    got: Result<Option<Logical>, Error>,
) -> Result<(), String> {
    let what = if store { "the store's restore" } else { "the view" };
    let prediction = predict(base, objects, store);
    let damaged: Vec<&String> = objects
        .iter()
        .filter(|(p, b)| b.as_ref().is_some_and(|b| base.objects.get(*p) != Some(b)))
        .map(|(p, _)| p)
        .collect();
    match got {
        Err(e) => {
            if !matches!(e.kind(), ErrorKind::Corrupt | ErrorKind::WrongStore) {
                return Err(format!("{what} failed with {:?}, neither Corrupt nor WrongStore: {e}", e.kind()));
            }
            if damaged.is_empty() && prediction.outcome.as_ref().err() != Some(&e.kind()) {
                return Err(format!("{what} failed ({e}) on intact objects; expected {:?}", prediction.outcome));
            }
            Ok(())
        }
        Ok(state) => {
            if let Some(read) = damaged.iter().find(|p| prediction.reads.contains(p)) {
                return Err(format!("{what} accepted the damaged object {read}"));
            }
            match prediction.outcome {
                Ok(expected) if expected == state => Ok(()),
                outcome => Err(format!("{what} restored {state:#?}\n  expected {outcome:#?}")),
            }
        }
    }
}

/// Damages a copy of a small mirror's objects as the input says, then restores from it alone (a view and a
/// store), each of which must be refused as `Corrupt` or `WrongStore` or give exactly the state the intact
/// objects describe (see the module docs for what is accepted and why).
///
/// Encoding: the first byte chooses the base (bit 0: one whose mirror collected its old objects, or not);
/// then up to [`RESTORE_MIRROR_MUTATIONS_MAX`] mutations, each a kind byte (modulo 4) and an object byte
/// (an index into the base's objects in path order) followed by its arguments (missing bytes read as 0):
///
/// | kind % 4 | mutation | argument bytes |
/// |---|---|---|
/// | 0 | xor one byte | offset (u16 little-endian, modulo the length), value |
/// | 1 | truncate | length (u16 little-endian, modulo the length + 1) |
/// | 2 | delete | — |
/// | 3 | swap with another object (a move, if one is absent) | the other object |
///
/// # Panics
///
/// When a restore panics, fails in another way, or restores a state it must not.
pub fn restore_mirror(data: &[u8]) {
    let base = match bases() {
        Ok(bases) => &bases[usize::from(data.first().copied().unwrap_or(0) & 1)],
        Err(e) => panic!("restore_mirror: building the base failed: {e}"),
    };
    let objects = mutate(base, data.get(1..).unwrap_or_default());
    let result = runtime().and_then(|rt: Runtime| {
        for store in [false, true] {
            let got = rt.block_on(restore(&objects, store))?;
            judge(base, &objects, store, got)?;
        }
        Ok(())
    });
    if let Err(e) = result {
        let changed: Vec<(&String, Option<usize>)> = objects
            .iter()
            .filter(|(p, b)| base.objects.get(*p) != b.as_ref())
            .map(|(p, b)| (p, b.as_ref().map(Vec::len)))
            .collect();
        panic!("restore_mirror: {e}\nchanged objects (path, new length): {changed:?}");
    }
}

/// Small hand-made inputs for `restore_mirror`: nothing changed, on both bases; then on each base, a byte
/// flipped in a slot the restore reads; the last slot deleted (a prefix); the middle slot it reads deleted (a torn
/// tail, when fewer than `MIRROR_SLOTS_IN_FLIGHT_MAX` slots follow); the first deleted (a gap, when more do); the
/// newest manifest deleted (an older one is read); two slots swapped; the newest snapshot truncated; and on the
/// base that keeps everything, every manifest of the second epoch deleted (the store's claim would repeat it).
pub fn restore_mirror_seeds() -> Vec<Vec<u8>> {
    let Ok(bases) = bases() else { return Vec::new() };
    let index =
        |base: &Base, path: &str| base.objects.keys().position(|p| p == path).and_then(|i| u8::try_from(i).ok());
    let mut seeds = vec![vec![0], vec![1]];
    for (b, base) in (0u8..).zip(bases.iter()) {
        let layout = layout();
        let newest = base.manifests.iter().last().map(|(p, m)| (p.clone(), *m));
        let Some((newest, facts)) = newest else { continue };
        let read: Vec<u64> = base.slot_epochs.keys().copied().filter(|s| *s >= facts.first_slot).collect();
        if read.len() < 3 {
            continue;
        }
        let slot = |s: u64| index(base, layout.wal(s).as_ref()).unwrap_or(0);
        let (first, middle, last) = (slot(read[0]), slot(read[read.len() / 2]), slot(read[read.len() - 1]));
        let snapshot = index(base, layout.snapshot(facts.first_slot).as_ref()).unwrap_or(0);
        let newest = index(base, &newest).unwrap_or(0);
        seeds.push(vec![b, 0, middle, 70, 0, 0x40]);
        seeds.push(vec![b, 2, last]);
        seeds.push(vec![b, 2, middle]);
        seeds.push(vec![b, 2, first]);
        seeds.push(vec![b, 2, newest]);
        seeds.push(vec![b, 3, first, last]);
        seeds.push(vec![b, 1, snapshot, 100, 0]);
        if b == 0 {
            let mut input = vec![b];
            for (path, m) in &base.manifests {
                if m.epoch == 2 {
                    input.extend([2, index(base, path).unwrap_or(0)]);
                }
            }
            seeds.push(input);
        }
    }
    seeds
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(r: &Result<Option<Logical>, Error>) -> String {
        match r {
            Ok(None) => "Ok(no store)".into(),
            Ok(Some(l)) => format!("Ok({} bytes of state)", format!("{l:?}").len()),
            Err(e) => format!("Err({:?})", e.kind()),
        }
    }

    /// The seeds cover what they say (each expected outcome, on both bases), and the judge refuses a restore
    /// that gives another state than predicted or accepts a damaged object.
    #[test]
    fn the_seeds_and_the_judge() {
        let bases = bases().as_ref().unwrap();
        let rt = runtime().unwrap();
        let mut seen = Vec::new();
        for seed in restore_mirror_seeds() {
            let base = &bases[usize::from(seed[0] & 1)];
            let objects = mutate(base, &seed[1..]);
            for store in [false, true] {
                let got = rt.block_on(restore(&objects, store)).unwrap();
                let line = format!("{seed:?} store={store}: {}", outcome(&got));
                println!("{line}");
                seen.push(line);
                judge(base, &objects, store, got).unwrap();
            }
        }
        let count = |s: &str| seen.iter().filter(|l| l.contains(s)).count();
        // Intact, prefix, torn-tail and older-manifest restores succeed on both paths; damage, gaps, a truncated
        // snapshot and a repeated epoch are refused.
        assert_eq!(seen.len(), 2 * 17, "{seen:#?}");
        let counts = (count("Ok("), count("Err(Corrupt)"), count("Err(WrongStore)"));
        assert_eq!(counts, (15, 17, 2), "{seen:#?}");

        // Against a wrong state or a damaged object read, the judge fails.
        let base = &bases[0];
        let intact = mutate(base, &[]);
        let wrong = base.states.get(&3).cloned().flatten();
        assert!(judge(base, &intact, false, Ok(wrong)).is_err());
        assert!(judge(base, &intact, true, Err(Error::corrupt("x"))).is_err(), "intact objects must restore");
        let full = predict(base, &intact, false).outcome.unwrap();
        let slot = layout().wal(*base.slot_epochs.keys().last().unwrap()).to_string();
        let mut damaged = intact.clone();
        damaged.get_mut(&slot).unwrap().as_mut().unwrap()[70] ^= 1;
        assert!(judge(base, &damaged, false, Ok(full)).unwrap_err().contains("accepted the damaged"));
    }
}
