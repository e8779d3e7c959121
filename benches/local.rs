//! The local rows, each against raw redb on the same disk in the same run: one durable stage vs one durable
//! single-insert commit, and vs raw redb doing the same writes by hand (the layout's part of the gap); 1, 8, 32 and 128 concurrent stagers (group commit) vs serial durable commits and vs
//! durable commits of 1,000 inserts each; `is_processed` vs redb point gets. Criterion times each operation;
//! then each subject and its baseline run in alternating bursts (`common::paired_rounds`) for the ratios, which
//! it prints last.
//!
//! `cargo bench --bench local` measures; `cargo test --bench local` runs each bench once on tiny fixtures.

#![allow(clippy::disallowed_methods, reason = "benches measure wall time; nothing they decide depends on it")]

#[path = "common/mod.rs"]
mod common;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use sinkpoint::testkit::SplitMix64;
use sinkpoint::{StagingDurability, Store};

use common::{Goal, Op, Report, cid, fmt_dur, fmt_rate, key, small_result};
use sinkpoint::{Attempt, Part, StagePart};

/// The raw baseline's table: a stage's key as the key, its write result's bytes as the value.
const RAW: TableDefinition<&[u8], &[u8]> = TableDefinition::new("bench");
/// The raw baseline of the key index: source key → owning checkpoint id, as sinkpoint's own index.
const RAW_KEYS: TableDefinition<&[u8], &str> = TableDefinition::new("keys");

/// Criterion's samples per bench (its minimum).
const SAMPLE_SIZE: usize = 10;
/// The paired rounds behind the ratios, and how long each op runs in a round.
const ROUNDS: usize = 15;
/// The rounds of the two goal rows' pairs (row 1 and row 2): a round's ratio ranges over about 0.7–1.9 on this
/// disk, and 15 rounds cannot tell a 0.1 change of the median apart (Dec 5).
const GOAL_ROUNDS: usize = 61;
const BURST: Duration = Duration::from_millis(40);
/// Calls each stager makes in one run of its op, between the spawn and the join of the stagers: they run freely
/// within a run. With one call a run (the bench until Dec 5, evening), a paired round's run of 32 stagers was 32
/// calls in lock-step — spawn, one call each, join — whose time was as much the spawns and the barrier as the
/// commits; that shape stays as a context row (`LOCKSTEP_NAME`).
const STAGER_CALLS_A_RUN: u64 = 16;
/// The lock-step shape of the goal's stager count: one call each a run.
const LOCKSTEP_NAME: &str = "sinkpoint-32-stagers-lockstep";
/// Parts per checkpoint id before a stager moves to a fresh id (well below the seal limit).
const PARTS_PER_ID: u64 = 50_000;
/// The concurrency levels of the group-commit row.
const STAGERS: [usize; 4] = [1, 8, 32, 128];
/// The level of row 2's goal (≥ 10× serial durable commits).
const GOAL_STAGERS: usize = 32;
/// Inserts per transaction of the raw batched baseline.
const RAW_BATCH_INSERTS: u64 = 1000;
/// The stage-shaped raw baseline: calls a commit (about what 128 stagers get), checkpoints written to, tables.
const SHAPED_CALLS_A_COMMIT: u64 = 64;
const SHAPED_IDS: u64 = 128;
/// Its single-call twin, the layout's part of row 1: one call a commit, into one checkpoint (as the durable
/// stage row stages into one checkpoint).
const SHAPED_SINGLE: Shaped =
    Shaped { name: "redb-stage-shaped-1-call-a-commit", calls_a_commit: 1, ids: 1, layout: PartLayout::LogOnly };
