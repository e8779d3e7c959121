//! A sinkpoint [`Target`](sinkpoint::Target) over Delta Lake tables, on delta-rs: exactly-once commits of data
//! files that workers wrote before the table commit.
//!
//! - [`write_data_file`] is the worker side: Arrow batches in, one Parquet file in the table's directory out,
//!   as a [`WriteResult`](sinkpoint::WriteResult) tagged [`Format::Delta`](sinkpoint::Format::Delta) carrying
//!   the file's Delta `Add` action ([`encode_add`] for a file written any other way, [`decode_add`] back).
//! - [`DeltaTarget`] commits key n as one blind append of every `Add` of the key, with the Delta action
//!   `txn { appId: "sinkpoint.job.<job>", version: n }` and `commitInfo` fields naming the job, the key, the
//!   epoch and the checkpoint ids. The commit is built on a snapshot V whose `txn` for the job is n − 1 (the key
//!   check), with delta-rs's retries off, through [`fence::NextVersionOnly`], a log store that lets only version
//!   V + 1 through: a racing writer and a zombie meet a `txn` of n and are refused; a re-send of this very commit
//!   after its answer was lost finds it in the key's commit file and answers `Committed`, writing nothing. The
//!   probe reads the job's `txn` in the latest snapshot: exact, and one snapshot load whatever the table's
//!   history (checkpoints and log cleanup keep it); for a key in flight it also reads the key's own commit file,
//!   when it is among the few since the intent, for the checkpoint ids.
//! - [`DeltaDataFiles`] ([`DeltaTarget::data_files`]) tells [`sinkpoint::gc::collect_data_files`] which file a
//!   result names and which ones the table still references, so that the files of dropped attempts are deleted
//!   and nothing a reader may open is.
//!
//! delta-rs uses `object_store` 0.13, the core 0.14: the target opens the table by URI through delta-rs's own
//! storage, never through the store's `Arc<dyn ObjectStore>`.
//!
//! The shape of a job (the whole of it, with crash flags, is `examples/delta_job.rs`):
//!
//! ```text
//! worker:  result = write_data_file(target.object_store()?, &batches)   // a data file, invisible to readers
//!          store.stage(&id, StagePart::new(attempt, part).keys(..).results(vec![result])); store.seal(&id, parts)
//! driver:  let target = DeltaTarget::new(uri);
//!          Committer::new(&store, &target).recover(); ...; Committer::new(&store, &target).finish()
//! ```
//!
//! The design, and why each race ends with one commit, is in the repository's `docs/protocols/delta.md`.

#![forbid(unsafe_code)]
#![deny(missing_docs, unreachable_pub, missing_debug_implementations)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod fence;
mod files;
pub mod limits;
mod props;
mod results;
mod target;

pub use files::DeltaDataFiles;
pub use results::{ADD_FORMAT_VERSION, decode_add, encode_add, write_data_file};
pub use target::DeltaTarget;
#[doc(hidden)]
pub use target::LogStoreWrapper;
