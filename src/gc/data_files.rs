//! Orphan data files: the collector that deletes the data files no commit will ever reference.
//!
//! A worker writes its data files before it stages them, so a checkpoint's files outlive the attempt that
//! wrote them whenever the attempt is dropped: `restart` (a retried task), `abort`, the operator's
//! `force_abort`. The store remembers each result they drop in its **garbage ledger** (table `garbage`,
//! written by the same transaction that drops it, mirrored and carried by snapshots like every table), keyed by
//! the sequence number of the record that dropped it. [`collect_data_files`] reads the ledger and the live
//! checkpoints from one snapshot and asks the table ([`DataFiles`]) for the rest:
//!
//! - a file a **live** checkpoint (Staged, Sealed, Committing, CommitUnknown) names is kept: a retried attempt
//!   may have staged the dropped attempt's very file again;
//! - a file the **table references** (any version readers can still open) is kept: whatever the ledger says, a
//!   table that holds it must keep it;
//! - a file **younger than the grace period** is kept, and so is its ledger entry, for the next collection (so
//!   the grace period must exceed any task's time from writing a file to staging it, as the inbox's does);
//! - anything else is due: deleted with `apply`, then its entry leaves the ledger (`ForgetGarbage`, mirrored
//!   before it is acknowledged). An entry whose files are gone, live or referenced leaves the ledger too: those
//!   files are no longer this entry's to delete.
//!
//! Only files the ledger names are ever candidates, so a file of another job (or of no job) sharing the table is
//! never touched unless this job staged that very name. What the ledger cannot name is not collected: an attempt
//! that died before staging anything left its files named nowhere, and the loser of a shared-staging race is
//! told (`SealLost` carries its results) and deletes its own. A data file is written once (a rule of
//! [`DataFiles`]): the judgement of a file and its delete are two requests, and a rewrite of the name between
//! them would be deleted with it. One collection runs at a time per store. docs/protocols/collector.md, "Data
//! files of dropped attempts".

use std::collections::BTreeSet;

use futures::StreamExt as _;

use super::files::DataFiles;
use super::ledger::{GarbageEntry, GarbageRef};
use super::{age_ms, is_young};
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::inspect::Inspector;
use crate::limits::{
    COLLECT_CONCURRENT_MAX, DATA_FILE_GRACE_MS_DEFAULT, GARBAGE_FORGET_ENTRIES_MAX, GARBAGE_PAGE_ENTRIES_MAX,
};
use crate::store::{Store, TableSnapshot};
use crate::types::{Attempt, CheckpointId};

/// How a collection runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct CollectSettings {
    /// Files modified less than this long ago are kept (with their ledger entry), in milliseconds (default
    /// [`crate::limits::DATA_FILE_GRACE_MS_DEFAULT`]: a day, like the inbox's).
    pub grace_ms: u64,
    /// Delete what is due and forget the settled entries; `false` (the default) only reports.
    pub apply: bool,
}

impl Default for CollectSettings {
    fn default() -> Self {
        Self { grace_ms: DATA_FILE_GRACE_MS_DEFAULT, apply: false }
    }
}

/// What the collector decided about one file a ledger entry names.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub enum Verdict {
    /// Past the grace period and named by nothing live: deleted (with `apply`).
    Deleted,
    /// Past the grace period and named by nothing live: would be deleted (a dry run).
    Due,
    /// Modified within the grace period: kept, and its entry stays in the ledger.
    Young,
    /// Already gone.
    Gone,
    /// Named by a live checkpoint's write result: kept.
    Live,
    /// Referenced by the table: kept.
    Referenced,
}

impl Verdict {
    /// Every verdict, in declaration order.
    pub const ALL: [Verdict; 6] =
        [Verdict::Deleted, Verdict::Due, Verdict::Young, Verdict::Gone, Verdict::Live, Verdict::Referenced];

    /// A stable lowercase name, for reports and JSON.
    pub const fn name(self) -> &'static str {
        match self {
            Verdict::Deleted => "deleted",
            Verdict::Due => "due",
            Verdict::Young => "young",
            Verdict::Gone => "gone",
            Verdict::Live => "live",
            Verdict::Referenced => "referenced",
        }
    }
}

/// One file of one ledger entry and what was decided.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct OrphanFile {
    /// The file, as [`DataFiles::files_of`] named it.
    pub file: String,
    /// The ledger entry naming it.
    pub entry: GarbageRef,
    /// The checkpoint whose dropped attempt wrote it.
    pub id: CheckpointId,
    /// That attempt.
    pub attempt: Attempt,
    /// Its size, when it exists.
    pub bytes: Option<u64>,
    /// The decision.
    pub verdict: Verdict,
}

/// What [`collect_data_files`] found and did.
#[derive(Clone, Default, PartialEq, Eq, Debug)]
pub struct CollectReport {
    /// Every file of every ledger entry read, in ledger order.
    pub files: Vec<OrphanFile>,
    /// Ledger entries read.
    pub entries: u64,
    /// Ledger entries removed (0 in a dry run).
    pub forgotten: u64,
}

impl CollectReport {
    /// How many files got `verdict`, and their bytes.
    pub fn tally(&self, verdict: Verdict) -> (u64, u64) {
        self.files.iter().filter(|f| f.verdict == verdict).fold((0, 0), |(n, b), f| (n + 1, b + f.bytes.unwrap_or(0)))
    }
}

