//! Proves that one checkpoint over two tables (`sinkpoint::multi::MultiTable`, two `DirTable`s, each with its own
//! store) puts each input into each table exactly once whatever crashes: a simulated process (both stores' redb
//! files and both tables' object stores counting one set of I/O points) is killed at a random point, or stopped at
//! a named crash point of a table's commit or between the per-table steps, then reruns, recovers and finishes.
//! Each case draws its schedule from a seed it prints. A retry that trusts the first table's `is_processed` (the
//! naive version) loses the input in the second table: the directed test and the naive schedule show it.

use crate::common;

use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use common::{ROWS_PER_INPUT, account, exactly_once, input_id, input_key, job, sharded};
use object_store::memory::InMemory;
use object_store::path::Path;
use sinkpoint::commit::{CrashHook, crash_points};
use sinkpoint::multi::{MultiPart, MultiTable, crash_points as multi_points};
use sinkpoint::testkit::{self, CrashBackend, FaultStore, ProcessCrash, Shard, SplitMix64};
use sinkpoint::{DirTable, Error, ErrorKind, Store, TargetIdentity, WriteResult};

const TABLES: usize = 2;

/// The suite's cases when `SINKPOINT_CASES` is not set: about five seconds on one core.
const CASES_DEFAULT: u64 = 200;

/// The variable that replays a run's seed.
const SEED_VAR: &str = "SINKPOINT_MULTI_SEED";

/// How the job decides that an input is done.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Skip {
    /// Processed in every table (`MultiTable::is_processed`): the protocol.
    EveryTable,
    /// Processed in the first table: the naive version, which a crash between the tables defeats.
    FirstTable,
}

/// What survives a process: each store's durable redb image and each table's objects.
struct World {
    backends: Vec<CrashBackend>,
    objects: Vec<FaultStore<InMemory>>,
    /// Every write result a seal returned as garbage, with its table, across every run.
    cleanup: Vec<(usize, WriteResult)>,
    runs: usize,
    /// The runs a crash ended.
    stopped: usize,
    log: Vec<String>,
}

impl World {
    fn new() -> Self {
        Self {
            backends: (0..TABLES).map(|_| CrashBackend::new()).collect(),
            objects: (0..TABLES).map(|_| FaultStore::new(InMemory::new())).collect(),
            cleanup: Vec::new(),
            runs: 0,
            stopped: 0,
            log: Vec::new(),
        }
    }

    /// Table `t` as a process attached to `process` (or none) sees it.
    fn table(&self, t: usize, process: Option<&ProcessCrash>) -> DirTable {
        let objects = self.objects[t].fresh();
        if let Some(process) = process {
            objects.attach(process);
        }
        DirTable::new(Arc::new(objects), Path::from("table"))
    }
}

fn identity(t: usize) -> TargetIdentity {
    TargetIdentity::new(format!("memory:///table-{t}")).unwrap()
}

/// One case's schedule, drawn from its seed.
#[derive(Clone, Debug)]
struct Plan {
    inputs: usize,
    /// Whether a retried input is written into every table, not only those `lacking` it: the rewritten files of
    /// the tables that hold it must come back as garbage.
    rewrite_every_table: bool,
    /// Commit (`commit_pending`) after every this many inputs; `None`: only `finish`.
    commit_every: Option<usize>,
    skip: Skip,
}

/// How one process run is stopped.
#[derive(Clone, Debug)]
enum Stop {
    /// Killed at I/O point k of the process (both stores and both tables).
    AtPoint(u64),
    /// Stopped the `nth` time (from 1) it reaches a named crash point.
    Named(&'static str, usize),
    /// Runs to the end.
    Never,
}

/// The named crash points: each table's commit, and those between the per-table steps.
fn named_points() -> Vec<&'static str> {
    crash_points::ALL.iter().chain(multi_points::ALL.iter()).copied().collect()
}

fn hook(stop: &Stop, fired: &Arc<AtomicBool>) -> Option<CrashHook> {
    let Stop::Named(point, nth) = stop.clone() else { return None };
    let (seen, fired) = (AtomicUsize::new(0), fired.clone());
    Some(Arc::new(move |at| {
        let hit = at == point && seen.fetch_add(1, Ordering::SeqCst) + 1 == nth;
        fired.fetch_or(hit, Ordering::SeqCst);
        hit
    }))
}

/// How a process run ended.
struct Ran {
    finished: bool,
    /// The I/O points it made, over both stores and both tables.
    points: u64,
}

