//! The commit protocol: the [`Target`] contract every table adapter meets, and the committer that drives
//! sealed checkpoints into the target exactly once, including recovery after a crash.
//!
//! - **F1**: the target commit landed but marking the checkpoints committed did not. Recovery probes the
//!   recorded key, finds it with the recorded set, and only marks.
//! - **F2**: the checkpoints were sealed (and maybe recorded under a key) but the target commit failed or
//!   never ran. Recovery probes, finds nothing, and commits the retained results under the same key.
//! - **U**: the target's answer is unknown. The key goes to CommitUnknown and is never re-committed until a
//!   probe answers; nothing is assumed either way.
//!
//! [`Target`], its answers and [`Committer`] are at the crate's root (`sinkpoint::Committer`); this module holds
//! what the committer reports and its crash hooks.

pub(crate) mod committer;
pub(crate) mod target;

pub(crate) use committer::Committer;
pub use committer::{Blocked, CommitReport, CrashHook, RecoveryReport, crash_points};
pub(crate) use target::{CommitOutcome, ProbeOutcome, Target, TargetCommit};
