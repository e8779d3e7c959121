//! Snapshots: every materialised table (not the log) written out from one read transaction, and loaded back
//! in place of a store's state. A snapshot at slot `s` is the state just before `wal/{s}`: the writer begins
//! the read transaction right after committing the group of slot `s - 1`, and uploads it only once every slot
//! before `s` is in the mirror, so any snapshot at `s` is the same history, whoever made it.

use redb::{ReadTransaction, ReadableTable, WriteTransaction};

use crate::error::{Error, Result};
use crate::mirror::format::{SnapshotEntry, SnapshotHeader, SnapshotWriter};
use crate::wal::record::decode_value;
use crate::wal::tables::{
    CHECKPOINTS, COMMITS, GARBAGE, KEYS, LOG, META, META_KEY, Meta, PARTS, STATES, encode_meta, read_meta,
};

/// Writes out the state seen by `txn`, whose meta must say `header.next_seq`, in chunks of at most
/// `object_bytes_max` bytes: each full chunk (1, 2…) goes to `put` as soon as it is full, so one chunk at a time
/// is held, and chunk 0 (the last entries and the chunk count) is returned, for the caller to put last, with how
/// many entries the snapshot holds.
pub(crate) fn build(
    txn: &ReadTransaction,
    header: &SnapshotHeader,
    object_bytes_max: u64,
    put: &mut dyn FnMut(u32, Vec<u8>) -> Result<()>,
) -> Result<(Vec<u8>, u64)> {
    // The meta as it stands (its stored next seq may lag the log's: `tables::read_meta`).
    let meta = read_meta(&txn.open_table(META)?, &txn.open_table(LOG)?)?
        .ok_or_else(|| Error::corrupt("table meta is empty"))?;
    if meta.next_seq != header.next_seq {
        return Err(Error::bug(format!(
            "a snapshot for seq {} from a state at seq {}",
            header.next_seq, meta.next_seq
        )));
    }
    let mut out = Chunked { writer: SnapshotWriter::new(header, object_bytes_max), put, entries: 0 };
    out.push(&SnapshotEntry::Meta(encode_meta(&meta)?))?;
    for entry in txn.open_table(CHECKPOINTS)?.iter()? {
        let (k, v) = entry?;
        out.push(&SnapshotEntry::Checkpoint(k.value().to_owned(), v.value().to_vec()))?;
    }
    for entry in txn.open_table(PARTS)?.iter()? {
        let (k, v) = entry?;
        let (id, attempt, part) = k.value();
        out.push(&SnapshotEntry::Part(id.to_owned(), attempt, part, v.value().to_vec()))?;
    }
    // A fresh part is written out as the `parts` row it becomes when settled: a snapshot holds no fresh part, so
    // its format (and what a restore from it holds) does not depend on when a checkpoint was last settled.
    crate::wal::fresh::visit_stored(txn, None, |_, part| {
        out.push(&SnapshotEntry::Part(part.id.as_str().to_owned(), part.attempt, part.part, part.row()?))
    })?;
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
    for entry in txn.open_table(GARBAGE)?.iter()? {
        let (k, v) = entry?;
        let (seq, index) = k.value();
        out.push(&SnapshotEntry::Garbage(seq, index, v.value().to_vec()))?;
    }
    Ok((out.writer.finish()?, out.entries))
}

/// How many entries a snapshot of `txn` would hold, about (the fresh parts still in the log are not counted),
/// from the tables' stored lengths: no table is read.
pub(crate) fn entries_about(txn: &ReadTransaction) -> Result<u64> {
    use redb::ReadableTableMetadata as _;
    Ok(1 + txn.open_table(CHECKPOINTS)?.len()?
        + txn.open_table(PARTS)?.len()?
        + txn.open_table(KEYS)?.len()?
        + txn.open_table(STATES)?.len()?
        + txn.open_table(COMMITS)?.len()?
        + txn.open_table(GARBAGE)?.len()?)
}

