//! The byte formats of the three mirror objects: the WAL segment, the snapshot and the manifest. Each is
//! immutable, written once with `PutMode::Create`, and checked whole (magic, version, reserved bytes, lengths,
//! a CRC32 over every byte before it) when read back, so a truncated or damaged object is an error naming it.
//!
//! All integers are little-endian. The CRC is CRC32 (IEEE), as in [`crate::wal::frame`].
//!
//! Segment, `wal/{slot:020}` (the frames of one committed group, or of a fence):
//!
//! | offset | size | field                                                                   |
//! |-------:|-----:|-------------------------------------------------------------------------|
//! | 0      | 8    | magic `SPWALSEG`                                                        |
//! | 8      | 1    | format version ([`MIRROR_FORMAT_VERSION`])                              |
//! | 9      | 1    | kind: 0 = group, 1 = fence (its last frame is the `Open` of this header's epoch and tag) |
//! | 10     | 2    | reserved, zero                                                          |
//! | 12     | 4    | frame count `n` (u32, at least 1)                                       |
//! | 16     | 8    | slot (u64), equal to the slot in the object's name                      |
//! | 24     | 8    | epoch of the writer that put it (u64)                                   |
//! | 32     | 16   | that writer's tag (u128)                                                |
//! | 48     | 8    | sequence number of the first frame (u64); the others follow densely     |
//! | 56     | 8    | byte length `L` of the frames (u64)                                     |
//! | 64     | L    | `n` frames back to back, each exactly as in the local log               |
//! | 64 + L | 4    | CRC32 of bytes `0 .. 64 + L`                                            |
//!
//! Snapshot, `snapshot/{slot:020}` (the materialised state just before `wal/{slot}`, without the log), in one
//! or more chunks, each an object no larger than a reader accepts: chunk 0 is `snapshot/{slot:020}` and chunk
//! `i` (1 ≤ i < n) is `snapshot/{slot:020}.{i:010}`. The entries are those of chunks 1, 2… n − 1, then 0; chunk
//! 0 is put last, so its presence means the others are there. Version 1 (one chunk, bytes 9..16 zero) is still
//! read.
//!
//! | offset | size | field                                                                   |
//! |-------:|-----:|-------------------------------------------------------------------------|
//! | 0      | 8    | magic `SPSNAPSH`                                                        |
//! | 8      | 1    | snapshot format version ([`SNAPSHOT_FORMAT_VERSION`]; 1, 2 still read) |
//! | 9      | 3    | reserved, zero                                                          |
//! | 12     | 4    | chunk (u32): in chunk 0 the chunk count n ≥ 1, in chunk i its index i    |
//! | 16     | 8    | slot (u64)                                                              |
//! | 24     | 8    | next sequence number: the first frame of `wal/{slot}` (u64)             |
//! | 32     | 8    | epoch of the writer that made it (u64)                                  |
//! | 40     | 16   | that writer's tag (u128)                                                |
//! | 56     | 8    | entry count `m` (u64)                                                   |
//! | 64     | 8    | byte length `L` of the entries (u64)                                    |
//! | 72     | L    | `m` entries, each a u32 length then a postcard [`SnapshotEntry`]         |
//! | 72 + L | 4    | CRC32 of bytes `0 .. 72 + L`                                            |
//!
//! Manifest, `manifest/{epoch:020}` (an epoch claim) or `manifest/{epoch:020}.{update:010}` (the holder's
//! update after a snapshot):
//!
//! | offset | size | field                                                                   |
//! |-------:|-----:|-------------------------------------------------------------------------|
//! | 0      | 8    | magic `SPMANIFS`                                                        |
//! | 8      | 1    | format version                                                          |
//! | 9      | 3    | reserved, zero                                                          |
//! | 12     | 4    | byte length `N` of the body (u32)                                       |
//! | 16     | N    | postcard [`ManifestBody`]                                               |
//! | 16 + N | 4    | CRC32 of bytes `0 .. 16 + N`                                            |

#![cfg_attr(not(test), deny(clippy::indexing_slicing))]

use serde::{Deserialize, Serialize};

use crate::codec::{self, CRC_BYTES, check_envelope, le_u32, le_u64, le_u128};
use crate::error::Error;
use crate::limits::{MIRROR_HISTORY_EPOCHS_MAX, MIRROR_SEGMENT_FRAMES_MAX};
use crate::types::{Epoch, JobId, TargetIdentity};
use crate::wal::frame;
use crate::wal::record::Record;

