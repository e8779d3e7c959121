//! The local rows, each against raw redb on the same disk in the same run: one durable stage vs one durable
//! single-insert commit; 1, 8, 32 and 128 concurrent stagers (group commit) vs serial durable commits and vs
//! durable commits of 1,000 inserts each; `is_processed` vs redb point gets. It ends by printing the ratios.
//!
//! `cargo bench --bench local` measures; `cargo test --bench local` runs each bench once on tiny fixtures.

#[path = "common/mod.rs"]
mod common;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use sinkpoint::testkit::SplitMix64;
use sinkpoint::{StagingDurability, Store};

use common::{Goal, Report, SAMPLING, Samples, cid, fmt_dur, fmt_rate, key, small_result};

/// The raw baseline's table: a stage's key as the key, its write result's bytes as the value.
const RAW: TableDefinition<&[u8], &[u8]> = TableDefinition::new("bench");
/// The raw baseline of the key index: source key → owning checkpoint id, as sinkpoint's own index.
const RAW_KEYS: TableDefinition<&[u8], &str> = TableDefinition::new("keys");

/// Criterion's samples per bench; the ratios use the medians of exactly these.
const SAMPLE_SIZE: usize = 10;
/// Parts per checkpoint id before a stager moves to a fresh id (well below the seal limit).
const PARTS_PER_ID: u64 = 50_000;
/// The concurrency levels of the group-commit row.
const STAGERS: [usize; 4] = [1, 8, 32, 128];
/// Inserts per transaction of the raw batched baseline.
const RAW_BATCH_INSERTS: u64 = 1000;
/// The stage-shaped raw baseline: calls a commit (about what 128 stagers get), checkpoints written to, tables.
const SHAPED_CALLS_A_COMMIT: u64 = 64;
const SHAPED_IDS: u64 = 128;
const SHAPED_LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("log");
const SHAPED_PARTS: TableDefinition<(&str, u32, u32), &[u8]> = TableDefinition::new("parts");
const SHAPED_CHECKPOINTS: TableDefinition<&str, &[u8]> = TableDefinition::new("checkpoints");
const SHAPED_META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
/// Keys of the lookup store (quick mode: a hundredth).
const LOOKUP_KEYS: u64 = 100_000;
/// The source keys one stage call carries when building the lookup store.
const BUILD_KEYS_PER_STAGE: u64 = 10_000;
/// Distinct random keys cycled through by the lookup benches, drawn up front so no bench pays for formatting.
const LOOKUP_PROBES: usize = 4096;
/// The lookup benches' seed (printed; fixed so runs look up the same keys).
const LOOKUP_SEED: u64 = 0x5eed_0006;

