//! Text and JSON forms of what the commands read. The text forms are golden-tested: change them deliberately.

use std::fmt::Write as _;

use serde_json::{Value, json};
use sinkpoint::inspect::{OperatorAction, OperatorRecord, StoreSummary};
use sinkpoint::{CheckpointId, CheckpointInfo, CheckpointState, CommitInfo, Resolution};

/// What blocks the job, and what to do about it.
pub(crate) struct Advice {
    pub(crate) blocked: bool,
    pub(crate) text: String,
}

/// What blocks the job, given its summary and the latest operator record still readable (`last`).
pub(crate) fn advice(summary: &StoreSummary, last: Option<&OperatorRecord>) -> Advice {
    let Some(commit) = &summary.in_flight else {
        if let Some(text) = unbound_advice(summary, last) {
            return Advice { blocked: false, text };
        }
        let text = if summary.finished { "the job finished; nothing to do" } else { "nothing blocks the job" };
        return Advice { blocked: false, text: text.into() };
    };
    let key = commit.key;
    match commit.state {
        CheckpointState::CommitUnknown { .. } => Advice {
            blocked: true,
            text: format!(
                "key {key}'s outcome is unknown. Run the job: its committer probes the table. If the probe cannot \
                 tell (the table's history was expired), look at the table and run `sinkpoint resolve {key} \
                 committed|not-committed --reason ...` while the job is stopped (committed needs the table's word: \
                 --table URL for a DirTable, or --i-checked-the-table)"
            ),
        },
        _ if commit.awaits_recommit => Advice {
            blocked: false,
            text: format!("key {key} waits to be re-committed once (an operator's not-committed verdict): run the job"),
        },
        _ => Advice {
            blocked: false,
            text: format!("key {key} is being committed: run the job to finish it (a crashed run is recovered)"),
        },
    }
}

/// After an un-bind of the next key (nothing begun since): the block may be in the table, which the store
/// cannot see, so say what the next run does with the key.
fn unbound_advice(summary: &StoreSummary, last: Option<&OperatorRecord>) -> Option<String> {
    let last = last?;
    let OperatorAction::Unbind { key } = last.action else { return None };
    (key == summary.next_key).then(|| {
        format!(
            "key {key} was un-bound ({:?}); its checkpoints wait Sealed. Run the job: its committer probes the \
             table for key {key} before it begins it again. If the table holds key {key}, the run refuses: record \
             what landed under it with `sinkpoint settle-landed {key} ID... --reason ...` while the job is stopped",
            last.reason
        )
    })
}

/// The file and its mirror, side by side (`status --store --mirror`).
pub(crate) struct MirrorRelation {
    pub(crate) file_next_seq: u64,
    pub(crate) file_epoch: u64,
    pub(crate) mirror_next_seq: u64,
    pub(crate) mirror_epoch: u64,
}

impl MirrorRelation {
    /// Records the file holds that the mirror has yet to receive.
    pub(crate) fn lag(&self) -> u64 {
        self.file_next_seq.saturating_sub(self.mirror_next_seq)
    }

    /// Records the mirror holds beyond the file read.
    pub(crate) fn behind(&self) -> u64 {
        self.mirror_next_seq.saturating_sub(self.file_next_seq)
    }

    fn text(&self) -> String {
        let behind = self.behind();
        if behind == 0 {
            return format!("{} records", self.lag());
        }
        let why = if self.mirror_epoch > self.file_epoch {
            format!(
                "a newer writer (epoch {}; the file's is {}) went on from the mirror: this file is stale, restore \
                 from the mirror",
                self.mirror_epoch, self.file_epoch
            )
        } else {
            "a running job's file is read from a copy, a moment old".to_string()
        };
        format!("none: the file read is {behind} records behind its mirror ({why})")
    }
}

/// A state's name, as `sinkpoint list` spells it (the library's one name for it).
pub(crate) fn state_name(state: CheckpointState) -> &'static str {
    sinkpoint::StateFilter::from(state).name()
}

/// The commit key a state names, if any.
pub(crate) fn state_key(state: CheckpointState) -> Option<u64> {
    match state {
        CheckpointState::Committing { key } | CheckpointState::CommitUnknown { key } => Some(key),
        CheckpointState::Committed { key } => key,
        _ => None,
    }
}

