//! Snapshots: every materialised table (not the log) written out from one read transaction, and loaded back
//! in place of a store's state. A snapshot at slot `s` is the state just before `wal/{s}`: the writer begins
//! the read transaction right after committing the group of slot `s - 1`, and uploads it only once every slot
//! before `s` is in the mirror, so any snapshot at `s` is the same history, whoever made it.

use redb::{ReadTransaction, ReadableTable, WriteTransaction};

use crate::error::{Error, Result};
use crate::mirror::format::{SnapshotEntry, SnapshotHeader, SnapshotWriter};
use crate::wal::record::decode_value;
use crate::wal::tables::{CHECKPOINTS, COMMITS, KEYS, LOG, META, META_KEY, Meta, PARTS, STATES, encode_meta};

/// Writes out the state seen by `txn`, whose meta must say `header.next_seq`.
pub(crate) fn build(txn: &ReadTransaction, header: &SnapshotHeader) -> Result<Vec<u8>> {
    let meta_table = txn.open_table(META)?;
    let meta_bytes = meta_table.get(META_KEY)?.ok_or_else(|| Error::corrupt("table meta is empty"))?;
    let meta: Meta = decode_value(meta_bytes.value(), &|| "table meta".into())?;
    if meta.next_seq != header.next_seq {
        return Err(Error::bug(format!(
            "a snapshot for seq {} from a state at seq {}",
            header.next_seq, meta.next_seq
        )));
    }
    let mut out = SnapshotWriter::new(header);
    out.push(&SnapshotEntry::Meta(meta_bytes.value().to_vec()))?;
    for entry in txn.open_table(CHECKPOINTS)?.iter()? {
        let (k, v) = entry?;
        out.push(&SnapshotEntry::Checkpoint(k.value().to_owned(), v.value().to_vec()))?;
    }
    for entry in txn.open_table(PARTS)?.iter()? {
        let (k, v) = entry?;
        let (id, attempt, part) = k.value();
        out.push(&SnapshotEntry::Part(id.to_owned(), attempt, part, v.value().to_vec()))?;
    }
    for entry in txn.open_table(KEYS)?.iter()? {
        let (k, v) = entry?;
        out.push(&SnapshotEntry::Key(k.value().to_vec(), v.value().to_owned()))?;
    }
    for entry in txn.open_table(STATES)?.iter()? {
        let (k, _) = entry?;
        let (code, id) = k.value();
        out.push(&SnapshotEntry::State(code, id.to_owned()))?;
    }
    for entry in txn.open_table(COMMITS)?.iter()? {
        let (k, v) = entry?;
        out.push(&SnapshotEntry::Commit(k.value(), v.value().to_vec()))?;
    }
    Ok(out.finish())
}

/// Replaces every table of `txn` (the log included, which restarts empty at the snapshot's seq) with the
/// snapshot's entries, and returns its meta. `place` names the snapshot object.
pub(crate) fn load(
    txn: &WriteTransaction,
    header: &SnapshotHeader,
    entries: &[SnapshotEntry],
    place: &str,
) -> Result<Meta> {
    let mut log = txn.open_table(LOG)?;
    let mut checkpoints = txn.open_table(CHECKPOINTS)?;
    let mut parts = txn.open_table(PARTS)?;
    let mut keys = txn.open_table(KEYS)?;
    let mut states = txn.open_table(STATES)?;
    let mut commits = txn.open_table(COMMITS)?;
    let mut meta_table = txn.open_table(META)?;
    log.retain(|_, _| false)?;
    checkpoints.retain(|_, _| false)?;
    parts.retain(|_, _| false)?;
    keys.retain(|_, _| false)?;
    states.retain(|_, _| false)?;
    commits.retain(|_, _| false)?;
    let mut meta: Option<Meta> = None;
    for entry in entries {
        match entry {
            SnapshotEntry::Meta(bytes) => meta = Some(decode_value(bytes, &|| format!("{place}: meta"))?),
            SnapshotEntry::Checkpoint(id, v) => drop(checkpoints.insert(id.as_str(), v.as_slice())?),
            SnapshotEntry::Part(id, attempt, part, v) => {
                drop(parts.insert((id.as_str(), *attempt, *part), v.as_slice())?);
            }
            SnapshotEntry::Key(key, owner) => drop(keys.insert(key.as_slice(), owner.as_str())?),
            SnapshotEntry::State(code, id) => drop(states.insert((*code, id.as_str()), ())?),
            SnapshotEntry::Commit(key, v) => drop(commits.insert(*key, v.as_slice())?),
        }
    }
    let mut meta = meta.ok_or_else(|| Error::corrupt(format!("{place}: holds no meta")))?;
    if meta.next_seq != header.next_seq {
        return Err(Error::corrupt(format!(
            "{place}: its meta is at seq {}, its header at seq {}",
            meta.next_seq, header.next_seq
        )));
    }
    meta.log_start = meta.next_seq;
    meta_table.insert(META_KEY, encode_meta(&meta)?.as_slice())?;
    Ok(meta)
}
