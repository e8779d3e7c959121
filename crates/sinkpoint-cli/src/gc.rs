//! `sinkpoint gc`: the garbage of a job's mirror and of its shared-staging inbox, listed (a dry run, the default)
//! or deleted (`--apply`). What is garbage, and why deleting it never breaks a restore or a commit, is decided by
//! the core (`sinkpoint::gc::find_mirror_garbage`, `sinkpoint::gc::find_inbox_garbage`); this prints it, and
//! shows the core's progress counts on stderr while it works (`crate::progress`).

use std::fmt::Write as _;

use serde_json::{Value, json};
use sinkpoint::gc::{
    CollectReport, CollectSettings, InboxEntry, InboxGarbage, InboxReason, MirrorGarbage, MirrorObject, Verdict,
    collect_data_files, delete_inbox_garbage, delete_mirror_garbage, find_inbox_garbage, find_mirror_garbage,
    preview_data_files,
};
use sinkpoint::inspect::Inspector;
use sinkpoint::shared::{Inbox, SharedStaging};
use sinkpoint::{Clock as _, DirTable, JobId, SystemClock};

use crate::exit::{Code, Failure};
use crate::progress::Progress;
use crate::render::{key_text, print_json, result_json};
use crate::source::object_store_at;

/// The default `--min-age`: the mirror's own default `MirrorSettings::gc_age_ms_min` (10 minutes).
pub(crate) const GC_MIN_AGE_DEFAULT: &str = "10m";

/// The default `--grace`: `sinkpoint::limits::INBOX_GRACE_MS_DEFAULT` (24 hours).
pub(crate) const GC_GRACE_DEFAULT: &str = "24h";

/// What `gc` was asked to do.
pub(crate) struct Request<'a> {
    pub(crate) mirror: Option<&'a str>,
    pub(crate) shared: Option<&'a str>,
    pub(crate) job: Option<&'a str>,
    /// With `table`: the store whose garbage ledger names the orphan data files.
    pub(crate) store: Option<&'a std::path::Path>,
    pub(crate) table: Option<&'a str>,
    pub(crate) min_age_ms: u64,
    pub(crate) grace_ms: u64,
    pub(crate) apply: bool,
    pub(crate) json: bool,
    /// Confirms a takeover when the mirror has seen a newer writer than the store file (see `source::writer`).
    pub(crate) take_over: bool,
}

/// Parses a duration such as `0s`, `90s`, `10m`, `24h`, `7d` or `500ms` into milliseconds.
pub(crate) fn parse_duration_ms(text: &str) -> Result<u64, String> {
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let number: u64 = digits.parse().map_err(|_| format!("{text:?} is not a duration: write e.g. 10m, 24h, 0s"))?;
    let scale: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(format!("{text:?}: the unit must be ms, s, m, h or d (e.g. 10m, 24h)")),
    };
    number.checked_mul(scale).ok_or_else(|| format!("{text:?} is too long a duration"))
}

fn duration_text(ms: u64) -> String {
    match ms {
        0 => "0s".into(),
        ms if ms % 86_400_000 == 0 => format!("{}d", ms / 86_400_000),
        ms if ms % 3_600_000 == 0 => format!("{}h", ms / 3_600_000),
        ms if ms % 60_000 == 0 => format!("{}m", ms / 60_000),
        ms if ms % 1_000 == 0 => format!("{}s", ms / 1_000),
        ms => format!("{ms}ms"),
    }
}