pub(crate) fn summary_text(
    source: &str,
    s: &StoreSummary,
    mirror: Option<&MirrorRelation>,
    last: Option<&OperatorRecord>,
    advice: &Advice,
) -> String {
    let counts: Vec<String> = s.counts.iter().map(|(f, n)| format!("{} {n}", f.name())).collect();
    let in_flight = s.in_flight.as_ref().map_or("none".to_string(), |c| {
        format!(
            "key {} ({}, {} checkpoints, prepared at table version {})",
            c.key,
            state_name(c.state),
            c.ids.len(),
            version(c.prepared_version)
        )
    });
    let retention = match (s.retention_watermark, &s.in_flight) {
        (Some(v), _) => format!("keep table versions >= {v} (a probe may read them)"),
        (None, Some(_)) => "no constraint (the target keeps no version to retain)".to_string(),
        (None, None) => "no constraint (nothing in flight)".to_string(),
    };
    let mut out = String::new();
    let _ = writeln!(out, "store        {source}");
    let _ = writeln!(out, "job          {}", s.job);
    let _ = writeln!(out, "target       {}", s.target);
    let _ = writeln!(out, "epoch        {}", s.epoch);
    let _ = writeln!(out, "checkpoints  {}", counts.join(", "));
    let _ = writeln!(out, "commits      next key {}, in flight: {in_flight}", s.next_key);
    let _ = writeln!(out, "finished     {}", if s.finished { "yes" } else { "no" });
    let _ = writeln!(out, "retention    {retention}");
    let _ = writeln!(
        out,
        "garbage      {} ledger entries{}",
        s.garbage_entries,
        if s.garbage_entries > 0 { collector_hint(s.target.as_str()) } else { "" }
    );
    if let Some(mirror) = mirror {
        let _ = writeln!(out, "mirror lag   {}", mirror.text());
    }
    if let Some(last) = last {
        let _ = writeln!(out, "operator     {}", operator_text(last));
    }
    let _ = writeln!(out, "{}  {}", if advice.blocked { "BLOCKED    " } else { "next       " }, advice.text);
    out
}

/// Who collects the data files of dropped attempts, by the target's kind: `gc --table` reads a DirTable only,
/// and a Lance job's (identity `lance:<uri>`, as its adapters record it) has its own collector.
fn collector_hint(target: &str) -> &'static str {
    if target.starts_with("lance:") {
        " (data files of dropped attempts: the Lance collector deletes them: LanceSink.collect_orphans, or \
         Driver.collect_data_files(LanceDataFiles(uri)) in Python; in Rust collect_data_files with \
         LanceTarget::data_files. sinkpoint gc --table reads a DirTable only)"
    } else {
        " (data files of dropped attempts: sinkpoint gc --store PATH --table URL collects them from a DirTable; \
         another table's own collector from its table)"
    }
}

/// One operator record as a line: what was changed, when (log seq and epoch) and why.
pub(crate) fn operator_text(r: &OperatorRecord) -> String {
    let what = match &r.action {
        OperatorAction::Resolve { key, resolution } => format!("key {key} resolved {}", resolution_name(*resolution)),
        OperatorAction::ForceAbort { ids } => format!("force-aborted {}", ids_text(ids)),
        OperatorAction::Unbind { key } => format!("key {key} un-bound"),
        _ => "an operator change this sinkpoint does not know".to_string(),
    };
    format!("{what} (log seq {}, epoch {}): {:?}", r.seq, r.epoch, r.reason)
}

pub(crate) fn operator_json(r: &OperatorRecord) -> Value {
    let (action, key, resolution, ids) = match &r.action {
        OperatorAction::Resolve { key, resolution } => {
            ("resolve", Some(*key), Some(resolution_name(*resolution)), None)
        }
        OperatorAction::ForceAbort { ids } => ("force-abort", None, None, Some(ids)),
        OperatorAction::Unbind { key } => ("unbind", Some(*key), None, None),
        _ => ("unknown", None, None, None),
    };
    let ids = ids.map(|ids| ids.iter().map(|i| i.as_str()).collect::<Vec<_>>());
    json!({
        "seq": r.seq, "epoch": r.epoch, "action": action, "key": key, "resolution": resolution, "ids": ids,
        "reason": r.reason,
    })
}

pub(crate) fn resolution_name(resolution: Resolution) -> &'static str {
    match resolution {
        Resolution::Committed => "committed",
        Resolution::NotCommitted => "not-committed",
    }
}

