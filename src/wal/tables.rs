//! The redb tables: the log and the materialised state it is applied to, always in the same write
//! transaction.
//!
//! | table         | key                          | value                                   |
//! |---------------|------------------------------|-----------------------------------------|
//! | `meta`        | `"meta"`                     | [`Meta`]                                |
//! | `log`         | seq `u64`                    | one frame (see [`super::frame`])        |
//! | `checkpoints` | id `&str`                    | [`CheckpointRecord`]                    |
//! | `parts`       | `(id, attempt, part)`        | [`PartValue`]                           |
//! | `keys`        | source key `&[u8]`           | owning checkpoint id `&str`             |
//! | `states`      | `(state code u8, id)`        | `()`: the index behind `list` and `pending` |
//! | `commits`     | key number `u64`             | [`CommitValue`]                         |
//! | `garbage`     | `(seq u64, index u32)`       | [`GarbageValue`]: a dropped write result |
//!
//! Every value but the log's frames and the key index's ids is wrapped by [`super::record::encode_value`].

use redb::{ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::state::{CheckpointRecord, CheckpointState, CommitSequence};
use crate::types::{CheckpointId, Epoch, JobId, SourceKey, TargetIdentity, WriteResult};
use crate::wal::record::{Record, decode_value, encode_value};

pub(crate) const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
pub(crate) const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("log");
pub(crate) const CHECKPOINTS: TableDefinition<&str, &[u8]> = TableDefinition::new("checkpoints");
pub(crate) const PARTS: TableDefinition<(&str, u32, u32), &[u8]> = TableDefinition::new("parts");
pub(crate) const KEYS: TableDefinition<&[u8], &str> = TableDefinition::new("keys");
pub(crate) const STATES: TableDefinition<(u8, &str), ()> = TableDefinition::new("states");
pub(crate) const COMMITS: TableDefinition<u64, &[u8]> = TableDefinition::new("commits");
/// The garbage ledger: each write result that `restart`, `abort` or `force_abort` dropped, keyed by the sequence
/// number of the record that dropped it and its index among that record's results, until the data-file
/// collector ([`crate::collect`]) has deleted its files and a `ForgetGarbage` record removes it.
pub(crate) const GARBAGE: TableDefinition<(u64, u32), &[u8]> = TableDefinition::new("garbage");

pub(crate) const META_KEY: &str = "meta";

/// The version of the local format as a whole, which a writer's open stamps on the store. Format 2 keeps a
/// Staged attempt's new parts in their stage records until settled (fresh parts, [`crate::wal::fresh`]), leaves a Staged record's result count at 0 (readers count its parts) and lets the stored
/// `Meta::next_seq` lag the log (see [`read_meta`]); a format-1 file is a format-2 file with no fresh part, exact
/// counts and an exact next seq, so it is opened and stamped 2, and a format-1 binary refuses a format-2 file
/// (it would not see the fresh parts, and would number records from a lagging next seq).
pub(crate) const STORE_FORMAT_VERSION: u32 = 2;

/// The oldest local format this version opens.
pub(crate) const STORE_FORMAT_VERSION_OLDEST: u32 = 1;

/// The store's metadata: one value, rewritten by a write transaction that changes anything in it but `next_seq`
/// (see [`read_meta`]).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, Debug)]
pub(crate) struct Meta {
    pub format_version: u32,
    pub job: JobId,
    pub target: TargetIdentity,
    /// The epoch of the writer that last opened the store.
    pub epoch: Epoch,
    /// That writer's unique tag.
    pub writer_tag: u128,
    /// The sequence number the next record gets. Stored, it may lag: the log's last frame says it exactly
    /// (see [`read_meta`]).
    pub next_seq: u64,
    /// The lowest sequence number still in the log table.
    pub log_start: u64,
    /// The commit sequence.
    pub seq: CommitSequence,
    /// Whether the job's final commit has landed.
    pub finished: bool,
}

/// Refuses a store of a format this version does not read: every open and every reader checks it first.
pub(crate) fn check_format(meta: &Meta) -> Result<(), Error> {
    if !(STORE_FORMAT_VERSION_OLDEST..=STORE_FORMAT_VERSION).contains(&meta.format_version) {
        return Err(Error::wrong_store(format!(
            "store format version {} is not one this version opens ({STORE_FORMAT_VERSION_OLDEST} to \
             {STORE_FORMAT_VERSION}): open it with the sinkpoint release that wrote it",
            meta.format_version
        )));
    }
    Ok(())
}

/// Who a store belongs to, and whether an open may create it: what both opens (local, and through the mirror)
/// check a store against. The one place that checks a stored [`Meta`] and builds a new one.
#[derive(Clone, Debug)]
pub(crate) struct Identity {
    pub job: JobId,
    pub target: TargetIdentity,
    pub create_if_missing: bool,
}

impl Identity {
    /// Refuses a store of another format, job or target.
    pub(crate) fn check(&self, meta: &Meta) -> Result<(), Error> {
        check_format(meta)?;
        self.check_owner(&meta.job, &meta.target, "the store")
    }

    /// Refuses `what` (a store, a mirror) when it belongs to another job or target.
    pub(crate) fn check_owner(&self, job: &JobId, target: &TargetIdentity, what: &str) -> Result<(), Error> {
        if *job != self.job {
            return Err(Error::wrong_store(format!("{what} belongs to job {job}, not {}", self.job)));
        }
        if *target != self.target {
            return Err(Error::wrong_store(format!("{what} belongs to target {target}, not {}", self.target)));
        }
        Ok(())
    }

    /// The meta of a store created now, before its `Create` record (epoch 0, nothing logged).
    pub(crate) fn new_meta(&self, writer_tag: u128) -> Meta {
        Meta {
            format_version: STORE_FORMAT_VERSION,
            job: self.job.clone(),
            target: self.target.clone(),
            epoch: 0,
            writer_tag,
            next_seq: 0,
            log_start: 0,
            seq: CommitSequence { next_key: 0, in_flight: None },
            finished: false,
        }
    }

    /// The first record of every store.
    pub(crate) fn create_record(&self) -> Record {
        Record::Create { job: self.job.clone(), target: self.target.clone() }
    }
}

/// One staged part: its keys and write results.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, Debug)]
pub(crate) struct PartValue {
    #[serde(with = "crate::byte_serde::byte_strings")]
    pub keys: Vec<SourceKey>,
    pub results: Vec<WriteResult>,
}

/// A [`PartValue`] by reference, for encoding only: postcard writes a slice exactly as it writes a `Vec`, so the
/// bytes are a `PartValue`'s (`tests::part_value_ref_encodes_as_part_value` holds them equal).
#[derive(Serialize)]
pub(crate) struct PartValueRef<'a> {
    #[serde(serialize_with = "crate::byte_serde::byte_strings::serialize")]
    pub keys: &'a [SourceKey],
    pub results: &'a [WriteResult],
}

