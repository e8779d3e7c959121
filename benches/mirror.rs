//! Object-store rows: requests and bytes per checkpoint lifecycle (10 stage calls, seal, commit) for sinkpoint
//! with its mirror attached (synchronous and asynchronous mode) and for a Daft-style checkpoint store written
//! here (one object per stage call, a JSON manifest per checkpoint, list + get of every manifest to load the skip
//! set), each on a request-counting in-memory store of its own; then, over a store that takes about 20 ms a
//! request, the wall time of a 100-checkpoint job and of a rerun's skip-set load for both (issue 15's goal: the
//! job at most half the baseline's wall time).
//!
//! A job is run in waves of `workers` checkpoints (as `examples/job.rs` ran before its workers each took a
//! `SealWindow`; the windowed shape is its loop today): the wave's checkpoints run concurrently (one task each), each task issues its 10 stage calls one after another
//! and then seals, and the wave ends with one commit of everything sealed. One worker is one task doing one
//! lifecycle after another. The Daft-style baseline runs the same waves.
//!
//! No criterion timing here: the figures are counts, and the throttled jobs run once (they are sleep-bound).
//! `cargo bench --bench mirror` measures; `cargo test --bench mirror` runs tiny jobs at 1 ms a request.

#![allow(clippy::disallowed_methods, reason = "benches measure wall time; nothing they decide depends on it")]

#[path = "common/mod.rs"]
mod common;

use std::collections::BTreeSet;
use std::path::Path as FsPath;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use futures::future::join_all;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::throttle::{ThrottleConfig, ThrottledStore};
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use sinkpoint::DirTable;
use sinkpoint::mirror::{MirrorMode, MirrorSettings};
use sinkpoint::{
    CheckpointId, CommitKey, CommitOutcome, Committer, SealWindow, SealWindowSettings, StageOutcome, StagingDurability,
    Store, Target, TargetCommit, WriteResult,
};

use common::counting::{CountingStore, Counts, Tally};
use common::{Goal, Report, cid, fmt_dur, key, small_result};
use sinkpoint::{Attempt, Part, StagePart};

/// The areas (first path segment) of an object store.
const SP_TABLE_AREA: &str = "sinkpoint-table";
/// The mirror's prefix.
const MIRROR_AREA: &str = "sinkpoint-mirror";
const DAFT_TABLE_AREA: &str = "daft-table";
const DAFT_STATE_AREA: &str = "daft-state";

/// Stage calls in one checkpoint's lifecycle.
const STAGES: u32 = 10;
/// Lifecycles counted (after the job's start) for the per-lifecycle rows: a multiple of every worker count.
const LIFECYCLES: u64 = 128;
/// The job shapes of the per-lifecycle rows: one task; one task whose stage calls are concurrent; the
/// quick-start job's default of 8 workers; 16 and 32 workers.
const SHAPES: [Shape; 6] = [
    Shape::awaited(1),
    Shape::WINDOWED,
    Shape { concurrent_stages: true, ..Shape::awaited(1) },
    Shape::awaited(8),
    Shape::awaited(16),
    Shape::awaited(32),
];
/// Checkpoints of the throttled job.
const JOB_CHECKPOINTS: u64 = 100;
/// The shapes of the throttled job: one task (its seals awaited, or in a window), and the quick-start job's 8
/// workers; the one task and the 8 workers again with their stage calls not fsynced (each seal still awaited).
const JOB_SHAPES: [Shape; 5] = [
    Shape::awaited(1),
    Shape::WINDOWED,
    Shape::awaited(8),
    Shape { unsynced_stages: true, ..Shape::awaited(1) },
    Shape { unsynced_stages: true, ..Shape::awaited(8) },
];
/// The windowed shape's wave: the `SealWindow`'s default bound, so a wave is one window's worth of seals.
const WINDOW_WAVE: usize = 16;
/// The throttled store's wait per request.
const REQUEST_WAIT: Duration = Duration::from_millis(20);
/// The asynchronous mode's bounds: up to this many groups in flight, none older than `ASYNC_LAG_MS`.
const ASYNC_LAG_BATCHES: u32 = 64;
const ASYNC_LAG_MS: u64 = 1_000;
/// The snapshot interval of the snapshot variant, in records (the default is 10,000).
const SNAPSHOT_RECORDS: u64 = 256;