fn main() {
    let quick = common::quick();
    let samples = Samples::default();
    let report = Report::default();
    let rt = common::runtime();
    let dir = common::tempdir();
    let mut c = common::criterion(SAMPLE_SIZE, Duration::from_secs(if quick { 1 } else { 3 }));

    bench_durable_one(&mut c, &rt, dir.path(), &samples);
    bench_group_commit(&mut c, &rt, dir.path(), &samples);
    bench_lookups(&mut c, &rt, dir.path(), &samples, if quick { LOOKUP_KEYS / 100 } else { LOOKUP_KEYS });
    c.final_summary();

    let m = |name: &str| samples.median(name, SAMPLE_SIZE);
    if let (Some(stage), Some(raw)) = (m("stage"), m("redb-single")) {
        report.add(
            "durable stage of one small result / raw redb single-insert durable commit (time)",
            stage.as_secs_f64() / raw.as_secs_f64(),
            Goal::AtMost(1.2),
            format!("stage {} vs redb {}", fmt_dur(stage), fmt_dur(raw)),
        );
    }
    if let (Some(stage), Some(raw)) = (m("stage-nd"), m("redb-single-nd")) {
        report.add(
            "the same, neither fsynced: non-durable stage / raw redb Durability::None commit (time)",
            stage.as_secs_f64() / raw.as_secs_f64(),
            Goal::Info,
            format!("stage {} vs redb {}: the CPU and thread hand-off part of the gap", fmt_dur(stage), fmt_dur(raw)),
        );
    }
    for n in STAGERS {
        let Some(group) = m(&format!("stagers-{n}")) else { continue };
        let rate = 1.0 / group.as_secs_f64();
        if let Some(raw) = m("redb-single") {
            report.add(
                format!("{n} stagers, group commit / serial raw redb durable commits (calls per second)"),
                raw.as_secs_f64() / group.as_secs_f64(),
                if n == 32 { Goal::AtLeast(10.0) } else { Goal::Info },
                format!("{} vs {}", fmt_rate(rate), fmt_rate(1.0 / raw.as_secs_f64())),
            );
        }
        if let Some(batched) = m("redb-batch") {
            report.add(
                format!("{n} stagers, group commit / raw redb commits of 1,000 inserts (per second)"),
                batched.as_secs_f64() / group.as_secs_f64(),
                if n >= 32 { Goal::AtLeast(0.5) } else { Goal::Info },
                format!("{} stage calls vs {} inserts", fmt_rate(rate), fmt_rate(1.0 / batched.as_secs_f64())),
            );
        }
        if let (Some(shaped), true) = (m("redb-shaped"), n == 128) {
            report.add(
                format!("{n} stagers / raw redb doing a stage call's writes by hand, 64 a commit (per second)"),
                shaped.as_secs_f64() / group.as_secs_f64(),
                Goal::Info,
                format!("{} vs {}", fmt_rate(rate), fmt_rate(1.0 / shaped.as_secs_f64())),
            );
        }
        if let (Some(serial), true) = (m("stage"), n > 1) {
            report.add(
                format!("{n} stagers / 1 stager, both sinkpoint (calls per second)"),
                serial.as_secs_f64() / group.as_secs_f64(),
                Goal::Info,
                format!("{} vs {}", fmt_rate(rate), fmt_rate(1.0 / serial.as_secs_f64())),
            );
        }
    }
    if let (Some(sp), Some(raw)) = (m("is-processed"), m("redb-get")) {
        report.add(
            "is_processed / raw redb point get, a read transaction each (lookups per second)",
            raw.as_secs_f64() / sp.as_secs_f64(),
            Goal::AtLeast(0.5),
            format!("{} vs {}", fmt_rate(1.0 / sp.as_secs_f64()), fmt_rate(1.0 / raw.as_secs_f64())),
        );
    }
    if let (Some(sp), Some(raw)) = (m("is-processed"), m("redb-get-held")) {
        report.add(
            "is_processed / raw redb point get in one held read transaction (lookups per second)",
            raw.as_secs_f64() / sp.as_secs_f64(),
            Goal::Info,
            format!("{} vs {}", fmt_rate(1.0 / sp.as_secs_f64()), fmt_rate(1.0 / raw.as_secs_f64())),
        );
    }
    report.print("local: durable stage, group commit, lookups");
}

/// Times `iters` runs of a routine and records them under `name`.
fn timed(samples: &Samples, name: &str, count: u64, f: impl FnOnce()) -> Duration {
    let start = Instant::now();
    f();
    let elapsed = start.elapsed();
    samples.record(name, count, elapsed);
    elapsed
}

/// The checkpoint id and part of a stager's `i`-th call: a fresh id every `PARTS_PER_ID` parts.
fn id_part(prefix: &str, i: u64) -> (sinkpoint::CheckpointId, u32) {
    (cid(&format!("{prefix}-{}", i / PARTS_PER_ID)), (i % PARTS_PER_ID) as u32)
}

fn raw_db(path: &Path) -> Database {
    let db = Database::create(path).expect("create the raw redb file");
    let txn = db.begin_write().expect("raw write");
    txn.open_table(RAW).expect("raw table");
    txn.open_table(RAW_KEYS).expect("raw keys table");
    txn.commit().expect("raw commit");
    db
}

fn bench_durable_one(c: &mut Criterion, rt: &tokio::runtime::Runtime, dir: &Path, samples: &Samples) {
    let store = rt.block_on(common::open_store(&dir.join("one.redb"), StagingDurability::Immediate));
    let raw = raw_db(&dir.join("one-raw.redb"));
    let mut g = c.benchmark_group("durable-one");
    g.sampling_mode(SAMPLING);
    let mut next = 0u64;
    g.bench_function("sinkpoint-stage", |b| {
        b.iter_custom(|iters| {
            timed(samples, "stage", iters, || {
                rt.block_on(async {
                    for _ in 0..iters {
                        let (id, part) = id_part("one", next);
                        store.stage(&id, 0, part, vec![key(next)], vec![small_result(next)]).await.expect("stage");
                        next += 1;
                    }
                })
            })
        })
    });
    let mut next = 0u64;
    g.bench_function("redb-single-insert", |b| {
        b.iter_custom(|iters| {
            timed(samples, "redb-single", iters, || {
                for _ in 0..iters {
                    let txn = raw.begin_write().expect("raw write");
                    {
                        let mut t = txn.open_table(RAW).expect("raw table");
                        t.insert(key(next).as_slice(), small_result(next).bytes()).expect("raw insert");
                    }
                    txn.commit().expect("raw commit");
                    next += 1;
                }
            })
        })
    });
    // The same pair without fsync: what is left is CPU and the hand-off to the writer thread.
    let nd = rt.block_on(common::open_store(&dir.join("one-nd.redb"), StagingDurability::None));
    let mut next = 0u64;
    g.bench_function("sinkpoint-stage-nondurable", |b| {
        b.iter_custom(|iters| {
            timed(samples, "stage-nd", iters, || {
                rt.block_on(async {
                    for _ in 0..iters {
                        let (id, part) = id_part("one", next);
                        nd.stage(&id, 0, part, vec![key(next)], vec![small_result(next)]).await.expect("stage");
                        next += 1;
                    }
                })
            })
        })
    });
    let rawnd = raw_db(&dir.join("one-raw-nd.redb"));
    let mut next = 0u64;
    g.bench_function("redb-single-insert-nondurable", |b| {
        b.iter_custom(|iters| {
            timed(samples, "redb-single-nd", iters, || {
                for _ in 0..iters {
                    let mut txn = rawnd.begin_write().expect("raw write");
                    txn.set_durability(redb::Durability::None).expect("raw durability");
                    {
                        let mut t = txn.open_table(RAW).expect("raw table");
                        t.insert(key(next).as_slice(), small_result(next).bytes()).expect("raw insert");
                    }
                    txn.commit().expect("raw commit");
                    next += 1;
                }
            })
        })
    });
    g.finish();
    store.close();
}

