//! Reading the mirror: the newest manifest (checked), the dense run of slots from a first slot up to the first
//! absent one (each checked, and a slot present beyond that gap is corruption), and a snapshot.

use crate::error::{Error, Result};
use crate::limits::{MIRROR_READ_WINDOW_BYTES_MAX, MIRROR_READS_CONCURRENT_MAX};
use crate::mirror::format::{
    EpochOpen, ManifestBody, Segment, SnapshotEntry, SnapshotHeader, check_snapshot_entries, decode_manifest,
    decode_segment, decode_snapshot_chunk,
};
use crate::mirror::layout::ManifestName;
use crate::mirror::remote::Remote;

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

/// Reads `wal/{first_slot}`, `wal/{first_slot + 1}`… up to the first absent slot, checking each segment and
/// that each continues the previous one's sequence numbers, handing each to `each` in slot order as it arrives,
/// and returns the first absent slot. At most a window of segments is held at once (fetched, not yet handed
/// over): [`MIRROR_READS_CONCURRENT_MAX`] of them, and no more than [`MIRROR_READ_WINDOW_BYTES_MAX`] by the
/// listing's sizes unless one segment alone is larger. An error of `each` stops the reading.
pub(crate) fn for_each_segment(
    remote: &Remote,
    first_slot: u64,
    mut each: impl FnMut(Segment) -> Result<()>,
) -> Result<u64> {
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
            slot += 1;
        }
    }
    if let Some((beyond, _)) = listed.range(slot + 1..).next() {
        return Err(Error::corrupt(format!(
            "{} is missing while {} exists: a gap in the mirror's log",
            remote.describe(&remote.layout.wal(slot)),
            remote.describe(&remote.layout.wal(*beyond))
        )));
    }
    Ok(slot)
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
