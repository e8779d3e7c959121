//! # sinkpoint
//!
//! Crash-safe, exactly-once checkpoints for data sink writers. Each checkpoint id moves through an explicit
//! state machine (Staged → Sealed → Committing → Committed, with Aborted and CommitUnknown) recorded in a local
//! redb write-ahead log, so a retried job never appends twice and never loses a row.
//!
//! # Start here
//!
//! A job's tasks write data files and stage their write results under a checkpoint id; a committer then makes one
//! table commit of everything sealed, exactly once, whatever crashed and was retried:
//!
//! ```
//! use sinkpoint::{Attempt, CheckpointId, Committer, DirTable, JobId, Part, StagePart, Store, TargetIdentity};
//!
//! # #[tokio::main]
//! # async fn main() -> sinkpoint::Result<()> {
//! let dir = tempfile::tempdir()?;
//! let table = DirTable::local(dir.path().join("table"))?;
//! let store = Store::builder(JobId::new("nightly")?, TargetIdentity::new("file:///nightly-table")?)
//!     .path(dir.path().join("nightly.redb"))
//!     .open()
//!     .await?;
//! let committer = Committer::new(&store, &table);
//! committer.recover().await?; // after a crash: a commit that landed, one that did not, one unknown
//! for input in ["a.parquet", "b.parquet"] {
//!     let key = input.as_bytes().to_vec();
//!     if store.is_processed(&key)? {
//!         continue; // a retried job skips what is sealed
//!     }
//!     let id = CheckpointId::new(input)?; // a retried task maps to the same checkpoint
//!     let result = table.write_data_file(&format!("{input}.rows"), b"rows".to_vec()).await?;
//!     store.stage(&id, StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key]).results(vec![result])).await?;
//!     store.seal(&id, 1).await?;
//! }
//! let report = committer.finish().await?; // one table commit; a rerun of the job does nothing
//! assert_eq!(report.committed_keys, [0]);
//! store.close_async().await;
//! # Ok(())
//! # }
//! ```
//!
//! Where to go next, by role:
//!
//! | you are | start with |
//! |---|---|
//! | a task writing one input (same process as the store) | [`Store::stage`], [`Store::seal`], [`Store::stage_and_seal`], [`SealWindow`] |
//! | a worker on another machine | [`shared::SharedStaging`], [`shared::Worker`]; the committer adopts with [`shared::Inbox`] |
//! | the driver that commits | [`Committer`]: `recover`, `commit_pending`, `finish` |
//! | writing a table adapter | [`Target`] (its contract), [`DirTable`] (the reference), the conformance suite in `testkit` (feature `testkit`) |
//! | a sink writing each input into several tables | [`multi::MultiTable`]: one checkpoint, each table its own store and keys |
//! | running the job safely across machines | [`StoreBuilder::mirror`] and [`mirror::MirrorSettings`] |
//! | an operator | [`inspect::Inspector`] (read-only), the `sinkpoint` CLI, and the hatches behind [`Store::operator`] ([`Operator`]) |
//! | collecting garbage | [`gc`]: [`gc::collect_data_files`], [`gc::find_mirror_garbage`], [`gc::find_inbox_garbage`] |
//! | handling errors | [`Error::kind`] says what to do ([`ErrorKind`]); [`TransitionError`] names an illegal transition |
//!
//! The design (states, invariants, object layout, failure model, crash points) is `docs/ARCHITECTURE.md` in the
//! repository; limits a caller checks against are in [`limits`].

#![forbid(unsafe_code)]
#![deny(missing_docs, unreachable_pub, missing_debug_implementations)]
// No unwrap or expect in the library: every failure is an error that says what to do (tests may unwrap).
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod byte_serde;
mod clock;
mod codec;
pub mod commit;
mod create_once;
mod dir_table;
mod error;
pub mod gc;
pub mod inspect;
pub mod limits;
pub mod mirror;
pub mod multi;
pub mod shared;
mod state;
mod store;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
mod types;
pub(crate) mod wal;

pub use clock::{Clock, SystemClock};
pub use commit::committer::Committer;
pub use commit::target::{CommitOutcome, ProbeOutcome, Target, TargetCommit};
pub use dir_table::{DirCommitRecord, DirTable};
pub use error::{Error, ErrorKind, Result, TransitionError};
pub use state::{CheckpointState, ParseStateError, Resolution, StateFilter};
#[cfg(any(test, feature = "testkit"))]
pub use store::WriterHold;
pub use store::{
    CheckpointInfo, CommitInfo, Landed, Operator, Pending, PendingCheckpoint, ProcessedKeys, SealWindow,
    SealWindowSettings, StageOutcome, StagingDurability, Store, StoreBuilder, StoreSettings,
};
pub use types::{
    Attempt, CheckpointId, CommitKey, Epoch, Format, JobId, Part, SourceKey, StagePart, TargetIdentity, WriteResult,
};
pub use wal::writer::WriterStats;

/// The README's examples, compiled as doctests so that they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
