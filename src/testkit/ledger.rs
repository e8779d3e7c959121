//! The garbage ledger's raw step, for tests that drive it by hand (a forget of a given entry, a forget refused
//! for bad input). Users never see it: on [`Store`] it is crate-private, because an entry forgotten before its
//! files are deleted leaves them named nowhere, never collected. Only [`crate::gc::collect_data_files`] calls it
//! in production.

use async_trait::async_trait;

use crate::error::Result;
use crate::gc::GarbageRef;
use crate::store::Store;

/// The data-file collector's step on a [`Store`]'s garbage ledger, for tests. Import it
/// (`use sinkpoint::testkit::RawLedger;`) and call it as a method.
#[async_trait]
pub trait RawLedger {
    /// Removes `entries` from the garbage ledger, durably (and mirrored before it returns); entries already gone
    /// are skipped. 1 to [`crate::limits::GARBAGE_FORGET_ENTRIES_MAX`] entries a call.
    async fn forget_garbage(&self, entries: &[GarbageRef]) -> Result<()>;
}

#[async_trait]
impl RawLedger for Store {
    async fn forget_garbage(&self, entries: &[GarbageRef]) -> Result<()> {
        Store::forget_garbage(self, entries).await
    }
}
