//! The reading commands: nothing here writes.

use serde_json::json;
use sinkpoint::inspect::{OperatorRecord, StoreSummary};
use sinkpoint::{CheckpointId, StateFilter};

use crate::Source;
use crate::exit::{Code, Failure};
use crate::progress::Progress;
use crate::render;
use crate::source::{inspector, mirror_inspector};

pub(crate) async fn status(source: &Source) -> Result<Code, Failure> {
    let inspector = inspector(source).await?;
    let summary = inspector.summary()?;
    let mut records = inspector.operator_records()?;
    // With both the file and its mirror: the two must be one job's, and how far apart they are.
    let mirror = match (&source.store, &source.mirror) {
        (Some(path), Some(url)) => Some(compare_with_mirror(path, &summary, url, &mut records).await?),
        _ => None,
    };
    let last = records.last();
    let advice = render::advice(&summary, last);
    if source.json {
        let mut value = render::summary_json(&summary, &advice);
        value["source"] = json!(inspector.source());
        value["mirror_lag_records"] = json!(mirror.as_ref().map(render::MirrorRelation::lag));
        value["file_behind_mirror_records"] = json!(mirror.as_ref().map(render::MirrorRelation::behind));
        value["mirror_next_seq"] = json!(mirror.as_ref().map(|m| m.mirror_next_seq));
        value["mirror_epoch"] = json!(mirror.as_ref().map(|m| m.mirror_epoch));
        value["last_operator_record"] = last.map_or(json!(null), render::operator_json);
        render::print_json(&value);
    } else {
        print!("{}", render::summary_text(inspector.source(), &summary, mirror.as_ref(), last, &advice));
    }
    Ok(if advice.blocked { Code::Attention } else { Code::Ok })
}

/// Reads the mirror at `url` beside the file at `path`: refused when it is another job's (their sequence numbers
/// would be compared as if one log's); the mirror's operator records are merged into `records`.
async fn compare_with_mirror(
    path: &std::path::Path,
    file: &StoreSummary,
    url: &str,
    records: &mut Vec<OperatorRecord>,
) -> Result<render::MirrorRelation, Failure> {
    let inspector = mirror_inspector(url).await?;
    let mirror = inspector.summary()?;
    if (&mirror.job, &mirror.target) != (&file.job, &file.target) {
        return Err(Failure::new(
            Code::NotFound,
            format!(
                "the store file {} is job {}'s (target {}), but the mirror {url} is job {}'s (target {}): give \
                 this job's mirror",
                path.display(),
                file.job,
                file.target,
                mirror.job,
                mirror.target
            ),
        ));
    }
    records.extend(inspector.operator_records()?);
    records.sort_by_key(|r| (r.seq, r.epoch));
    records.dedup();
    Ok(render::MirrorRelation {
        file_next_seq: file.next_seq,
        file_epoch: file.epoch,
        mirror_next_seq: mirror.next_seq,
        mirror_epoch: mirror.epoch,
    })
}

pub(crate) async fn list(source: &Source, state: Option<StateFilter>) -> Result<Code, Failure> {
    let inspector = inspector(source).await?;
    let states = state.map_or(StateFilter::ALL.to_vec(), |s| vec![s]);
    let mut all = Vec::new();
    for state in states {
        all.extend(inspector.list(state)?);
    }
    all.sort_by(|a, b| a.id.cmp(&b.id));
    if source.json {
        render::print_json(&json!(all.iter().map(render::checkpoint_json).collect::<Vec<_>>()));
    } else {
        for info in &all {
            println!("{}", render::checkpoint_line(info));
        }
    }
    Ok(Code::Ok)
}

pub(crate) async fn show(source: &Source, id: &str) -> Result<Code, Failure> {
    let inspector = inspector(source).await?;
    let id = CheckpointId::new(id)?;
    let Some(info) = inspector.get(&id)? else {
        return Err(Failure::new(Code::NotFound, format!("no checkpoint {id} in {}", inspector.source())));
    };
    // One indexed read of the key's record; an error reading it is reported, not hidden.
    let key = render::state_key(info.state);
    let commit = key.map(|key| inspector.commit(key)).transpose()?.flatten();
    let records: Vec<OperatorRecord> = inspector
        .operator_records()?
        .into_iter()
        .filter(|r| r.names_checkpoint(&id) || key.is_some_and(|k| r.names_key(k)))
        .collect();
    if source.json {
        let mut value = render::checkpoint_json(&info);
        value["commit"] = commit.as_ref().map_or(json!(null), render::commit_json);
        value["operator_records"] = json!(records.iter().map(render::operator_json).collect::<Vec<_>>());
        render::print_json(&value);
    } else {
        print!("{}", render::checkpoint_text(&info, commit.as_ref(), &records));
    }
    Ok(Code::Ok)
}