const SHAPED_GROUPED: Shaped = Shaped {
    name: "redb-stage-shaped-64-calls-a-commit",
    calls_a_commit: SHAPED_CALLS_A_COMMIT,
    ids: SHAPED_IDS,
    layout: PartLayout::LogOnly,
};
/// The single-call and grouped twins of `SHAPED_SINGLE` and `SHAPED_GROUPED` in another layout, named `names`.
const fn twins(names: [&'static str; 2], layout: PartLayout) -> [Shaped; 2] {
    [Shaped { name: names[0], layout, ..SHAPED_SINGLE }, Shaped { name: names[1], layout, ..SHAPED_GROUPED }]
}
/// The same two as format 2's first cut wrote them: the part appended to a table of fresh parts too.
const SHAPED_FRESH_TABLE: [Shaped; 2] = twins(
    ["redb-stage-shaped-fresh-table-1-call-a-commit", "redb-stage-shaped-fresh-table-64-calls-a-commit"],
    PartLayout::FreshTable,
);
/// As store format 1 wrote them: the part's row at the end of its checkpoint's range.
const SHAPED_ROWS: [Shaped; 2] = twins(
    ["redb-stage-shaped-format-1-1-call-a-commit", "redb-stage-shaped-format-1-64-calls-a-commit"],
    PartLayout::Rows,
);
/// And as fresh parts were first built: the fresh row, with the checkpoint's record and the meta rewritten.
const SHAPED_REWRITING: [Shaped; 2] = twins(
    ["redb-stage-shaped-rewriting-1-call-a-commit", "redb-stage-shaped-rewriting-64-calls-a-commit"],
    PartLayout::FreshRewriting,
);
/// Every single-call shape, then every grouped one: the store's layout first.
const SHAPED_SINGLES: [Shaped; 4] = [SHAPED_SINGLE, SHAPED_FRESH_TABLE[0], SHAPED_ROWS[0], SHAPED_REWRITING[0]];
const SHAPED_GROUPS: [Shaped; 4] = [SHAPED_GROUPED, SHAPED_FRESH_TABLE[1], SHAPED_ROWS[1], SHAPED_REWRITING[1]];
const SHAPED_LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("log");
const SHAPED_PARTS: TableDefinition<(&str, u32, u32), &[u8]> = TableDefinition::new("parts");
const SHAPED_FRESH: TableDefinition<u64, &[u8]> = TableDefinition::new("fresh_parts");
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
    let report = Report::default();
    let rt = common::runtime();
    let dir = common::tempdir();
    let dir = dir.path();
    let mut c = common::criterion(SAMPLE_SIZE, Duration::from_secs(if quick { 1 } else { 2 }));

    let one = rt.block_on(common::open_store(&dir.join("one.redb"), StagingDurability::Immediate));
    let one_nd = rt.block_on(common::open_store(&dir.join("one-nd.redb"), StagingDurability::None));
    let group = Arc::new(rt.block_on(common::open_store(&dir.join("group.redb"), StagingDurability::Immediate)));
    let lookup_keys = if quick { LOOKUP_KEYS / 100 } else { LOOKUP_KEYS };
    let lookup = rt.block_on(lookup_store(dir, lookup_keys));
    let raw_one = raw_db(&dir.join("one-raw.redb"));
    let raw_one_nd = raw_db(&dir.join("one-raw-nd.redb"));
    let raw_batch = raw_db(&dir.join("batch-raw.redb"));
    let raw_singles: Vec<Database> =
        SHAPED_SINGLES.iter().map(|s| raw_db(&dir.join(format!("{}.redb", s.name)))).collect();
    let raw_groups: Vec<Database> =
        SHAPED_GROUPS.iter().map(|s| raw_db(&dir.join(format!("{}.redb", s.name)))).collect();
    let raw_lookup = raw_lookup_db(dir, lookup_keys);
    let probes = lookup_probes(&lookup, lookup_keys);
    let held = raw_lookup.begin_read().expect("raw read");
    let held = held.open_table(RAW_KEYS).expect("raw keys table");

    let mut durable = vec![
        stage_op("sinkpoint-stage", &rt, &one, "one"),
        raw_single_op("redb-single-insert", &raw_one, redb::Durability::Immediate),
        stage_op("sinkpoint-stage-nondurable", &rt, &one_nd, "nd"),
        raw_single_op("redb-single-insert-nondurable", &raw_one_nd, redb::Durability::None),
    ];
    durable.extend(raw_singles.iter().zip(SHAPED_SINGLES).map(|(db, shape)| raw_shaped_op(db, shape)));
    let mut grouped: Vec<Op<'_>> =
        STAGERS.iter().map(|&n| stagers_op(stagers_name(n), n, STAGER_CALLS_A_RUN, &rt, &group)).collect();
    grouped.push(stagers_op(LOCKSTEP_NAME, GOAL_STAGERS, 1, &rt, &group));
    grouped.push(raw_batch_op(&raw_batch));
    grouped.extend(raw_groups.iter().zip(SHAPED_GROUPS).map(|(db, shape)| raw_shaped_op(db, shape)));
    let mut lookups = vec![
        Op::new("sinkpoint-is-processed", 1, 256, |iters| {
            timed_lookups(iters, &probes, |k| lookup.is_processed(k).expect("lookup"))
        }),
        Op::new("redb-get-a-read-txn-each", 1, 256, |iters| {
            timed_lookups(iters, &probes, |k| {
                let txn = raw_lookup.begin_read().expect("raw read");
                txn.open_table(RAW_KEYS).expect("raw keys table").get(k).expect("raw get").is_some()
            })
        }),
        Op::new("redb-get-one-held-read-txn", 1, 256, |iters| {
            timed_lookups(iters, &probes, |k| held.get(k).expect("raw get").is_some())
        }),
    ];
    common::bench_ops(&mut c, "durable-one", &mut durable);
    common::bench_ops(&mut c, "group-commit", &mut grouped);
    common::bench_ops(&mut c, "lookups", &mut lookups);
    c.final_summary();

    // The ratios: each subject and its baseline in alternating bursts, so each pair shares the machine's moments.
    let mut all: Vec<Op<'_>> = durable.into_iter().chain(grouped).chain(lookups).collect();
    let goal_pairs = [("sinkpoint-stage", "redb-single-insert"), (stagers_name(GOAL_STAGERS), "redb-single-insert")];
    let mut pairs = vec![
        ("sinkpoint-stage", SHAPED_SINGLE.name),
        ("sinkpoint-stage-nondurable", "redb-single-insert-nondurable"),
        ("sinkpoint-is-processed", "redb-get-a-read-txn-each"),
        ("sinkpoint-is-processed", "redb-get-one-held-read-txn"),
        (LOCKSTEP_NAME, "redb-single-insert"),
    ];
    pairs.extend(SHAPED_SINGLES.map(|shaped| (shaped.name, "redb-single-insert")));
    pairs.extend(SHAPED_GROUPS.map(|shaped| ("redb-single-insert", shaped.name)));
    for n in STAGERS {
        if n != GOAL_STAGERS {
            pairs.push((stagers_name(n), "redb-single-insert"));
        }
        pairs.push((stagers_name(n), "redb-1000-inserts-a-commit"));
        if n >= 32 {
            pairs.push((stagers_name(n), SHAPED_GROUPED.name));
            pairs.push((stagers_name(n), "sinkpoint-stage"));
        }
    }
    let (rounds, goal_rounds, burst) =
        if quick { (1, 1, Duration::from_millis(1)) } else { (ROUNDS, GOAL_ROUNDS, BURST) };
    let r = common::paired_rounds(&mut all, &goal_pairs, goal_rounds, burst)
        .merge(common::paired_rounds(&mut all, &pairs, rounds, burst));
    drop(all);
    let stats = group.stats();
    println!(
        "\ngroup commit: {} calls in {} redb commits ({:.1} calls a commit over every stager count); {rounds} paired rounds, {goal_rounds} for rows 1 and 2",
        stats.calls,
        stats.commits,
        stats.calls as f64 / stats.commits.max(1) as f64
    );
    report_rows(&report, &r);
    report.print("local: durable stage, group commit, lookups");
    one.close();
    one_nd.close();
    lookup.close();
    if let Ok(group) = Arc::try_unwrap(group) {
        group.close();
    }
}

