//! A sinkpoint [`Target`](sinkpoint::Target) over Lance datasets: exactly-once commits of fragments that workers
//! wrote before the table commit.
//!
//! - [`write_fragments`] is the worker side: Arrow batches in, uncommitted fragments out, as
//!   [`WriteResult`](sinkpoint::WriteResult)s tagged [`Format::Lance`](sinkpoint::Format::Lance) (protobuf
//!   `DataFragment` bytes); [`FRAGMENT_JSON_FORMAT`] tags pylance's `FragmentMetadata.to_json()` form, so a
//!   Python worker stages the fragments it wrote itself.
//! - [`LanceTarget`] commits key n as one Append of every fragment of the key, with transaction properties naming
//!   the job, the key, the epoch and the checkpoint ids. Lance 14.0.2 rebases every Append onto the latest
//!   version and has no expected-version precondition, so the commit goes through [`fence::NextVersionOnly`], a
//!   commit handler that lets only manifest version V + 1 through (V being the version the key check read), with
//!   Lance's retries off. Its probe reads only the versions since the commit's intent.
//! - [`LanceTarget::cleanup_old_versions`] is Lance's cleanup keeping the versions a probe may still read.
//! - [`LanceDataFiles`] ([`LanceTarget::data_files`]) tells [`sinkpoint::gc::collect_data_files`] which data
//!   files a result names and which ones every version of the dataset still references, so that the files of
//!   dropped attempts are deleted and nothing a reader may open is.
//!
//! The shape of a job (the whole of it, with crash flags, is `examples/lance_job.rs`):
//!
//! ```text
//! worker:  results = write_fragments(dataset, batches)            // data files, invisible to readers
//!          store.stage(&id, StagePart::new(attempt, part).keys(..).results(results)); store.seal(&id, parts)
//! driver:  let target = LanceTarget::new(uri);
//!          Committer::new(&store, &target).recover(); ...; Committer::new(&store, &target).finish()
//! ```
//!
//! The design, and why each race ends with one commit, is in the repository's
//! `docs/protocols/lance.md`.

#![forbid(unsafe_code)]
#![deny(missing_docs, unreachable_pub, missing_debug_implementations)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod fence;
mod files;
pub mod limits;
#[doc(hidden)]
pub mod mark;
mod props;
mod results;
mod target;

pub use files::LanceDataFiles;
pub use results::{FRAGMENT_JSON_FORMAT, decode_fragment, write_fragments};
pub use target::LanceTarget;