/// At most a few ids, then how many more.
fn ids_text(ids: &[CheckpointId]) -> String {
    const SHOWN: usize = 3;
    let shown: Vec<&str> = ids.iter().take(SHOWN).map(CheckpointId::as_str).collect();
    let more = ids.len().saturating_sub(SHOWN);
    if more == 0 { shown.join(", ") } else { format!("{} and {more} more", shown.join(", ")) }
}

fn version(v: Option<u64>) -> String {
    v.map_or("(none given)".to_string(), |v| v.to_string())
}

pub(crate) fn summary_json(s: &StoreSummary, advice: &Advice) -> Value {
    let counts: serde_json::Map<String, Value> =
        s.counts.iter().map(|(f, n)| (f.name().to_string(), json!(n))).collect();
    json!({
        "job": s.job.as_str(), "target": s.target.as_str(), "epoch": s.epoch, "counts": counts,
        "next_key": s.next_key, "in_flight": s.in_flight.as_ref().map(commit_json), "finished": s.finished,
        "retention_watermark": s.retention_watermark, "next_seq": s.next_seq,
        "garbage_entries": s.garbage_entries,
        "blocked": advice.blocked, "advice": advice.text,
    })
}

pub(crate) fn checkpoint_json(c: &CheckpointInfo) -> Value {
    json!({
        "id": c.id.as_str(), "state": state_name(c.state), "key": state_key(c.state), "attempt": c.attempt.get(),
        "epoch": c.epoch, "parts": c.parts, "results": c.results,
    })
}

pub(crate) fn checkpoint_line(c: &CheckpointInfo) -> String {
    let key = state_key(c.state).map_or(String::new(), |k| format!(" key {k}"));
    format!("{}  {}{key}  attempt {}  parts {}  results {}", c.id, state_name(c.state), c.attempt, c.parts, c.results)
}

pub(crate) fn checkpoint_text(c: &CheckpointInfo, commit: Option<&CommitInfo>, records: &[OperatorRecord]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "id           {}", c.id);
    let _ = writeln!(out, "state        {}", state_name(c.state));
    let _ = writeln!(out, "attempt      {} (begun by epoch {})", c.attempt, c.epoch);
    let _ = writeln!(out, "parts        {}", c.parts);
    let _ = writeln!(out, "results      {}", c.results);
    if let Some(commit) = commit {
        let _ = writeln!(out, "commit       {}", commit_line(commit));
    }
    for record in records {
        let _ = writeln!(out, "operator     {}", operator_text(record));
    }
    out
}

pub(crate) fn commit_json(c: &CommitInfo) -> Value {
    json!({
        "key": c.key, "ids": c.ids.iter().map(|i| i.as_str()).collect::<Vec<_>>(), "state": state_name(c.state),
        "prepared_version": c.prepared_version, "final_commit": c.final_commit, "epoch": c.epoch,
        "awaits_recommit": c.awaits_recommit,
    })
}

pub(crate) fn commit_line(c: &CommitInfo) -> String {
    let last = if c.final_commit { ", final" } else { "" };
    let again = if c.awaits_recommit { ", awaits its re-commit" } else { "" };
    format!(
        "key {}  {}  {} checkpoints  prepared at version {}  epoch {}{last}{again}",
        c.key,
        state_name(c.state),
        c.ids.len(),
        version(c.prepared_version),
        c.epoch
    )
}

/// A source key as text when it is UTF-8, else as hex (marked so).
pub(crate) fn key_text(key: &[u8]) -> String {
    match std::str::from_utf8(key) {
        Ok(text) => text.to_string(),
        Err(_) => format!("hex:{}", hex(key)),
    }
}

pub(crate) fn key_json(key: &[u8]) -> Value {
    match std::str::from_utf8(key) {
        Ok(text) => json!({ "key": text }),
        Err(_) => json!({ "key_hex": hex(key) }),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

pub(crate) fn print_json(value: &Value) {
    println!("{value}");
}

/// A write result as JSON: its format, and its bytes as text when they are UTF-8, else as hex.
pub(crate) fn result_json(r: &sinkpoint::WriteResult) -> Value {
    match std::str::from_utf8(r.bytes()) {
        Ok(text) => json!({ "format": format!("{:?}", r.format()), "result": text }),
        Err(_) => {
            json!({ "format": format!("{:?}", r.format()), "result_hex": key_json(r.bytes())["key_hex"] })
        }
    }
}