/// The only mirror format version written for segments and manifests; readers refuse any other.
pub const MIRROR_FORMAT_VERSION: u8 = 1;
/// The snapshot format version written: 3, chunked, with the garbage ledger's rows. Readers also accept 2 (the
/// same without garbage entries) and 1 (a single object of the same layout, with the chunk field reserved and
/// zero). A reader of version 2 refuses a version 3 snapshot by its version, not as damage.
pub(crate) const SNAPSHOT_FORMAT_VERSION: u8 = 3;

const SEGMENT_MAGIC: [u8; 8] = *b"SPWALSEG";
const SNAPSHOT_MAGIC: [u8; 8] = *b"SPSNAPSH";
const MANIFEST_MAGIC: [u8; 8] = *b"SPMANIFS";
const SEGMENT_HEADER_BYTES: usize = 64;
const SNAPSHOT_HEADER_BYTES: usize = 72;
const MANIFEST_HEADER_BYTES: usize = 16;

/// What a segment holds.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum SegmentKind {
    /// The frames of committed groups.
    Group,
    /// A new writer's fence: its last frame is that writer's `Open` record.
    Fence,
}

/// The fixed fields of a segment.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(crate) struct SegmentHeader {
    pub kind: SegmentKind,
    pub slot: u64,
    pub epoch: Epoch,
    pub writer_tag: u128,
    pub first_seq: u64,
}

/// A decoded, fully checked segment.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(crate) struct Segment {
    pub header: SegmentHeader,
    /// Each frame's bytes, exactly as in the local log.
    pub frames: Vec<Vec<u8>>,
    /// Each frame's epoch.
    pub epochs: Vec<Epoch>,
    /// The epochs its `Open` records open (a fence opens one). The records themselves are decoded to check
    /// them and dropped: a replay decodes each again from its frame, so a read log is held once, not twice.
    pub opens: Vec<EpochOpen>,
}

impl Segment {
    /// The sequence number after the last frame.
    pub(crate) fn end_seq(&self) -> u64 {
        self.header.first_seq + self.frames.len() as u64
    }
}

fn check_length(body: &[u8], header: usize, declared: u64, place: &str) -> Result<(), Error> {
    if (body.len() - header) as u64 != declared {
        return Err(Error::corrupt(format!(
            "{place}: declares {declared} bytes after its header but holds {}",
            body.len() - header
        )));
    }
    Ok(())
}

/// Encodes a segment of `frames` (each a whole frame), whose first sequence number is in the header.
pub(crate) fn encode_segment(header: &SegmentHeader, frames: &[Vec<u8>]) -> Result<Vec<u8>, Error> {
    let count = u32::try_from(frames.len()).map_err(|_| Error::bug("segment frame count over u32"))?;
    if count == 0 || count > MIRROR_SEGMENT_FRAMES_MAX {
        return Err(Error::bug(format!("a segment of {count} frames")));
    }
    let len: usize = frames.iter().map(Vec::len).sum();
    let mut out = Vec::with_capacity(SEGMENT_HEADER_BYTES + len + CRC_BYTES);
    out.extend_from_slice(&SEGMENT_MAGIC);
    out.push(MIRROR_FORMAT_VERSION);
    out.push(match header.kind {
        SegmentKind::Group => 0,
        SegmentKind::Fence => 1,
    });
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&count.to_le_bytes());
    out.extend_from_slice(&header.slot.to_le_bytes());
    out.extend_from_slice(&header.epoch.to_le_bytes());
    out.extend_from_slice(&header.writer_tag.to_le_bytes());
    out.extend_from_slice(&header.first_seq.to_le_bytes());
    out.extend_from_slice(&(len as u64).to_le_bytes());
    debug_assert_eq!(out.len(), SEGMENT_HEADER_BYTES);
    for f in frames {
        out.extend_from_slice(f);
    }
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    // Checked just after it is written, as every read will check it.
    debug_assert!(decode_segment(&out, header.slot, "encode check").is_ok());
    Ok(out)
}