/// A fresh part (see [`crate::wal::fresh`]), read from its stage record: the key it takes in table `parts` once
/// settled, and what its row there holds (decoded: a reader that counts results needs no row encoded).
#[derive(Clone, PartialEq, Eq, Debug)]
pub(crate) struct FreshPart {
    pub id: CheckpointId,
    pub attempt: u32,
    pub part: u32,
    pub value: PartValue,
}

impl FreshPart {
    /// The part's row in `parts`, exactly as a stage writes it.
    pub(crate) fn row(&self) -> Result<Vec<u8>, Error> {
        encode_value(&PartValueRef { keys: &self.value.keys, results: &self.value.results })
    }
}

/// One row of the garbage ledger: a write result of a dropped attempt, with whose it was.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, Debug)]
pub(crate) struct GarbageValue {
    pub id: CheckpointId,
    pub attempt: u32,
    pub result: WriteResult,
}

/// One commit key's record: bound forever to its set of checkpoints.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, Debug)]
pub(crate) struct CommitValue {
    /// The checkpoints it covers, sorted.
    pub ids: Vec<CheckpointId>,
    /// The target version it was prepared against.
    pub target_version: Option<u64>,
    /// Whether it is the job's last commit.
    pub final_commit: bool,
    /// The epoch that began it.
    pub epoch: Epoch,
    /// Its state: Committing, CommitUnknown or Committed; or [`COMMIT_AWAITS_RECOMMIT`] (`Sealed`) while an
    /// operator's `resolve(key, NotCommitted)` waits for its re-commit (its checkpoints are then Committing).
    pub state: CheckpointState,
}

/// The state of a commit record between an operator's `resolve(key, NotCommitted)` and the re-commit it orders:
/// the committer then re-commits the key once without probing first (a probe that stays Unknown forever would
/// otherwise never let it move). `Sealed` is otherwise never a commit record's state, so the verdict is durable
/// in the record itself, survives log truncation, and needs no change to the record's encoding.
pub(crate) const COMMIT_AWAITS_RECOMMIT: CheckpointState = CheckpointState::Sealed;

impl CommitValue {
    /// Whether an operator's NotCommitted verdict waits for its re-commit (see [`COMMIT_AWAITS_RECOMMIT`]).
    pub(crate) fn awaits_recommit(&self) -> bool {
        self.state == COMMIT_AWAITS_RECOMMIT
    }
}

