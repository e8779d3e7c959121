//! Object-store rows: requests and bytes per checkpoint lifecycle (10 stage calls, seal, commit) for sinkpoint
//! and for a Daft-style checkpoint store written here (one object per stage call, a JSON manifest per
//! checkpoint, list + get of every manifest to load the skip set), both on one request-counting in-memory store;
//! then the wall time of a 100-checkpoint job and of a rerun's skip-set load for both, over a store that takes
//! about 20 ms a request.
//!
//! Pending the mirror: sinkpoint's WAL is local only on this branch, so its checkpoint-state requests are 0 and
//! its object-store requests are what the target commit costs (`DirTable` through the `Committer`). When the
//! mirror merges, attach it in `Sinkpoint::open` under `MIRROR_AREA`: the counts, the rows and the report pick
//! it up unchanged.
//!
//! No criterion timing here: the figures are counts, and the throttled job runs once (it is sleep-bound).
//! `cargo bench --bench mirror` measures; `cargo test --bench mirror` runs a 3-checkpoint job at 1 ms a request.

#![allow(clippy::disallowed_methods, reason = "benches measure wall time; nothing they decide depends on it")]

#[path = "common/mod.rs"]
mod common;

use std::collections::BTreeSet;
use std::path::Path as FsPath;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::throttle::{ThrottleConfig, ThrottledStore};
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use sinkpoint::target::DirTable;
use sinkpoint::{CheckpointId, CommitKey, CommitOutcome, Committer, StagingDurability, Store, Target, TargetCommit};

use common::counting::{CountingStore, Counts, Tally};
use common::{Goal, Report, cid, fmt_dur, key, small_result};

/// The areas (first path segment) of the shared object store.
const SP_TABLE_AREA: &str = "sinkpoint-table";
/// Where sinkpoint's mirror will live once it merges; nothing writes here yet.
const MIRROR_AREA: &str = "sinkpoint-mirror";
const DAFT_TABLE_AREA: &str = "daft-table";
const DAFT_STATE_AREA: &str = "daft-state";

/// Stage calls in one checkpoint's lifecycle.
const STAGES: u32 = 10;
/// Lifecycles counted (after the job's start) for the per-lifecycle rows.
const LIFECYCLES: u64 = 10;
/// Checkpoints of the throttled job (quick mode: 3).
const JOB_CHECKPOINTS: u64 = 100;
/// The throttled store's wait per request (quick mode: 1 ms).
const REQUEST_WAIT: Duration = Duration::from_millis(20);

fn main() {
    let quick = common::quick();
    let report = Report::default();
    let rt = common::runtime();
    let dir = common::tempdir();

    // Requests and bytes per lifecycle, on one counting in-memory store.
    let counting = Arc::new(CountingStore::new(InMemory::new()));
    let counts = counting.counts();
    let os: Arc<dyn ObjectStore> = counting;
    let (sp, daft) = rt.block_on(async {
        let sp = Sinkpoint::open(os.clone(), &dir.path().join("count.redb")).await;
        sp.start().await;
        let before = sp_tally(&counts);
        for c in 0..LIFECYCLES {
            sp.lifecycle(c).await;
        }
        let sp_run = since(sp_tally(&counts), before);
        sp.close();

        let mut daft = DaftStyle::new(os.clone());
        daft.load_skip_set().await;
        let before = daft_tally(&counts);
        for c in 0..LIFECYCLES {
            daft.lifecycle(c).await;
        }
        let daft_run = since(daft_tally(&counts), before);
        // The wrapper must have seen exactly what the baseline did: a stage object per call, a manifest
        // written at seal and rewritten at commit.
        let state_puts = counts.area(DAFT_STATE_AREA).puts;
        assert_eq!(state_puts, LIFECYCLES * (u64::from(STAGES) + 2), "the counted Daft-style state puts");
        (sp_run, daft_run)
    });
    let per = |t: &Tally| t.requests() as f64 / LIFECYCLES as f64;
    let per_bytes = |t: &Tally| t.bytes() as f64 / LIFECYCLES as f64;
    let ((sp_state, sp_target), (daft_state, daft_target)) = (sp, daft);
    println!("per {LIFECYCLES} lifecycles ({STAGES} stage calls, seal, commit each):");
    println!("  sinkpoint  state (mirror pending): {}; target: {}", sp_state.short(), sp_target.short());
    println!("  daft-style state: {}; target: {}", daft_state.short(), daft_target.short());
    report.add(
        "checkpoint-state requests per lifecycle: sinkpoint / Daft-style (sinkpoint's mirror pending: WAL local)",
        per(&sp_state) / per(&daft_state),
        Goal::AtMost(0.1),
        format!("{:.1} vs {:.1} requests", per(&sp_state), per(&daft_state)),
    );
    report.add(
        "checkpoint-state bytes per lifecycle: sinkpoint / Daft-style (mirror pending)",
        per_bytes(&sp_state) / per_bytes(&daft_state),
        Goal::Info,
        format!("{:.0} B vs {:.0} B", per_bytes(&sp_state), per_bytes(&daft_state)),
    );
    let (sp_all, daft_all) = (per(&sp_state) + per(&sp_target), per(&daft_state) + per(&daft_target));
    report.add(
        "all requests per lifecycle, the target's commit included: sinkpoint / Daft-style",
        sp_all / daft_all,
        Goal::Info,
        format!(
            "{sp_all:.1} vs {daft_all:.1} (target: {:.1} vs {:.1}: sinkpoint also lists the table's version)",
            per(&sp_target),
            per(&daft_target)
        ),
    );

    // The throttled job: every request waits; the job and a rerun's skip-set load, wall time.
    let (checkpoints, wait) = if quick { (3, Duration::from_millis(1)) } else { (JOB_CHECKPOINTS, REQUEST_WAIT) };
    let (sp_job, sp_load, sp_load_requests) = rt.block_on(sinkpoint_job(dir.path(), checkpoints, wait));
    let (daft_job, daft_load, daft_load_requests) = rt.block_on(daft_job(checkpoints, wait));
    report.add(
        format!("{checkpoints}-checkpoint job, {} a request: sinkpoint / Daft-style (wall time)", fmt_dur(wait)),
        sp_job.as_secs_f64() / daft_job.as_secs_f64(),
        Goal::Info,
        format!("{} vs {}", fmt_dur(sp_job), fmt_dur(daft_job)),
    );
    report.add(
        format!("rerun's skip-set load after {checkpoints} checkpoints: sinkpoint / Daft-style (wall time)"),
        sp_load.as_secs_f64() / daft_load.as_secs_f64(),
        Goal::Info,
        format!(
            "{} ({sp_load_requests} requests: open + recover) vs {} ({daft_load_requests} requests: list + a get per manifest)",
            fmt_dur(sp_load),
            fmt_dur(daft_load)
        ),
    );
    report.print("mirror: object-store requests and wall time (mirror pending)");
}