fn report_rows(report: &Report, r: &common::Rounds) {
    let t = |name: &str| r.time(name).unwrap_or_default();
    let spread =
        |a: &str, b: &str| r.spread(a, b).map(|(lo, hi)| format!(" (rounds {lo:.2}..{hi:.2})")).unwrap_or_default();
    let rate = |name: &str| fmt_rate(1.0 / t(name).as_secs_f64().max(1e-12));
    if let Some(ratio) = r.ratio("sinkpoint-stage", "redb-single-insert") {
        report.add(
            "durable stage of one small result / raw redb single-insert durable commit (time)",
            ratio,
            Goal::AtMost(1.2),
            format!(
                "stage {} vs redb {}{}",
                fmt_dur(t("sinkpoint-stage")),
                fmt_dur(t("redb-single-insert")),
                spread("sinkpoint-stage", "redb-single-insert")
            ),
        );
    }
    for shaped in SHAPED_SINGLES {
        if let Some(ratio) = r.ratio(shaped.name, "redb-single-insert") {
            report.add(
                format!(
                    "raw redb doing a stage call's writes by hand {}, one call a commit / raw redb single-insert commit (time): the layout's part of row 1",
                    shaped.layout()
                ),
                ratio,
                Goal::Info,
                format!("{} vs {}", fmt_dur(t(shaped.name)), fmt_dur(t("redb-single-insert"))),
            );
        }
    }
    for shaped in SHAPED_GROUPS {
        if let Some(ratio) = r.ratio("redb-single-insert", shaped.name) {
            report.add(
                format!("raw redb doing a stage call's writes by hand {}, 64 calls a commit / serial raw redb durable commits (calls per second): the layout's bound on row 2", shaped.layout()),
                ratio,
                Goal::Info,
                format!("{} vs {}", rate(shaped.name), rate("redb-single-insert")),
            );
        }
    }
    if let Some(ratio) = r.ratio("sinkpoint-stage", SHAPED_SINGLE.name) {
        report.add(
            "durable stage / raw redb doing its writes by hand, one call a commit (time): the machinery's part",
            ratio,
            Goal::Info,
            format!("{} vs {}", fmt_dur(t("sinkpoint-stage")), fmt_dur(t(SHAPED_SINGLE.name))),
        );
    }
    if let Some(ratio) = r.ratio("sinkpoint-stage-nondurable", "redb-single-insert-nondurable") {
        report.add(
            "the same, neither fsynced: non-durable stage / raw redb Durability::None commit (time)",
            ratio,
            Goal::Info,
            format!(
                "stage {} vs redb {}: the CPU and thread hand-off part of the gap",
                fmt_dur(t("sinkpoint-stage-nondurable")),
                fmt_dur(t("redb-single-insert-nondurable"))
            ),
        );
    }
    for n in STAGERS {
        let name = stagers_name(n);
        let who = if n == 1 { "1 stager".to_owned() } else { format!("{n} stagers") };
        // Throughput ratios: the baseline's time per element over the subject's.
        if let Some(ratio) = r.ratio("redb-single-insert", name) {
            report.add(
                format!("{who}, group commit / serial raw redb durable commits (calls per second)"),
                ratio,
                if n == GOAL_STAGERS { Goal::AtLeast(10.0) } else { Goal::Info },
                format!("{} vs {}{}", rate(name), rate("redb-single-insert"), spread("redb-single-insert", name)),
            );
        }
        if let Some(ratio) = r.ratio("redb-1000-inserts-a-commit", name) {
            report.add(
                format!("{who}, group commit / raw redb commits of 1,000 inserts (per second)"),
                ratio,
                if n >= 32 { Goal::AtLeast(0.5) } else { Goal::Info },
                format!("{} stage calls vs {} inserts", rate(name), rate("redb-1000-inserts-a-commit")),
            );
        }
        if let (Some(ratio), true) = (r.ratio("sinkpoint-stage", name), n >= 32) {
            report.add(
                format!("{who} / serial sinkpoint stage calls, one durable commit each (calls per second)"),
                ratio,
                Goal::Info,
                format!("{} vs {}", rate(name), rate("sinkpoint-stage")),
            );
        }
        if let (Some(ratio), true) = (r.ratio(SHAPED_GROUPED.name, name), n >= 32) {
            report.add(
                format!("{who} / raw redb doing a stage call's writes by hand, 64 calls a commit (per second)"),
                ratio,
                Goal::Info,
                format!("{} vs {}", rate(name), rate(SHAPED_GROUPED.name)),
            );
        }
    }
    if let Some(ratio) = r.ratio("redb-single-insert", LOCKSTEP_NAME) {
        report.add(
            "32 stagers in lock-step, one call each between spawn and join (row 2 as measured until Dec 5, evening) / serial raw redb durable commits (calls per second)",
            ratio,
            Goal::Info,
            format!("{} vs {}", rate(LOCKSTEP_NAME), rate("redb-single-insert")),
        );
    }
    if let Some(ratio) = r.ratio("redb-get-a-read-txn-each", "sinkpoint-is-processed") {
        report.add(
            "is_processed / raw redb point get, a read transaction each (lookups per second)",
            ratio,
            Goal::AtLeast(0.5),
            format!("{} vs {}", rate("sinkpoint-is-processed"), rate("redb-get-a-read-txn-each")),
        );
    }
    if let Some(ratio) = r.ratio("redb-get-one-held-read-txn", "sinkpoint-is-processed") {
        report.add(
            "is_processed / raw redb point get in one held read transaction (lookups per second)",
            ratio,
            Goal::Info,
            format!("{} vs {}", rate("sinkpoint-is-processed"), rate("redb-get-one-held-read-txn")),
        );
    }
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

/// One durable (or not, as the store was opened) stage call of one key and one small result, serially.
fn stage_op<'a>(name: &'static str, rt: &'a tokio::runtime::Runtime, store: &'a Store, prefix: &'static str) -> Op<'a> {
    let mut next = 0u64;
    Op::new(name, 1, 1, move |iters| {
        let start = Instant::now();
        rt.block_on(async {
            for _ in 0..iters {
                let (id, part) = id_part(prefix, next);
                store
                    .stage(
                        &id,
                        StagePart::new(Attempt::FIRST, Part::new(part))
                            .keys(vec![key(next)])
                            .results(vec![small_result(next)]),
                    )
                    .await
                    .expect("stage");
                next += 1;
            }
        });
        start.elapsed()
    })
}

/// One raw redb write transaction of one insert of the same bytes (key, result) a stage call carries.
fn raw_single_op<'a>(name: &'static str, db: &'a Database, durability: redb::Durability) -> Op<'a> {
    let mut next = 0u64;
    Op::new(name, 1, 1, move |iters| {
        let start = Instant::now();
        for _ in 0..iters {
            let mut txn = db.begin_write().expect("raw write");
            txn.set_durability(durability).expect("raw durability");
            {
                let mut t = txn.open_table(RAW).expect("raw table");
                t.insert(key(next).as_slice(), small_result(next).bytes()).expect("raw insert");
            }
            txn.commit().expect("raw commit");
            next += 1;
        }
        start.elapsed()
    })
}

fn stagers_name(n: usize) -> &'static str {
    match n {
        1 => "sinkpoint-1-stager",
        8 => "sinkpoint-8-stagers",
        32 => "sinkpoint-32-stagers",
        _ => "sinkpoint-128-stagers",
    }
}