pub(crate) async fn gc(request: &Request<'_>) -> Result<Code, Failure> {
    if request.mirror.is_none() && request.shared.is_none() && request.store.is_none() {
        return Err(Failure::new(
            Code::Usage,
            "give --mirror URL, --shared URL, --store PATH --table URL, or several: what to collect",
        ));
    }
    // Ages are the store's `last_modified` against this machine's wall clock: the one clock both share.
    let now_wall_ms = SystemClock.wall_ms();
    // Progress on stderr while listing, reading and deleting (only on a terminal, never with --json).
    let progress = Progress::start(request.json, "gc: starting");
    let mut mirror_report = None;
    if let Some(url) = request.mirror {
        let (store, prefix) = object_store_at("--mirror", url)?;
        progress.phase("mirror: listing");
        let garbage =
            find_mirror_garbage(store.clone(), prefix.clone(), now_wall_ms, request.min_age_ms, progress.gc("mirror"))
                .await?;
        let deleted = if request.apply {
            Some(delete_mirror_garbage(store, prefix, &garbage, progress.gc("mirror")).await?)
        } else {
            None
        };
        mirror_report = Some((url, garbage, deleted));
    }
    let mut inbox_report = None;
    if let Some(url) = request.shared {
        let job = match (request.job, &mirror_report) {
            (Some(job), _) => JobId::new(job)?,
            (None, Some((_, garbage, _))) => garbage.job.clone(),
            (None, None) => {
                return Err(Failure::new(Code::Usage, "--shared needs the job: give --job NAME (or --mirror URL)"));
            }
        };
        let (store, prefix) = object_store_at("--shared", url)?;
        let inbox = Inbox::new(SharedStaging::new(store, prefix.as_ref(), job.clone())?);
        progress.phase("inbox: listing");
        let garbage = find_inbox_garbage(&inbox, now_wall_ms, request.grace_ms, progress.gc("inbox")).await?;
        let deleted = if request.apply {
            Some(delete_inbox_garbage(&inbox, &garbage, progress.gc("inbox")).await?)
        } else {
            None
        };
        inbox_report = Some((url, job, garbage, deleted));
    }
    let mut files_report = None;
    if let (Some(path), Some(url)) = (request.store, request.table) {
        progress.phase("data files: reading the ledger and the table");
        let report = data_files(path, url, request).await?;
        files_report = Some((path, url, report));
    }
    // Cleared before the report, so that it never mixes with stdout on one terminal.
    drop(progress);
    if request.json {
        print_json(&json!({
            "apply": request.apply,
            "min_age_ms": request.min_age_ms,
            "grace_ms": request.grace_ms,
            "mirror": mirror_report.as_ref().map(|(url, g, d)| mirror_json(url, g, *d)),
            "inbox": inbox_report.as_ref().map(|(url, job, g, d)| inbox_json(url, job, g, *d)),
            "data_files": files_report.as_ref().map(|(path, url, r)| files_json(path, url, r)),
        }));
    } else {
        let mut out = String::new();
        if let Some((url, garbage, deleted)) = &mirror_report {
            mirror_text(&mut out, url, garbage, *deleted, request.min_age_ms);
        }
        if let Some((url, job, garbage, deleted)) = &inbox_report {
            inbox_text(&mut out, url, job, garbage, *deleted, request.grace_ms);
        }
        if let Some((path, url, report)) = &files_report {
            files_text(&mut out, path, url, report, request.grace_ms);
        }
        if !request.apply {
            let _ = writeln!(out, "dry run: nothing was deleted; run again with --apply to delete what is listed");
        }
        print!("{out}");
    }
    Ok(Code::Ok)
}

fn mirror_json(url: &str, g: &MirrorGarbage, deleted: Option<u64>) -> Value {
    let objects = |list: &[MirrorObject]| -> Vec<Value> {
        list.iter()
            .map(
                |o| json!({ "path": o.path.as_ref(), "bytes": o.bytes, "age_ms": o.age_ms, "reason": o.reason.name() }),
            )
            .collect()
    };
    json!({
        "url": url, "job": g.job.as_str(), "epoch": g.epoch, "newest_manifest": g.newest_manifest.as_ref(),
        "base_slot": g.base_slot,
        "due_count": g.due.len(), "due_bytes": g.due_bytes(), "due": objects(&g.due),
        "young_count": g.young.len(), "young_bytes": g.young_bytes(), "young": objects(&g.young),
        "deleted": deleted,
    })
}