/// The store's meta as it stands. A transaction that only appends records (a stage, a seal) does not rewrite
/// the meta: its stored `next_seq` is then a lower bound, and the log's last frame, whose key is the last
/// sequence number given, says the next one. Every transaction that empties the log (a truncation to its end)
/// changes `log_start` and so writes the meta, so an empty log means the stored value is exact. A log that ends
/// below the stored value lost frames: `Corrupt`.
pub(crate) fn read_meta(
    meta_table: &impl ReadableTable<&'static str, &'static [u8]>,
    log: &impl ReadableTable<u64, &'static [u8]>,
) -> Result<Option<Meta>, Error> {
    let Some(bytes) = meta_table.get(META_KEY)? else { return Ok(None) };
    let mut meta: Meta = decode_value(bytes.value(), &|| "table meta".into())?;
    if let Some((last, _)) = log.last()? {
        let next_seq = last.value().saturating_add(1);
        if next_seq < meta.next_seq || last.value() < meta.log_start {
            return Err(Error::corrupt(format!(
                "table log ends at seq {}, but table meta says the log holds seqs {}.. and the next is at least {}",
                last.value(),
                meta.log_start,
                meta.next_seq
            )));
        }
        meta.next_seq = next_seq;
    }
    Ok(Some(meta))
}

impl Meta {
    /// Whether `self` must be written over `stored` (the value last written or read): anything but
    /// `next_seq` changed. See [`read_meta`].
    pub(crate) fn must_overwrite(&self, stored: &Meta) -> bool {
        *self != Meta { next_seq: self.next_seq, ..stored.clone() }
    }
}

pub(crate) fn read_checkpoint(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
    id: &CheckpointId,
) -> Result<Option<CheckpointRecord>, Error> {
    match table.get(id.as_str())? {
        None => Ok(None),
        Some(v) => decode_value(v.value(), &|| format!("table checkpoints, id {id}")).map(Some),
    }
}

pub(crate) fn read_commit(
    table: &impl ReadableTable<u64, &'static [u8]>,
    key: u64,
) -> Result<Option<CommitValue>, Error> {
    match table.get(key)? {
        None => Ok(None),
        Some(v) => decode_value(v.value(), &|| format!("table commits, key {key}")).map(Some),
    }
}

