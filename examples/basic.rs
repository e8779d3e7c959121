//! The shape of sinkpoint in thirty lines: stage a task's write results, seal them, commit them once.
//!
//! ```text
//! cargo run --example basic
//! ```

use sinkpoint::Committer;
use sinkpoint::DirTable;
use sinkpoint::{Attempt, CheckpointId, JobId, Part, StagePart, Store, TargetIdentity};

#[tokio::main]
async fn main() -> sinkpoint::Result<()> {
    let dir = tempfile::tempdir()?;
    let table = DirTable::local(dir.path().join("table"))?;
    let store = Store::builder(JobId::new("basic")?, TargetIdentity::new("file:///basic-table")?)
        .path(dir.path().join("basic.redb"))
        .open()
        .await?;
    let committer = Committer::new(&store, &table);
    committer.recover().await?; // after a crash: F1, F2 and unknown outcomes are resolved here

    for input in ["a.csv", "b.csv"] {
        let key = format!("s3://in/{input}").into_bytes();
        if store.is_processed(&key)? {
            continue; // a retried job skips what is already sealed
        }
        let id = CheckpointId::new(input)?; // deterministic: a retried task maps to the same checkpoint
        let result = table.write_data_file(&format!("{input}.rows"), b"rows".to_vec()).await?;
        // One stage call: part 0 of the first attempt, with the input's key and its data file.
        let part = StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key]).results(vec![result]);
        store.stage(&id, part).await?;
        store.seal(&id, 1).await?; // one part: the keys are now processed
    }
    let report = committer.finish().await?; // one atomic table commit, then the job's end recorded: reruns skip it all
    store.close_async().await; // the file closed cleanly (a store dropped inside the runtime is not)
    let keys: Vec<String> = report.committed_keys.iter().map(u64::to_string).collect();
    println!("committed under key {}", keys.join(", "));
    Ok(())
}