/// `n` concurrent stagers; one iteration is one durable call of each, running freely (not in lock-step) within
/// a run of `calls_a_run` iterations (criterion's own runs take as many as it likes).
fn stagers_op<'a>(
    name: &'static str,
    n: usize,
    calls_a_run: u64,
    rt: &'a tokio::runtime::Runtime,
    store: &'a Arc<Store>,
) -> Op<'a> {
    let counters: Arc<Vec<AtomicU64>> = Arc::new((0..n).map(|_| AtomicU64::new(0)).collect());
    Op::new(name, n as u64, calls_a_run, move |iters| {
        let start = Instant::now();
        rt.block_on(async {
            let tasks: Vec<_> = (0..n)
                .map(|t| {
                    let (store, counters) = (store.clone(), counters.clone());
                    tokio::spawn(async move { stager(&store, name, n, t, &counters[t], iters).await })
                })
                .collect();
            for task in tasks {
                task.await.expect("stager task");
            }
        });
        start.elapsed()
    })
}

async fn stager(store: &Store, op: &str, n: usize, t: usize, counter: &AtomicU64, calls: u64) {
    let prefix = format!("{op}-{t}");
    let lockstep = u64::from(op == LOCKSTEP_NAME);
    for _ in 0..calls {
        let i = counter.fetch_add(1, Ordering::Relaxed);
        let (id, part) = id_part(&prefix, i);
        // Keys and results differ per stager so that no call is a no-op retry.
        let unique = lockstep << 48 | (t as u64) << 40 | (n as u64) << 32 | i;
        store
            .stage(
                &id,
                StagePart::new(Attempt::FIRST, Part::new(part))
                    .keys(vec![key(unique)])
                    .results(vec![small_result(unique)]),
            )
            .await
            .expect("stage");
    }
}

