//! Shared by the `mirror_*` suites: the object-store backends the mirror tests run on (in-memory and a local
//! directory for all of them, [`kinds`]; moto's S3 API as well, when `SINKPOINT_S3_ENDPOINT` is set, for those
//! about conditional creates, listings and request counts, [`kinds_with_s3`]), each wrapped in a `FaultStore`,
//! and small helpers to build stores and checkpoints.
#![allow(dead_code, reason = "each suite uses a different part of the support module")]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt as _};
use sinkpoint::mirror::{MirrorMode, MirrorSettings};
use sinkpoint::testkit::{FaultStore, ManualClock};
use sinkpoint::{Attempt, Part, StagePart};
use sinkpoint::{CheckpointId, Format, JobId, Store, StoreBuilder, TargetIdentity, WriteResult};

/// Which object store a test runs on.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    Memory,
    Local,
    S3,
}

/// One object store for one test, with the fault wrapper the stores use and the prefix under test.
pub struct Bucket {
    pub kind: Kind,
    pub raw: Arc<dyn ObjectStore>,
    pub faults: FaultStore<Arc<dyn ObjectStore>>,
    pub prefix: Path,
    _dir: Option<tempfile::TempDir>,
}

static UNIQUE: AtomicU64 = AtomicU64::new(0);

#[expect(clippy::disallowed_methods, reason = "bucket names must differ across runs against one moto server")]
fn unique(test: &str) -> String {
    let n = UNIQUE.fetch_add(1, Ordering::SeqCst);
    let pid = std::process::id();
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    let name: String =
        test.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).collect();
    let name = &name[..name.len().min(30)];
    format!("{name}-{pid}-{n}-{nanos}")
}

/// The backends most mirror tests run on: InMemory and a local directory, which answer at once. What these tests
/// check (fencing logic, ordering, gates, damaged bytes, bounds) does not depend on the store's wire protocol.
pub fn kinds() -> Vec<Kind> {
    vec![Kind::Memory, Kind::Local]
}

/// The same two and moto's S3 API, for the tests whose subject S3 can answer differently from the local stores:
/// conditional creates (`PutMode::Create`, `If-None-Match`: a claim or fence that loses, a slot another epoch
/// took, a retry answered `AlreadyExists` for our own object), listings (what a restore, a view and a
/// collection find, object ages from the store's own clock) and the requests a group costs. S3 only when moto is
/// there: without it, outside CI the test runs the other two and the test binary says so once on its stderr
/// (`say_s3_skipped`, which libtest does not capture); in CI (`CI` set) a missing moto fails the test.
pub fn kinds_with_s3() -> Vec<Kind> {
    match std::env::var("SINKPOINT_S3_ENDPOINT") {
        Ok(_) => vec![Kind::Memory, Kind::Local, Kind::S3],
        Err(_) => {
            assert!(
                std::env::var("CI").is_err(),
                "CI is set but SINKPOINT_S3_ENDPOINT is not: .ci/run must start moto (source .ci/moto.sh; moto_start)"
            );
            sinkpoint::testkit::say_s3_skipped();
            vec![Kind::Memory, Kind::Local]
        }
    }
}

impl Bucket {
    pub fn new(kind: Kind, test: &str) -> Self {
        let name = unique(test);
        let (raw, dir): (Arc<dyn ObjectStore>, _) = match kind {
            Kind::Memory => (Arc::new(object_store::memory::InMemory::new()), None),
            Kind::Local => {
                let dir = tempfile::tempdir().unwrap();
                (Arc::new(object_store::local::LocalFileSystem::new_with_prefix(dir.path()).unwrap()), Some(dir))
            }
            Kind::S3 => {
                let endpoint = std::env::var("SINKPOINT_S3_ENDPOINT").unwrap();
                sinkpoint::testkit::create_s3_bucket(&endpoint, &name).unwrap();
                let s3 = object_store::aws::AmazonS3Builder::new()
                    .with_endpoint(&endpoint)
                    .with_allow_http(true)
                    .with_bucket_name(&name)
                    .with_access_key_id("test")
                    .with_secret_access_key("test")
                    .with_region("us-east-1")
                    .build()
                    .unwrap();
                (Arc::new(s3), None)
            }
        };
        let faults = FaultStore::new(raw.clone());
        Self { kind, raw, faults, prefix: Path::from(format!("jobs/{name}")), _dir: dir }
    }

    /// The store handed to sinkpoint.
    pub fn store(&self) -> Arc<dyn ObjectStore> {
        Arc::new(self.faults.clone())
    }

