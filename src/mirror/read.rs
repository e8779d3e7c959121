//! Reading the mirror: the newest manifest (checked), the dense run of slots from a first slot up to the first
//! absent one (each checked; a segment of an epoch below one already read is a void and skipped; a slot present
//! further beyond that gap than a writer's puts in flight reach is corruption), and a snapshot.

use crate::error::{Error, Result};
use crate::limits::{MIRROR_READ_WINDOW_BYTES_MAX, MIRROR_READS_CONCURRENT_MAX, MIRROR_SLOTS_IN_FLIGHT_MAX};
use crate::mirror::format::{
    EpochOpen, ManifestBody, Segment, SegmentHeader, SnapshotEntry, SnapshotHeader, check_snapshot_entries,
    decode_manifest, decode_segment, decode_snapshot_chunk,
};
use crate::mirror::layout::ManifestName;
use crate::mirror::remote::Remote;
use crate::types::Epoch;

/// The newest manifest under the prefix (an empty vector if there is none), with the names of all of them
/// checked. Only the newest is read: a restore needs nothing else, so a damaged superseded manifest is ignored like
/// a superseded slot, and an open costs one GET however many claims piled up. A manifest that vanished between
/// the listing and the read was deleted by the newest holder's collection, so the one before it is read instead;
/// a damaged newest one is corruption. A claim with a superseded base is read as [`read_newest`] says.
pub(crate) fn read_manifests(remote: &Remote) -> Result<Vec<(ManifestName, ManifestBody)>> {
    let mut names = Vec::new();
    for meta in remote.list("manifest")? {
        let name = remote.layout.parse_manifest(&meta.location).ok_or_else(|| {
            Error::corrupt(format!("{}: not the name of a manifest", remote.describe(&meta.location)))
        })?;
        names.push(name);
    }
    names.sort();
    Ok(read_newest(remote, &names)?.into_iter().collect())
}

/// The newest of `names` (sorted, oldest first) that is still there, read and checked. A claim (update 0) whose
/// base is below the newest manifest of the epochs before it copied a base superseded while its writer read (a
/// crash before that writer's update named the newer one): the history of slots is linear, so the later
/// snapshot supersedes the earlier one, and its base and history are used. That costs one more GET, for a claim.
pub(crate) fn read_newest(remote: &Remote, names: &[ManifestName]) -> Result<Option<(ManifestName, ManifestBody)>> {
    let Some((at, name, mut body)) = read_last(remote, names)? else { return Ok(None) };
    if name.update == 0
        && let Some((_, _, older)) = read_last(remote, &names[..at])?
        && older.first_slot > body.first_slot
    {
        body.first_slot = older.first_slot;
        body.snapshot = older.snapshot;
        body.history = older.history;
    }
    Ok(Some((name, body)))
}

/// The last of `names` still there, with its index: one vanished since the listing was collected behind a newer
/// one, so the one before it is read instead; a damaged one is corruption.
fn read_last(remote: &Remote, names: &[ManifestName]) -> Result<Option<(usize, ManifestName, ManifestBody)>> {
    for (at, name) in names.iter().enumerate().rev() {
        let path = remote.layout.manifest(*name);
        let Some(bytes) = remote.get(&path)? else { continue };
        let body = decode_manifest(&bytes, name.epoch, name.update, &remote.describe(&path))?;
        return Ok(Some((at, *name, body)));
    }
    Ok(None)
}

/// The names of every manifest, oldest first, without reading them.
pub(crate) fn list_manifest_names(remote: &Remote) -> Result<Vec<ManifestName>> {
    let mut names: Vec<_> =
        remote.list("manifest")?.iter().filter_map(|m| remote.layout.parse_manifest(&m.location)).collect();
    names.sort();
    Ok(names)
}

