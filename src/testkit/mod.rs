//! The testkit (feature `testkit`): the seams the crash, model and protocol suites drive, documented so that
//! an adapter author can run the same suites against their own target.
//!
//! - [`CrashBackend`]: a redb storage backend with a live image and a durable image advanced only by sync,
//!   counting I/O operations and freezing at operation k, so recovery reopens exactly what a crash leaves.
//! - [`FaultyTarget`]: wraps any [`crate::Target`] and injects commit and probe faults, scripted or seeded.
//! - [`WatermarkTable`]: a target that keeps only a watermark, like Delta's `txn`.
//! - [`SplitMix64`]: the seeded generator behind every random schedule.

mod backend;
mod rng;
mod target;

pub use backend::CrashBackend;
pub use rng::SplitMix64;
pub use target::{CommitFault, FaultyTarget, ProbeFault, WatermarkTable};
