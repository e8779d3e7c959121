//! Shared by every bench: the quick-mode switch, the measured operations ([`Op`]) that criterion times one by
//! one and [`paired_rounds`] times in alternating pairs for the ratios the report leads with, the report table,
//! and the fixtures (a store, keys and results of the sizes the rows name).
//!
//! Each bench binary includes this file with `#[path = "common/mod.rs"] mod common;`, so a helper one binary
//! does not use is dead code there: hence the module-wide allow.
#![allow(dead_code)]

pub mod counting;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use criterion::{Criterion, SamplingMode};
use sinkpoint::{CheckpointId, Format, JobId, StagingDurability, Store, TargetIdentity, WriteResult};

/// Whether this is the quick mode: `cargo test --benches`, or `cargo bench -- --test`. It mirrors criterion's
/// own rule (no `--bench` flag, or `--test`), so the fixtures shrink exactly when criterion runs each bench once.
pub fn quick() -> bool {
    let args: Vec<String> = std::env::args().collect();
    !args.iter().any(|a| a == "--bench") || args.iter().any(|a| a == "--test")
}

/// Criterion, configured for a shared 2-core machine: few samples, short windows, flat sampling (every sample
/// runs the same number of iterations, so a slow routine is not run 1 + 2 + … + n times).
pub fn criterion(sample_size: usize, measurement: Duration) -> Criterion {
    Criterion::default()
        .sample_size(sample_size)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(measurement)
        .without_plots()
        .configure_from_args()
}

/// The sampling mode every group uses.
pub const SAMPLING: SamplingMode = SamplingMode::Flat;

/// One measured operation: `run(iters)` does `iters` iterations of `elements` elements each and returns the
/// time they took (a routine may leave its setup, such as copying a file, out of it).
pub struct Op<'a> {
    pub name: &'static str,
    /// Elements (stage calls, inserts, lookups, opens) in one iteration.
    pub elements: u64,
    /// Iterations per timed call in the paired rounds: more than one for sub-microsecond routines, so that
    /// reading the clock does not weigh on them.
    pub chunk: u64,
    pub run: Box<dyn FnMut(u64) -> Duration + 'a>,
}

impl<'a> Op<'a> {
    pub fn new(name: &'static str, elements: u64, chunk: u64, run: impl FnMut(u64) -> Duration + 'a) -> Self {
        Self { name, elements, chunk, run: Box::new(run) }
    }
}