/// When the mirror acks a call.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Sync,
    Async,
    /// Synchronous, with a snapshot every `SNAPSHOT_RECORDS` records, fixed, instead of the default schedule.
    SyncSnapshots,
}

impl Mode {
    fn settings(self) -> MirrorSettings {
        let defaults = MirrorSettings::default();
        match self {
            Mode::Sync => defaults,
            Mode::Async => MirrorSettings {
                mode: MirrorMode::Asynchronous { lag_batches_max: ASYNC_LAG_BATCHES, lag_ms_max: ASYNC_LAG_MS },
                ..defaults
            },
            // Fixed intervals, so the snapshots' cost shows at every size of the job.
            Mode::SyncSnapshots => MirrorSettings {
                snapshot_interval_records: SNAPSHOT_RECORDS,
                snapshot_log_ratio_percent: 0,
                ..defaults
            },
        }
    }

    fn name(self) -> &'static str {
        match self {
            Mode::Sync => "sync",
            Mode::Async => "async",
            Mode::SyncSnapshots => "sync (snapshots every 256 records)",
        }
    }
}

/// How a job issues its calls: waves of `workers` concurrent checkpoints (one task each), and within a
/// checkpoint the stage calls one after another or all at once (a task writing its parts in parallel).
///
/// `windowed` is the worker loop the README recommends: one task, its stage calls not fsynced
/// (`StagingDurability::None`) and each checkpoint's last part and seal queued in a `SealWindow` (default 16),
/// flushed and committed every `WINDOW_WAVE` checkpoints. The Daft-style baseline runs the same waves, one
/// checkpoint after another.
///
/// `unsynced_stages`: the stage calls are not fsynced (`StagingDurability::None`), each seal is awaited: a
/// synchronous mirror then waits for the seal's put only, which carries the stage calls before it.
#[derive(Clone, Copy, Debug)]
struct Shape {
    workers: usize,
    concurrent_stages: bool,
    windowed: bool,
    unsynced_stages: bool,
}

impl Shape {
    /// `workers` tasks, each call awaited and fsynced.
    const fn awaited(workers: usize) -> Self {
        Self { workers, concurrent_stages: false, windowed: false, unsynced_stages: false }
    }

    /// The worker loop the README recommends: one task, its seals in a window.
    const WINDOWED: Self = Self { windowed: true, ..Self::awaited(1) };

    /// The checkpoints of one wave (one commit each).
    fn wave_len(self) -> usize {
        if self.windowed { WINDOW_WAVE } else { self.workers }
    }

    /// The stage calls' durability: the windowed worker leaves them to the window's durable commits.
    fn staging(self) -> StagingDurability {
        if self.windowed || self.unsynced_stages { StagingDurability::None } else { StagingDurability::Immediate }
    }
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.windowed {
            return write!(f, "1 worker, seals in a window, a commit every {WINDOW_WAVE}");
        }
        let stages = if self.concurrent_stages { "concurrent" } else { "sequential" };
        let s = if self.workers == 1 { "" } else { "s" };
        let unsynced = if self.unsynced_stages { " not fsynced" } else { "" };
        write!(f, "{} worker{s}, {stages} stage calls{unsynced}", self.workers)
    }
}