/// One run of the job as a process: opens both stores, recovers, writes and seals each input not processed,
/// commits as the plan says, finishes. Returns whether it finished; a crash ends it early, leaving each store's
/// durable image and whatever reached the tables.
async fn run_process(world: &mut World, plan: &Plan, stop: &Stop) -> Ran {
    world.runs += 1;
    let process = ProcessCrash::new();
    if let Stop::AtPoint(k) = stop {
        process.crash_at(Some(*k));
    }
    let fired = Arc::new(AtomicBool::new(false));
    world.log.push(format!("-- run {} stopped by {stop:?}", world.runs));
    let tables: Vec<DirTable> = (0..TABLES).map(|t| world.table(t, Some(&process))).collect();
    let mut stores = Vec::new();
    let mut ended = Ok(());
    for (t, backend) in world.backends.iter().enumerate() {
        backend.attach(&process);
        match Store::builder(job(), identity(t)).backend(backend.clone()).open().await {
            Ok(store) => stores.push(store),
            Err(e) => {
                ended = Err(e);
                break;
            }
        }
    }
    if ended.is_ok() {
        let mut builder = MultiTable::builder();
        for (store, table) in stores.iter().zip(&tables) {
            builder = builder.table(store, table);
        }
        let mut multi = builder.build().unwrap();
        if let Some(hook) = hook(stop, &fired) {
            multi = multi.with_crash_hook(hook);
        }
        ended = job_steps(&multi, &stores, &tables, plan, world).await;
    }
    for store in stores {
        store.close_async().await;
    }
    // What a reboot finds: each file's durable image, detached from the dead process.
    world.backends = world.backends.iter().map(CrashBackend::crash_image).collect();
    let points = process.ops();
    match ended {
        Ok(()) => Ran { finished: true, points },
        Err(e) if process.is_dead() || fired.load(Ordering::SeqCst) => {
            world.stopped += 1;
            world.log.push(format!("the process ends: {e}"));
            Ran { finished: false, points }
        }
        Err(e) => panic!("run {} failed without a crash: {e}\n{}", world.runs, world.log.join("\n")),
    }
}

/// The job's steps on open stores.
async fn job_steps(
    multi: &MultiTable<'_>,
    stores: &[Store],
    tables: &[DirTable],
    plan: &Plan,
    world: &mut World,
) -> Result<(), Error> {
    let reports = multi.recover().await?;
    world.log.push(format!("recovered: {reports:?}"));
    if multi.is_finished()? {
        world.log.push("every table finished: the fast path".into());
        return Ok(());
    }
    let mut sealed = 0;
    for i in 0..plan.inputs {
        let done = match plan.skip {
            Skip::EveryTable => multi.is_processed(&input_key(i))?,
            Skip::FirstTable => stores[0].is_processed(&input_key(i))?,
        };
        if done {
            continue;
        }
        let id = input_id(i);
        let targets = if plan.rewrite_every_table { (0..TABLES).collect() } else { multi.lacking(&id)? };
        let mut part = MultiPart::new(vec![input_key(i)]);
        for t in targets {
            // Named apart by run, so each file is written once.
            let name = format!("input-{i:04}-t{t}-r{}", world.runs);
            let rows: String = (0..ROWS_PER_INPUT).map(|r| format!("{i}:{r}\n")).collect();
            part = part.results(t, vec![tables[t].write_data_file(&name, rows.into_bytes()).await?]);
        }
        let report = multi.seal(&id, part).await?;
        world.log.push(format!("input {i}: {report:?}"));
        world.cleanup.extend(report.cleanup);
        sealed += 1;
        if plan.commit_every.is_some_and(|every| sealed % every == 0) {
            multi.commit_pending().await?;
        }
    }
    multi.finish().await?;
    Ok(())
}

/// After the last run: each input in each table exactly once; each store finished; every result returned as
/// garbage is in its table's garbage ledger and in no commit of its table.
async fn check(world: &World, plan: &Plan) -> Result<(), String> {
    for t in 0..TABLES {
        let table = world.table(t, None);
        let accounting = account(&table, plan.inputs).await;
        if accounting != exactly_once(plan.inputs) {
            return Err(format!("table {t}: {accounting:?}, not {:?}", exactly_once(plan.inputs)));
        }
        let committed: Vec<String> = table.commits().await.unwrap().into_iter().flat_map(|c| c.files).collect();
        let store = Store::builder(job(), identity(t)).backend(world.backends[t].clone()).open().await.unwrap();
        let finished = store.is_finished().unwrap();
        let ledger: Vec<WriteResult> = store.garbage(None, 4096).unwrap().into_iter().map(|e| e.result).collect();
        store.close_async().await;
        if !finished {
            return Err(format!("table {t}'s store is not finished"));
        }
        for (_, result) in world.cleanup.iter().filter(|(table, _)| *table == t) {
            let name = String::from_utf8(result.bytes().to_vec()).unwrap();
            if committed.contains(&name) {
                return Err(format!("table {t} committed {name}, which a seal returned as garbage"));
            }
            if !ledger.contains(result) {
                return Err(format!("table {t}'s garbage ledger lacks {name}, which a seal returned"));
            }
        }
    }
    Ok(())
}

