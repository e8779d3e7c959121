//! # sinkpoint
//!
//! Crash-safe, exactly-once checkpoints for data sink writers. Each checkpoint id moves through an explicit
//! state machine (Staged → Sealed → Committing → Committed, with Aborted and CommitUnknown) recorded in a local
//! redb write-ahead log, so a retried job never appends twice and never loses a row.
//!
//! Start with [`Store`]; the map of the design is `docs/ARCHITECTURE.md`.

#![forbid(unsafe_code)]
#![deny(missing_docs, unreachable_pub, missing_debug_implementations)]
// No unwrap or expect in the library: every failure is an error that says what to do (tests may unwrap).
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod codec;
pub mod collect;
pub mod commit;
mod dir_table;
mod error;
pub mod inspect;
pub mod limits;
pub mod mirror;
pub mod shared;
mod state;
mod store;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
mod types;
pub(crate) mod wal;

pub use commit::committer::Committer;
pub use commit::target::{CommitOutcome, ProbeOutcome, Target, TargetCommit};
pub use dir_table::{DirCommitRecord, DirTable};
pub use error::{Error, ErrorKind, Result, TransitionError};
pub use state::{CheckpointState, ParseStateError, StateFilter};
#[cfg(any(test, feature = "testkit"))]
pub use store::WriterHold;
pub use store::{
    CheckpointInfo, CommitInfo, Landed, Pending, PendingCheckpoint, ProcessedKeys, SealWindow, SealWindowSettings,
    StageOutcome, StagingDurability, Store, StoreBuilder, StoreSettings,
};
pub use types::{
    Attempt, CheckpointId, CommitKey, Epoch, Format, JobId, Part, SourceKey, StagePart, TargetIdentity, WriteResult,
};
pub use wal::record::Resolution;
pub use wal::writer::WriterStats;

/// The README's examples, compiled as doctests so that they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