fn main() {
    let quick = common::quick();
    let report = Report::default();
    let rt = common::runtime();
    let dir = common::tempdir();

    // Requests and bytes per lifecycle, each system on a counting in-memory store of its own.
    let (lifecycles, shapes): (u64, &[Shape]) = if quick { (16, &SHAPES[..3]) } else { (LIFECYCLES, &SHAPES) };
    println!("per lifecycle ({STAGES} stage calls, seal, commit), over {lifecycles} lifecycles after the start:");
    for (n, &shape) in shapes.iter().enumerate() {
        let daft = rt.block_on(daft_count(lifecycles, shape));
        println!("  {shape}, daft-style : {}; rerun's load {} requests", daft.run.line(), daft.load.requests);
        // The snapshot variant only for one task, whose restore reads the most slots.
        let modes: &[Mode] =
            if n == 0 { &[Mode::Sync, Mode::Async, Mode::SyncSnapshots] } else { &[Mode::Sync, Mode::Async] };
        for &mode in modes {
            let path = dir.path().join(format!("count-{n}-{mode:?}.redb"));
            let sp = rt.block_on(sinkpoint_count(&path, lifecycles, shape, mode));
            println!(
                "  {shape}, sinkpoint {:<5}: {}; the open: {}; restore {} requests ({})",
                mode.name(),
                sp.run.line(),
                sp.open.short(),
                sp.restore.requests,
                sp.restore.detail
            );
            let (sp_run, daft_run) = (&sp.run, &daft.run);
            report.add(
                format!(
                    "checkpoint-state requests per lifecycle, {shape}, {} mirror: sinkpoint / Daft-style",
                    mode.name()
                ),
                sp_run.per(sp_run.state.requests()) / daft_run.per(daft_run.state.requests()),
                Goal::AtMost(0.1),
                format!(
                    "{:.2} vs {:.2} (sinkpoint: {:.2} puts; {:.1} calls a group)",
                    sp_run.per(sp_run.state.requests()),
                    daft_run.per(daft_run.state.requests()),
                    sp_run.per(sp_run.state.puts),
                    sp_run.calls_per_group(),
                ),
            );
            if mode == Mode::Sync {
                report.add(
                    format!("checkpoint-state bytes per lifecycle, {shape}, sync mirror: sinkpoint / Daft-style"),
                    sp_run.per(sp_run.state.bytes()) / daft_run.per(daft_run.state.bytes()),
                    Goal::Info,
                    format!(
                        "{:.0} B vs {:.0} B",
                        sp_run.per(sp_run.state.bytes()),
                        daft_run.per(daft_run.state.bytes())
                    ),
                );
                report.add(
                    format!("all requests per lifecycle, the target's commit included, {shape}, sync: sinkpoint / Daft-style"),
                    sp_run.per(sp_run.all()) / daft_run.per(daft_run.all()),
                    Goal::Info,
                    format!(
                        "{:.2} vs {:.2} (target: {:.2} vs {:.2}; sinkpoint also lists the table's version)",
                        sp_run.per(sp_run.all()),
                        daft_run.per(daft_run.all()),
                        sp_run.per(sp_run.target.requests()),
                        daft_run.per(daft_run.target.requests())
                    ),
                );
            }
            if mode != Mode::Async {
                report.add(
                    format!(
                        "rerun's skip-set load after {lifecycles} lifecycles, {shape}, {} mirror, restore from the mirror, no local file: sinkpoint / Daft-style (requests)",
                        mode.name()
                    ),
                    sp.restore.requests as f64 / daft.load.requests as f64,
                    Goal::Info,
                    format!("{} vs {} ({}; Daft-style: {})", sp.restore.requests, daft.load.requests, sp.restore.detail, daft.load.detail),
                );
            }
        }
    }

    // The throttled jobs: every request waits; the job, then a rerun's skip-set load, wall time.
    let quick_shapes = [Shape::awaited(1), Shape::WINDOWED, Shape::awaited(2)];
    let (checkpoints, wait, job_shapes): (u64, Duration, &[Shape]) =
        if quick { (3, Duration::from_millis(1), &quick_shapes) } else { (JOB_CHECKPOINTS, REQUEST_WAIT, &JOB_SHAPES) };
    println!("\n{checkpoints}-checkpoint jobs over a store taking {} a request:", fmt_dur(wait));
    for (n, &shape) in job_shapes.iter().enumerate() {
        let daft = rt.block_on(daft_job(checkpoints, shape, wait));
        println!("  {shape}, daft-style : {}", daft.line());
        for mode in [Mode::Sync, Mode::Async] {
            let path = dir.path().join(format!("job-{n}-{mode:?}.redb"));
            let sp = rt.block_on(sinkpoint_job(&path, checkpoints, shape, mode, wait));
            println!("  {shape}, sinkpoint {:<5}: {}", mode.name(), sp.line());
            report.add(
                format!(
                    "{checkpoints}-checkpoint job, {shape}, {} a request, {} mirror: sinkpoint / Daft-style (wall time)",
                    fmt_dur(wait),
                    mode.name()
                ),
                sp.job.as_secs_f64() / daft.job.as_secs_f64(),
                Goal::AtMost(0.5),
                format!(
                    "{} vs {} ({:.2} vs {:.2} state requests a lifecycle; {:.1} calls a group)",
                    fmt_dur(sp.job),
                    fmt_dur(daft.job),
                    sp.run.per(sp.run.state.requests()),
                    daft.run.per(daft.run.state.requests()),
                    sp.run.calls_per_group()
                ),
            );
            for (what, load) in [("restore from the mirror, no local file", &sp.restore), ("reopen", &sp.reopen)] {
                report.add(
                    format!(
                        "rerun's skip-set load after that job ({shape}, {}), {what}: sinkpoint / Daft-style list + get (requests)",
                        mode.name()
                    ),
                    load.requests as f64 / daft.load.requests as f64,
                    Goal::Info,
                    format!(
                        "{} requests in {} vs {} in {} ({})",
                        load.requests,
                        fmt_dur(load.time),
                        daft.load.requests,
                        fmt_dur(daft.load.time),
                        load.detail
                    ),
                );
            }
        }
    }
    report.print("mirror: object-store requests and wall time");
}

