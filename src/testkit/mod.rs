//! The testkit (feature `testkit`): the seams the crash and model suites drive, documented so that an adapter
//! author can run the same suites against their own target.
//!
//! - [`CrashBackend`]: a redb storage backend with a live image and a durable image advanced only by sync,
//!   counting I/O operations and freezing at operation k, so recovery reopens exactly what a crash leaves.
//! - [`crash`]: the exhaustive crash-point runner: a scripted [`crash::Workload`] crashed at every I/O
//!   operation, recovered, checked against its crash-free run and finished.
//! - [`fuzz`]: the logic of the fuzz targets in `fuzz/`, callable on stable from plain tests.

mod backend;
pub mod crash;
pub mod fuzz;

pub use backend::CrashBackend;