fn mirror_text(out: &mut String, url: &str, g: &MirrorGarbage, deleted: Option<u64>, min_age_ms: u64) {
    let _ = writeln!(
        out,
        "mirror       {url} (job {}, epoch {}; restores from {} and slot {})",
        g.job, g.epoch, g.newest_manifest, g.base_slot
    );
    let verb = if deleted.is_some() { "deleted     " } else { "would delete" };
    let _ = writeln!(out, "  {verb} {} objects, {} bytes", g.due.len(), g.due_bytes());
    let _ = writeln!(
        out,
        "  kept         {} objects, {} bytes younger than {}",
        g.young.len(),
        g.young_bytes(),
        duration_text(min_age_ms)
    );
    for o in &g.due {
        let _ = writeln!(
            out,
            "    {:<10}  {}  {} bytes  age {}",
            o.reason.name(),
            o.path,
            o.bytes,
            duration_text(o.age_ms)
        );
    }
}

fn inbox_json(url: &str, job: &JobId, g: &InboxGarbage, deleted: Option<u64>) -> Value {
    let entries = |list: &[InboxEntry]| -> Vec<Value> {
        list.iter()
            .map(|e| {
                let winner = match &e.reason {
                    InboxReason::Lost { winner } => json!({
                        "worker": winner.worker, "session": format!("{:032x}", winner.session),
                        "attempt": winner.attempt,
                    }),
                    _ => Value::Null,
                };
                json!({
                    "path": e.path.as_ref(), "bytes": e.bytes, "age_ms": e.age_ms, "reason": e.reason.name(),
                    "winner": winner, "id": e.id.as_ref().map(|i| i.as_str()),
                    "results": e.results.iter().map(result_json).collect::<Vec<_>>(),
                })
            })
            .collect()
    };
    json!({
        "url": url, "job": job.as_str(),
        "due_count": g.due.len(), "due_bytes": g.due_bytes(), "due": entries(&g.due),
        "results_count": g.due.iter().map(|e| e.results.len()).sum::<usize>(),
        "young_count": g.young.len(), "young_bytes": g.young_bytes(), "young": entries(&g.young),
        "truncated": g.truncated, "deleted": deleted,
    })
}

fn inbox_text(out: &mut String, url: &str, job: &JobId, g: &InboxGarbage, deleted: Option<u64>, grace_ms: u64) {
    let _ = writeln!(out, "inbox        {url} (job {job})");
    let verb = if deleted.is_some() { "deleted     " } else { "would delete" };
    let results: usize = g.due.iter().map(|e| e.results.len()).sum();
    let _ = writeln!(
        out,
        "  {verb} {} entries, {} bytes; their {results} write results name data files to delete",
        g.due.len(),
        g.due_bytes()
    );
    let _ = writeln!(
        out,
        "  kept         {} unclaimed entries, {} bytes younger than {} (their workers may still seal)",
        g.young.len(),
        g.young_bytes(),
        duration_text(grace_ms)
    );
    if g.truncated {
        let _ = writeln!(out, "  (the listing stopped at its limit: run gc again for the rest)");
    }
    for e in &g.due {
        let why = match &e.reason {
            InboxReason::Lost { winner } => format!("lost to {winner}"),
            other => other.name().to_string(),
        };
        let _ = writeln!(out, "    {}  {} bytes  age {}  {why}", e.path, e.bytes, duration_text(e.age_ms));
        for r in &e.results {
            let _ = writeln!(out, "      result {:?} {}", r.format(), key_text(r.bytes()));
        }
    }
}

/// Collects the orphan data files the store's garbage ledger names from the reference table at `url`, once the
/// table is shown to be the store's target. A dry run reads the store read-only (a running job's file is read from
/// a copy; no epoch is taken, nothing is written); `--apply` opens it as its writer (refused while the job runs;
/// with `--mirror`, the store's mirror, the forgetting is mirrored too).
async fn data_files(path: &std::path::Path, url: &str, request: &Request<'_>) -> Result<CollectReport, Failure> {
    let (objects, prefix) = object_store_at("--table", url)?;
    let table = sinkpoint::DirTable::new(objects, prefix);
    let inspector = Inspector::open_file(path)?;
    check_table_is_target(&inspector, &table, url).await?;
    if !request.apply {
        return Ok(preview_data_files(&inspector, &table, &SystemClock, request.grace_ms).await?);
    }
    // Its read-only handle on the file would keep the writer's open below from taking the file's lock.
    drop(inspector);
    let store = crate::source::writer(path, request.mirror, request.take_over).await?;
    let settings = CollectSettings { grace_ms: request.grace_ms, apply: true };
    let report = collect_data_files(&store, &table, &SystemClock, &settings).await;
    store.close_async().await;
    Ok(report?)
}