/// One durable raw redb commit of 1,000 inserts of sequential keys: redb's best case.
fn raw_batch_op(db: &Database) -> Op<'_> {
    let mut next = 0u64;
    Op::new("redb-1000-inserts-a-commit", RAW_BATCH_INSERTS, 1, move |iters| {
        let start = Instant::now();
        for _ in 0..iters {
            let txn = db.begin_write().expect("raw write");
            {
                let mut t = txn.open_table(RAW).expect("raw table");
                for _ in 0..RAW_BATCH_INSERTS {
                    t.insert(key(next).as_slice(), small_result(next).bytes()).expect("raw insert");
                    next += 1;
                }
            }
            txn.commit().expect("raw commit");
        }
        start.elapsed()
    })
}

/// A stage-shaped raw baseline: `calls_a_commit` calls a durable commit, spread over `ids` checkpoints.
#[derive(Clone, Copy)]
struct Shaped {
    name: &'static str,
    calls_a_commit: u64,
    ids: u64,
    layout: PartLayout,
}

/// Where a stage call's part goes, besides its log frame, and what else it rewrites.
#[derive(Clone, Copy, PartialEq, Eq)]
enum PartLayout {
    /// Nothing but the log frame (a checkpoint's record is written when it is created): store format 2, as
    /// stored, the part kept in its stage record.
    LogOnly,
    /// A row appended to a table of fresh parts under the record's sequence number, and nothing else: format 2's
    /// first cut (Dec 5, before the part was kept in its record alone).
    FreshTable,
    /// The same fresh row, with the checkpoint's record (its result count) and the meta (its next seq)
    /// rewritten by every call: fresh parts as first built (Dec 5, before the record and meta stopped being
    /// rewritten).
    FreshRewriting,
    /// Its row in `parts` at the end of its checkpoint's range, the record and the meta rewritten: store format 1.
    Rows,
}