/// Decodes and checks a segment read from the object named by `place`, which must hold `slot`.
pub(crate) fn decode_segment(bytes: &[u8], slot: u64, place: &str) -> Result<Segment, Error> {
    let body = check_envelope(bytes, &SEGMENT_MAGIC, &[MIRROR_FORMAT_VERSION], SEGMENT_HEADER_BYTES, place)?;
    let kind = match codec::byte(body, 9)? {
        0 => SegmentKind::Group,
        1 => SegmentKind::Fence,
        k => return Err(Error::corrupt(format!("{place}: unknown segment kind {k}"))),
    };
    if codec::slice(body, 10..12)? != [0, 0] {
        return Err(Error::corrupt(format!("{place}: non-zero reserved bytes")));
    }
    let count = le_u32(body, 12)?;
    let header = SegmentHeader {
        kind,
        slot: le_u64(body, 16)?,
        epoch: le_u64(body, 24)?,
        writer_tag: le_u128(body, 32)?,
        first_seq: le_u64(body, 48)?,
    };
    check_length(body, SEGMENT_HEADER_BYTES, le_u64(body, 56)?, place)?;
    if header.slot != slot {
        return Err(Error::corrupt(format!("{place}: holds slot {}, not {slot}", header.slot)));
    }
    if count == 0 || count > MIRROR_SEGMENT_FRAMES_MAX {
        return Err(Error::corrupt(format!("{place}: declares {count} frames")));
    }
    let mut rest = codec::rest(body, SEGMENT_HEADER_BYTES)?;
    let mut segment = Segment { header, frames: Vec::new(), epochs: Vec::new(), opens: Vec::new() };
    let mut last_opens = false;
    for i in 0..u64::from(count) {
        let (frame, used) = frame::decode_prefix(rest, place)?;
        let seq = segment.header.first_seq + i;
        if frame.seq != seq {
            return Err(Error::corrupt(format!("{place}: frame {i} has seq {}, expected {seq}", frame.seq)));
        }
        if frame.epoch > segment.header.epoch {
            return Err(Error::corrupt(format!(
                "{place}: frame of seq {seq} has epoch {}, above the segment's epoch {}",
                frame.epoch, segment.header.epoch
            )));
        }
        let record = Record::from_payload(frame.payload, &format!("{place}, seq {seq}"))?;
        last_opens = false;
        if let Record::Open { writer_tag } = record {
            last_opens = writer_tag == segment.header.writer_tag && frame.epoch == segment.header.epoch;
            segment.opens.push(EpochOpen { epoch: frame.epoch, writer_tag, seq, slot: segment.header.slot });
        }
        segment.epochs.push(frame.epoch);
        segment.frames.push(codec::slice(rest, 0..used)?.to_vec());
        rest = codec::rest(rest, used)?;
    }
    if !rest.is_empty() {
        return Err(Error::corrupt(format!("{place}: {} bytes after its {count} frames", rest.len())));
    }
    let opens = segment.opens.len();
    let fence_ok = match kind {
        SegmentKind::Fence => opens == 1 && last_opens,
        SegmentKind::Group => opens == 0,
    };
    if !fence_ok {
        return Err(Error::corrupt(format!(
            "{place}: a {kind:?} segment with {opens} Open records (a fence ends with its writer's Open, a group has none)"
        )));
    }
    Ok(segment)
}

