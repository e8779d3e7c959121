//! The local write-ahead log: the frame codec, the logical records, the redb tables they are applied to, and
//! the group-commit writer.

pub(crate) mod apply;
// The frame codec and the records are `pub` items so that `testkit::whitebox` can re-export them to the suites
// that damage them by hand; without the testkit nothing outside the crate reaches them.
#[cfg_attr(not(any(test, feature = "testkit")), allow(unreachable_pub))]
pub mod frame;
pub(crate) mod fresh;
pub(crate) mod half_created;
pub(crate) mod operator_records;
#[cfg_attr(not(any(test, feature = "testkit")), allow(unreachable_pub))]
pub(crate) mod record;
pub(crate) mod tables;
pub(crate) mod verify;
pub(crate) mod writer;