/// An in-memory (or any) store behind the request counter.
fn counting(inner: impl ObjectStore) -> (Arc<dyn ObjectStore>, Counts) {
    let counting = Arc::new(CountingStore::new(inner));
    let counts = counting.counts();
    (counting, counts)
}

/// An in-memory store behind `ThrottledStore` (every put, get, list and delete waits `wait`) behind the counter.
fn throttled(wait: Duration) -> (Arc<dyn ObjectStore>, Counts) {
    let config = ThrottleConfig {
        wait_put_per_call: wait,
        wait_get_per_call: wait,
        wait_list_per_call: wait,
        wait_list_with_delimiter_per_call: wait,
        wait_delete_per_call: wait,
        ..ThrottleConfig::default()
    };
    counting(ThrottledStore::new(InMemory::new(), config))
}

/// What one system asked of its store over `lifecycles` lifecycles: the checkpoint state's area and the
/// target's, and (for sinkpoint) the local group commits, each shipped as one segment.
#[derive(Clone, Copy, Default)]
struct Run {
    state: Tally,
    target: Tally,
    lifecycles: u64,
    groups: Option<u64>,
    /// Commits (one a wave), each a begin and a mark call.
    waves: u64,
}

impl Run {
    fn of(counts: &Counts, state: &str, target: &str, lifecycles: u64) -> Self {
        Self { state: counts.area(state), target: counts.area(target), lifecycles, groups: None, waves: 0 }
    }

    fn since(self, before: &Run) -> Self {
        Self { state: self.state.since(&before.state), target: self.target.since(&before.target), ..self }
    }

    /// The local group commits of the run, for the calls a group.
    fn with_groups(self, groups: u64, workers: usize) -> Self {
        let waves = self.lifecycles.div_ceil(workers.max(1) as u64);
        Self { groups: Some(groups), waves, ..self }
    }

    fn per(&self, n: u64) -> f64 {
        n as f64 / self.lifecycles as f64
    }

    fn all(&self) -> u64 {
        self.state.requests() + self.target.requests()
    }

    /// Calls (stage, seal, begin, mark) per local group: how much the writer folded.
    fn calls_per_group(&self) -> f64 {
        let calls = self.lifecycles * (u64::from(STAGES) + 1) + 2 * self.waves;
        self.groups.map_or(f64::NAN, |g| calls as f64 / g.max(1) as f64)
    }

    fn line(&self) -> String {
        format!(
            "state {:.2} req ({}); target {:.2} req; {}",
            self.per(self.state.requests()),
            self.state.short(),
            self.per(self.target.requests()),
            self.groups.map_or(String::new(), |g| format!("{g} groups"))
        )
    }
}

fn input(c: u64) -> CheckpointId {
    cid(&format!("input-{c:05}"))
}

fn stage_item(c: u64, part: u32) -> u64 {
    c * u64::from(STAGES) + u64::from(part)
}

/// Part `part` of checkpoint `c`: its one source key and one small result.
fn stage_part(c: u64, part: u32) -> StagePart {
    let i = stage_item(c, part);
    StagePart::new(Attempt::FIRST, Part::new(part)).keys(vec![key(i)]).results(vec![small_result(i)])
}

/// The waves of a job: `workers` consecutive checkpoints each.
fn waves(checkpoints: std::ops::Range<u64>, workers: usize) -> Vec<Vec<u64>> {
    checkpoints.collect::<Vec<_>>().chunks(workers.max(1)).map(<[u64]>::to_vec).collect()
}

// ---------------------------------------------------------------------------------------------------------
// sinkpoint's side.