    /// The keys under the prefix, sorted, relative to it.
    pub async fn keys(&self) -> Vec<String> {
        use futures::TryStreamExt as _;
        let mut out: Vec<String> = self
            .raw
            .list(Some(&self.prefix))
            .map_ok(|m| m.location.as_ref().trim_start_matches(self.prefix.as_ref()).trim_start_matches('/').to_owned())
            .try_collect()
            .await
            .unwrap();
        out.sort();
        out
    }

    pub fn path(&self, key: &str) -> Path {
        Path::from(format!("{}/{key}", self.prefix))
    }

    pub async fn read(&self, key: &str) -> Vec<u8> {
        self.raw.get(&self.path(key)).await.unwrap().bytes().await.unwrap().to_vec()
    }

    /// Replaces an object's bytes behind sinkpoint's back (corruption tests).
    pub async fn overwrite(&self, key: &str, bytes: Vec<u8>) {
        self.raw.put(&self.path(key), bytes.into()).await.unwrap();
    }

    pub async fn delete(&self, key: &str) {
        self.raw.delete(&self.path(key)).await.unwrap();
    }

    /// Deletes everything under the prefix.
    pub async fn delete_prefix(&self) {
        for key in self.keys().await {
            self.delete(&key).await;
        }
    }
}

pub fn job() -> JobId {
    JobId::new("job").unwrap()
}

pub fn target() -> TargetIdentity {
    TargetIdentity::new("mem://table").unwrap()
}

pub fn id(n: u32) -> CheckpointId {
    CheckpointId::new(format!("input-{n:04}")).unwrap()
}

pub fn key(n: u32) -> Vec<u8> {
    format!("s3://in/{n:04}.csv").into_bytes()
}

pub fn result(n: u32) -> WriteResult {
    WriteResult::new(Format::Parquet, format!("part-{n:04}.parquet").into_bytes()).unwrap()
}

pub fn sync_settings() -> MirrorSettings {
    MirrorSettings {
        mode: MirrorMode::Synchronous,
        snapshot_interval_records: 1_000_000,
        snapshot_interval_bytes: u64::MAX,
        // Fixed intervals: the suites count the snapshots their settings ask for (`mirror_bounds` tests the ratio).
        snapshot_log_ratio_percent: 0,
        gc_age_ms_min: 1_000,
        request_timeout_ms: 10_000,
        ..MirrorSettings::default()
    }
}

/// The key of WAL slot `slot` under the prefix (slots are zero-padded to 20 digits: docs/FORMATS.md, "Mirror objects").
pub fn wal_key(slot: u64) -> String {
    format!("wal/{slot:020}")
}

/// The first WAL slot after the highest one present.
pub async fn next_wal_slot(bucket: &Bucket) -> u64 {
    let last = bucket.keys().await.into_iter().filter(|k| k.starts_with("wal/")).max().expect("a WAL slot");
    last["wal/".len()..].parse::<u64>().expect("a slot number") + 1
}

/// A builder for a store whose local file is `file`, mirrored in `bucket`.
pub fn builder(bucket: &Bucket, file: &std::path::Path, settings: MirrorSettings, clock: &ManualClock) -> StoreBuilder {
    Store::builder(job(), target())
        .path(file)
        .mirror(bucket.store(), bucket.prefix.clone(), settings)
        .clock(Arc::new(clock.clone()))
}

/// Stages and seals checkpoint `n` (one part: its key and its result).
pub async fn seal(store: &Store, n: u32) {
    store
        .stage(&id(n), StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key(n)]).results(vec![result(n)]))
        .await
        .unwrap();
    store.seal(&id(n), 1).await.unwrap();
}

/// What a store holds, in a comparable form: every checkpoint's state, the processed keys, the pending results,
/// the garbage ledger (its first page: a test's ledger is small).
pub fn digest(store: &Store) -> String {
    use sinkpoint::StateFilter;
    let mut out = String::new();
    for filter in StateFilter::ALL {
        for info in store.list(filter).unwrap() {
            out.push_str(&format!(
                "{} {:?} a{} p{} r{}\n",
                info.id, info.state, info.attempt, info.parts, info.results
            ));
        }
    }
    for k in store.processed_keys() {
        out.push_str(&format!("key {}\n", String::from_utf8_lossy(&k.unwrap())));
    }
    let pending = store.pending().unwrap();
    for p in pending.checkpoints {
        out.push_str(&format!("pending {} {:?}\n", p.info.id, p.results));
    }
    for g in store.garbage(None, usize::MAX).unwrap() {
        out.push_str(&format!("garbage {}.{} {} a{} {:?}\n", g.at.seq, g.at.index, g.id, g.attempt, g.result));
    }
    out.push_str(&format!(
        "next_key {} in_flight {:?} finished {}\n",
        pending.next_key, pending.in_flight, pending.finished
    ));
    out
}
