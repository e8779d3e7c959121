//! The changing commands: each opens the store as its writer (refused while a job holds it), records the change
//! with who made it and why, and closes.

use std::path::Path;

use sinkpoint::inspect::{Inspector, StoreSummary};
use sinkpoint::mirror::MirrorSettings;
use sinkpoint::{CheckpointId, JobId, Resolution, Store, WriteResult};

use crate::exit::{Code, Failure};
use crate::progress::Progress;
use crate::render::{key_text, print_json, result_json};
use crate::source::{check_writable, mirror, open_writer};
use crate::{TableCheck, Writable};
use serde_json::{Value, json};

/// Prints a changing command's outcome: `text` for a person, or `value` (with `"command"` and `"changed"` added) as
/// one JSON object with `--json`.
fn report(json: bool, command: &str, changed: bool, text: &str, mut value: Value) {
    if json {
        value["command"] = Value::from(command);
        value["changed"] = Value::from(changed);
        value["outcome"] = Value::from(text);
        print_json(&value);
    } else {
        println!("{text}");
    }
}

/// `who: why`, as the log records it.
fn attributed(reason: &str) -> String {
    let user = std::env::var("USER").unwrap_or_else(|_| "unknown-user".into());
    let host = std::fs::read_to_string("/etc/hostname").map(|h| h.trim().to_string()).unwrap_or_default();
    format!("sinkpoint CLI, {user}@{host}: {reason}")
}

/// Every refusal a changing command makes before it writes (see [`check_writable`]): the store's summary.
async fn checked(store: &Writable) -> Result<StoreSummary, Failure> {
    check_reason(store)?;
    check_writable(&store.store, store.mirror.as_deref(), store.take_over).await
}

/// Opens the store, `checked` already, as its writer, makes the change and closes it.
async fn with_writer<T>(
    store: &Writable,
    checked: StoreSummary,
    change: impl AsyncFnOnce(&Store, &str) -> sinkpoint::Result<T>,
) -> Result<T, Failure> {
    let opened = open_writer(&store.store, checked, store.mirror.as_deref()).await?;
    let result = change(&opened, &attributed(&store.reason)).await;
    // Closing waits for the writer (and the mirror, in synchronous mode) to finish what was recorded.
    opened.close_async().await;
    Ok(result?)
}

/// Whether the DirTable at `table.table` holds a commit under `job`'s key `key`; `None` when no table was given
/// (the operator's confirmation then stands in for it, see [`unconfirmed`]).
async fn table_holds(table: &TableCheck, job: &JobId, key: u64) -> Result<Option<bool>, Failure> {
    let Some(url) = &table.table else { return Ok(None) };
    let (objects, prefix) = crate::source::object_store_at("--table", url)?;
    let dir = sinkpoint::DirTable::new(objects, prefix);
    Ok(Some(crate::source::dir_table_holds(&dir, url, job, key).await?))
}

/// Refuses a change that loses rows on a wrong word unless the operator confirmed they checked the table.
fn unconfirmed(table: &TableCheck, key: u64, what: &str) -> Result<(), Failure> {
    if table.i_checked_the_table {
        return Ok(());
    }
    Err(Failure::new(
        Code::Usage,
        format!(
            "this {what}. Check the table for key {key} first: give --table URL for a DirTable, or look yourself \
             (Lance: the table metadata's `sinkpoint.job.<job>` mark names the job's last landed key) and add \
             --i-checked-the-table (nothing was changed)"
        ),
    ))
}

/// The CLI prefixes who ran it, so an empty reason would reach the store as a non-empty one.
fn check_reason(store: &Writable) -> Result<(), Failure> {
    if store.reason.trim().is_empty() {
        return Err(Failure::new(Code::Usage, "--reason is empty: say why, for the next operator"));
    }
    Ok(())
}

pub(crate) async fn resolve(
    store: &Writable,
    table: &TableCheck,
    key: u64,
    resolution: Resolution,
) -> Result<Code, Failure> {
    // Refused before the store is opened for writing, so a refused verdict leaves the file as it was.
    let summary = checked(store).await?;
    let job = summary.job.clone();
    let inspector = Inspector::open_file(&store.store)?;
    inspector.check_verdict(key, resolution)?;
    let settled = inspector.commit(key)?.is_some_and(|c| match resolution {
        Resolution::Committed => matches!(c.state, sinkpoint::CheckpointState::Committed { .. }),
        Resolution::NotCommitted => c.awaits_recommit,
    });
    drop(inspector);
    let fields = json!({ "key": key, "verdict": crate::render::resolution_name(resolution) });
    if settled {
        let text = format!("key {key} already stands {}: nothing changed", verdict_text(resolution));
        report(store.json, "resolve", false, &text, fields);
        return Ok(Code::Ok);
    }
    if resolution == Resolution::Committed {
        match table_holds(table, &job, key).await? {
            Some(false) => {
                return Err(Failure::new(
                    Code::Refused,
                    format!(
                        "the table holds no commit under key {key}: resolving it committed would lose its rows for \
                         good. Resolve it not-committed (the next run re-sends it once) (nothing was changed)"
                    ),
                ));
            }
            Some(true) => {}
            None => unconfirmed(
                table,
                key,
                "marks its checkpoints Committed without sending them: if the table does not hold the key, their \
                 rows are lost for good",
            )?,
        }
    }
    with_writer(store, summary, async |s, why| s.operator().resolve(key, resolution, why).await).await?;
    let text = match resolution {
        Resolution::Committed => format!("key {key} resolved committed: its checkpoints are Committed"),
        Resolution::NotCommitted => {
            format!("key {key} resolved not-committed: the next run of the job re-sends it once")
        }
    };
    report(store.json, "resolve", true, &text, fields);
    Ok(Code::Ok)
}