/// What a counted sinkpoint job asked of its store: the open, the lifecycles, and a rerun's restore.
struct SpCount {
    open: Tally,
    run: Run,
    restore: Load,
}

/// A sinkpoint job on a counting in-memory store: open, start, the lifecycles (counted), then a restore from
/// the mirror into a new local file (the disk was lost), counted too.
async fn sinkpoint_count(path: &FsPath, lifecycles: u64, shape: Shape, mode: Mode) -> SpCount {
    let (os, counts) = counting(InMemory::new());
    let sp = Sinkpoint::open(os.clone(), path, mode, shape.staging()).await;
    let open = counts.area(MIRROR_AREA);
    sp.start().await;
    let (before, stats) = (Run::of(&counts, MIRROR_AREA, SP_TABLE_AREA, 1), sp.store.stats());
    sp.job(0..lifecycles, shape).await;
    let commits = sp.store.stats().commits - stats.commits;
    // Closed before counting: the close waits for the mirror's maintenance (a snapshot under way).
    sp.store.close();
    let run =
        Run::of(&counts, MIRROR_AREA, SP_TABLE_AREA, lifecycles).since(&before).with_groups(commits, shape.wave_len());
    let restore = sinkpoint_rerun(&os, &counts, &path.with_extension("restored.redb"), mode, lifecycles).await;
    SpCount { open, run, restore }
}

/// A rerun: open (restoring from the mirror if `path` is absent), recover, check the skip set; its requests.
async fn sinkpoint_rerun(
    os: &Arc<dyn ObjectStore>,
    counts: &Counts,
    path: &FsPath,
    mode: Mode,
    checkpoints: u64,
) -> Load {
    let before = Run::of(counts, MIRROR_AREA, SP_TABLE_AREA, 1);
    let start = Instant::now();
    let sp = Sinkpoint::open(os.clone(), path, mode, StagingDurability::Immediate).await;
    sp.start().await;
    sp.check_skips(checkpoints);
    let time = start.elapsed();
    let d = Run::of(counts, MIRROR_AREA, SP_TABLE_AREA, 1).since(&before);
    sp.store.close();
    let detail = format!(
        "mirror: {} lists, {} gets, {} puts; target: {}",
        d.state.lists,
        d.state.gets + d.state.heads,
        d.state.puts,
        d.target.requests()
    );
    Load { requests: d.all(), time, detail }
}

/// A sinkpoint job: its store, mirrored under `MIRROR_AREA`, and its table, both in one object store.
struct Sinkpoint {
    store: Store,
    table: DirTable,
}

impl Sinkpoint {
    /// Opens (creates, reopens or restores) the store at `path` through the mirror in `os`.
    async fn open(os: Arc<dyn ObjectStore>, path: &FsPath, mode: Mode, staging: StagingDurability) -> Self {
        let store = Store::builder(common::job(), common::target())
            .path(path)
            .staging_durability(staging)
            .mirror(os.clone(), Path::from(MIRROR_AREA), mode.settings())
            .open()
            .await
            .expect("open the mirrored store");
        Self { store, table: DirTable::new(os, Path::from(SP_TABLE_AREA)) }
    }

    /// What a job does first: recover (a new store probes key 0 of the target to refuse lost state).
    async fn start(&self) {
        let report = Committer::new(&self.store, &self.table).recover().await.expect("recover");
        assert!(report.blocked.is_none(), "recovery is blocked: {:?}", report.blocked);
    }

    /// One checkpoint's task: its stage calls (one after another, or all at once), then the seal.
    async fn checkpoint(&self, c: u64, concurrent: bool) {
        let id = input(c);
        let stage = |part: u32| self.store.stage(&id, stage_part(c, part));
        if concurrent {
            for outcome in join_all((0..STAGES).map(stage)).await {
                assert!(matches!(outcome.expect("stage"), StageOutcome::Staged), "a new part");
            }
        } else {
            for part in 0..STAGES {
                assert!(matches!(stage(part).await.expect("stage"), StageOutcome::Staged), "a new part");
            }
        }
        self.store.seal(&id, STAGES).await.expect("seal");
    }

