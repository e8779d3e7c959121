//! The settings of a store: plain data a caller may build, compare or deserialise, kept apart from the injected
//! parts of [`super::StoreBuilder`].

use crate::types::{JobId, TargetIdentity};
use crate::wal::tables::Identity;

/// How durable a `stage` call is before it returns.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum StagingDurability {
    /// fsynced before `stage` returns (the default).
    #[default]
    Immediate,
    /// Returned after the in-memory commit, without an fsync: **lost on a crash** until a later durable call
    /// (any seal, restart, abort or commit-protocol call is durable and makes every earlier call durable too).
    /// Never applies to anything but `stage`.
    None,
}

/// The settings of a store: plain data, kept apart from the injected components of [`crate::StoreBuilder`].
#[derive(Clone, Debug)]
pub struct StoreSettings {
    /// The job; recorded at create, checked at every open.
    pub job: JobId,
    /// The target's identity; recorded at create, checked at every open.
    pub target: TargetIdentity,
    /// The durability of `stage` calls.
    pub staging_durability: StagingDurability,
    /// Whether `open` may create a store that does not exist yet.
    pub create_if_missing: bool,
    /// The most bytes redb's page cache may hold ([`crate::limits::STORE_CACHE_BYTES_DEFAULT`] by default):
    /// the store's memory stays bounded however many keys it holds.
    pub cache_bytes: usize,
}

impl StoreSettings {
    /// Who the store must belong to, for both opens.
    pub(crate) fn identity(&self) -> Identity {
        Identity { job: self.job.clone(), target: self.target.clone(), create_if_missing: self.create_if_missing }
    }
}
