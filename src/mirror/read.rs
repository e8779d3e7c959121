//! Reading the mirror: the newest manifest (checked), the dense run of slots from a first slot up to the first
//! absent one (each checked, and a slot present beyond that gap is corruption), and a snapshot.

use crate::error::{Error, Result};
use crate::limits::MIRROR_READS_CONCURRENT_MAX;
use crate::mirror::format::{
    EpochOpen, ManifestBody, Segment, SnapshotEntry, SnapshotHeader, decode_manifest, decode_segment, decode_snapshot,
};
use crate::mirror::layout::ManifestName;
use crate::mirror::remote::Remote;
use crate::wal::record::Record;

/// The newest manifest under the prefix (an empty vector if there is none), with the names of all of them
/// checked. Only the newest is read: a restore needs nothing else, so a damaged superseded manifest is ignored like
/// a superseded slot, and an open costs one GET however many claims piled up. A manifest that vanished between
/// the listing and the read was deleted by the newest holder's collection, so the one before it is read instead;
/// a damaged newest one is corruption.
pub(crate) fn read_manifests(remote: &Remote) -> Result<Vec<(ManifestName, ManifestBody)>> {
    let mut names = Vec::new();
    for meta in remote.list("manifest")? {
        let name = remote.layout.parse_manifest(&meta.location).ok_or_else(|| {
            Error::corrupt(format!("{}: not the name of a manifest", remote.describe(&meta.location)))
        })?;
        names.push(name);
    }
    names.sort();
    for name in names.into_iter().rev() {
        let path = remote.layout.manifest(name);
        let Some(bytes) = remote.get(&path)? else { continue };
        return Ok(vec![(name, decode_manifest(&bytes, name.epoch, name.update, &remote.describe(&path))?)]);
    }
    Ok(Vec::new())
}

/// The names of every manifest, oldest first, without reading them.
pub(crate) fn list_manifest_names(remote: &Remote) -> Result<Vec<ManifestName>> {
    let mut names: Vec<_> =
        remote.list("manifest")?.iter().filter_map(|m| remote.layout.parse_manifest(&m.location)).collect();
    names.sort();
    Ok(names)
}

/// The slots of the mirror's log from `first_slot` on.
#[derive(Debug)]
pub(crate) struct MirrorLog {
    /// The segments, in slot order, each continuing the previous one's sequence numbers.
    pub segments: Vec<Segment>,
    /// The first absent slot.
    pub next_slot: u64,
}

/// Reads `wal/{first_slot}`, `wal/{first_slot + 1}`… up to the first absent slot, checking each segment and
/// that each continues the previous one's sequence numbers.
pub(crate) fn read_log(remote: &Remote, first_slot: u64) -> Result<MirrorLog> {
    let mut listed = Vec::new();
    for meta in remote.list("wal")? {
        let slot = remote.layout.parse_slot(&meta.location, "wal").ok_or_else(|| {
            Error::corrupt(format!("{}: not the name of a WAL slot", remote.describe(&meta.location)))
        })?;
        if slot >= first_slot {
            listed.push(slot);
        }
    }
    let mut segments: Vec<Segment> = Vec::new();
    let mut slot = first_slot;
    let last_listed = listed.iter().copied().max();
    'read: loop {
        // The listed slots from here are fetched several at a time, a slot put since the listing one at a time;
        // either way they are checked in slot order and reading stops at the first absent one, as if each had
        // been read in turn.
        let end = match last_listed {
            Some(last) if last >= slot => (last + 1).min(slot + MIRROR_READS_CONCURRENT_MAX as u64),
            _ => slot + 1,
        };
        let paths: Vec<_> = (slot..end).map(|s| remote.layout.wal(s)).collect();
        for (path, got) in paths.iter().zip(remote.get_many(&paths)?) {
            let Some(bytes) = got? else { break 'read };
            let place = remote.describe(path);
            let segment = decode_segment(&bytes, slot, &place)?;
            if let Some(prev) = segments.last()
                && segment.header.first_seq != prev.end_seq()
            {
                return Err(Error::corrupt(format!(
                    "{place}: begins at seq {}, but the slot before ends at seq {}",
                    segment.header.first_seq,
                    prev.end_seq()
                )));
            }
            segments.push(segment);
            slot += 1;
        }
    }
    if let Some(beyond) = listed.iter().copied().filter(|s| *s > slot).min() {
        return Err(Error::corrupt(format!(
            "{} is missing while {} exists: a gap in the mirror's log",
            remote.describe(&remote.layout.wal(slot)),
            remote.describe(&remote.layout.wal(beyond))
        )));
    }
    Ok(MirrorLog { segments, next_slot: slot })
}

/// Reads and checks `snapshot/{slot}`, which a manifest references: absent is corruption.
pub(crate) fn read_snapshot(remote: &Remote, slot: u64) -> Result<(SnapshotHeader, Vec<SnapshotEntry>, String)> {
    let path = remote.layout.snapshot(slot);
    let place = remote.describe(&path);
    let bytes = remote
        .get(&path)?
        .ok_or_else(|| Error::corrupt(format!("{place} is missing, though the newest manifest references it")))?;
    let (header, entries) = decode_snapshot(&bytes, slot, &place)?;
    Ok((header, entries, place))
}

/// The epochs a segment opens (a fence opens one).
pub(crate) fn opens_in(segment: &Segment) -> impl Iterator<Item = EpochOpen> + '_ {
    segment.records.iter().enumerate().filter_map(move |(i, record)| match record {
        Record::Open { writer_tag } => Some(EpochOpen {
            epoch: segment.epochs[i],
            writer_tag: *writer_tag,
            seq: segment.header.first_seq + i as u64,
            slot: segment.header.slot,
        }),
        _ => None,
    })
}