    /// One checkpoint of the windowed shape: the stage calls (not fsynced), then the last part and the seal
    /// queued in the window.
    async fn windowed_checkpoint(&self, window: &mut SealWindow<'_>, c: u64) {
        let id = input(c);
        for n in 0..STAGES - 1 {
            let outcome = self.store.stage(&id, stage_part(c, n)).await.expect("stage");
            assert!(matches!(outcome, StageOutcome::Staged), "a new part");
        }
        window.stage_and_seal(&id, stage_part(c, STAGES - 1), STAGES).await.expect("queue the seal");
    }

    /// Waves of concurrent checkpoints, one commit after each; then every group is in the mirror.
    async fn job(&self, checkpoints: std::ops::Range<u64>, shape: Shape) {
        if shape.windowed {
            let mut window = SealWindow::new(&self.store, SealWindowSettings::default()).expect("a window");
            for wave in waves(checkpoints, shape.wave_len()) {
                for &c in &wave {
                    self.windowed_checkpoint(&mut window, c).await;
                }
                assert_eq!(window.flush().await.expect("flush").len(), wave.len(), "every seal of the wave landed");
                let done = Committer::new(&self.store, &self.table).commit_pending().await.expect("commit");
                assert_eq!(done.committed_keys.len(), 1, "one target commit per wave");
            }
            self.store.flush().await.expect("flush");
            return;
        }
        for wave in waves(checkpoints, shape.workers) {
            join_all(wave.iter().map(|&c| self.checkpoint(c, shape.concurrent_stages))).await;
            let done = Committer::new(&self.store, &self.table).commit_pending().await.expect("commit");
            assert_eq!(done.committed_keys.len(), 1, "one target commit per wave");
        }
        self.store.flush().await.expect("flush");
    }

    /// The rerun's check: every input is skipped.
    fn check_skips(&self, checkpoints: u64) {
        let skipped =
            (0..checkpoints).filter(|&c| self.store.is_processed(&key(stage_item(c, 0))).expect("lookup")).count();
        assert_eq!(skipped as u64, checkpoints, "the rerun skips every input");
    }
}

/// A rerun's skip-set load: requests (state and target), wall time, and what the requests were.
#[derive(Default)]
struct Load {
    requests: u64,
    time: Duration,
    detail: String,
}

struct SpJob {
    job: Duration,
    run: Run,
    restore: Load,
    reopen: Load,
}

impl SpJob {
    fn line(&self) -> String {
        format!(
            "job {}; {}; restore {} req in {}; reopen {} req in {}",
            fmt_dur(self.job),
            self.run.line(),
            self.restore.requests,
            fmt_dur(self.restore.time),
            self.reopen.requests,
            fmt_dur(self.reopen.time)
        )
    }
}

/// The throttled job for sinkpoint: open, start, the waves; then two reruns, each opening and recovering and
/// checking the skip set: one restoring from the mirror into a new local file (the disk was lost), one
/// reopening the job's own file through the mirror.
async fn sinkpoint_job(path: &FsPath, checkpoints: u64, shape: Shape, mode: Mode, wait: Duration) -> SpJob {
    let (os, counts) = throttled(wait);
    let start = Instant::now();
    let sp = Sinkpoint::open(os.clone(), path, mode, shape.staging()).await;
    sp.start().await;
    let (before, stats) = (Run::of(&counts, MIRROR_AREA, SP_TABLE_AREA, 1), sp.store.stats());
    sp.job(0..checkpoints, shape).await;
    let job = start.elapsed();
    let run = Run::of(&counts, MIRROR_AREA, SP_TABLE_AREA, checkpoints).since(&before);
    let run = run.with_groups(sp.store.stats().commits - stats.commits, shape.wave_len());
    sp.store.close();

    let restore = sinkpoint_rerun(&os, &counts, &path.with_extension("restored.redb"), mode, checkpoints).await;
    let reopen = sinkpoint_rerun(&os, &counts, path, mode, checkpoints).await;
    SpJob { job, run, restore, reopen }
}

// ---------------------------------------------------------------------------------------------------------
// The Daft-style baseline.

/// Daft's checkpoint store, as the design describes it: every stage call writes one object (random name), each
/// checkpoint a JSON manifest (rewritten when committed), and a run loads the skip set by listing and reading
/// every manifest. Staged results are kept in memory for the commit, as Daft does.
struct DaftStyle {
    os: Arc<dyn ObjectStore>,
    table: DirTable,
    next_key: AtomicU64,
    next_object: AtomicU64,
}