fn verdict_text(resolution: Resolution) -> &'static str {
    match resolution {
        Resolution::Committed => "committed",
        Resolution::NotCommitted => "resolved not-committed (the next run re-sends it)",
    }
}

pub(crate) async fn unbind(store: &Writable, table: &TableCheck, key: u64) -> Result<Code, Failure> {
    let summary = checked(store).await?;
    let job = summary.job.clone();
    match table_holds(table, &job, key).await? {
        Some(true) => {
            return Err(Failure::new(
                Code::Refused,
                format!(
                    "the table holds a commit under key {key}: un-bound, the key would be refused by every later run. \
                     If it holds this key's checkpoints, resolve it committed; if it holds others, use settle-landed \
                     with the ids it holds (nothing was changed)"
                ),
            ));
        }
        Some(false) => {}
        None => unconfirmed(
            table,
            key,
            "puts its checkpoints back to Sealed for a later key: if the table holds the key, every later run of the \
             job is refused",
        )?,
    }
    with_writer(store, summary, async |s, why| s.operator().unbind(key, why).await).await?;
    let text =
        format!("key {key} un-bound: its checkpoints are Sealed again; the next run commits them under a fresh probe");
    report(store.json, "unbind", true, &text, json!({ "key": key }));
    Ok(Code::Ok)
}

pub(crate) async fn settle_landed(store: &Writable, key: u64, ids: &[String]) -> Result<Code, Failure> {
    let ids = ids.iter().map(|i| CheckpointId::new(i.as_str())).collect::<sinkpoint::Result<Vec<_>>>()?;
    with_writer(store, checked(store).await?, async |s, why| s.operator().settle_landed(key, &ids, why).await).await?;
    let text = format!(
        "key {key} settled: {} checkpoints Committed under it as the table holds them; the key's others are Sealed \
         again and the next run commits them under a later key",
        ids.len()
    );
    let names: Vec<&str> = ids.iter().map(CheckpointId::as_str).collect();
    report(store.json, "settle-landed", true, &text, json!({ "key": key, "committed": names }));
    Ok(Code::Ok)
}

pub(crate) async fn force_abort(store: &Writable, ids: &[String]) -> Result<Code, Failure> {
    let ids = ids.iter().map(|i| CheckpointId::new(i.as_str())).collect::<sinkpoint::Result<Vec<_>>>()?;
    let dropped =
        with_writer(store, checked(store).await?, async |s, why| s.operator().force_abort(&ids, why).await).await?;
    let mut text = format!(
        "aborted {} checkpoints; their inputs will be read again (a checkpoint adopted from shared staging once the \
         job's next adoption round has released its claim). Their write results, below, are in the garbage ledger: \
         never delete their files by hand (a table version may use them); the collector deletes each once no version \
         does (`sinkpoint gc --store PATH --table URL` for a DirTable; for Lance, `LanceSink.collect_orphans` or \
         `Driver.collect_data_files(LanceDataFiles(uri))`):",
        ids.len()
    );
    for result in &dropped {
        text.push_str(&format!("\n  {}", result_text(result)));
    }
    let names: Vec<&str> = ids.iter().map(CheckpointId::as_str).collect();
    let results: Vec<Value> = dropped.iter().map(result_json).collect();
    report(store.json, "force-abort", true, &text, json!({ "aborted": names, "write_results": results }));
    Ok(Code::Ok)
}

fn result_text(result: &WriteResult) -> String {
    format!("{:?} {}", result.format(), key_text(result.bytes()))
}

pub(crate) async fn restore(url: &str, to: &Path, take_over: bool, json: bool) -> Result<Code, Failure> {
    if !take_over {
        return Err(Failure::new(
            Code::Usage,
            "restore takes the mirror over: a writer still running on it is fenced and stops. Stop the job first, \
             then add --take-over (to look without taking over, use `sinkpoint status --mirror URL`)",
        ));
    }
    if to.exists() {
        return Err(Failure::new(Code::Usage, format!("{} exists: restore into a new path", to.display())));
    }
    // The restore has no counts to give while it reads: a spinner names each phase (see `crate::progress`).
    let progress = Progress::start(json, "reading the mirror");
    let summary = crate::source::mirror_inspector(url).await?.summary()?;
    let (object_store, prefix) = mirror(url)?;
    progress.phase(&format!("restoring into {} (taking the mirror over)", to.display()));
    let store = Store::builder(summary.job.clone(), summary.target.clone())
        .path(to)
        .mirror(object_store, prefix, MirrorSettings::default())
        .open()
        .await?;
    let epoch = store.epoch();
    store.close_async().await;
    progress.phase("verifying the restored store");
    let checked = Inspector::open_file(to)?.verify()?;
    drop(progress);
    let text = format!(
        "restored job {} into {} as epoch {epoch}: {} checkpoints, {} commit keys; run the job with this file",
        summary.job,
        to.display(),
        checked.checkpoints,
        checked.commits
    );
    let fields = json!({
        "job": summary.job.as_str(), "to": to.display().to_string(), "epoch": epoch,
        "checkpoints": checked.checkpoints, "commit_keys": checked.commits,
    });
    report(json, "restore", true, &text, fields);
    Ok(Code::Ok)
}
