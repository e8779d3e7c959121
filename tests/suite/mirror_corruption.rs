//! Proves fail-closed restore (invariant 6): each object a restore reads (the newest manifest, the
//! referenced snapshot, every slot from it on) corrupted by one flipped byte, truncated to half or by one byte
//! is refused with a `Corrupt` error naming that object; a gap in the slots is refused naming the missing slot;
//! a well-formed segment whose record the state rejects is refused naming the sequence number; objects a restore
//! does not need (slots behind the snapshot, awaiting collection) do not stop it.
//!
//! Backends: InMemory and a local directory (`mirror_support::kinds`): nothing here depends on how S3 answers.

use crate::mirror_support;

use mirror_support::*;
use sinkpoint::ErrorKind;
use sinkpoint::limits::MIRROR_SLOTS_IN_FLIGHT_MAX;
use sinkpoint::mirror::MirrorSettings;
use sinkpoint::testkit::ManualClock;
use sinkpoint::testkit::whitebox::Record;
use sinkpoint::testkit::whitebox::frame;

fn settings() -> MirrorSettings {
    // Snapshots, but no collection: every old object stays, so the test sees live and unreferenced ones.
    MirrorSettings { snapshot_interval_records: 6, gc_age_ms_min: u64::MAX, ..sync_settings() }
}

/// Builds a mirror with two epochs, snapshots and slots after the newest snapshot; returns its keys.
async fn build(bucket: &Bucket, dir: &std::path::Path, clock: &ManualClock) -> Vec<String> {
    let file = dir.join("a.redb");
    let store = builder(bucket, &file, settings(), clock).open().await.unwrap();
    for n in 0..4 {
        seal(&store, n).await;
    }
    store.close();
    let store = builder(bucket, &file, settings(), clock).open().await.unwrap();
    seal(&store, 4).await;
    store.flush().await.unwrap();
    store.close();
    std::fs::remove_file(&file).unwrap();
    bucket.keys().await
}

