//! Garbage collection: every collector of the crate, and the vocabulary they share.
//!
//! Three kinds of garbage outlive the work that made them, and each has its collector here:
//!
//! | garbage | collector | rules |
//! |---|---|---|
//! | data files of dropped attempts, named by the store's garbage ledger | [`collect_data_files`]; its dry run over a read-only [`crate::inspect::Inspector`], [`preview_data_files`] | `gc/data_files.rs` |
//! | mirror objects no restore reads, which a dead writer's own collection never reached | [`find_mirror_garbage`], then [`delete_mirror_garbage`] | `gc/mirror.rs` |
//! | shared-staging inbox entries no committer will adopt | [`find_inbox_garbage`], then [`delete_inbox_garbage`] | `gc/inbox.rs` |
//!
//! A live mirror writer collects what its newest manifest superseded itself, as it goes, by the rules
//! [`find_mirror_garbage`] holds to for a process that is not the writer.
//!
//! The vocabulary they share:
//!
//! - An item's **age** is the caller's wall time ([`crate::Clock::wall_ms`]) less its last modification as its
//!   storage reports it (0 for a time in the future). A collector runs where the writer does not, and storage's
//!   clock is the one both share: keep every grace period far above the skew between the caller's and storage's.
//! - An item younger than the **grace period** (for the mirror, its minimum age) is **young**: kept, for a writer
//!   may still use it. Any other item the rules name is **due**.
//! - A collector reports before it deletes, and names a **reason** for each item: `find_*_garbage` returns what
//!   it found, due and young ([`MirrorGarbage`] of [`MirrorObject`]s, [`InboxGarbage`] of [`InboxEntry`]s), and
//!   `delete_*_garbage` deletes the due items of such a report. The data-file collector judges each file to a
//!   [`Verdict`] and deletes only with [`CollectSettings::apply`].
//! - A long collection tells a [`ProgressFn`] how far it has got ([`Progress`]); [`no_progress`] ignores it.
//!
//! docs/protocols/collector.md has each collector's rules and the tests that hold them.

mod data_files;
pub(crate) mod files;
mod inbox;
pub(crate) mod ledger;
mod mirror;

use std::sync::Arc;

use object_store::ObjectMeta;

pub use data_files::{CollectReport, CollectSettings, OrphanFile, Verdict, collect_data_files, preview_data_files};
pub use files::{DataFiles, FileStat};
pub use inbox::{InboxEntry, InboxGarbage, InboxReason, delete_inbox_garbage, find_inbox_garbage};
pub use ledger::{GarbageEntry, GarbageRef};
pub use mirror::{MirrorGarbage, MirrorObject, MirrorReason, delete_mirror_garbage, find_mirror_garbage};

/// How far a collection has got, told to a [`ProgressFn`] as it goes (for a progress bar). Each count is a
/// running total since the call began; a count only grows, and an `of` is what is known so far to be done.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum Progress {
    /// Objects listed so far (a mirror's `manifest/`, `wal/` and `snapshot/`, or an inbox): how many there are
    /// is not known until the listing ends.
    Listed(u64),
    /// Objects read so far (an inbox's claims and due entries), of `of` to read.
    Read {
        /// Read so far.
        done: u64,
        /// To read, as far as is known now.
        of: u64,
    },
    /// Objects deleted so far, of `of` to delete.
    Deleted {
        /// Deleted so far.
        done: u64,
        /// To delete.
        of: u64,
    },
}

/// A callback told of a collection's progress ([`Progress`]). It is called on the collection's own thread
/// between requests, so it should return at once; it cannot change what is collected.
pub type ProgressFn = Arc<dyn Fn(Progress) + Send + Sync>;

/// A callback that ignores progress, for a caller that shows none.
pub fn no_progress() -> ProgressFn {
    Arc::new(|_| {})
}

/// The age of something last modified at `modified_ms`, at `now_wall_ms` (both milliseconds since the Unix
/// epoch): 0 for a modification in the future.
pub(crate) fn age_ms(now_wall_ms: u64, modified_ms: u64) -> u64 {
    now_wall_ms.saturating_sub(modified_ms)
}

/// The age of an object by its store's `last_modified`, at `now_wall_ms` (a time before the Unix epoch counts as
/// the epoch).
pub(crate) fn object_age_ms(now_wall_ms: u64, object: &ObjectMeta) -> u64 {
    age_ms(now_wall_ms, u64::try_from(object.last_modified.timestamp_millis()).unwrap_or(0))
}

/// Whether something `age_ms` old is within the grace period `grace_ms`, and so kept: every collector's one rule
/// of time.
pub(crate) fn is_young(age_ms: u64, grace_ms: u64) -> bool {
    age_ms < grace_ms
}