/// The rule that lets a writer keep several puts in flight: a segment whose epoch is below the highest epoch
/// of a segment in an earlier slot is a **void**, skipped by every reader. A writer whose puts were in flight
/// when it stopped (crashed, or was fenced) can land slots past one that never landed; a takeover fences that
/// first absent slot, and the dead writer's later slots are then voids. None of them was acknowledged (a writer
/// acknowledges in slot order), so skipping them loses nothing.
///
/// The bound that keeps a void from hiding damage: a writer puts slot `s` only once every slot up to
/// `s - MIRROR_SLOTS_IN_FLIGHT_MAX` landed, and every slot below the first one a newer epoch took was filled
/// before it, so a void lies fewer than [`MIRROR_SLOTS_IN_FLIGHT_MAX`] slots past the first segment of the epoch
/// that made it one. A lower epoch further on is an altered mirror: `Corrupt`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub(crate) struct EpochFloor {
    /// The highest segment epoch read so far.
    epoch: Epoch,
    /// The slot where it was first seen (an upper bound on it for a base).
    since_slot: u64,
}

impl EpochFloor {
    /// The floor of a reader starting at `first_slot` of a manifest with `history`: the newest epoch opened
    /// below it. A base is a snapshot made after its writer's segment before it landed, so no higher epoch's
    /// segment lies below it.
    pub(crate) fn at_base(history: &[EpochOpen], first_slot: u64) -> Self {
        history
            .iter()
            .filter(|open| open.slot < first_slot)
            .max_by_key(|open| (open.epoch, open.slot))
            .map_or_else(Self::default, |open| Self { epoch: open.epoch, since_slot: open.slot })
    }

    /// The first slot past every void the current floor allows: a stopped writer's puts in flight cannot reach
    /// it, so a lower epoch there is an altered mirror.
    pub(crate) fn voids_end(&self) -> u64 {
        self.since_slot.saturating_add(MIRROR_SLOTS_IN_FLIGHT_MAX)
    }

    /// Whether the segment with `header` counts (and raises the floor to its epoch), or is a void; `Corrupt` if
    /// it is of a lower epoch where no put in flight could have landed it.
    pub(crate) fn admit(&mut self, header: &SegmentHeader, place: &str) -> Result<bool> {
        if header.epoch >= self.epoch {
            if header.epoch > self.epoch {
                *self = Self { epoch: header.epoch, since_slot: header.slot };
            }
            return Ok(true);
        }
        if header.slot >= self.voids_end() {
            return Err(Error::corrupt(format!(
                "{place}: a segment of epoch {} after epoch {} began at slot {}: a writer's puts in flight reach \
                 {} slots, so no writer put it there; the mirror was altered",
                header.epoch, self.epoch, self.since_slot, MIRROR_SLOTS_IN_FLIGHT_MAX
            )));
        }
        Ok(false)
    }
}

/// Reads `wal/{first_slot}`, `wal/{first_slot + 1}`… up to the first absent slot, checking each segment and
/// that each continues the previous one's sequence numbers, handing each to `each` in slot order as it arrives
/// (voids, by `floor`, are checked and skipped), and returns the first absent slot and the floor there. At most
/// a window of segments is held at once (fetched, not yet handed over): [`MIRROR_READS_CONCURRENT_MAX`] of them,
/// and no more than [`MIRROR_READ_WINDOW_BYTES_MAX`] by the listing's sizes unless one segment alone is larger.
/// Slots present past the first absent one (a stopped writer's torn tail) are ignored within
/// [`MIRROR_SLOTS_IN_FLIGHT_MAX`] of it and are corruption beyond. An error of `each` stops the reading.
pub(crate) fn for_each_segment(
    remote: &Remote,
    first_slot: u64,
    mut floor: EpochFloor,
    mut each: impl FnMut(Segment) -> Result<()>,
) -> Result<(u64, EpochFloor)> {
    let mut listed = std::collections::BTreeMap::new();
    for meta in remote.list("wal")? {
        let slot = remote.layout.parse_slot(&meta.location, "wal").ok_or_else(|| {
            Error::corrupt(format!("{}: not the name of a WAL slot", remote.describe(&meta.location)))
        })?;
        if slot >= first_slot {
            listed.insert(slot, meta.size);
        }
    }
    let mut end_seq: Option<u64> = None;
    let mut slot = first_slot;
    'read: loop {
        // The listed slots from here are fetched several at a time, a slot put since the listing one at a time;
        // either way they are checked in slot order and reading stops at the first absent one, as if each had
        // been read in turn.
        let end = window_end(&listed, slot);
        let paths: Vec<_> = (slot..end).map(|s| remote.layout.wal(s)).collect();
        for (path, got) in paths.iter().zip(remote.get_many(&paths)?) {
            let Some(bytes) = got? else { break 'read };
            let place = remote.describe(path);
            let segment = decode_segment(&bytes, slot, &place)?;
            drop(bytes);
            slot += 1;
            if !floor.admit(&segment.header, &place)? {
                continue;
            }
            if let Some(prev) = end_seq
                && segment.header.first_seq != prev
            {
                return Err(Error::corrupt(format!(
                    "{place}: begins at seq {}, but the slot before ends at seq {prev}",
                    segment.header.first_seq,
                )));
            }
            end_seq = Some(segment.end_seq());
            each(segment)?;
        }
    }
    if let Some((beyond, _)) = listed.range(slot + MIRROR_SLOTS_IN_FLIGHT_MAX..).next() {
        return Err(Error::corrupt(format!(
            "{} is missing while {} exists: a gap in the mirror's log wider than a writer's puts in flight",
            remote.describe(&remote.layout.wal(slot)),
            remote.describe(&remote.layout.wal(*beyond))
        )));
    }
    Ok((slot, floor))
}

