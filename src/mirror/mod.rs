//! The object-storage mirror: the WAL shipped to any `object_store` as immutable objects, restored from there
//! when the local file is gone, and the one place where a stale writer is fenced.
//!
//! - **Objects** (see `mirror::layout` for the keys, `mirror::format` for the bytes): epoch claims and their updates in
//!   `manifest/`, segments of one or more committed groups in the dense slots of `wal/`, periodic images of the state in
//!   `snapshot/`. All are written once, with `PutMode::Create`.
//! - **Takeover** (`open`): read the slots up to the first absent one, reconcile the local file with them (or
//!   restore it), claim the next epoch, re-list the manifests (redoing the read from any newer base a racing
//!   collection may use), and put a fence (a segment holding this writer's `Open` record) in the first absent
//!   slot. A zombie's next segment finds its slot taken by a higher epoch and stops with `Fenced`.
//! - **Shipping** (`ship`): the writer thread hands every committed group to an uploader and goes on; the
//!   uploader puts one segment at a time holding every group queued behind the last put, and sends the acks the
//!   mode or a commit intent (any protocol record but a mark) held back when their group lands; snapshots every
//!   so many records, and deletes what the newest manifest no longer references after a minimum age.
//! - **Reading without the local file**: [`MirrorView`].
//! - **The operator's collection** ([`crate::gc::find_mirror_garbage`], [`crate::gc::delete_mirror_garbage`]):
//!   what a dead writer's own collection never reached, by the same rules; it lives with the other collectors in
//!   `gc`, and reads the mirror through the layout, the remote and `read_newest` re-exported below.

pub(crate) mod format;
mod layout;
mod open;
mod read;
mod remote;
mod ship;
mod snapshot;
mod view;

use std::sync::Arc;

use object_store::ObjectStore;
use object_store::path::Path;
use redb::{ReadableTable as _, TableDefinition, WriteTransaction};
use serde::{Deserialize, Serialize};

pub use format::MIRROR_FORMAT_VERSION;
pub use view::MirrorView;

pub(crate) use layout::ManifestName;
pub(crate) use open::open;
pub(crate) use read::read_newest;
pub(crate) use remote::Remote;
pub(crate) use ship::Progress;

/// Names `path` in `store` for a message: as the URL an operator passes for a local directory or S3.
pub(crate) fn describe(store: &dyn ObjectStore, path: &Path) -> String {
    remote::describe(path, &store.to_string())
}

/// The object decoders and the key layout, for the testkit's fuzz target of restores.
#[cfg(any(test, feature = "testkit"))]
pub(crate) use format::{decode_manifest, decode_segment, decode_snapshot};
#[cfg(any(test, feature = "testkit"))]
pub(crate) use layout::Layout;

use crate::clock::Clock;
use crate::error::{Error, InvalidInput, Result};
use crate::limits::{
    MIRROR_SLOTS_IN_FLIGHT_MAX, MIRROR_SNAPSHOT_INTERVAL_BYTES_DEFAULT, MIRROR_SNAPSHOT_LOG_RATIO_PERCENT_DEFAULT,
    MIRROR_SNAPSHOT_LOG_RATIO_PERCENT_MAX, MIRROR_SNAPSHOT_LOG_RECORDS_MAX_DEFAULT,
};
use crate::wal::record::{decode_value, encode_value};

/// When a call is acked relative to the mirror.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum MirrorMode {
    /// Every durable call is acked only after its group is in the mirror. A call committed without an fsync
    /// (`StagingDurability::None` staging, a `SealWindow`'s seals) is acked after its local commit, since its ack
    /// promises nothing durable; the next durable call's ack, or a `SealWindow`'s `Landed`, means it is in the
    /// mirror too.
    Synchronous,
    /// Groups are uploaded in the background; a call is acked after the local commit, except that a batch holding a
    /// commit-protocol record (begin, resolve, commit-empty, force-abort; every one but the mark of a landed commit)
    /// is always in the mirror before it is acked. A mark lost with the disk leaves its key committing, and recovery
    /// finds the commit in the target by its key. Callers wait for room when either bound is reached. The uploader
    /// holds a group nobody waits for up to 50 ms (`MIRROR_LINGER_MS`) for the groups
    /// behind it, so a worker's calls and its commit share one object; a `Store::flush` or a caller at a bound ends
    /// that wait at once.
    ///
    /// Seals are acked before they are in the mirror: a lost disk can take back an acked seal. Act on a seal
    /// irrevocably (delete or acknowledge its source) only after a later `Store::flush` returned `Ok`.
    Asynchronous {
        /// The most groups committed locally but not yet in the mirror.
        lag_batches_max: u32,
        /// The oldest such group's most age, in milliseconds on the store's clock.
        lag_ms_max: u64,
    },
}