fn slot_of(key: &str) -> u64 {
    key.rsplit('/').next().unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_object_a_restore_reads_is_checked() {
    for kind in kinds() {
        let bucket = Bucket::new(kind, "corrupt");
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(0);
        let keys = build(&bucket, dir.path(), &clock).await;
        let snapshot = keys.iter().filter(|k| k.starts_with("snapshot/")).max().cloned().expect("a snapshot");
        // Only the newest manifest is read: a superseded one, damaged, is ignored like a superseded slot
        // (red-team 22).
        assert!(keys.iter().filter(|k| k.starts_with("manifest/")).count() >= 2, "{kind:?}: one manifest: {keys:?}");
        let live = |key: &str, now: &[String]| {
            now.iter().filter(|k| k.starts_with("manifest/")).max().is_some_and(|newest| key == newest)
                || key == snapshot
                || (key.starts_with("wal/") && slot_of(key) >= slot_of(&snapshot))
        };
        assert!(keys.iter().any(|k| !live(k, &keys)), "{kind:?}: the mirror has no unreferenced object: {keys:?}");
        let file = dir.path().join("r.redb");
        let mut checked = 0;
        for key in &keys {
            let good = bucket.read(key).await;
            let mut flipped = good.clone();
            flipped[good.len() / 2] ^= 0x20;
            for (what, bad) in [
                ("flipped", flipped),
                ("halved", good[..good.len() / 2].to_vec()),
                ("short", good[..good.len() - 1].to_vec()),
            ] {
                bucket.overwrite(key, bad).await;
                let before = bucket.keys().await;
                let opened = builder(&bucket, &file, settings(), &clock).open().await;
                if live(key, &before) {
                    let err = opened.err().unwrap_or_else(|| panic!("{kind:?}: {what} {key} went unnoticed"));
                    assert_eq!(err.kind(), ErrorKind::Corrupt, "{kind:?}: {what} {key}: {err}");
                    assert!(err.to_string().contains(key.as_str()), "{kind:?}: {what} {key}: {err}");
                    assert_eq!(bucket.keys().await, before, "{kind:?}: a refused open wrote to the mirror");
                    checked += 1;
                } else {
                    // The restore does not read it; the open succeeds (and claims an epoch), which is harmless.
                    opened.unwrap_or_else(|e| panic!("{kind:?}: {what} unreferenced {key}: {e}")).close();
                    std::fs::remove_file(&file).unwrap();
                    // Its claim and fence go, so the same manifest stays the newest for the next object.
                    for added in bucket.keys().await.into_iter().filter(|k| !before.contains(k)) {
                        bucket.delete(&added).await;
                    }
                }
                bucket.overwrite(key, good.clone()).await;
            }
        }
        // The newest manifest, the snapshot and the slot after it, three ways each.
        assert!(checked >= 3 * 3, "{kind:?}: only {checked} damaged objects checked");
        // And with the local file present, a damaged slot after it is refused too.
        let store = builder(&bucket, &file, settings(), &clock).open().await.unwrap();
        store.close();
        let last = bucket.keys().await.into_iter().filter(|k| k.starts_with("wal/")).max().unwrap();
        let good = bucket.read(&last).await;
        bucket.overwrite(&last, good[..good.len() - 1].to_vec()).await;
        let err = builder(&bucket, &file, settings(), &clock).open().await.err().unwrap();
        assert_eq!(err.kind(), ErrorKind::Corrupt, "{kind:?}: {err}");
        assert!(err.to_string().contains(&last), "{kind:?}: {err}");
    }
}

/// Seals enough checkpoints, one slot each, that a slot can be missing with more than a writer's puts in flight
/// after it; returns the WAL keys in slot order.
async fn long_log(bucket: &Bucket, file: &std::path::Path, clock: &ManualClock) -> Vec<String> {
    // No snapshot, so every slot is referenced.
    let store = builder(bucket, file, sync_settings(), clock).open().await.unwrap();
    for n in 0..(2 * MIRROR_SLOTS_IN_FLIGHT_MAX as u32 + 2) {
        seal(&store, n).await;
    }
    store.close();
    std::fs::remove_file(file).unwrap();
    let mut wal: Vec<String> = bucket.keys().await.into_iter().filter(|k| k.starts_with("wal/")).collect();
    wal.sort_by_key(|k| slot_of(k));
    wal
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gap_in_the_slots_is_refused_naming_the_missing_slot() {
    for kind in kinds() {
        let bucket = Bucket::new(kind, "gap");
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(0);
        let wal = long_log(&bucket, &dir.path().join("a.redb"), &clock).await;
        // As many slots follow it as a writer can have in flight: no stopped writer leaves that.
        let missing = &wal[wal.len() - 1 - MIRROR_SLOTS_IN_FLIGHT_MAX as usize];
        bucket.delete(missing).await;
        let err = builder(&bucket, &dir.path().join("r.redb"), sync_settings(), &clock).open().await.err().unwrap();
        assert_eq!(err.kind(), ErrorKind::Corrupt, "{kind:?}: {err}");
        let message = err.to_string();
        assert!(message.contains("gap") && message.contains(missing.as_str()), "{kind:?}: {message}");
    }
}

/// A slot missing with fewer slots after it than a writer's puts in flight is a stopped writer's torn tail: the
/// restore stops before it, as if the log ended there, and the writer that restores it puts its next segments
/// past the tail's (voids, below its epoch), so the mirror reads as that writer's log from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_tail_is_ignored_and_later_skipped_as_voids() {
    for kind in kinds() {
        let bucket = Bucket::new(kind, "torn");
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(0);
        let wal = long_log(&bucket, &dir.path().join("a.redb"), &clock).await;
        let sealed = 2 * MIRROR_SLOTS_IN_FLIGHT_MAX as u32 + 2;
        // Each checkpoint took two slots (its durable stage, its seal): the last checkpoint's stage is missing,
        // its seal torn.
        let missing = &wal[wal.len() - 2];
        bucket.delete(missing).await;
        let store = builder(&bucket, &dir.path().join("r.redb"), sync_settings(), &clock).open().await.unwrap();
        assert!(store.is_processed(&key(sealed - 2)).unwrap(), "{kind:?}: the slots before the gap are restored");
        assert!(!store.is_processed(&key(sealed - 1)).unwrap(), "{kind:?}: the last seal is past the gap");
        // The restored writer fenced the missing slot; the torn slot after it is a void it puts past.
        for n in [sealed - 1, sealed] {
            seal(&store, n).await;
        }
        let written = digest(&store);
        store.close();
        let keys = bucket.keys().await;
        assert!(keys.contains(missing), "{kind:?}: the restored writer fenced the missing slot: {keys:?}");
        let view = sinkpoint::mirror::MirrorView::open(bucket.store(), bucket.prefix.clone()).await.unwrap();
        for n in 0..=sealed {
            assert!(view.is_processed(&key(n)).unwrap(), "{kind:?}: the view reads seal {n} past the void");
        }
        let again = builder(&bucket, &dir.path().join("again.redb"), sync_settings(), &clock).open().await.unwrap();
        assert_eq!(digest(&again), written, "{kind:?}: a restore past the void is the writer's state");
        again.close();
    }
}

/// Encodes a segment by hand, as docs/FORMATS.md describes it.
fn segment(slot: u64, epoch: u64, first_seq: u64, frames: &[Vec<u8>]) -> Vec<u8> {
    let len: usize = frames.iter().map(Vec::len).sum();
    let mut out = b"SPWALSEG".to_vec();
    out.extend_from_slice(&[1, 0, 0, 0]);
    out.extend_from_slice(&(frames.len() as u32).to_le_bytes());
    out.extend_from_slice(&slot.to_le_bytes());
    out.extend_from_slice(&epoch.to_le_bytes());
    out.extend_from_slice(&7u128.to_le_bytes());
    out.extend_from_slice(&first_seq.to_le_bytes());
    out.extend_from_slice(&(len as u64).to_le_bytes());
    for f in frames {
        out.extend_from_slice(f);
    }
    let crc = crc32fast_hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// CRC32 (IEEE), bit by bit: the test does not share the library's implementation.
fn crc32fast_hash(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_the_state_rejects_is_refused_naming_its_sequence_number() {
    for kind in kinds() {
        let bucket = Bucket::new(kind, "rejected");
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(0);
        let keys = build(&bucket, dir.path(), &clock).await;
        let last = keys.iter().filter(|k| k.starts_with("wal/")).max().unwrap().clone();
        let bytes = bucket.read(&last).await;
        let first_seq = u64::from_le_bytes(bytes[48..56].try_into().unwrap());
        let count = u64::from(u32::from_le_bytes(bytes[12..16].try_into().unwrap()));
        let epoch = u64::from_le_bytes(bytes[24..32].try_into().unwrap());
        // A well-formed slot after the last one, marking a commit key that was never begun.
        let seq = first_seq + count;
        let record = Record::MarkCommitted { key: 99 }.to_payload().unwrap();
        let next = format!("wal/{:020}", slot_of(&last) + 1);
        bucket
            .overwrite(&next, segment(slot_of(&last) + 1, epoch, seq, &[frame::encode(seq, epoch, &record).unwrap()]))
            .await;
        let err = builder(&bucket, &dir.path().join("r.redb"), settings(), &clock).open().await.err().unwrap();
        assert_eq!(err.kind(), ErrorKind::Corrupt, "{kind:?}: {err}");
        let message = err.to_string();
        assert!(message.contains(&format!("seq {seq}")) && message.contains("rejects"), "{kind:?}: {message}");
        assert!(message.contains(&next), "{kind:?}: {message}");
    }
}