impl Shaped {
    /// How the row names the shape's layout.
    fn layout(self) -> &'static str {
        match self.layout {
            PartLayout::LogOnly => "as stored (the stage record alone, nothing rewritten)",
            PartLayout::FreshTable => "as first cut (the part appended to a fresh-parts table too)",
            PartLayout::FreshRewriting => "as first built (the fresh row, the record and meta rewritten)",
            PartLayout::Rows => "as format 1 stored them (the part's row in parts, the record and meta rewritten)",
        }
    }
}

/// What one stage call writes, done by hand in raw redb (no channel, no encoding, no validation): a log
/// append, its part where the layout puts it, and, as the layout says, the checkpoint's record and the meta
/// value once a commit. It tells the data layout's cost from the machinery's.
fn raw_shaped_op(db: &Database, shape: Shaped) -> Op<'_> {
    let mut next = 0u64;
    let part_value = vec![7u8; 100];
    // The part's row and the id, attempt and part number that name it.
    let fresh_value = vec![8u8; 120];
    let frame = vec![9u8; 160];
    Op::new(shape.name, shape.calls_a_commit, 1, move |iters| {
        let start = Instant::now();
        for _ in 0..iters {
            let txn = db.begin_write().expect("raw write");
            {
                let mut log = txn.open_table(SHAPED_LOG).expect("raw log");
                let mut parts = txn.open_table(SHAPED_PARTS).expect("raw parts");
                let mut fresh = txn.open_table(SHAPED_FRESH).expect("raw fresh parts");
                let mut checkpoints = txn.open_table(SHAPED_CHECKPOINTS).expect("raw checkpoints");
                let mut meta = txn.open_table(SHAPED_META).expect("raw meta");
                for _ in 0..shape.calls_a_commit {
                    let id = format!("shaped-{:03}", next % shape.ids);
                    let part = (next / shape.ids) as u32;
                    let seen = checkpoints.get(id.as_str()).expect("raw get").map(|v| v.value().len());
                    let created = seen.is_none();
                    std::hint::black_box(seen);
                    match shape.layout {
                        PartLayout::Rows => {
                            let there = parts.get((id.as_str(), 0, part)).expect("raw get").is_some();
                            std::hint::black_box(there);
                            parts.insert((id.as_str(), 0, part), part_value.as_slice()).expect("raw insert");
                        }
                        PartLayout::FreshTable | PartLayout::FreshRewriting => {
                            drop(fresh.insert(next, fresh_value.as_slice()).expect("raw insert"));
                        }
                        PartLayout::LogOnly => {}
                    }
                    if created || rewriting_meta(shape.layout) {
                        checkpoints.insert(id.as_str(), &part_value[..30]).expect("raw insert");
                    }
                    log.insert(next, frame.as_slice()).expect("raw insert");
                    next += 1;
                }
                if rewriting_meta(shape.layout) {
                    meta.insert("meta", &part_value[..60]).expect("raw insert");
                }
            }
            txn.commit().expect("raw commit");
        }
        start.elapsed()
    })
}