fn sp_tally(counts: &Counts) -> (Tally, Tally) {
    (counts.area(MIRROR_AREA), counts.area(SP_TABLE_AREA))
}

fn daft_tally(counts: &Counts) -> (Tally, Tally) {
    (counts.area(DAFT_STATE_AREA), counts.area(DAFT_TABLE_AREA))
}

/// What happened to a (state, target) pair of tallies between `before` and `now`.
fn since(now: (Tally, Tally), before: (Tally, Tally)) -> (Tally, Tally) {
    (now.0.since(&before.0), now.1.since(&before.1))
}

fn input(c: u64) -> CheckpointId {
    cid(&format!("input-{c:05}"))
}

fn stage_item(c: u64, part: u32) -> u64 {
    c * u64::from(STAGES) + u64::from(part)
}

// ---------------------------------------------------------------------------------------------------------
// sinkpoint's side.

/// A sinkpoint job: its local store and its table in the object store.
struct Sinkpoint {
    store: Store,
    table: DirTable,
}

impl Sinkpoint {
    /// The one place the mirror rows change when the mirror merges: attach `os` under `MIRROR_AREA` as the
    /// store's mirror here. Until then the WAL is local and costs no request.
    async fn open(os: Arc<dyn ObjectStore>, path: &FsPath) -> Self {
        let store = common::open_store(path, StagingDurability::Immediate).await;
        Self { store, table: DirTable::new(os, Path::from(SP_TABLE_AREA)) }
    }

    /// What a job does first: recover (a new store probes key 0 of the target to refuse lost state).
    async fn start(&self) {
        let report = Committer::new(&self.store, &self.table).recover().await.expect("recover");
        assert!(report.blocked.is_none(), "recovery is blocked: {:?}", report.blocked);
    }

    async fn lifecycle(&self, c: u64) {
        let id = input(c);
        for part in 0..STAGES {
            let i = stage_item(c, part);
            self.store.stage(&id, 0, part, vec![key(i)], vec![small_result(i)]).await.expect("stage");
        }
        self.store.seal(&id, STAGES).await.expect("seal");
        let done = Committer::new(&self.store, &self.table).commit_pending(false).await.expect("commit");
        assert_eq!(done.committed_keys.len(), 1, "one target commit per lifecycle");
    }

    fn close(self) {
        self.store.close();
    }
}