/// Collects the orphan data files of `store`'s dropped attempts from `table` (see the module docs for the
/// rules): reports every file of every ledger entry and, with `settings.apply`, deletes the due ones and
/// forgets the settled entries. `clock.wall_ms()` is compared with the files' modification times, so keep the
/// grace period far above any clock skew between this machine and the table's storage.
pub async fn collect_data_files(
    store: &Store,
    table: &dyn DataFiles,
    clock: &dyn Clock,
    settings: &CollectSettings,
) -> Result<CollectReport> {
    let _collecting = store.begin_collection()?;
    let (ledger, live) = read_ledger_and_live(&store.snapshot()?, table)?;
    let (mut report, settled, failure) = judge_ledger(table, &ledger, &live, clock, settings).await?;
    if settings.apply {
        for chunk in settled.chunks(GARBAGE_FORGET_ENTRIES_MAX) {
            store.forget_garbage(chunk).await?;
            report.forgotten += chunk.len() as u64;
        }
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(report),
    }
}

/// What [`collect_data_files`] would delete, read through a read-only [`Inspector`]: a dry run that never opens
/// the store for writing (so it takes no epoch and fences no writer) and deletes nothing. While a writer holds
/// the store, the inspector reads a copy: the report is as of that copy.
pub async fn preview_data_files(
    inspector: &Inspector,
    table: &dyn DataFiles,
    clock: &dyn Clock,
    grace_ms: u64,
) -> Result<CollectReport> {
    let (ledger, live) = inspector.read(|snapshot| read_ledger_and_live(snapshot, table))?;
    let settings = CollectSettings { grace_ms, apply: false };
    let (report, _settled, failure) = judge_ledger(table, &ledger, &live, clock, &settings).await?;
    match failure {
        Some(e) => Err(e),
        None => Ok(report),
    }
}

/// A report of every file of the ledger's entries, the entries settled, and the first failure (entries judged
/// before it are reported and settled; the rest wait for the next run).
type Judged = (CollectReport, Vec<GarbageRef>, Option<Error>);

/// Judges (and with `settings.apply`, deletes) the files of every entry of `ledger`.
async fn judge_ledger(
    table: &dyn DataFiles,
    ledger: &[GarbageEntry],
    live: &BTreeSet<String>,
    clock: &dyn Clock,
    settings: &CollectSettings,
) -> Result<Judged> {
    let referenced = table.referenced().await?;
    let now_ms = clock.wall_ms();
    let mut report = CollectReport { entries: ledger.len() as u64, ..CollectReport::default() };
    let mut settled = Vec::new();
    // Entries are judged [`COLLECT_CONCURRENT_MAX`] at a time (a stat and a delete are a request each), and
    // reported in ledger order.
    let referenced = &referenced;
    let mut judged = futures::stream::iter(ledger)
        .map(|entry| async move { (entry.at, judge_entry(table, entry, live, referenced, now_ms, settings).await) })
        .buffered(COLLECT_CONCURRENT_MAX);
    while let Some((at, judgement)) = judged.next().await {
        match judgement {
            Ok((files, done)) => {
                report.files.extend(files);
                if done {
                    settled.push(at);
                }
            }
            // An entry judged alongside may have had its files deleted: the next run finds them gone.
            Err(e) => return Ok((report, settled, Some(e))),
        }
    }
    Ok((report, settled, None))
}

/// The whole ledger and the files every live checkpoint names, from one snapshot of the store.
fn read_ledger_and_live(
    snapshot: &TableSnapshot,
    table: &dyn DataFiles,
) -> Result<(Vec<GarbageEntry>, BTreeSet<String>)> {
    let mut ledger = Vec::new();
    loop {
        let page = snapshot.garbage(ledger.last().map(|e: &GarbageEntry| e.at), GARBAGE_PAGE_ENTRIES_MAX)?;
        let full = page.len() == GARBAGE_PAGE_ENTRIES_MAX;
        ledger.extend(page);
        if !full {
            break;
        }
    }
    let mut live = BTreeSet::new();
    snapshot.each_live_result(|result| {
        live.extend(table.files_of(result)?);
        Ok(())
    })?;
    Ok((ledger, live))
}

/// Decides (and with `apply`, deletes) each file of one entry; returns the files and whether the entry is
/// settled (none of its files waits for its grace period or, in a dry run, for its deletion).
async fn judge_entry(
    table: &dyn DataFiles,
    entry: &GarbageEntry,
    live: &BTreeSet<String>,
    referenced: &BTreeSet<String>,
    now_ms: u64,
    settings: &CollectSettings,
) -> Result<(Vec<OrphanFile>, bool)> {
    let mut out = Vec::new();
    let mut settled = true;
    for file in table.files_of(&entry.result)? {
        let stat = table.stat(&file).await?;
        let verdict = if live.contains(&file) {
            Verdict::Live
        } else if referenced.contains(&file) {
            Verdict::Referenced
        } else {
            match stat {
                None => Verdict::Gone,
                Some(s) if is_young(age_ms(now_ms, s.modified_ms), settings.grace_ms) => Verdict::Young,
                Some(_) if settings.apply => {
                    table.delete(&file).await?;
                    Verdict::Deleted
                }
                Some(_) => Verdict::Due,
            }
        };
        settled &= !matches!(verdict, Verdict::Young | Verdict::Due);
        out.push(OrphanFile {
            file,
            entry: entry.at,
            id: entry.id.clone(),
            attempt: entry.attempt,
            bytes: stat.map(|s| s.bytes),
            verdict,
        });
    }
    Ok((out, settled))
}