/// The end (exclusive) of the window of slots to fetch from `slot`: the listed slots from there, up to
/// [`MIRROR_READS_CONCURRENT_MAX`] of them and [`MIRROR_READ_WINDOW_BYTES_MAX`] of their listed bytes (one at
/// least); a slot not listed is fetched alone.
fn window_end(listed: &std::collections::BTreeMap<u64, u64>, slot: u64) -> u64 {
    let mut end = slot;
    let mut bytes = 0u64;
    while end < slot + MIRROR_READS_CONCURRENT_MAX as u64
        && let Some(size) = listed.get(&end)
    {
        bytes = bytes.saturating_add(*size);
        if end > slot && bytes > MIRROR_READ_WINDOW_BYTES_MAX {
            break;
        }
        end += 1;
    }
    end.max(slot + 1)
}

/// Reads and checks the snapshot at `slot`, which a manifest references: chunk 0, then chunks 1… of the count it
/// names, each of the same snapshot (slot, seq, epoch, writer). Absent is corruption.
pub(crate) fn read_snapshot(remote: &Remote, slot: u64) -> Result<(SnapshotHeader, Vec<SnapshotEntry>, String)> {
    let path = remote.layout.snapshot(slot);
    let place = remote.describe(&path);
    let bytes = remote
        .get(&path)?
        .ok_or_else(|| Error::corrupt(format!("{place} is missing, though the newest manifest references it")))?;
    let first = decode_snapshot_chunk(&bytes, slot, &place)?;
    drop(bytes);
    let mut entries = Vec::new();
    for chunk in 1..first.chunk {
        let path = remote.layout.snapshot_chunk(slot, chunk);
        let at = remote.describe(&path);
        let bytes = remote
            .get(&path)?
            .ok_or_else(|| Error::corrupt(format!("{at} is missing, though {place} counts {} chunks", first.chunk)))?;
        let part = decode_snapshot_chunk(&bytes, slot, &at)?;
        if part.header != first.header || part.chunk != chunk {
            return Err(Error::corrupt(format!(
                "{at}: chunk {} of {:?}, not chunk {chunk} of the snapshot {place} begins ({:?})",
                part.chunk, part.header, first.header
            )));
        }
        entries.extend(part.entries);
    }
    entries.extend(first.entries);
    check_snapshot_entries(&entries, &place)?;
    Ok((first.header, entries, place))
}

/// The epochs a segment opens (a fence opens one).
pub(crate) fn opens_in(segment: &Segment) -> impl Iterator<Item = EpochOpen> + '_ {
    segment.opens.iter().copied()
}