/// The throttled job for sinkpoint: start, `checkpoints` lifecycles; then a rerun: reopen, recover, and check
/// the skip set. Returns the job's and the rerun's wall times and the rerun's requests.
async fn sinkpoint_job(dir: &FsPath, checkpoints: u64, wait: Duration) -> (Duration, Duration, u64) {
    let (os, counts) = throttled(wait);
    let path = dir.join("job.redb");
    let start = Instant::now();
    let sp = Sinkpoint::open(os.clone(), &path).await;
    sp.start().await;
    for c in 0..checkpoints {
        sp.lifecycle(c).await;
    }
    let job = start.elapsed();
    sp.close();
    let before = sp_tally(&counts);
    let start = Instant::now();
    let sp = Sinkpoint::open(os, &path).await;
    sp.start().await;
    let skipped = (0..checkpoints).filter(|&c| sp.store.is_processed(&key(stage_item(c, 0))).expect("lookup")).count();
    let load = start.elapsed();
    let (state, target) = since(sp_tally(&counts), before);
    assert_eq!(skipped as u64, checkpoints, "the rerun skips every input");
    sp.close();
    (job, load, state.requests() + target.requests())
}

// ---------------------------------------------------------------------------------------------------------
// The Daft-style baseline.

/// Daft's checkpoint store, as the design describes it: every stage call writes one object (random name), each
/// checkpoint a JSON manifest (rewritten when committed), and a run loads the skip set by listing and reading
/// every manifest. Staged results are kept in memory for the commit, as Daft does.
struct DaftStyle {
    os: Arc<dyn ObjectStore>,
    table: DirTable,
    next_key: u64,
    next_object: u64,
}

impl DaftStyle {
    fn new(os: Arc<dyn ObjectStore>) -> Self {
        let table = DirTable::new(os.clone(), Path::from(DAFT_TABLE_AREA));
        Self { os, table, next_key: 0, next_object: 0 }
    }

    fn manifest_path(id: &CheckpointId) -> Path {
        Path::from(format!("{DAFT_STATE_AREA}/manifests/{id}.json"))
    }

    async fn put(&self, path: &Path, json: String) {
        self.os.put(path, PutPayload::from(json.into_bytes())).await.expect("put");
    }

    async fn lifecycle(&mut self, c: u64) {
        let id = input(c);
        let mut keys = Vec::new();
        let mut results = Vec::new();
        let mut objects = Vec::new();
        for part in 0..STAGES {
            let i = stage_item(c, part);
            let (k, r) = (String::from_utf8(key(i)).expect("ASCII"), small_result(i));
            // A random object name per stage call (Daft uses a UUID): a retried call writes a second object.
            self.next_object += 1;
            let path = Path::from(format!("{DAFT_STATE_AREA}/staged/{id}/{:016x}.json", self.next_object));
            let body = format!(
                r#"{{"checkpoint":"{id}","keys":["{k}"],"results":["{}"]}}"#,
                String::from_utf8_lossy(r.bytes())
            );
            self.put(&path, body).await;
            objects.push(path.to_string());
            keys.push(k);
            results.push(r);
        }
        let manifest = |state: &str| {
            format!(
                r#"{{"checkpoint":"{id}","state":"{state}","keys":{},"staged":{}}}"#,
                json_array(&keys),
                json_array(&objects)
            )
        };
        self.put(&Self::manifest_path(&id), manifest("checkpointed")).await;
        let commit_key = CommitKey { job: common::job(), n: self.next_key };
        let ids = [id.clone()];
        let commit = TargetCommit {
            key: &commit_key,
            ids: &ids,
            epoch: 1,
            results: &results,
            final_commit: false,
            prepared_version: None,
        };
        assert!(matches!(self.table.commit(&commit).await, CommitOutcome::Committed), "the Daft-style commit");
        self.next_key += 1;
        self.put(&Self::manifest_path(&id), manifest("committed")).await;
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

/// The throttled job for the baseline: load the (empty) skip set, `checkpoints` lifecycles; then a rerun's
/// skip-set load. Returns the job's and the load's wall times and the load's requests.
async fn daft_job(checkpoints: u64, wait: Duration) -> (Duration, Duration, u64) {
    let (os, counts) = throttled(wait);
    let start = Instant::now();
    let mut daft = DaftStyle::new(os.clone());
    assert!(daft.load_skip_set().await.is_empty(), "a new job has nothing to skip");
    for c in 0..checkpoints {
        daft.lifecycle(c).await;
    }
    let job = start.elapsed();
    let before = daft_tally(&counts);
    let start = Instant::now();
    let skip = DaftStyle::new(os).load_skip_set().await;
    let load = start.elapsed();
    let (state, target) = since(daft_tally(&counts), before);
    assert_eq!(skip.len() as u64, checkpoints * u64::from(STAGES), "the rerun skips every key");
    (job, load, state.requests() + target.requests())
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

/// An in-memory store behind `ThrottledStore` (every put, get and list waits `wait`) behind the counter.
fn throttled(wait: Duration) -> (Arc<dyn ObjectStore>, Counts) {
    let config = ThrottleConfig {
        wait_put_per_call: wait,
        wait_get_per_call: wait,
        wait_list_per_call: wait,
        wait_list_with_delimiter_per_call: wait,
        wait_delete_per_call: wait,
        ..ThrottleConfig::default()
    };
    let counting = Arc::new(CountingStore::new(ThrottledStore::new(InMemory::new(), config)));
    let counts = counting.counts();
    (counting, counts)
}