/// One case: a crash-free run counts the plan's I/O points; then up to three runs are stopped at random points
/// (I/O or named), and a last one runs to the end.
async fn run_case(seed: u64, skip: Skip, world: &mut World) -> Result<(), String> {
    let mut rng = SplitMix64::new(seed);
    let plan = Plan {
        inputs: rng.below(4) as usize + 1,
        rewrite_every_table: rng.below(2) == 0,
        commit_every: [None, Some(1), Some(2)][rng.below(3) as usize],
        skip,
    };
    world.log.push(format!("case seed {seed}: {plan:?}"));
    let points = {
        let mut dry = World::new();
        let ran = run_process(&mut dry, &plan, &Stop::Never).await;
        assert!(ran.finished, "the crash-free run did not finish\n{}", dry.log.join("\n"));
        ran.points
    };
    let named = named_points();
    for _ in 0..rng.below(3) + 1 {
        let stop = if rng.below(3) == 0 {
            Stop::Named(named[rng.below(named.len() as u64) as usize], rng.below(3) as usize + 1)
        } else {
            Stop::AtPoint(rng.below(points) + 1)
        };
        if run_process(world, &plan, &stop).await.finished {
            break;
        }
    }
    if !run_process(world, &plan, &Stop::Never).await.finished {
        return Err("the last run, which nothing stops, did not finish".into());
    }
    check(world, &plan).await
}

sharded!(mod every_input_lands_in_each_table_exactly_once_after_any_crash => run_shard);

/// One shard: its share of the cases, case `i` from seed base + `i`.
fn run_shard(shard: Shard) {
    let cases = testkit::cases(CASES_DEFAULT);
    let base = testkit::seed(SEED_VAR);
    shard.announce("multi-table crash schedule", cases, SEED_VAR, base);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (mut runs, mut stopped) = (0, 0);
    for i in shard.range(cases) {
        let seed = base.wrapping_add(i);
        let mut world = World::new();
        if let Err(failure) = rt.block_on(run_case(seed, Skip::EveryTable, &mut world)) {
            panic!(
                "case seed {seed} failed (replay: {SEED_VAR}={seed} {}=1): {failure}\n{}",
                testkit::CASES_VAR,
                world.log.join("\n")
            );
        }
        (runs, stopped) = (runs + world.runs, stopped + world.stopped);
    }
    let _ = writeln!(std::io::stderr(), "multi-table crash schedule, shard {shard}: {runs} runs, {stopped} stopped");
}

/// The naive version, a retry that skips an input its first table holds, run over the same kind of schedule:
/// some case must lose an input in the second table, or the schedule never crashes between the tables and the
/// suite above proves nothing about them.
#[test]
fn a_retry_that_trusts_the_first_table_loses_inputs_in_the_second() {
    let base = testkit::seed(SEED_VAR);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let cases = testkit::cases(CASES_DEFAULT).min(100);
    let failed = (0..cases)
        .filter(|i| rt.block_on(run_case(base.wrapping_add(*i), Skip::FirstTable, &mut World::new())).is_err())
        .count();
    let _ = writeln!(std::io::stderr(), "naive retry (base seed {base}): {failed} of {cases} cases lost an input");
    assert!(failed > 0, "no naive case of {cases} (base seed {base}) lost an input: the schedule is too weak");
}

/// The crux, directed: the process stops after the first input is sealed in the first table, before the second
/// table is offered it. The retry finds it unprocessed, writes it again (into both tables: the first table's new
/// file comes back as garbage) and seals it in the second table only; each table commits it once. The naive
/// retry, trusting the first table, never writes it into the second.
#[test]
fn a_crash_between_the_tables_is_finished_only_where_the_input_lacks() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    for skip in [Skip::EveryTable, Skip::FirstTable] {
        rt.block_on(async {
            let plan = Plan { inputs: 2, rewrite_every_table: true, commit_every: None, skip };
            let mut world = World::new();
            let stop = Stop::Named(multi_points::AFTER_TABLE_SEAL, 1);
            assert!(!run_process(&mut world, &plan, &stop).await.finished);
            assert!(run_process(&mut world, &plan, &Stop::Never).await.finished);
            let second = account(&world.table(1, None), plan.inputs).await;
            if skip == Skip::FirstTable {
                assert_eq!(second.missing, ROWS_PER_INPUT, "the naive retry should lose input 0 in table 1");
                return;
            }
            check(&world, &plan).await.unwrap();
            let garbage: Vec<usize> = world.cleanup.iter().map(|(t, _)| *t).collect();
            assert_eq!(garbage, [0], "the retry's rewrite of input 0 for table 0 is its one garbage");
        });
    }
}