/// A snapshot writer that puts each chunk it closes.
struct Chunked<'a> {
    writer: SnapshotWriter,
    put: &'a mut dyn FnMut(u32, Vec<u8>) -> Result<()>,
    entries: u64,
}

impl Chunked<'_> {
    fn push(&mut self, entry: &SnapshotEntry) -> Result<()> {
        self.entries += 1;
        match self.writer.push(entry)? {
            Some((chunk, bytes)) => (self.put)(chunk, bytes),
            None => Ok(()),
        }
    }
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
    let mut garbage = txn.open_table(GARBAGE)?;
    let mut meta_table = txn.open_table(META)?;
    log.retain(|_, _| false)?;
    checkpoints.retain(|_, _| false)?;
    parts.retain(|_, _| false)?;
    keys.retain(|_, _| false)?;
    states.retain(|_, _| false)?;
    commits.retain(|_, _| false)?;
    garbage.retain(|_, _| false)?;
    let mut meta: Option<Meta> = None;
    for entry in entries {
        match entry {
            SnapshotEntry::Meta(bytes) => meta = Some(decode_value(bytes, &|| format!("{place}: meta"))?),
            SnapshotEntry::Checkpoint(id, v) => drop(checkpoints.insert(id.as_str(), v.as_slice())?),
            SnapshotEntry::Part(id, attempt, part, v) => {
                if parts.insert((id.as_str(), *attempt, *part), v.as_slice())?.is_some() {
                    return Err(Error::corrupt(format!("{place}: holds part ({id}, {attempt}, {part}) twice")));
                }
            }
            SnapshotEntry::Key(key, owner) => drop(keys.insert(key.as_slice(), owner.as_str())?),
            SnapshotEntry::State(code, id) => drop(states.insert((*code, id.as_str()), ())?),
            SnapshotEntry::Commit(key, v) => drop(commits.insert(*key, v.as_slice())?),
            SnapshotEntry::Garbage(seq, index, v) => drop(garbage.insert((*seq, *index), v.as_slice())?),
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

#[cfg(test)]
mod tests {
    use crate::{Attempt, Part, StagePart};
    use std::sync::Arc;

    use bytes::Bytes;
    use object_store::memory::InMemory;
    use object_store::path::Path;
    use redb::{Database, ReadableDatabase as _, ReadableTable as _, TableDefinition};

    use super::*;
    use crate::create_once::Created;
    use crate::mirror::read::read_snapshot;
    use crate::mirror::remote::Remote;
    use crate::wal::tables::create_all;
    use crate::{CheckpointId, Format, JobId, Store, TargetIdentity, WriteResult};

    /// Every row of one table, as bytes, for comparing two databases.
    fn rows<K: redb::Key + 'static, V: redb::Value + 'static>(
        db: &Database,
        table: TableDefinition<K, V>,
    ) -> Vec<(Vec<u8>, Vec<u8>)> {
        let txn = db.begin_read().unwrap();
        let table = txn.open_table(table).unwrap();
        table
            .iter()
            .unwrap()
            .map(|row| {
                let (k, v) = row.unwrap();
                (K::as_bytes(&k.value()).as_ref().to_vec(), V::as_bytes(&v.value()).as_ref().to_vec())
            })
            .collect()
    }

    /// The rows of `parts` once every fresh part is settled (a snapshot holds settled parts only), sorted.
    fn settled_parts(db: &Database) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = rows(db, PARTS);
        crate::wal::fresh::visit_stored(&db.begin_read().unwrap(), None, |_, part| {
            let key = (part.id.as_str(), part.attempt, part.part);
            out.push((<(&str, u32, u32) as redb::Value>::as_bytes(&key).to_vec(), part.row()?));
            Ok(())
        })
        .unwrap();
        out.sort();
        out
    }

    fn state(db: &Database) -> Vec<Vec<(Vec<u8>, Vec<u8>)>> {
        vec![
            rows(db, CHECKPOINTS),
            settled_parts(db),
            rows(db, KEYS),
            rows(db, STATES),
            rows(db, COMMITS),
            rows(db, GARBAGE),
        ]
    }

    #[test]
    fn a_restore_from_a_snapshot_in_many_chunks_under_a_low_object_limit_yields_the_same_state() {
        let dir = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        let store = rt.block_on(async {
            let store = Store::builder(JobId::new("job").unwrap(), TargetIdentity::new("mem://t").unwrap())
                .path(dir.path().join("a.redb"))
                .open()
                .await
                .unwrap();
            for n in 0..40u32 {
                let id = CheckpointId::new(format!("input-{n:04}")).unwrap();
                let keys = (0..5).map(|k| format!("s3://in/{n:04}/{k}.csv").into_bytes()).collect();
                let result = WriteResult::new(Format::Parquet, vec![n as u8; 300]).unwrap();
                store
                    .stage(&id, StagePart::new(Attempt::FIRST, Part::FIRST).keys(keys).results(vec![result]))
                    .await
                    .unwrap();
                if n % 2 == 0 {
                    store.seal(&id, 1).await.unwrap();
                }
            }
            store
        });
        let db = store.database();
        let next_seq = {
            let txn = db.begin_read().unwrap();
            read_meta(&txn.open_table(META).unwrap(), &txn.open_table(LOG).unwrap()).unwrap().unwrap().next_seq
        };
        let header = SnapshotHeader { slot: 7, next_seq, epoch: 1, writer_tag: 9 };
        let remote = Remote::new(Arc::new(InMemory::new()), Path::from("p"), 10_000).unwrap();
        let limit = 2048u64;
        let mut sizes = Vec::new();
        let mut put = |chunk: u32, bytes: Vec<u8>| {
            sizes.push(bytes.len() as u64);
            let landed = remote.put_settled(&remote.layout.snapshot_chunk(7, chunk), &Bytes::from(bytes))?;
            assert!(matches!(landed, Created::Ours));
            Ok(())
        };
        let (first, written) = build(&db.begin_read().unwrap(), &header, limit, &mut put).unwrap();
        sizes.push(first.len() as u64);
        assert!(matches!(remote.put_settled(&remote.layout.snapshot(7), &Bytes::from(first)), Ok(Created::Ours)));
        assert!(sizes.len() > 5, "{} chunks: the state should not fit a few objects of {limit} bytes", sizes.len());
        assert!(sizes.iter().all(|s| *s <= limit), "an object over the limit of {limit}: {sizes:?}");

        let (read_header, entries, place) = read_snapshot(&remote, 7).unwrap();
        assert_eq!(read_header, header);
        assert_eq!(written, entries.len() as u64, "the entries build counts are the entries a reader finds");
        let restored = redb::Builder::new().create_with_backend(redb::backends::InMemoryBackend::new()).unwrap();
        let txn = restored.begin_write().unwrap();
        create_all(&txn).unwrap();
        let meta = load(&txn, &read_header, &entries, &place).unwrap();
        txn.commit().unwrap();
        assert_eq!(meta.next_seq, next_seq);
        assert!(
            settled_parts(db).len() > rows(db, PARTS).len(),
            "the store's Staged checkpoints should hold fresh parts"
        );
        assert_eq!(state(&restored), state(db), "the restored tables differ from the store's");
        assert_eq!(rows(&restored, PARTS), settled_parts(&restored), "a restore holds no fresh part");

        // A chunk missing fails closed, naming it.
        remote.delete(&remote.layout.snapshot_chunk(7, 2)).unwrap();
        let err = read_snapshot(&remote, 7).unwrap_err();
        assert!(matches!(err.kind(), crate::ErrorKind::Corrupt), "{err}");
        assert!(err.to_string().contains("00000000000000000007.0000000002 "), "{err}");
        store.close();
    }
}