fn bench_group_commit(c: &mut Criterion, rt: &tokio::runtime::Runtime, dir: &Path, samples: &Samples) {
    let store = Arc::new(rt.block_on(common::open_store(&dir.join("group.redb"), StagingDurability::Immediate)));
    let mut g = c.benchmark_group("group-commit");
    g.sampling_mode(SAMPLING);
    for n in STAGERS {
        // One iteration is one call of each of the n stagers, running freely (not in lock-step).
        g.throughput(Throughput::Elements(n as u64));
        let counters: Arc<Vec<AtomicU64>> = Arc::new((0..n).map(|_| AtomicU64::new(0)).collect());
        g.bench_function(format!("sinkpoint-{n}-stagers"), |b| {
            b.iter_custom(|iters| {
                timed(samples, &format!("stagers-{n}"), iters * n as u64, || {
                    rt.block_on(async {
                        let tasks: Vec<_> = (0..n)
                            .map(|t| {
                                let (store, counters) = (store.clone(), counters.clone());
                                tokio::spawn(async move { stager(&store, n, t, &counters[t], iters).await })
                            })
                            .collect();
                        for task in tasks {
                            task.await.expect("stager task");
                        }
                    })
                })
            })
        });
    }
    let stats = store.stats();
    println!("group commit: {} calls in {} redb commits ({:.1} calls a commit)", stats.calls, stats.commits, {
        stats.calls as f64 / stats.commits.max(1) as f64
    });
    if let Ok(store) = Arc::try_unwrap(store) {
        store.close();
    }

    let raw = raw_db(&dir.join("batch-raw.redb"));
    g.throughput(Throughput::Elements(RAW_BATCH_INSERTS));
    let mut next = 0u64;
    g.bench_function("redb-1000-inserts-a-commit", |b| {
        b.iter_custom(|iters| {
            timed(samples, "redb-batch", iters * RAW_BATCH_INSERTS, || {
                for _ in 0..iters {
                    let txn = raw.begin_write().expect("raw write");
                    {
                        let mut t = txn.open_table(RAW).expect("raw table");
                        for _ in 0..RAW_BATCH_INSERTS {
                            t.insert(key(next).as_slice(), small_result(next).bytes()).expect("raw insert");
                            next += 1;
                        }
                    }
                    txn.commit().expect("raw commit");
                }
            })
        })
    });

    // What one stage call writes, done by hand in raw redb (no channel, no encoding, no validation): a log
    // append, a part at the end of one of 128 checkpoints, the checkpoint's record, and the meta value once a
    // commit. It tells the data layout's cost from the machinery's.
    let raw = raw_db(&dir.join("shaped-raw.redb"));
    g.throughput(Throughput::Elements(SHAPED_CALLS_A_COMMIT));
    let mut next = 0u64;
    let part_value = vec![7u8; 100];
    let frame = vec![9u8; 160];
    g.bench_function("redb-stage-shaped-64-calls-a-commit", |b| {
        b.iter_custom(|iters| {
            timed(samples, "redb-shaped", iters * SHAPED_CALLS_A_COMMIT, || {
                for _ in 0..iters {
                    let txn = raw.begin_write().expect("raw write");
                    {
                        let mut log = txn.open_table(SHAPED_LOG).expect("raw log");
                        let mut parts = txn.open_table(SHAPED_PARTS).expect("raw parts");
                        let mut checkpoints = txn.open_table(SHAPED_CHECKPOINTS).expect("raw checkpoints");
                        let mut meta = txn.open_table(SHAPED_META).expect("raw meta");
                        for _ in 0..SHAPED_CALLS_A_COMMIT {
                            let id = format!("shaped-{:03}", next % SHAPED_IDS);
                            let part = (next / SHAPED_IDS) as u32;
                            let seen = checkpoints.get(id.as_str()).expect("raw get").map(|v| v.value().len());
                            std::hint::black_box(seen);
                            let there = parts.get((id.as_str(), 0, part)).expect("raw get").is_some();
                            std::hint::black_box(there);
                            parts.insert((id.as_str(), 0, part), part_value.as_slice()).expect("raw insert");
                            checkpoints.insert(id.as_str(), &part_value[..30]).expect("raw insert");
                            log.insert(next, frame.as_slice()).expect("raw insert");
                            next += 1;
                        }
                        meta.insert("meta", &part_value[..60]).expect("raw insert");
                    }
                    txn.commit().expect("raw commit");
                }
            })
        })
    });
    g.finish();
}