/// Refuses a `--table` that is not the store's target: its URL is the store's target identity, or it holds the
/// store's last committed key under the store's job. A wrong table would be asked which files it references, and
/// files of the right one it never names would be judged orphans.
async fn check_table_is_target(inspector: &Inspector, table: &DirTable, url: &str) -> Result<(), Failure> {
    let summary = inspector.summary()?;
    let same = |a: &str, b: &str| a.trim_end_matches('/') == b.trim_end_matches('/');
    if same(summary.target.as_str(), url) {
        return Ok(());
    }
    // The in-flight key is at most the last one begun; the last committed key is one of the last two.
    let committed = (summary.next_key.saturating_sub(2)..summary.next_key)
        .rev()
        .map(|key| inspector.commit(key))
        .find_map(|info| match info {
            Ok(Some(info)) if matches!(info.state, sinkpoint::CheckpointState::Committed { .. }) => Some(Ok(info.key)),
            Ok(_) => None,
            Err(e) => Some(Err(e)),
        })
        .transpose()?;
    let why = match committed {
        Some(key) if crate::source::dir_table_holds(table, url, &summary.job, key).await? => return Ok(()),
        Some(key) => format!("it does not hold the job's committed key {key}"),
        None => "the job committed nothing yet to check it against".to_owned(),
    };
    Err(Failure::new(
        Code::NotFound,
        format!(
            "--table {url} is not shown to be this store's target {} (job {}): {why}. Give the table the job \
             commits to (nothing was read or deleted)",
            summary.target, summary.job
        ),
    ))
}

fn files_json(path: &std::path::Path, url: &str, r: &CollectReport) -> Value {
    let tally = |v: Verdict| {
        let (count, bytes) = r.tally(v);
        json!({ "count": count, "bytes": bytes })
    };
    json!({
        "store": path.display().to_string(), "table": url, "entries": r.entries, "forgotten": r.forgotten,
        "deleted": tally(Verdict::Deleted), "due": tally(Verdict::Due), "young": tally(Verdict::Young),
        "gone": tally(Verdict::Gone), "live": tally(Verdict::Live), "referenced": tally(Verdict::Referenced),
        "files": r.files.iter().map(|f| json!({
            "file": f.file, "verdict": f.verdict.name(), "id": f.id.as_str(), "attempt": f.attempt.get(),
            "bytes": f.bytes, "ledger": format!("{}.{}", f.entry.seq, f.entry.index),
        })).collect::<Vec<_>>(),
    })
}

fn files_text(out: &mut String, path: &std::path::Path, url: &str, r: &CollectReport, grace_ms: u64) {
    let _ = writeln!(out, "data files   {url} (garbage ledger of {}: {} entries)", path.display(), r.entries);
    let (verb, done) = if r.tally(Verdict::Deleted).0 > 0 || r.forgotten > 0 {
        ("deleted     ", r.tally(Verdict::Deleted))
    } else {
        ("would delete", r.tally(Verdict::Due))
    };
    let _ = writeln!(out, "  {verb} {} files, {} bytes", done.0, done.1);
    let young = r.tally(Verdict::Young);
    let _ = writeln!(
        out,
        "  kept         {} files, {} bytes younger than {}; {} named by a live checkpoint, {} by the table",
        young.0,
        young.1,
        duration_text(grace_ms),
        r.tally(Verdict::Live).0,
        r.tally(Verdict::Referenced).0
    );
    let _ = writeln!(out, "  {} already gone; {} ledger entries forgotten", r.tally(Verdict::Gone).0, r.forgotten);
    for f in &r.files {
        let size = f.bytes.map_or_else(|| "-".to_owned(), |b| format!("{b} bytes"));
        let _ = writeln!(out, "    {:<10}  {}  {size}  ({} attempt {})", f.verdict.name(), f.file, f.id, f.attempt);
    }
}