/// One entry of a snapshot: a row of one materialised table, its value bytes exactly as stored (each value
/// carries its own version and CRC).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, Debug)]
pub(crate) enum SnapshotEntry {
    /// The meta value (exactly one, first).
    Meta(#[serde(with = "crate::byte_serde::byte_string")] Vec<u8>),
    /// A row of `checkpoints`: id, value.
    Checkpoint(String, #[serde(with = "crate::byte_serde::byte_string")] Vec<u8>),
    /// A row of `parts`: id, attempt, part, value.
    Part(String, u32, u32, #[serde(with = "crate::byte_serde::byte_string")] Vec<u8>),
    /// A row of `keys`: source key, owning id.
    Key(#[serde(with = "crate::byte_serde::byte_string")] Vec<u8>, String),
    /// A row of `states`: state code, id.
    State(u8, String),
    /// A row of `commits`: key number, value.
    Commit(u64, #[serde(with = "crate::byte_serde::byte_string")] Vec<u8>),
    /// A row of `garbage` (snapshot version 3): sequence number, index, value.
    Garbage(u64, u32, #[serde(with = "crate::byte_serde::byte_string")] Vec<u8>),
}

/// The fixed fields of a snapshot.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(crate) struct SnapshotHeader {
    pub slot: u64,
    pub next_seq: u64,
    pub epoch: Epoch,
    pub writer_tag: u128,
}

/// Builds a snapshot's chunks one entry at a time, none over `object_bytes_max`: [`SnapshotWriter::push`] hands
/// back each full chunk (1, 2…) to be put at once, so at most one chunk is held; [`SnapshotWriter::finish`]
/// returns chunk 0, to be put last.
pub(crate) struct SnapshotWriter {
    header: SnapshotHeader,
    out: Vec<u8>,
    entries: u64,
    /// The chunks handed back so far.
    done: u32,
    object_bytes_max: u64,
}

impl SnapshotWriter {
    pub(crate) fn new(header: &SnapshotHeader, object_bytes_max: u64) -> Self {
        Self { header: header.clone(), out: chunk_start(header), entries: 0, done: 0, object_bytes_max }
    }

    /// Adds `entry`; returns the chunk it closed (its index and bytes) when it did not fit the current one.
    pub(crate) fn push(&mut self, entry: &SnapshotEntry) -> Result<Option<(u32, Vec<u8>)>, Error> {
        let bytes = postcard::to_allocvec(entry).map_err(|e| Error::bug(format!("encoding a snapshot entry: {e}")))?;
        let len = u32::try_from(bytes.len()).map_err(|_| Error::bug("snapshot entry over u32"))?;
        let room = |used: usize| (used + 4 + bytes.len() + CRC_BYTES) as u64 <= self.object_bytes_max;
        if !room(SNAPSHOT_HEADER_BYTES) {
            // An entry holds one table value, far below the object limit (a const assertion in limits.rs); only
            // a test's low limit gets here.
            return Err(Error::bug(format!(
                "a snapshot entry of {} bytes does not fit an object of {} bytes; the snapshot is not made",
                bytes.len(),
                self.object_bytes_max
            )));
        }
        let mut closed = None;
        if !room(self.out.len()) {
            self.done = self.done.checked_add(1).ok_or_else(|| Error::bug("snapshot chunk count over u32"))?;
            let full = std::mem::replace(&mut self.out, chunk_start(&self.header));
            closed = Some((self.done, seal_chunk(full, self.done, std::mem::take(&mut self.entries))?));
        }
        self.out.extend_from_slice(&len.to_le_bytes());
        self.out.extend_from_slice(&bytes);
        self.entries += 1;
        Ok(closed)
    }

    /// Chunk 0: the last entries, and the chunk count.
    pub(crate) fn finish(self) -> Result<Vec<u8>, Error> {
        seal_chunk(self.out, self.done + 1, self.entries)
    }
}

fn chunk_start(header: &SnapshotHeader) -> Vec<u8> {
    let mut out = Vec::with_capacity(4096);
    out.extend_from_slice(&SNAPSHOT_MAGIC);
    out.push(SNAPSHOT_FORMAT_VERSION);
    out.extend_from_slice(&[0; 7]);
    out.extend_from_slice(&header.slot.to_le_bytes());
    out.extend_from_slice(&header.next_seq.to_le_bytes());
    out.extend_from_slice(&header.epoch.to_le_bytes());
    out.extend_from_slice(&header.writer_tag.to_le_bytes());
    out.extend_from_slice(&[0; 16]);
    debug_assert_eq!(out.len(), SNAPSHOT_HEADER_BYTES);
    out
}

fn seal_chunk(mut out: Vec<u8>, chunk: u32, entries: u64) -> Result<Vec<u8>, Error> {
    let len = (out.len() - SNAPSHOT_HEADER_BYTES) as u64;
    codec::write_at(&mut out, 12, &chunk.to_le_bytes())?;
    codec::write_at(&mut out, 56, &entries.to_le_bytes())?;
    codec::write_at(&mut out, 64, &len.to_le_bytes())?;
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    Ok(out)
}

/// One decoded, checked object of a snapshot.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(crate) struct SnapshotChunk {
    pub header: SnapshotHeader,
    /// In chunk 0 the chunk count, in chunk i its index (1 for a version 1 snapshot).
    pub chunk: u32,
    pub entries: Vec<SnapshotEntry>,
}

/// Decodes and checks one chunk of a snapshot, read from the object named by `place`, which must hold `slot`.
/// The entries' order across chunks (the meta first, once) is the caller's to check.
pub(crate) fn decode_snapshot_chunk(bytes: &[u8], slot: u64, place: &str) -> Result<SnapshotChunk, Error> {
    let body = check_envelope(bytes, &SNAPSHOT_MAGIC, &[1, 2, SNAPSHOT_FORMAT_VERSION], SNAPSHOT_HEADER_BYTES, place)?;
    let chunk = match codec::byte(body, 8)? {
        1 => (codec::slice(body, 9..16)? == [0; 7]).then_some(1),
        _ => Some(le_u32(body, 12)?).filter(|c| *c >= 1 && body.get(9..12) == Some(&[0; 3][..])),
    };
    let Some(chunk) = chunk else {
        return Err(Error::corrupt(format!("{place}: non-zero reserved bytes or a zero chunk field")));
    };
    let header = SnapshotHeader {
        slot: le_u64(body, 16)?,
        next_seq: le_u64(body, 24)?,
        epoch: le_u64(body, 32)?,
        writer_tag: le_u128(body, 40)?,
    };
    if header.slot != slot {
        return Err(Error::corrupt(format!("{place}: holds slot {}, not {slot}", header.slot)));
    }
    let count = le_u64(body, 56)?;
    check_length(body, SNAPSHOT_HEADER_BYTES, le_u64(body, 64)?, place)?;
    let mut rest = codec::rest(body, SNAPSHOT_HEADER_BYTES)?;
    let mut entries = Vec::new();
    for i in 0..count {
        if rest.len() < 4 {
            return Err(Error::corrupt(format!("{place}: entry {i} of {count} is missing")));
        }
        let len = le_u32(rest, 0)? as usize;
        let Some(entry_bytes) = rest.get(4..4 + len) else {
            return Err(Error::corrupt(format!("{place}: entry {i} claims {len} bytes past the end")));
        };
        let entry: SnapshotEntry = postcard::from_bytes(entry_bytes)
            .map_err(|e| Error::corrupt(format!("{place}: entry {i} is undecodable: {e}")))?;
        entries.push(entry);
        rest = codec::rest(rest, 4 + len)?;
    }
    if count == 0 || !rest.is_empty() {
        return Err(Error::corrupt(format!("{place}: {count} entries and {} bytes after them", rest.len())));
    }
    Ok(SnapshotChunk { header, chunk, entries })
}

/// Checks that `entries`, a whole snapshot's in order, hold the meta first and only there.
pub(crate) fn check_snapshot_entries(entries: &[SnapshotEntry], place: &str) -> Result<(), Error> {
    for (i, entry) in entries.iter().enumerate() {
        if (i == 0) != matches!(entry, SnapshotEntry::Meta(_)) {
            return Err(Error::corrupt(format!("{place}: entry {i}: the meta must come first, once")));
        }
    }
    Ok(())
}

/// Decodes and checks a snapshot held whole in the object named by `place` (one chunk), which must hold `slot`.
/// Restores stream chunks instead; this whole-object form serves the fuzz logic and the format's tests.
#[cfg(any(test, feature = "testkit"))]
pub(crate) fn decode_snapshot(
    bytes: &[u8],
    slot: u64,
    place: &str,
) -> Result<(SnapshotHeader, Vec<SnapshotEntry>), Error> {
    let chunk = decode_snapshot_chunk(bytes, slot, place)?;
    if chunk.chunk != 1 {
        return Err(Error::corrupt(format!("{place}: one of {} chunks, read as a whole snapshot", chunk.chunk)));
    }
    check_snapshot_entries(&chunk.entries, place)?;
    Ok((chunk.header, chunk.entries))
}

/// The opening of one epoch, as the mirror's history remembers it: which writer, at which record and slot.
#[derive(Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Debug)]
pub(crate) struct EpochOpen {
    /// The epoch.
    pub epoch: Epoch,
    /// The writer's tag.
    pub writer_tag: u128,
    /// The sequence number of its `Open` record.
    pub seq: u64,
    /// The slot of its fence.
    pub slot: u64,
}

/// A manifest's body, postcard-encoded in this field order.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, Debug)]
pub(crate) struct ManifestBody {
    /// The epoch claimed (or held, for an update).
    pub epoch: Epoch,
    /// 0 for the claim, then 1, 2… for the holder's updates after each snapshot.
    pub update: u32,
    /// The job the mirror belongs to.
    pub job: JobId,
    /// The target's identity.
    pub target: TargetIdentity,
    /// The claiming writer's tag.
    pub writer_tag: u128,
    /// The first slot a reader reads: the log is complete from here on.
    pub first_slot: u64,
    /// Whether `snapshot/{first_slot}` holds the state before `first_slot` (otherwise `first_slot` is 0 and
    /// the log begins with `Create`).
    pub snapshot: bool,
    /// When it was written, in wall-clock ms since the Unix epoch, for people; the minimum age of the deletes it
    /// enables is measured on the writer's monotonic clock, never from this.
    pub created_ms: u64,
    /// The epochs opened in slots before `first_slot`, oldest first (at most [`MIRROR_HISTORY_EPOCHS_MAX`]);
    /// the fences from `first_slot` on are in the slots themselves.
    pub history: Vec<EpochOpen>,
}

/// Encodes a manifest.
pub(crate) fn encode_manifest(body: &ManifestBody) -> Result<Vec<u8>, Error> {
    let encoded = postcard::to_allocvec(body).map_err(|e| Error::bug(format!("encoding a manifest: {e}")))?;
    let len = u32::try_from(encoded.len()).map_err(|_| Error::bug("manifest over u32"))?;
    let mut out = Vec::with_capacity(MANIFEST_HEADER_BYTES + encoded.len() + CRC_BYTES);
    out.extend_from_slice(&MANIFEST_MAGIC);
    out.push(MIRROR_FORMAT_VERSION);
    out.extend_from_slice(&[0, 0, 0]);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&encoded);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    Ok(out)
}

/// Decodes and checks a manifest read from the object named by `place`, whose name says `(epoch, update)`.
pub(crate) fn decode_manifest(bytes: &[u8], epoch: Epoch, update: u32, place: &str) -> Result<ManifestBody, Error> {
    let body = check_envelope(bytes, &MANIFEST_MAGIC, &[MIRROR_FORMAT_VERSION], MANIFEST_HEADER_BYTES, place)?;
    if codec::slice(body, 9..12)? != [0, 0, 0] {
        return Err(Error::corrupt(format!("{place}: non-zero reserved bytes")));
    }
    check_length(body, MANIFEST_HEADER_BYTES, u64::from(le_u32(body, 12)?), place)?;
    let manifest: ManifestBody = postcard::from_bytes(codec::rest(body, MANIFEST_HEADER_BYTES)?)
        .map_err(|e| Error::corrupt(format!("{place}: undecodable body: {e}")))?;
    if manifest.epoch != epoch || manifest.update != update {
        return Err(Error::corrupt(format!(
            "{place}: holds epoch {} update {}, not its name's",
            manifest.epoch, manifest.update
        )));
    }
    // The identity was checked when it was written; a bad one read back is damage.
    if JobId::new(manifest.job.as_str()).is_err() || TargetIdentity::new(manifest.target.as_str()).is_err() {
        return Err(Error::corrupt(format!("{place}: holds an invalid job or target")));
    }
    if !manifest.snapshot && manifest.first_slot != 0 {
        return Err(Error::corrupt(format!("{place}: reads from slot {} without a snapshot", manifest.first_slot)));
    }
    if manifest.history.len() > MIRROR_HISTORY_EPOCHS_MAX
        || manifest.history.windows(2).any(|w| matches!(w, [a, b] if a.epoch >= b.epoch || a.seq >= b.seq))
        || manifest.history.last().is_some_and(|h| h.slot >= manifest.first_slot || h.epoch > manifest.epoch)
    {
        return Err(Error::corrupt(format!("{place}: its epoch history is out of order")));
    }
    Ok(manifest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::MIRROR_OBJECT_BYTES_MAX;
    use crate::types::CheckpointId;

    fn frames() -> Vec<Vec<u8>> {
        let stage = Record::Seal { id: CheckpointId::new("a").unwrap(), parts: 1 };
        vec![
            frame::encode(7, 2, &stage.to_payload().unwrap()).unwrap(),
            frame::encode(8, 2, &Record::MarkCommitted { key: 0 }.to_payload().unwrap()).unwrap(),
        ]
    }

    fn header() -> SegmentHeader {
        SegmentHeader { kind: SegmentKind::Group, slot: 5, epoch: 2, writer_tag: 0xAB, first_seq: 7 }
    }

    #[test]
    fn segment_golden_header_and_round_trip() {
        // Format stability: these header bytes are segment format 1 forever.
        let frames = frames();
        let bytes = encode_segment(&header(), &frames).unwrap();
        let len = frames.iter().map(Vec::len).sum::<usize>() as u64;
        let mut expected = b"SPWALSEG".to_vec();
        expected.extend_from_slice(&[1, 0, 0, 0, 2, 0, 0, 0]);
        expected.extend_from_slice(&5u64.to_le_bytes());
        expected.extend_from_slice(&2u64.to_le_bytes());
        expected.extend_from_slice(&0xABu128.to_le_bytes());
        expected.extend_from_slice(&7u64.to_le_bytes());
        expected.extend_from_slice(&len.to_le_bytes());
        assert_eq!(&bytes[..64], &expected[..]);
        assert_eq!(&bytes[64..bytes.len() - 4], frames.concat().as_slice());
        let crc = crc32fast::hash(&bytes[..bytes.len() - 4]).to_le_bytes();
        assert_eq!(&bytes[bytes.len() - 4..], &crc);
        let back = decode_segment(&bytes, 5, "t").unwrap();
        assert_eq!(back.end_seq(), 9);
        assert_eq!((back.header, back.frames), (header(), frames));
    }

    #[test]
    fn every_flipped_bit_and_truncation_of_a_segment_is_detected() {
        let bytes = encode_segment(&header(), &frames()).unwrap();
        for i in 0..bytes.len() * 8 {
            let mut damaged = bytes.clone();
            damaged[i / 8] ^= 1 << (i % 8);
            let err = decode_segment(&damaged, 5, "wal/5").unwrap_err();
            assert_eq!(err.kind(), crate::ErrorKind::Corrupt);
            assert!(err.to_string().contains("wal/5"), "{err}");
        }
        for len in 0..bytes.len() {
            assert!(decode_segment(&bytes[..len], 5, "t").is_err(), "truncation to {len} went unnoticed");
        }
        assert!(decode_segment(&bytes, 6, "t").unwrap_err().to_string().contains("holds slot 5, not 6"));
    }

    #[test]
    fn a_fence_must_end_with_its_writers_open() {
        let open = frame::encode(3, 4, &Record::Open { writer_tag: 9 }.to_payload().unwrap()).unwrap();
        let fence = SegmentHeader { kind: SegmentKind::Fence, slot: 1, epoch: 4, writer_tag: 9, first_seq: 3 };
        assert!(decode_segment(&encode_segment(&fence, std::slice::from_ref(&open)).unwrap(), 1, "t").is_ok());
        // The same Open in a group, or a fence with another writer's tag: both are refused.
        let group = SegmentHeader { kind: SegmentKind::Group, ..fence.clone() };
        let mut bytes = encode_segment(&fence, std::slice::from_ref(&open)).unwrap();
        bytes[9] = 0;
        let n = bytes.len() - 4;
        let crc = crc32fast::hash(&bytes[..n]).to_le_bytes();
        bytes[n..].copy_from_slice(&crc);
        assert!(decode_segment(&bytes, 1, "t").is_err(), "{group:?}");
        let other = SegmentHeader { writer_tag: 8, ..fence };
        let mut bytes = SEGMENT_MAGIC.to_vec();
        bytes.extend_from_slice(&[1, 1, 0, 0, 1, 0, 0, 0]);
        for v in [other.slot, other.epoch] {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        bytes.extend_from_slice(&other.writer_tag.to_le_bytes());
        bytes.extend_from_slice(&other.first_seq.to_le_bytes());
        bytes.extend_from_slice(&(open.len() as u64).to_le_bytes());
        bytes.extend_from_slice(&open);
        let crc = crc32fast::hash(&bytes).to_le_bytes();
        bytes.extend_from_slice(&crc);
        assert!(decode_segment(&bytes, 1, "t").unwrap_err().to_string().contains("Open"));
    }

    #[test]
    fn snapshots_round_trip_and_detect_damage() {
        let header = SnapshotHeader { slot: 9, next_seq: 40, epoch: 3, writer_tag: 7 };
        let mut w = SnapshotWriter::new(&header, MIRROR_OBJECT_BYTES_MAX);
        let entries = vec![
            SnapshotEntry::Meta(vec![1, 2, 3]),
            SnapshotEntry::Checkpoint("a".into(), vec![4]),
            SnapshotEntry::Part("a".into(), 0, 1, vec![5]),
            SnapshotEntry::Key(b"k".to_vec(), "a".into()),
            SnapshotEntry::State(1, "a".into()),
            SnapshotEntry::Commit(0, vec![6]),
            SnapshotEntry::Garbage(5, 1, vec![7]),
        ];
        for e in &entries {
            assert_eq!(w.push(e).unwrap(), None);
        }
        let bytes = w.finish().unwrap();
        // Version 3, one chunk.
        assert_eq!(&bytes[..16], b"SPSNAPSH\x03\0\0\0\x01\0\0\0");
        assert_eq!(&bytes[56..64], &7u64.to_le_bytes());
        assert_eq!(decode_snapshot(&bytes, 9, "t").unwrap(), (header.clone(), entries.clone()));
        // Version 2 (before the garbage ledger) is the same layout: still read.
        let mut v2 = bytes[..bytes.len() - CRC_BYTES].to_vec();
        v2[8] = 2;
        let crc = crc32fast::hash(&v2);
        v2.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(decode_snapshot(&v2, 9, "t").unwrap(), (header.clone(), entries.clone()));
        // Version 1 is the same layout with the chunk field reserved: still read, as one chunk.
        let v1 = as_version_1(&bytes);
        assert_eq!(&v1[..16], b"SPSNAPSH\x01\0\0\0\0\0\0\0");
        assert_eq!(decode_snapshot(&v1, 9, "t").unwrap(), (header, entries));
        for i in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[i] ^= 0x10;
            assert!(decode_snapshot(&damaged, 9, "t").is_err(), "byte {i} flip went unnoticed");
        }
        for len in 0..bytes.len() {
            assert!(decode_snapshot(&bytes[..len], 9, "t").is_err(), "truncation to {len} went unnoticed");
        }
    }

    /// Format stability of the entries inside a snapshot chunk (postcard, variant index first): a change here
    /// makes every mirror's snapshots unreadable. Byte strings are a varint length and the bytes.
    #[test]
    fn snapshot_entries_golden_encodings() {
        let cases = [
            (SnapshotEntry::Meta(vec![1, 2, 3]), "0003010203"),
            (SnapshotEntry::Checkpoint("a".into(), vec![4]), "0101610104"),
            (SnapshotEntry::Part("a".into(), 0, 1, vec![5]), "02016100010105"),
            (SnapshotEntry::Key(b"k".to_vec(), "a".into()), "03016b0161"),
            (SnapshotEntry::State(1, "a".into()), "04010161"),
            (SnapshotEntry::Commit(0, vec![6]), "05000106"),
            (SnapshotEntry::Garbage(5, 1, vec![7]), "0605010107"),
        ];
        for (entry, hex) in cases {
            let bytes = postcard::to_allocvec(&entry).unwrap();
            let got: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(got, hex, "{entry:?}");
            assert_eq!(postcard::from_bytes::<SnapshotEntry>(&bytes).unwrap(), entry);
        }
    }

    /// A version 1 snapshot (0.1's format) of the entries of a one-chunk version 2 or 3 one.
    fn as_version_1(v3: &[u8]) -> Vec<u8> {
        let mut v1 = v3[..v3.len() - CRC_BYTES].to_vec();
        v1[8] = 1;
        v1[12..16].copy_from_slice(&[0; 4]);
        let crc = crc32fast::hash(&v1);
        v1.extend_from_slice(&crc.to_le_bytes());
        v1
    }

    #[test]
    fn a_snapshot_over_the_object_limit_is_written_in_chunks_none_over_it() {
        let header = SnapshotHeader { slot: 4, next_seq: 12, epoch: 2, writer_tag: 5 };
        let limit = 300;
        let mut w = SnapshotWriter::new(&header, limit);
        let entries: Vec<_> = std::iter::once(SnapshotEntry::Meta(vec![7; 40]))
            .chain((0..20).map(|i| SnapshotEntry::Key(vec![i; 50], format!("id-{i}"))))
            .collect();
        let mut chunks = Vec::new();
        for e in &entries {
            chunks.extend(w.push(e).unwrap());
        }
        let first = w.finish().unwrap();
        assert!(chunks.len() >= 3, "{} chunks", chunks.len());
        let mut read = Vec::new();
        for (i, (index, bytes)) in chunks.iter().enumerate() {
            assert_eq!(*index as usize, i + 1);
            assert!(bytes.len() as u64 <= limit, "chunk {index}: {} bytes", bytes.len());
            let chunk = decode_snapshot_chunk(bytes, 4, "t").unwrap();
            assert_eq!((chunk.chunk, &chunk.header), (*index, &header));
            read.extend(chunk.entries);
        }
        assert!(first.len() as u64 <= limit);
        let head = decode_snapshot_chunk(&first, 4, "t").unwrap();
        assert_eq!(head.chunk as usize, chunks.len() + 1, "chunk 0 counts every chunk");
        assert_eq!(&first[8..16], &[SNAPSHOT_FORMAT_VERSION, 0, 0, 0, head.chunk as u8, 0, 0, 0]);
        read.extend(head.entries);
        assert_eq!(read, entries, "chunks 1…, then 0, hold the entries in order");
        check_snapshot_entries(&read, "t").unwrap();
        assert!(decode_snapshot(&first, 4, "t").is_err(), "chunk 0 of several is not a whole snapshot");
        // An entry that no object of the limit can hold: no snapshot, never an object over the limit.
        let mut w = SnapshotWriter::new(&header, limit);
        assert!(w.push(&SnapshotEntry::Meta(vec![0; 400])).is_err());
    }

    #[test]
    fn manifests_round_trip_and_detect_damage() {
        let body = ManifestBody {
            epoch: 4,
            update: 2,
            job: JobId::new("j").unwrap(),
            target: TargetIdentity::new("t").unwrap(),
            writer_tag: 5,
            first_slot: 12,
            snapshot: true,
            created_ms: 1000,
            history: vec![EpochOpen { epoch: 3, writer_tag: 1, seq: 1, slot: 0 }],
        };
        let bytes = encode_manifest(&body).unwrap();
        assert_eq!(&bytes[..12], b"SPMANIFS\x01\0\0\0");
        // The body is postcard in field order: epoch, update, job, target, tag, first slot, snapshot, created,
        // history (count, then epoch, tag, seq, slot each).
        let golden = "0402016a0174050c01e80701030101 00".replace(' ', "");
        let hex: String = bytes[16..bytes.len() - 4].iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, golden);
        assert_eq!(decode_manifest(&bytes, 4, 2, "t").unwrap(), body);
        assert!(decode_manifest(&bytes, 4, 3, "t").is_err(), "a manifest under another name");
        for i in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[i] ^= 0x01;
            assert!(decode_manifest(&damaged, 4, 2, "t").is_err(), "byte {i} flip went unnoticed");
        }
    }
}