async fn stager(store: &Store, n: usize, t: usize, counter: &AtomicU64, calls: u64) {
    let prefix = format!("g{n}-{t}");
    for _ in 0..calls {
        let i = counter.fetch_add(1, Ordering::Relaxed);
        let (id, part) = id_part(&prefix, i);
        // Keys and results differ per stager so that no call is a no-op retry.
        let unique = (t as u64) << 40 | (n as u64) << 32 | i;
        store.stage(&id, 0, part, vec![key(unique)], vec![small_result(unique)]).await.expect("stage");
    }
}

fn bench_lookups(c: &mut Criterion, rt: &tokio::runtime::Runtime, dir: &Path, samples: &Samples, keys: u64) {
    let store = rt.block_on(async {
        let store = common::open_store(&dir.join("lookup.redb"), StagingDurability::Immediate).await;
        for (n, start) in (0..keys).step_by(BUILD_KEYS_PER_STAGE as usize).enumerate() {
            let id = cid(&format!("lookup-{n}"));
            let batch: Vec<Vec<u8>> = (start..(start + BUILD_KEYS_PER_STAGE).min(keys)).map(key).collect();
            store.stage(&id, 0, 0, batch, Vec::new()).await.expect("stage keys");
            store.seal(&id, 1).await.expect("seal");
        }
        store
    });
    let raw = raw_db(&dir.join("lookup-raw.redb"));
    {
        let txn = raw.begin_write().expect("raw write");
        {
            let mut t = txn.open_table(RAW_KEYS).expect("raw keys table");
            for i in 0..keys {
                let owner = format!("lookup-{}", i / BUILD_KEYS_PER_STAGE);
                t.insert(key(i).as_slice(), owner.as_str()).expect("raw insert");
            }
        }
        txn.commit().expect("raw commit");
    }
    println!("lookups: {keys} processed keys, probes drawn with seed {LOOKUP_SEED:#x}");
    let mut rng = SplitMix64::new(LOOKUP_SEED);
    let probes: Vec<Vec<u8>> = (0..LOOKUP_PROBES).map(|_| key(rng.below(keys))).collect();
    assert!(store.is_processed(&probes[0]).expect("lookup"), "a processed key must be found");
    assert!(!store.is_processed(b"s3://in/absent").expect("lookup"), "an absent key must not be found");

    let mut g = c.benchmark_group("lookups");
    g.sampling_mode(SAMPLING);
    let mut i = 0usize;
    g.bench_function("sinkpoint-is-processed", |b| {
        b.iter_custom(|iters| {
            timed(samples, "is-processed", iters, || {
                for _ in 0..iters {
                    let hit = store.is_processed(&probes[i % LOOKUP_PROBES]).expect("lookup");
                    std::hint::black_box(hit);
                    i += 1;
                }
            })
        })
    });
    g.bench_function("redb-get-a-read-txn-each", |b| {
        b.iter_custom(|iters| {
            timed(samples, "redb-get", iters, || {
                for _ in 0..iters {
                    let txn = raw.begin_read().expect("raw read");
                    let t = txn.open_table(RAW_KEYS).expect("raw keys table");
                    let hit = t.get(probes[i % LOOKUP_PROBES].as_slice()).expect("raw get").is_some();
                    std::hint::black_box(hit);
                    i += 1;
                }
            })
        })
    });
    let txn = raw.begin_read().expect("raw read");
    let t = txn.open_table(RAW_KEYS).expect("raw keys table");
    g.bench_function("redb-get-one-held-read-txn", |b| {
        b.iter_custom(|iters| {
            timed(samples, "redb-get-held", iters, || {
                for _ in 0..iters {
                    let hit = t.get(probes[i % LOOKUP_PROBES].as_slice()).expect("raw get").is_some();
                    std::hint::black_box(hit);
                    i += 1;
                }
            })
        })
    });
    g.finish();
    store.close();
}
