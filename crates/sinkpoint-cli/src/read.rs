//! The reading commands: nothing here writes.

use serde_json::json;
use sinkpoint::{CheckpointId, StateFilter};

use crate::Source;
use crate::exit::{Code, Failure};
use crate::progress::Progress;
use crate::render;
use crate::source::{inspector, mirror_inspector};

pub(crate) async fn status(source: &Source) -> Result<Code, Failure> {
    let inspector = inspector(source).await?;
    let summary = inspector.summary()?;
    // With both the file and its mirror: how many records the mirror has yet to receive.
    let lag = match (&source.store, &source.mirror) {
        (Some(_), Some(url)) => Some(summary.next_seq.saturating_sub(mirror_inspector(url).await?.summary()?.next_seq)),
        _ => None,
    };
    let advice = render::advice(&summary);
    if source.json {
        let mut value = render::summary_json(&summary, &advice);
        value["source"] = json!(inspector.source());
        value["mirror_lag_records"] = json!(lag);
        render::print_json(&value);
    } else {
        print!("{}", render::summary_text(inspector.source(), &summary, lag, &advice));
    }
    Ok(if advice.blocked { Code::Attention } else { Code::Ok })
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
    let commit = render::state_key(info.state).map(|key| inspector.commit(key)).transpose()?.flatten();
    if source.json {
        let mut value = render::checkpoint_json(&info);
        value["commit"] = commit.as_ref().map_or(json!(null), render::commit_json);
        render::print_json(&value);
    } else {
        print!("{}", render::checkpoint_text(&info, commit.as_ref()));
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
    if source.json {
        render::print_json(&json!(commits.iter().map(render::commit_json).collect::<Vec<_>>()));
    } else {
        for commit in &commits {
            println!("{}", render::commit_line(commit));
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
        }));
    } else {
        println!(
            "{}: whole. {} log frames, {} checkpoints, {} commit keys, {} pending write results checked",
            inspector.source(),
            report.frames,
            report.checkpoints,
            report.commits,
            report.pending_results
        );
    }
    Ok(Code::Ok)
}

/// JSON lines, always (the format is the point): checkpoints, then commit keys, then processed keys.
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
    Ok(Code::Ok)
}
