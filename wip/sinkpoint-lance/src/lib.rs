//! A sinkpoint [`Target`](sinkpoint::Target) over Lance datasets (issue 11).
//!
//! - [`LanceTarget`] commits key n as one Append of every fragment of the key, with transaction properties
//!   naming the job, the key, the epoch and the checkpoint ids. Lance 14.0.2 rebases every Append onto the
//!   latest version and has no expected-version precondition, so the commit goes through
//!   [`fence::NextVersionOnly`], a commit handler that lets only manifest version V + 1 through (V being the
//!   version the key check read), with Lance's retries off.
//! - [`write_fragments`] is the worker side: Arrow batches in, uncommitted fragments out, as
//!   [`WriteResult`](sinkpoint::WriteResult)s tagged [`Format::Lance`](sinkpoint::Format::Lance) (protobuf
//!   `DataFragment` bytes); [`FRAGMENT_JSON_FORMAT`] tags pylance's `FragmentMetadata.to_json()` form.

pub mod fence;
pub mod limits;
mod props;
mod results;
mod target;

pub use results::{FRAGMENT_JSON_FORMAT, decode_fragment, write_fragments};
pub use target::LanceTarget;
