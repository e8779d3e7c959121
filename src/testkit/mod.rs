//! The testkit (feature `testkit`): the seams the crash and model suites drive, documented so that an adapter
//! author can run the same suites against their own target.
//!
//! - [`CrashBackend`]: a redb storage backend with a live image and a durable image advanced only by sync,
//!   counting I/O operations and freezing at operation k, so recovery reopens exactly what a crash leaves.

mod backend;

pub use backend::CrashBackend;
