//! The testkit (feature `testkit`): the seams the crash, model and protocol suites drive, documented so that
//! an adapter author can run the same suites against their own target.
//!
//! **Not a stable part of the API**: it may change in any release, like `object_store`'s integration suite.
//! Its black-box half is listed below, for adapters' tests; the white-box half (the fuzz logic over raw
//! frames, [`whitebox`]) reads the core's private formats and is hidden from the docs.
//!
//! - [`CrashBackend`]: a redb storage backend with a live image and a durable image advanced only by sync,
//!   counting I/O operations and freezing at operation k, so recovery reopens exactly what a crash leaves.
//! - [`FaultyTarget`]: wraps any [`crate::Target`] and injects commit and probe faults, scripted or seeded.
//! - [`WatermarkTable`]: a target that keeps only a watermark, like Delta's `txn`.
//! - [`HistoryTable`]: a target that checks a key only in the versions since the commit was prepared, like a
//!   Lance adapter reading manifests.
//! - [`SplitMix64`]: the seeded generator behind every random schedule.
//! - [`cases`], [`seed`], [`Shard`]: the randomized suites' case count (one variable, `SINKPOINT_CASES`), their
//!   printed seeds, and the shards a long suite is split into so that it runs on every core.
//! - [`FaultStore`]: an object store wrapper that fails puts before or after they land, holds them at a gate,
//!   adds latency, counts requests, bytes and listed objects, and crashes at operation k.
//! - [`ManualClock`]: a clock that moves only when the test says so.
//! - [`s3_endpoint`], [`create_s3_bucket`], [`say_s3_skipped`]: the S3-API test server (moto) `.ci/run` starts,
//!   for tests on S3, and the one visible line a test binary prints when it is absent.
//! - [`conformance`]: the suite an adapter author runs against their own [`crate::Target`] (not a stable part of
//!   the public API; may change in any release).
//! - [`ProcessCrash`]: one simulated process's crash point, shared by a [`CrashBackend`], a [`FaultStore`] and
//!   the crash-point runner's target wrapper, so a process dies at its k-th I/O operation whichever does it.
//! - [`crash`]: the exhaustive crash-point runner: a scripted [`crash::Workload`] crashed at every I/O
//!   operation, recovered, checked against its crash-free run and finished.
//! - [`RawProtocol`]: the commit protocol's raw steps, crate-private on [`crate::Store`], for tests that drive
//!   the protocol by hand.
//! - [`RawLedger`]: the garbage ledger's forget, crate-private on [`crate::Store`] (the data-file collector's
//!   step), for tests that forget an entry by hand.
//! - [`limits`]: the few crate-private tuning limits the suites measure against (the public ones are in
//!   [`crate::limits`]).

mod backend;
mod cases;
mod clock;
pub mod conformance;
pub mod crash;
mod faults;
#[doc(hidden)]
pub mod fuzz;
mod ledger;
mod moto;
mod process;
mod protocol;
mod rng;
mod target;

pub use backend::CrashBackend;
pub use cases::{CASES_VAR, SHARDS, Shard, cases, seed};
pub use clock::ManualClock;
pub use faults::{Counts, FaultStore, Journal, Mutation, PutFault};
pub use ledger::RawLedger;
pub use moto::{create_s3_bucket, s3_endpoint, say_s3_skipped};
pub use process::{Component, ProcessCrash};
pub use protocol::RawProtocol;
pub use rng::SplitMix64;
pub use target::{CommitFault, FaultyTarget, HistoryTable, ProbeFault, WatermarkTable};

/// White-box access to the local log's format, for the suites that damage or decode frames and records by hand.
/// Not for adapters: the log format is private to the core, and these may change in any release.
#[doc(hidden)]
pub mod whitebox {
    pub use crate::wal::frame;
    pub use crate::wal::record::Record;
}

/// Crate-private tuning limits a suite measures against (how many log records a store keeps, how many mirror puts
/// it tries), copied here for tests: not part of the API, like the rest of the testkit. Each is the value of the
/// [`crate::limits`] constant of the same name.
pub mod limits {
    /// How many log records the local log keeps behind the materialised tables without a mirror: at least this
    /// many and fewer than twice this many.
    pub const LOG_RECORDS_RETAINED_MAX: u64 = crate::limits::LOG_RECORDS_RETAINED_MAX;
    /// How long the mirror's uploader holds a segment nobody waits for, in milliseconds.
    pub const MIRROR_LINGER_MS: u64 = crate::limits::MIRROR_LINGER_MS;
    /// The most groups a synchronous mirror lets queue before the writer waits for room.
    pub const MIRROR_QUEUED_GROUPS_MAX: usize = crate::limits::MIRROR_QUEUED_GROUPS_MAX;
    /// The most times one mirror put is resolved after an ambiguous failure before the store is poisoned.
    pub const MIRROR_PUT_ATTEMPTS_MAX: u32 = crate::limits::MIRROR_PUT_ATTEMPTS_MAX;
}