/// The settings of a mirror: plain data.
#[derive(Clone, Debug)]
pub struct MirrorSettings {
    /// When calls are acked.
    pub mode: MirrorMode,
    /// A snapshot is made after this many records since the last one (at least 1).
    pub snapshot_interval_records: u64,
    /// A snapshot is also made after this many bytes of frames since the last one, whichever interval comes
    /// first: a few large records bound a restore no less than many small ones (at least 1; 0 is refused at
    /// open with [`crate::ErrorKind::InvalidInput`]).
    pub snapshot_interval_bytes: u64,
    /// How long the log since the last snapshot grows, relative to that snapshot, before the next one is due, in
    /// percent of its entries (against records) and of its bytes (against frame bytes): the intervals above are
    /// floors, and a store of n entries is snapshotted every `n * snapshot_log_ratio_percent / 100` records or so,
    /// up to `snapshot_log_records_max`. A snapshot writes the whole live state, so fixed intervals cost O(n)
    /// per interval and O(n²) over a job's life; a growing one keeps the snapshot entries a record costs near
    /// 100 / `snapshot_log_ratio_percent`, at the price of a longer log for an open to read and a restore to
    /// replay. 0 keeps the intervals fixed (tests that want many snapshots). At most
    /// [`MIRROR_SNAPSHOT_LOG_RATIO_PERCENT_MAX`].
    pub snapshot_log_ratio_percent: u32,
    /// The most records the log since the last snapshot grows to through `snapshot_log_ratio_percent` (never below
    /// `snapshot_interval_records`): it bounds what an open reads and a restore replays past the newest snapshot,
    /// and the local log the store keeps, whatever the state's size. Past n = this / ratio entries, a record costs
    /// about n / this snapshot entries again. At least 1.
    pub snapshot_log_records_max: u64,
    /// Objects the newest manifest stopped referencing are deleted only this long after it was written, in
    /// milliseconds on the store's clock: a reader that began before then has that long to finish.
    pub gc_age_ms_min: u64,
    /// The most one object-store request may take, in milliseconds of wall time (a liveness guard, not a
    /// correctness one): a put still running then is abandoned and settled like any ambiguous put.
    pub request_timeout_ms: u64,
    /// The most WAL segments in flight at once while somebody waits for them (1 to
    /// [`MIRROR_SLOTS_IN_FLIGHT_MAX`]). More lets concurrent
    /// synchronous callers each wait for their own put rather than queue behind another's (about a quarter less
    /// latency for 8 or 32 staggered callers over a 20 ms store), at the price of more, smaller puts (about three
    /// times as many there); 1 puts one segment at a time, folding everything queued behind it.
    pub puts_in_flight_max: u32,
}

impl Default for MirrorSettings {
    fn default() -> Self {
        Self {
            mode: MirrorMode::Synchronous,
            snapshot_interval_records: 10_000,
            snapshot_interval_bytes: MIRROR_SNAPSHOT_INTERVAL_BYTES_DEFAULT,
            snapshot_log_ratio_percent: MIRROR_SNAPSHOT_LOG_RATIO_PERCENT_DEFAULT,
            snapshot_log_records_max: MIRROR_SNAPSHOT_LOG_RECORDS_MAX_DEFAULT,
            gc_age_ms_min: 10 * 60 * 1000,
            request_timeout_ms: 30_000,
            puts_in_flight_max: MIRROR_SLOTS_IN_FLIGHT_MAX as u32,
        }
    }
}

