//! The local write-ahead log: the frame codec, the logical records, the redb tables they are applied to, and
//! the group-commit writer.

pub(crate) mod apply;
pub mod frame;
pub(crate) mod half_created;
pub(crate) mod record;
pub(crate) mod tables;
pub(crate) mod verify;
pub(crate) mod writer;