pub(crate) async fn keys(source: &Source, prefix: &str, limit: Option<u64>) -> Result<Code, Failure> {
    let inspector = inspector(source).await?;
    let mut printed = 0;
    let mut out = Vec::new();
    for key in inspector.processed_keys() {
        let key = key?;
        if !key.starts_with(prefix.as_bytes()) {
            continue;
        }
        if limit.is_some_and(|l| printed >= l) {
            break;
        }
        printed += 1;
        if source.json {
            out.push(render::key_json(&key));
        } else {
            println!("{}", render::key_text(&key));
        }
    }
    if source.json {
        render::print_json(&json!(out));
    }
    Ok(Code::Ok)
}

pub(crate) async fn commits(source: &Source) -> Result<Code, Failure> {
    let inspector = inspector(source).await?;
    let commits = inspector.commits()?;
    let records = inspector.operator_records()?;
    let of = |key: u64| records.iter().filter(move |r| r.names_key(key));
    if source.json {
        let values = commits.iter().map(|commit| {
            let mut value = render::commit_json(commit);
            value["operator_records"] = json!(of(commit.key).map(render::operator_json).collect::<Vec<_>>());
            value
        });
        render::print_json(&json!(values.collect::<Vec<_>>()));
    } else {
        for commit in &commits {
            println!("{}", render::commit_line(commit));
            for record in of(commit.key) {
                println!("  operator  {}", render::operator_text(record));
            }
        }
    }
    Ok(Code::Ok)
}

pub(crate) async fn verify(source: &Source) -> Result<Code, Failure> {
    // The inspector has no counts to give while it reads: a spinner names each phase (see `crate::progress`).
    let opening = if source.store.is_some() { "opening the store" } else { "restoring the mirror into memory" };
    let progress = Progress::start(source.json, opening);
    let inspector = inspector(source).await?;
    progress.phase("checking every log frame, checkpoint, commit and pending write result");
    let report = inspector.verify()?;
    drop(progress);
    if source.json {
        render::print_json(&json!({
            "source": inspector.source(), "ok": true, "frames": report.frames, "checkpoints": report.checkpoints,
            "commits": report.commits, "pending_results": report.pending_results,
            "mirror_records": report.mirror_records,
        }));
    } else {
        // A mirror's restore keeps no log: say what it checked instead of "0 log frames".
        let log = report.mirror_records.map_or(format!("{} log frames", report.frames), |n| {
            format!("the newest snapshot and {n} log records replayed after it (as a restore checks them)")
        });
        println!(
            "{}: whole. {log}, {} checkpoints, {} commit keys, {} pending write results checked",
            inspector.source(),
            report.checkpoints,
            report.commits,
            report.pending_results
        );
    }
    Ok(Code::Ok)
}

/// JSON lines, always (the format is the point): checkpoints, then commit keys, then processed keys, then the
/// operator records still in the log.
pub(crate) async fn export(source: &Source) -> Result<Code, Failure> {
    let inspector = inspector(source).await?;
    for state in StateFilter::ALL {
        for info in inspector.list(state)? {
            let mut line = render::checkpoint_json(&info);
            line["kind"] = json!("checkpoint");
            println!("{line}");
        }
    }
    for commit in inspector.commits()? {
        let mut line = render::commit_json(&commit);
        line["kind"] = json!("commit");
        println!("{line}");
    }
    for key in inspector.processed_keys() {
        let mut line = render::key_json(&key?);
        line["kind"] = json!("key");
        println!("{line}");
    }
    for record in inspector.operator_records()? {
        let mut line = render::operator_json(&record);
        line["kind"] = json!("operator_record");
        println!("{line}");
    }
    Ok(Code::Ok)
}