/// Registers every op as a criterion bench of `group` (criterion's own statistics and output).
pub fn bench_ops(c: &mut Criterion, group: &str, ops: &mut [Op<'_>]) {
    let mut g = c.benchmark_group(group);
    g.sampling_mode(SAMPLING);
    for op in ops.iter_mut() {
        g.throughput(criterion::Throughput::Elements(op.elements));
        g.bench_function(op.name, |b| b.iter_custom(|iters| (op.run)(iters)));
    }
    g.finish();
}

/// What [`paired_rounds`] measured: for each pair, the two ops' times per element in each round.
pub struct Rounds {
    pairs: BTreeMap<(&'static str, &'static str), Vec<(f64, f64)>>,
}

/// The ratios' measurement, built for a noisy shared machine (whose disk can turn ten times slower for a
/// second): for each pair `(a, b)`, `rounds` rounds of `a` for about `burst` then `b` for about `burst` (`b`
/// first every other round, so that a trend weighs on both alike). A ratio is the median over rounds of the two
/// ops' times in the same round: the noise of a moment is shared by a subject and its baseline instead of
/// landing on one of them.
pub fn paired_rounds(
    ops: &mut [Op<'_>],
    pairs: &[(&'static str, &'static str)],
    rounds: usize,
    burst: Duration,
) -> Rounds {
    let mut out: BTreeMap<(&'static str, &'static str), Vec<(f64, f64)>> = BTreeMap::new();
    let index = |ops: &[Op<'_>], name: &str| ops.iter().position(|o| o.name == name);
    for &(a, b) in pairs {
        let (Some(ia), Some(ib)) = (index(ops, a), index(ops, b)) else { continue };
        for round in 0..rounds {
            let (first, second) = if round % 2 == 0 { (ia, ib) } else { (ib, ia) };
            let t_first = burst_time(&mut ops[first], burst);
            let t_second = burst_time(&mut ops[second], burst);
            let (ta, tb) = if round % 2 == 0 { (t_first, t_second) } else { (t_second, t_first) };
            out.entry((a, b)).or_default().push((ta, tb));
        }
    }
    Rounds { pairs: out }
}

/// Runs `op` for about `burst` (at least one call) and returns its time per element.
fn burst_time(op: &mut Op<'_>, burst: Duration) -> f64 {
    let (mut elapsed, mut elements) = (Duration::ZERO, 0u64);
    loop {
        elapsed += (op.run)(op.chunk);
        elements += op.chunk * op.elements;
        if elapsed >= burst {
            break;
        }
    }
    elapsed.as_secs_f64() / elements as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 { v[mid] } else { (v[mid - 1] + v[mid]) / 2.0 }
}

impl Rounds {
    /// These rounds and `other`'s (pairs measured in separate calls of [`paired_rounds`], with their own round
    /// counts).
    pub fn merge(mut self, other: Rounds) -> Rounds {
        for (pair, v) in other.pairs {
            self.pairs.entry(pair).or_default().extend(v);
        }
        self
    }

    /// The per-round ratios of `a` over `b` (time per element), from the pair measured either way round.
    fn ratios(&self, a: &str, b: &str) -> Option<Vec<f64>> {
        if let Some(v) = self.pairs.iter().find(|((x, y), _)| *x == a && *y == b).map(|(_, v)| v) {
            return Some(v.iter().map(|(ta, tb)| ta / tb).collect());
        }
        let v = self.pairs.iter().find(|((x, y), _)| *x == b && *y == a).map(|(_, v)| v)?;
        Some(v.iter().map(|(tb, ta)| ta / tb).collect())
    }

    /// The median over rounds of `a`'s time per element over `b`'s.
    pub fn ratio(&self, a: &str, b: &str) -> Option<f64> {
        self.ratios(a, b).map(median)
    }

    /// The spread of that ratio over the rounds (min, max), to show how noisy the run was.
    pub fn spread(&self, a: &str, b: &str) -> Option<(f64, f64)> {
        let r = self.ratios(a, b)?;
        Some((r.iter().copied().fold(f64::INFINITY, f64::min), r.iter().copied().fold(0.0, f64::max)))
    }

    /// The median time of one element of `op` over every round it ran in.
    pub fn time(&self, op: &str) -> Option<Duration> {
        let mut all = Vec::new();
        for ((a, b), v) in &self.pairs {
            if *a == op {
                all.extend(v.iter().map(|(t, _)| *t));
            }
            if *b == op {
                all.extend(v.iter().map(|(_, t)| *t));
            }
        }
        (!all.is_empty()).then(|| Duration::from_secs_f64(median(all)))
    }
}

/// One row of the report: a ratio to its in-run baseline, its goal, and the absolute figures beside it.
pub struct Row {
    pub name: String,
    pub ratio: f64,
    pub goal: Goal,
    pub figures: String,
}

/// A goal for a ratio.
#[derive(Clone, Copy)]
pub enum Goal {
    /// The ratio must be at most this.
    AtMost(f64),
    /// The ratio must be at least this.
    AtLeast(f64),
    /// No goal: shown for context.
    Info,
}

impl Goal {
    fn verdict(self, ratio: f64) -> &'static str {
        match self {
            Goal::AtMost(g) if ratio <= g => "met",
            Goal::AtLeast(g) if ratio >= g => "met",
            Goal::Info => "-",
            _ => "MISSED",
        }
    }

    fn text(self) -> String {
        match self {
            Goal::AtMost(g) => format!("<= {g}"),
            Goal::AtLeast(g) => format!(">= {g}"),
            Goal::Info => "-".into(),
        }
    }
}

/// The rows a bench prints at its end, ratios first.
#[derive(Default)]
pub struct Report {
    rows: Mutex<Vec<Row>>,
}

impl Report {
    pub fn add(&self, name: impl Into<String>, ratio: f64, goal: Goal, figures: impl Into<String>) {
        let row = Row { name: name.into(), ratio, goal, figures: figures.into() };
        self.rows.lock().expect("report lock").push(row);
    }

    /// Prints the table (markdown, so it can be pasted into docs/BENCHMARKS.md) and the machine it ran on.
    pub fn print(&self, title: &str) {
        let rows = self.rows.lock().expect("report lock");
        println!("\n## {title}{}\n", if quick() { " (quick mode: tiny fixtures, figures meaningless)" } else { "" });
        println!("| row | ratio | goal | verdict | absolute figures |");
        println!("| --- | ---: | --- | --- | --- |");
        for r in rows.iter() {
            // Three decimals, but a tiny ratio keeps its digits in scientific notation.
            let ratio =
                if r.ratio == 0.0 || r.ratio >= 0.01 { format!("{:.3}", r.ratio) } else { format!("{:.1e}", r.ratio) };
            println!("| {} | {ratio} | {} | {} | {} |", r.name, r.goal.text(), r.goal.verdict(r.ratio), r.figures);
        }
        println!("\n{}", machine());
    }
}

/// The machine, in one line: cores, memory, CPU model.
pub fn machine() -> String {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("model name")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| s.lines().next().map(|l| l.split_whitespace().nth(1).unwrap_or("0").to_owned()))
        .and_then(|kb| kb.parse::<u64>().ok())
        .map(|kb| format!("{:.1} GiB", kb as f64 / 1024.0 / 1024.0))
        .unwrap_or_else(|| "unknown memory".into());
    format!("machine: {cores} cores, {mem}, {cpu}")
}

/// The bytes this process has read and written through system calls so far (`rchar`, `wchar` of
/// `/proc/self/io`), page-cache hits included: what a store's page reads and page writes cost in bytes. `None`
/// where the file does not exist.
pub fn io_bytes() -> Option<(u64, u64)> {
    let io = std::fs::read_to_string("/proc/self/io").ok()?;
    let field = |name: &str| {
        io.lines().find_map(|l| l.strip_prefix(name)).and_then(|v| v.trim_start_matches(':').trim().parse().ok())
    };
    Some((field("rchar")?, field("wchar")?))
}

/// A duration in the unit that reads best.
pub fn fmt_dur(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s >= 1.0 {
        format!("{s:.2} s")
    } else if s >= 1e-3 {
        format!("{:.2} ms", s * 1e3)
    } else {
        format!("{:.2} µs", s * 1e6)
    }
}

/// A rate per second, in thousands when large.
pub fn fmt_rate(per_s: f64) -> String {
    if per_s >= 10_000.0 { format!("{:.1} k/s", per_s / 1000.0) } else { format!("{per_s:.0} /s") }
}

pub fn job() -> JobId {
    JobId::new("bench-job").expect("valid job id")
}

pub fn target() -> TargetIdentity {
    TargetIdentity::new("mem://bench-table").expect("valid target identity")
}

pub fn cid(s: &str) -> CheckpointId {
    CheckpointId::new(s).expect("valid checkpoint id")
}

/// A source key of the shape a file-based job stages: about 30 bytes.
pub fn key(i: u64) -> Vec<u8> {
    format!("s3://in/part-{i:010}.csv").into_bytes()
}

/// A small write result: a data file's path, about 50 bytes.
pub fn small_result(i: u64) -> WriteResult {
    WriteResult::new(Format::Parquet, format!("s3://table/data/part-{i:010}-0.parquet").into_bytes())
        .expect("valid write result")
}

/// Opens (or creates) a store at `path`.
pub async fn open_store(path: &Path, durability: StagingDurability) -> Store {
    Store::builder(job(), target()).path(path).staging_durability(durability).open().await.expect("open the store")
}

/// A tokio runtime of the machine's two cores.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio runtime")
}

/// A temporary directory under /tmp, for both a bench and its baseline: the same disk.
pub fn tempdir() -> tempfile::TempDir {
    tempdir_in(std::path::Path::new("/tmp"))
}

/// A temporary directory of the benches' under `root`.
pub fn tempdir_in(root: &std::path::Path) -> tempfile::TempDir {
    tempfile::Builder::new().prefix("sinkpoint-bench-").tempdir_in(root).expect("a temporary directory")
}

/// Requests as an S3 bill counts them: a listing is one request per page of 1,000 objects (`lists` counts the
/// listing calls, each at least one page; `listed / 1,000` adds the further pages, within one per call).
pub fn requests(c: sinkpoint::testkit::Counts) -> u64 {
    c.puts + c.gets + c.lists + c.listed / 1000 + c.deletes + c.copies
}