/// One sealed checkpoint of the baseline, held in memory until its commit.
struct Sealed {
    id: CheckpointId,
    keys: Vec<String>,
    objects: Vec<String>,
    results: Vec<WriteResult>,
}

impl Sealed {
    fn manifest(&self, state: &str) -> String {
        format!(
            r#"{{"checkpoint":"{}","state":"{state}","keys":{},"staged":{}}}"#,
            self.id,
            json_array(&self.keys),
            json_array(&self.objects)
        )
    }
}

impl DaftStyle {
    fn new(os: Arc<dyn ObjectStore>) -> Self {
        let table = DirTable::new(os.clone(), Path::from(DAFT_TABLE_AREA));
        Self { os, table, next_key: AtomicU64::new(0), next_object: AtomicU64::new(0) }
    }

    fn manifest_path(id: &CheckpointId) -> Path {
        Path::from(format!("{DAFT_STATE_AREA}/manifests/{id}.json"))
    }

    async fn put(&self, path: Path, json: String) {
        self.os.put(&path, PutPayload::from(json.into_bytes())).await.expect("put");
    }

    /// One stage call: one object under a random-style name (Daft uses a UUID: a retried call writes a second
    /// object). Returns the key, the object's name and the result.
    async fn stage(&self, id: &CheckpointId, i: u64) -> (String, String, WriteResult) {
        let (k, r) = (String::from_utf8(key(i)).expect("ASCII"), small_result(i));
        let n = self.next_object.fetch_add(1, Ordering::Relaxed) + 1;
        let path = Path::from(format!("{DAFT_STATE_AREA}/staged/{id}/{n:016x}.json"));
        let body =
            format!(r#"{{"checkpoint":"{id}","keys":["{k}"],"results":["{}"]}}"#, String::from_utf8_lossy(r.bytes()));
        let name = path.to_string();
        self.put(path, body).await;
        (k, name, r)
    }

    /// One checkpoint's task: an object per stage call (one after another, or all at once), then the manifest.
    async fn checkpoint(&self, c: u64, concurrent: bool) -> Sealed {
        let id = input(c);
        let staged = if concurrent {
            join_all((0..STAGES).map(|part| self.stage(&id, stage_item(c, part)))).await
        } else {
            let mut staged = Vec::new();
            for part in 0..STAGES {
                staged.push(self.stage(&id, stage_item(c, part)).await);
            }
            staged
        };
        let mut sealed = Sealed { id: id.clone(), keys: Vec::new(), objects: Vec::new(), results: Vec::new() };
        for (k, name, r) in staged {
            sealed.keys.push(k);
            sealed.objects.push(name);
            sealed.results.push(r);
        }
        self.put(Self::manifest_path(&id), sealed.manifest("checkpointed")).await;
        sealed
    }

    /// One target commit of a wave's checkpoints, then each manifest rewritten as committed (concurrently).
    async fn commit(&self, wave: &[Sealed]) {
        let commit_key = CommitKey { job: common::job(), n: self.next_key.fetch_add(1, Ordering::Relaxed) };
        let ids: Vec<CheckpointId> = wave.iter().map(|s| s.id.clone()).collect();
        let results: Vec<WriteResult> = wave.iter().flat_map(|s| s.results.iter().cloned()).collect();
        let commit = TargetCommit {
            key: &commit_key,
            ids: &ids,
            epoch: 1,
            results: &results,
            final_commit: false,
            prepared_version: None,
        };
        assert!(matches!(self.table.commit(&commit).await, CommitOutcome::Committed), "the Daft-style commit");
        join_all(wave.iter().map(|s| self.put(Self::manifest_path(&s.id), s.manifest("committed")))).await;
    }

    /// The same waves as sinkpoint's job.
    async fn job(&self, checkpoints: std::ops::Range<u64>, shape: Shape) {
        if shape.windowed {
            for wave in waves(checkpoints, shape.wave_len()) {
                let mut sealed = Vec::new();
                for &c in &wave {
                    sealed.push(self.checkpoint(c, false).await);
                }
                self.commit(&sealed).await;
            }
            return;
        }
        for wave in waves(checkpoints, shape.workers) {
            let sealed = join_all(wave.iter().map(|&c| self.checkpoint(c, shape.concurrent_stages))).await;
            self.commit(&sealed).await;
        }
    }

    /// Lists every manifest and reads each: the skip set.
    async fn load_skip_set(&self) -> BTreeSet<String> {
        let prefix = Path::from(format!("{DAFT_STATE_AREA}/manifests"));
        let metas: Vec<_> = self.os.list(Some(&prefix)).try_collect().await.expect("list manifests");
        let mut skip = BTreeSet::new();
        for meta in metas {
            let body = self.os.get(&meta.location).await.expect("get").bytes().await.expect("bytes");
            let text = String::from_utf8(body.to_vec()).expect("UTF-8 manifest");
            if text.contains(r#""state":"committed""#) || text.contains(r#""state":"checkpointed""#) {
                skip.extend(json_field_array(&text, "keys"));
            }
        }
        skip
    }
}

/// A Daft-style job on a counting in-memory store: the lifecycles (counted), then a rerun's load.
async fn daft_count(lifecycles: u64, shape: Shape) -> DaftJob {
    let (os, counts) = counting(InMemory::new());
    let daft = DaftStyle::new(os.clone());
    assert!(daft.load_skip_set().await.is_empty(), "a new job has nothing to skip");
    let before = Run::of(&counts, DAFT_STATE_AREA, DAFT_TABLE_AREA, 1);
    let start = Instant::now();
    daft.job(0..lifecycles, shape).await;
    let job = start.elapsed();
    let run = Run::of(&counts, DAFT_STATE_AREA, DAFT_TABLE_AREA, lifecycles).since(&before);
    // The wrapper must have seen exactly what the baseline did: a stage object per call, a manifest written at
    // seal and rewritten at commit.
    assert_eq!(run.state.puts, lifecycles * (u64::from(STAGES) + 2), "the counted Daft-style state puts");
    let load = daft_load(os, &counts, lifecycles).await;
    DaftJob { job, run, load }
}

/// A rerun's skip-set load for the baseline: list + get of every manifest.
async fn daft_load(os: Arc<dyn ObjectStore>, counts: &Counts, checkpoints: u64) -> Load {
    let before = Run::of(counts, DAFT_STATE_AREA, DAFT_TABLE_AREA, 1);
    let start = Instant::now();
    let skip = DaftStyle::new(os).load_skip_set().await;
    let time = start.elapsed();
    let d = Run::of(counts, DAFT_STATE_AREA, DAFT_TABLE_AREA, 1).since(&before);
    assert_eq!(skip.len() as u64, checkpoints * u64::from(STAGES), "the rerun skips every key");
    Load { requests: d.all(), time, detail: format!("{} lists, {} gets", d.state.lists, d.state.gets) }
}

struct DaftJob {
    job: Duration,
    run: Run,
    load: Load,
}

impl DaftJob {
    fn line(&self) -> String {
        format!(
            "job {}; {}; load {} req in {}",
            fmt_dur(self.job),
            self.run.line(),
            self.load.requests,
            fmt_dur(self.load.time)
        )
    }
}

/// The throttled job for the baseline: load the (empty) skip set, the waves; then a rerun's skip-set load.
async fn daft_job(checkpoints: u64, shape: Shape, wait: Duration) -> DaftJob {
    let (os, counts) = throttled(wait);
    let start = Instant::now();
    let daft = DaftStyle::new(os.clone());
    assert!(daft.load_skip_set().await.is_empty(), "a new job has nothing to skip");
    let before = Run::of(&counts, DAFT_STATE_AREA, DAFT_TABLE_AREA, 1);
    daft.job(0..checkpoints, shape).await;
    let job = start.elapsed();
    let run = Run::of(&counts, DAFT_STATE_AREA, DAFT_TABLE_AREA, checkpoints).since(&before);
    let load = daft_load(os, &counts, checkpoints).await;
    DaftJob { job, run, load }
}

fn json_array(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("\"{s}\"")).collect();
    format!("[{}]", quoted.join(","))
}

/// The strings of `"field":["a","b"]` in a manifest this file wrote (no escapes: keys and paths are ASCII).
fn json_field_array(text: &str, field: &str) -> Vec<String> {
    let open = format!("\"{field}\":[");
    let Some(start) = text.find(&open).map(|i| i + open.len()) else { return Vec::new() };
    let end = start + text[start..].find(']').expect("a closed array");
    text[start..end].split(',').map(|s| s.trim_matches('"').to_owned()).filter(|s| !s.is_empty()).collect()
}
