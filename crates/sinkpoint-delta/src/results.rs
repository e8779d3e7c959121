//! Worker-side write results: Delta `Add` actions for data files written before the table commit, carried as
//! sinkpoint results.
//!
//! A result's bytes are the JSON object `{"v":1,"add":{…}}`: [`ADD_FORMAT_VERSION`] and the `Add` action as the
//! Delta log spells it (camelCase, the path percent-encoded), tagged [`Format::Delta`]. A Python worker that
//! wrote its own Parquet file stages the same object with the `add` it would put in a log.

use std::sync::Arc;

use arrow_array::RecordBatch;
use deltalake::kernel::Add;
use deltalake::logstore::object_store::{ObjectStore, ObjectStoreExt as _, PutMode, PutOptions, path::Path};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use serde::{Deserialize, Serialize};
use sinkpoint::{Format, WriteResult};

/// The encoding of a Delta write result; a result of another version is refused, never guessed.
pub const ADD_FORMAT_VERSION: u32 = 1;

/// The envelope of one `Add` in a write result.
#[derive(Serialize, Deserialize)]
struct Envelope {
    v: u32,
    add: Add,
}

/// The write result carrying `add`, [`Format::Delta`]. Refused (`InvalidInput`) for an `Add` the adapter would
/// refuse to commit ([`decode_add`] says why) or one over the store's result size limit.
pub fn encode_add(add: &Add) -> sinkpoint::Result<WriteResult> {
    check_add(add).map_err(sinkpoint::Error::invalid_input)?;
    let bytes = serde_json::to_vec(&Envelope { v: ADD_FORMAT_VERSION, add: add.clone() })
        .map_err(|e| sinkpoint::Error::invalid_input(format!("the Add of {} does not serialise: {e}", add.path)))?;
    WriteResult::new(Format::Delta, bytes)
}

/// The `Add` a write result carries. `Err` says why the bytes are not one this adapter commits: another format
/// or version, or an `Add` that is not a plain new data file of the table's own directory.
pub fn decode_add(result: &WriteResult) -> Result<Add, String> {
    if result.format() != &Format::Delta {
        return Err(format!("a Delta target cannot commit a {:?} write result", result.format()));
    }
    let envelope: Envelope =
        serde_json::from_slice(result.bytes()).map_err(|e| format!("not a Delta Add write result: {e}"))?;
    if envelope.v != ADD_FORMAT_VERSION {
        return Err(format!(
            "a Delta Add write result of version {}, this adapter reads version {ADD_FORMAT_VERSION}: commit with \
             the sinkpoint version that staged it",
            envelope.v
        ));
    }
    check_add(&envelope.add)?;
    Ok(envelope.add)
}

/// Whether `add` is what a worker may stage: a new data file (`dataChange`), no deletion vector, a size, and a
/// path relative to the table's root that stays inside it.
fn check_add(add: &Add) -> Result<(), String> {
    if !is_relative_inside(&add.path) {
        return Err(format!(
            "the Add names {:?}: a staged data file's path must be relative to the table's root, without `..`, \
             a scheme or a leading `/`",
            add.path
        ));
    }
    if !add.data_change {
        return Err(format!("the Add of {} has dataChange false: a staged data file is new data", add.path));
    }
    if add.deletion_vector.is_some() {
        return Err(format!("the Add of {} has a deletion vector: a staged data file is whole", add.path));
    }
    if add.size < 0 {
        return Err(format!("the Add of {} has size {}", add.path, add.size));
    }
    Ok(())
}

/// Whether `path` is a relative path of plain segments.
pub(crate) fn is_relative_inside(path: &str) -> bool {
    !path.is_empty()
        && !path.starts_with('/')
        && !path.contains("://")
        && !path.contains('\\')
        && !path.chars().any(char::is_control)
        && path.split('/').all(|segment| !segment.is_empty() && segment != "." && segment != "..")
}

/// Writes `batches` as one Parquet data file in the root of the table whose storage is `store` (delta-rs's
/// object store for the table, [`crate::DeltaTarget::object_store`]), under a name no other write takes, and
/// returns its [`Add`] as a write result. The file is invisible to readers until the driver commits it with
/// [`crate::DeltaTarget`]. The table must be unpartitioned; the `Add`'s stats hold the row count.
pub async fn write_data_file(store: Arc<dyn ObjectStore>, batches: &[RecordBatch]) -> sinkpoint::Result<WriteResult> {
    let Some(first) = batches.first() else {
        return Err(sinkpoint::Error::invalid_input("a data file needs at least one batch"));
    };
    let parquet = encode_parquet(first.schema(), batches)?;
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    let name = format!("part-00000-{}-c000.snappy.parquet", uuid::Uuid::new_v4());
    let size =
        i64::try_from(parquet.len()).map_err(|_| sinkpoint::Error::invalid_input("a data file over i64::MAX bytes"))?;
    // A data file is written once: a create-only put refuses a name that exists (the collector relies on it).
    let options = PutOptions { mode: PutMode::Create, ..PutOptions::default() };
    store
        .put_opts(&Path::from(name.as_str()), parquet.into(), options)
        .await
        .map_err(|e| sinkpoint::Error::target_with_source(format!("writing the data file {name}"), e))?;
    // The storage's own clock, as Delta means it ("the time this file was created"): no clock of ours to skew.
    let written = store
        .head(&Path::from(name.as_str()))
        .await
        .map_err(|e| sinkpoint::Error::target_with_source(format!("reading back the data file {name}"), e))?;
    let modification_time = written.last_modified.timestamp_millis();
    let add = Add {
        path: name,
        size,
        modification_time,
        data_change: true,
        stats: Some(format!("{{\"numRecords\":{rows}}}")),
        ..Add::default()
    };
    encode_add(&add)
}

/// The Parquet bytes of `batches` (snappy-compressed, as Delta writers commonly write them).
fn encode_parquet(schema: arrow_schema::SchemaRef, batches: &[RecordBatch]) -> sinkpoint::Result<Vec<u8>> {
    let failed = |e: parquet::errors::ParquetError| sinkpoint::Error::invalid_input(format!("encoding Parquet: {e}"));
    let properties = WriterProperties::builder().set_compression(Compression::SNAPPY).build();
    let mut bytes = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut bytes, schema, Some(properties)).map_err(failed)?;
    for batch in batches {
        writer.write(batch).map_err(failed)?;
    }
    writer.close().map_err(failed)?;
    Ok(bytes)
}