impl MirrorSettings {
    /// Refuses settings no mirror can work with, before anything is read or written.
    pub(crate) fn check(&self) -> Result<()> {
        if self.snapshot_interval_bytes == 0 {
            return Err(InvalidInput::Range { what: "snapshot_interval_bytes", value: 0, min: 1, max: u64::MAX }.into());
        }
        let ratio = u64::from(self.snapshot_log_ratio_percent);
        if ratio > MIRROR_SNAPSHOT_LOG_RATIO_PERCENT_MAX {
            let max = MIRROR_SNAPSHOT_LOG_RATIO_PERCENT_MAX;
            return Err(InvalidInput::Range { what: "snapshot_log_ratio_percent", value: ratio, min: 0, max }.into());
        }
        if self.snapshot_log_records_max == 0 {
            let what = "snapshot_log_records_max";
            return Err(InvalidInput::Range { what, value: 0, min: 1, max: u64::MAX }.into());
        }
        let puts = u64::from(self.puts_in_flight_max);
        if !(1..=MIRROR_SLOTS_IN_FLIGHT_MAX).contains(&puts) {
            let max = MIRROR_SLOTS_IN_FLIGHT_MAX;
            return Err(InvalidInput::Range { what: "puts_in_flight_max", value: puts, min: 1, max }.into());
        }
        Ok(())
    }
}

/// How far the mirror is behind the local file (in synchronous mode, zero once a durable call returned and
/// nothing but durable calls followed; a commit's mark, which is never waited for, may lag).
#[derive(Clone, Copy, PartialEq, Eq, Default, Debug)]
pub struct MirrorLag {
    /// Groups committed locally and not yet in the mirror.
    pub groups: u64,
    /// Their records.
    pub records: u64,
    /// The oldest one's age, in milliseconds on the store's clock (0 when none).
    pub oldest_ms: u64,
}

/// What `StoreBuilder::mirror` collected.
pub(crate) struct MirrorConfig {
    pub store: Arc<dyn ObjectStore>,
    pub prefix: Path,
    pub settings: MirrorSettings,
    pub clock: Arc<dyn Clock>,
}

/// The local mark that a store is mirrored: without it, a missing mirror could not be told from a new one.
const MARK: TableDefinition<&str, &[u8]> = TableDefinition::new("mirror");
const MARK_KEY: &str = "mark";

#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, Debug)]
pub(crate) struct Mark {
    /// Where it was mirrored, for messages.
    pub location: String,
    /// The epoch it was last opened with through the mirror.
    pub epoch: u64,
}

pub(crate) fn read_mark(txn: &WriteTransaction) -> Result<Option<Mark>> {
    let table = txn.open_table(MARK)?;
    let value = table.get(MARK_KEY)?;
    value.map(|v| decode_value(v.value(), &|| "table mirror".into())).transpose()
}

/// Where the store in `txn` is mirrored, read without a write transaction (none in a store never opened with a
/// mirror), so a caller can refuse before it opens the file as a writer.
pub(crate) fn mirrored_at(txn: &redb::ReadTransaction) -> Result<Option<String>> {
    let table = match txn.open_table(MARK) {
        Ok(table) => table,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let value = table.get(MARK_KEY)?;
    let mark: Option<Mark> = value.map(|v| decode_value(v.value(), &|| "table mirror".into())).transpose()?;
    Ok(mark.map(|m| m.location))
}

pub(crate) fn write_mark(txn: &WriteTransaction, mark: &Mark) -> Result<()> {
    txn.open_table(MARK)?.insert(MARK_KEY, encode_value(mark)?.as_slice())?;
    Ok(())
}

/// Refuses to open a mirrored store without its mirror: its epoch and records would never reach the mirror, and
/// the next open through the mirror would find the two diverged.
pub(crate) fn refuse_without_mirror(txn: &WriteTransaction) -> Result<()> {
    match read_mark(txn)? {
        None => Ok(()),
        Some(mark) => Err(Error::wrong_store(format!(
            "the store is mirrored at {}: open it with its mirror (the store builder's `mirror` setting), or its \
             changes would never reach the mirror",
            mark.location
        ))),
    }
}
