//! Target adapters shipped with the crate. [`DirTable`] is the reference: an append-only table in a
//! directory (or any object store), used by the tests and the quick-start job.

mod dir;

pub use dir::{DirCommitRecord, DirTable};
