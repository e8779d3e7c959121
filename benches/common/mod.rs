//! Shared by every bench: the quick-mode switch, the in-run sample recorder that turns criterion's samples into
//! the ratios the report leads with, the report table, and the fixtures (a store, a raw redb file, keys and
//! results of the sizes the rows name).
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

/// Records each `iter_custom` call (one criterion sample, or a warm-up call) so that the ratios are computed
/// from exactly the samples criterion measured: criterion runs its warm-up calls first and its `sample_size`
/// measured samples last, so the last `sample_size` records of a name are the measured ones.
#[derive(Default)]
pub struct Samples {
    by_name: Mutex<BTreeMap<String, Vec<(u64, Duration)>>>,
}

impl Samples {
    /// Records one call of `iters` iterations that took `elapsed`.
    pub fn record(&self, name: &str, iters: u64, elapsed: Duration) {
        let mut map = self.by_name.lock().expect("samples lock");
        map.entry(name.to_owned()).or_default().push((iters, elapsed));
    }

    /// The median time of one iteration over the last `n` samples of `name`, if it ran (a criterion filter
    /// may have skipped it).
    pub fn median(&self, name: &str, n: usize) -> Option<Duration> {
        let map = self.by_name.lock().expect("samples lock");
        let all = map.get(name)?;
        let mut per_iter: Vec<f64> =
            all[all.len().saturating_sub(n)..].iter().map(|(i, d)| d.as_secs_f64() / (*i).max(1) as f64).collect();
        per_iter.sort_by(f64::total_cmp);
        let mid = per_iter.len() / 2;
        let median = if per_iter.len() % 2 == 1 { per_iter[mid] } else { (per_iter[mid - 1] + per_iter[mid]) / 2.0 };
        Some(Duration::from_secs_f64(median))
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
            println!(
                "| {} | {:.3} | {} | {} | {} |",
                r.name,
                r.ratio,
                r.goal.text(),
                r.goal.verdict(r.ratio),
                r.figures
            );
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
    tempfile::Builder::new().prefix("sinkpoint-bench-").tempdir_in("/tmp").expect("a temporary directory")
}