/// Whether a layout rewrites the meta in every commit (the checkpoint's record likewise).
fn rewriting_meta(layout: PartLayout) -> bool {
    matches!(layout, PartLayout::Rows | PartLayout::FreshRewriting)
}

/// A store with `keys` processed keys, staged `BUILD_KEYS_PER_STAGE` to a call.
async fn lookup_store(dir: &Path, keys: u64) -> Store {
    let store = common::open_store(&dir.join("lookup.redb"), StagingDurability::Immediate).await;
    for (n, start) in (0..keys).step_by(BUILD_KEYS_PER_STAGE as usize).enumerate() {
        let id = cid(&format!("lookup-{n}"));
        let batch: Vec<Vec<u8>> = (start..(start + BUILD_KEYS_PER_STAGE).min(keys)).map(key).collect();
        store.stage(&id, StagePart::new(Attempt::FIRST, Part::FIRST).keys(batch)).await.expect("stage keys");
        store.seal(&id, 1).await.expect("seal");
    }
    store
}

/// The same keys, each owned by the same checkpoint id, in a raw redb table of the store's key-index types.
fn raw_lookup_db(dir: &Path, keys: u64) -> Database {
    let raw = raw_db(&dir.join("lookup-raw.redb"));
    let txn = raw.begin_write().expect("raw write");
    {
        let mut t = txn.open_table(RAW_KEYS).expect("raw keys table");
        for i in 0..keys {
            let owner = format!("lookup-{}", i / BUILD_KEYS_PER_STAGE);
            t.insert(key(i).as_slice(), owner.as_str()).expect("raw insert");
        }
    }
    txn.commit().expect("raw commit");
    raw
}

/// Random processed keys to look up (seeded, printed), checked against the store first.
fn lookup_probes(store: &Store, keys: u64) -> Vec<Vec<u8>> {
    println!("lookups: {keys} processed keys, probes drawn with seed {LOOKUP_SEED:#x}");
    let mut rng = SplitMix64::new(LOOKUP_SEED);
    let probes: Vec<Vec<u8>> = (0..LOOKUP_PROBES).map(|_| key(rng.below(keys))).collect();
    assert!(probes.iter().all(|p| store.is_processed(p).expect("lookup")), "every processed key must be found");
    assert!(!store.is_processed(b"s3://in/absent").expect("lookup"), "an absent key must not be found");
    probes
}

/// Times `iters` lookups, cycling through the probes.
fn timed_lookups(iters: u64, probes: &[Vec<u8>], mut lookup: impl FnMut(&[u8]) -> bool) -> Duration {
    let start = Instant::now();
    for i in 0..iters as usize {
        std::hint::black_box(lookup(&probes[i % probes.len()]));
    }
    start.elapsed()
}