/// An input a stop left sealed in the first table only is not processed, is lacking in the second, cannot be
/// aborted; a seal refused at the boundary writes nothing in any table; two stores of one target are refused.
#[test]
fn a_half_sealed_input_is_not_processed_and_cannot_be_aborted() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let plan = Plan { inputs: 1, rewrite_every_table: false, commit_every: None, skip: Skip::EveryTable };
        let mut world = World::new();
        let stop = Stop::Named(multi_points::AFTER_TABLE_SEAL, 1);
        assert!(!run_process(&mut world, &plan, &stop).await.finished);
        let tables: Vec<DirTable> = (0..TABLES).map(|t| world.table(t, None)).collect();
        let mut stores = Vec::new();
        for t in 0..TABLES {
            stores.push(Store::builder(job(), identity(t)).backend(world.backends[t].clone()).open().await.unwrap());
        }
        let multi = MultiTable::builder().table(&stores[0], &tables[0]).table(&stores[1], &tables[1]).build().unwrap();
        assert!(stores[0].is_processed(&input_key(0)).unwrap(), "sealed in table 0 before the stop");
        assert!(!multi.is_processed(&input_key(0)).unwrap(), "not processed until every table holds it");
        assert_eq!(multi.lacking(&input_id(0)).unwrap(), [1]);
        let refused = multi.abort(&input_id(0)).await.unwrap_err();
        assert_eq!(refused.kind(), ErrorKind::IllegalTransition, "{refused}");
        let twice = MultiTable::builder().table(&stores[0], &tables[0]).table(&stores[0], &tables[1]).build();
        assert_eq!(twice.unwrap_err().kind(), ErrorKind::InvalidInput);
        let missing = multi.seal(&input_id(0), MultiPart::new(vec![input_key(0)])).await.unwrap_err();
        assert_eq!(missing.kind(), ErrorKind::InvalidInput, "table 1 lacks it and the part has nothing for it");
        let empty_key = MultiPart::new(vec![Vec::new()]).results(1, vec![]);
        let past_the_end = MultiPart::new(vec![input_key(0)]).results(1, vec![]).results(2, vec![]);
        let twice = MultiPart::new(vec![input_key(0)]).results(1, vec![]).results(1, vec![]);
        let frames: Vec<usize> = stores.iter().map(|s| s.log_frames().unwrap().len()).collect();
        for bad in [empty_key, past_the_end, twice] {
            let refused = multi.seal(&input_id(0), bad.clone()).await.unwrap_err();
            assert_eq!(refused.kind(), ErrorKind::InvalidInput, "{bad:?}: {refused}");
        }
        let after: Vec<usize> = stores.iter().map(|s| s.log_frames().unwrap().len()).collect();
        assert_eq!(after, frames, "a refused seal writes nothing in any table");
        for store in stores {
            store.close_async().await;
        }
    });
}

/// A seal retried with the very part it sealed (its answer lost) is a no-op in each table, never garbage: its
/// files are the ones the tables will commit, and a caller that deleted cleanup's files would lose them.
#[test]
fn the_same_part_sealed_again_is_not_garbage() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let world = World::new();
        let tables: Vec<DirTable> = (0..TABLES).map(|t| world.table(t, None)).collect();
        let mut stores = Vec::new();
        for t in 0..TABLES {
            stores.push(Store::builder(job(), identity(t)).backend(world.backends[t].clone()).open().await.unwrap());
        }
        let multi = MultiTable::builder().table(&stores[0], &tables[0]).table(&stores[1], &tables[1]).build().unwrap();
        let mut part = MultiPart::new(vec![input_key(0)]);
        for (t, table) in tables.iter().enumerate() {
            part = part
                .results(t, vec![table.write_data_file(&format!("input-0-t{t}"), b"0:0\n".to_vec()).await.unwrap()]);
        }
        let first = multi.seal(&input_id(0), part.clone()).await.unwrap();
        let again = multi.seal(&input_id(0), part).await.unwrap();
        assert_eq!((first.sealed.clone(), first.cleanup.len()), (vec![0, 1], 0));
        assert_eq!(again, first, "the same part again: sealed, nothing returned as garbage");
        for store in &stores {
            assert!(store.garbage(None, 16).unwrap().is_empty(), "nothing in {}'s garbage ledger", store.target());
        }
        for store in stores {
            store.close_async().await;
        }
    });
}
