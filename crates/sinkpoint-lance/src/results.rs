//! Worker-side write results: fragments written before the table commit, carried as sinkpoint results.

use std::sync::Arc;

use arrow_array::RecordBatch;
use lance::Dataset;
use lance::dataset::transaction::Operation;
use lance::dataset::{InsertBuilder, WriteMode, WriteParams};
use lance_table::format::{Fragment, pb};
use prost::Message;
use sinkpoint::{Format, WriteResult};

/// The format tag of a fragment in the JSON form pylance's `FragmentMetadata.to_json()` produces.
pub const FRAGMENT_JSON_FORMAT: &str = "lance-fragment-json";

/// Writes `batches` into `dataset`'s data directory without committing, one [`WriteResult`] per fragment
/// ([`Format::Lance`]: the protobuf bytes of `pb::DataFragment`). The driver commits them with
/// [`crate::LanceTarget`]; until then they are invisible to readers.
pub async fn write_fragments(dataset: Arc<Dataset>, batches: Vec<RecordBatch>) -> lance::Result<Vec<WriteResult>> {
    let params = WriteParams { mode: WriteMode::Append, ..WriteParams::default() };
    let transaction = InsertBuilder::new(dataset).with_params(&params).execute_uncommitted(batches).await?;
    let Operation::Append { fragments } = transaction.operation else {
        return Err(lance::Error::invalid_input("an uncommitted append produced a non-Append operation"));
    };
    fragments
        .iter()
        .map(|fragment| {
            let bytes = pb::DataFragment::from(fragment).encode_to_vec();
            WriteResult::new(Format::Lance, bytes).map_err(|e| lance::Error::invalid_input(e.to_string()))
        })
        .collect()
}

/// The fragment a write result carries: protobuf ([`Format::Lance`]) or pylance JSON
/// ([`FRAGMENT_JSON_FORMAT`]). `Err` says why the bytes are not a fragment.
pub fn decode_fragment(result: &WriteResult) -> Result<Fragment, String> {
    match result.format() {
        Format::Lance => {
            let proto = pb::DataFragment::decode(result.bytes()).map_err(|e| format!("not a DataFragment: {e}"))?;
            Fragment::try_from(proto).map_err(|e| format!("not a valid fragment: {e}"))
        }
        Format::Other(tag) if tag == FRAGMENT_JSON_FORMAT => {
            serde_json::from_slice(result.bytes()).map_err(|e| format!("not FragmentMetadata JSON: {e}"))
        }
        other => Err(format!("a Lance target cannot commit a {other:?} write result")),
    }
}
