//! The testkit (feature `testkit`): the seams the crash and model suites drive, documented so that an adapter
//! author can run the same suites against their own target.
//!
//! - [`CrashBackend`]: a redb storage backend with a live image and a durable image advanced only by sync,
//!   counting I/O operations and freezing at operation k, so recovery reopens exactly what a crash leaves.
//! - [`FaultStore`]: an object store wrapper that fails puts before or after they land, holds them at a gate,
//!   adds latency, counts requests and bytes, and crashes at operation k.
//! - [`ManualClock`]: a clock that moves only when the test says so.

mod backend;
mod clock;
mod faults;

pub use backend::CrashBackend;
pub use clock::ManualClock;
pub use faults::{Counts, FaultStore, PutFault};