/// Every part of one attempt, in part order.
pub(crate) fn read_parts(
    table: &impl ReadableTable<(&'static str, u32, u32), &'static [u8]>,
    id: &CheckpointId,
    attempt: u32,
) -> Result<Vec<(u32, PartValue)>, Error> {
    let mut out = Vec::new();
    for entry in table.range((id.as_str(), attempt, 0)..=(id.as_str(), attempt, u32::MAX))? {
        let (k, v) = entry?;
        let part = k.value().2;
        out.push((part, decode_value(v.value(), &|| format!("table parts, ({id}, {attempt}, {part})"))?));
    }
    Ok(out)
}

/// Decodes the parts of one attempt in part order, one at a time, and hands each to `visit` until it returns
/// `Some`: memory stays at one part whatever the attempt's size.
pub(crate) fn visit_parts<T>(
    table: &impl ReadableTable<(&'static str, u32, u32), &'static [u8]>,
    id: &CheckpointId,
    attempt: u32,
    mut visit: impl FnMut(PartValue) -> Result<Option<T>, Error>,
) -> Result<Option<T>, Error> {
    for entry in table.range((id.as_str(), attempt, 0)..=(id.as_str(), attempt, u32::MAX))? {
        let (k, v) = entry?;
        let part = k.value().2;
        let value = decode_value(v.value(), &|| format!("table parts, ({id}, {attempt}, {part})"))?;
        if let Some(found) = visit(value)? {
            return Ok(Some(found));
        }
    }
    Ok(None)
}

pub(crate) fn encode_meta(meta: &Meta) -> Result<Vec<u8>, Error> {
    encode_value(meta)
}

/// Table `fresh_parts`, which unreleased development builds of format 2 wrote; a released store keeps a fresh
/// part in its stage record alone ([`crate::wal::fresh`]).
const DEV_FRESH_PARTS: TableDefinition<u64, &[u8]> = TableDefinition::new("fresh_parts");

/// Refuses a file whose table `fresh_parts` (see [`DEV_FRESH_PARTS`]) holds parts: this build would not see
/// them, and their checkpoints would lose them. An empty one is dropped.
fn refuse_dev_fresh_parts(txn: &redb::WriteTransaction) -> Result<(), Error> {
    use redb::TableHandle as _;
    if !txn.list_tables()?.any(|t| t.name() == DEV_FRESH_PARTS.name()) {
        return Ok(());
    }
    let held = redb::ReadableTableMetadata::len(&txn.open_table(DEV_FRESH_PARTS)?)?;
    if held > 0 {
        return Err(Error::wrong_store(format!(
            "table fresh_parts holds {held} staged parts, written by a development build of sinkpoint that this \
             build does not read: open the store with that build and seal or abort its Staged checkpoints first"
        )));
    }
    txn.delete_table(DEV_FRESH_PARTS)?;
    Ok(())
}

/// Creates every table, so readers never meet a missing one.
pub(crate) fn create_all(txn: &redb::WriteTransaction) -> Result<(), Error> {
    refuse_dev_fresh_parts(txn)?;
    txn.open_table(META)?;
    txn.open_table(LOG)?;
    txn.open_table(CHECKPOINTS)?;
    txn.open_table(PARTS)?;
    txn.open_table(KEYS)?;
    txn.open_table(STATES)?;
    txn.open_table(COMMITS)?;
    txn.open_table(GARBAGE)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Format;

    #[test]
    fn part_value_ref_encodes_as_part_value() {
        let keys = vec![b"k0".to_vec(), Vec::new(), vec![0xff; 300]];
        let results = vec![
            WriteResult::new(Format::Parquet, b"part-0.parquet".to_vec()).unwrap(),
            WriteResult::new(Format::Other("x".into()), vec![7; 200]).unwrap(),
        ];
        let owned = encode_value(&PartValue { keys: keys.clone(), results: results.clone() }).unwrap();
        let borrowed = encode_value(&PartValueRef { keys: &keys, results: &results }).unwrap();
        assert_eq!(owned, borrowed);
        let back: PartValue = decode_value(&borrowed, &|| "test".into()).unwrap();
        assert_eq!((back.keys, back.results), (keys, results));
        let empty = encode_value(&PartValueRef { keys: &[], results: &[] }).unwrap();
        assert_eq!(empty, encode_value(&PartValue { keys: Vec::new(), results: Vec::new() }).unwrap());
    }

    /// A database whose meta says `next_seq` and whose log holds `frames` seqs (their bytes do not matter here).
    fn meta_and_log(next_seq: u64, log_start: u64, frames: std::ops::Range<u64>) -> redb::Database {
        let db = redb::Database::builder().create_with_backend(redb::backends::InMemoryBackend::new()).unwrap();
        let txn = db.begin_write().unwrap();
        create_all(&txn).unwrap();
        {
            let identity = Identity {
                job: crate::JobId::new("j").unwrap(),
                target: crate::TargetIdentity::new("t").unwrap(),
                create_if_missing: true,
            };
            let meta = Meta { next_seq, log_start, ..identity.new_meta(1) };
            txn.open_table(META).unwrap().insert(META_KEY, encode_meta(&meta).unwrap().as_slice()).unwrap();
            let mut log = txn.open_table(LOG).unwrap();
            for seq in frames {
                log.insert(seq, [0u8].as_slice()).unwrap();
            }
        }
        txn.commit().unwrap();
        db
    }

    fn read(db: &redb::Database) -> Result<Option<Meta>, Error> {
        use redb::ReadableDatabase as _;
        let txn = db.begin_read().unwrap();
        read_meta(&txn.open_table(META).unwrap(), &txn.open_table(LOG).unwrap())
    }

    #[test]
    fn the_next_seq_is_the_logs_when_the_stored_one_lags() {
        assert_eq!(read(&meta_and_log(4, 2, 2..9)).unwrap().unwrap().next_seq, 9);
        // Exact already, and an empty log (truncated to its end, which wrote the meta): the stored value.
        assert_eq!(read(&meta_and_log(9, 2, 2..9)).unwrap().unwrap().next_seq, 9);
        assert_eq!(read(&meta_and_log(9, 9, 0..0)).unwrap().unwrap().next_seq, 9);
    }

    #[test]
    fn a_log_that_ends_below_the_stored_next_seq_is_corrupt() {
        let err = read(&meta_and_log(9, 2, 2..6)).unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Corrupt, "{err}");
        assert!(err.to_string().contains("table log ends at seq 5"), "{err}");
        // A log whose last frame is below its own start.
        assert_eq!(read(&meta_and_log(1, 3, 0..2)).unwrap_err().kind(), crate::ErrorKind::Corrupt);
    }

    #[test]
    fn a_development_builds_fresh_parts_table_is_refused_when_it_holds_parts_and_dropped_when_empty() {
        let db = redb::Builder::new().create_with_backend(redb::backends::InMemoryBackend::new()).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(DEV_FRESH_PARTS).unwrap().insert(7, b"part".as_slice()).unwrap();
        txn.commit().unwrap();
        let txn = db.begin_write().unwrap();
        let err = create_all(&txn).unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::WrongStore, "{err}");
        assert!(err.to_string().contains("holds 1 staged parts, written by a development build"), "{err}");
        txn.open_table(DEV_FRESH_PARTS).unwrap().remove(7).unwrap();
        create_all(&txn).unwrap();
        use redb::TableHandle as _;
        assert!(!txn.list_tables().unwrap().any(|t| t.name() == "fresh_parts"), "the empty table is dropped");
    }
}
