//! Case counts, seeds and shards of the randomized suites.
//!
//! One variable, [`CASES_VAR`] (`SINKPOINT_CASES`), sets the case count of every randomized suite (each has its
//! own default, sized for CI); each suite keeps its own seed variable, which replays a run. A long suite runs as
//! [`SHARDS`] tests, each over its own contiguous range of the cases ([`Shard::range`]), so that the test harness
//! (which runs a binary's tests in parallel) spreads one suite over every core.
//!
//! `PROPTEST_CASES` is not read: the proptest suites set their count from [`cases`] like the others, and a set
//! `PROPTEST_CASES` only earns a warning.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::ops::Range;
use std::sync::{Mutex, Once};

/// The variable every randomized suite reads its case count from.
pub const CASES_VAR: &str = "SINKPOINT_CASES";

/// How many tests a sharded suite is split into.
pub const SHARDS: u32 = 4;

/// Parses variable `var` if it is set; a value that does not parse is a mistake worth stopping for, not a
/// reason to run the default quietly.
fn parsed(var: &str) -> Option<u64> {
    let value = std::env::var(var).ok()?;
    Some(value.trim().parse().unwrap_or_else(|_| panic!("{var}={value:?} is not a number")))
}

/// The case count of a randomized suite: `SINKPOINT_CASES` if set, else `default`.
pub fn cases(default: u64) -> u64 {
    static WARN: Once = Once::new();
    if std::env::var_os("PROPTEST_CASES").is_some() {
        WARN.call_once(|| {
            let _ = writeln!(
                std::io::stderr(),
                "note: PROPTEST_CASES is ignored; {CASES_VAR} sets the case count of every randomized suite"
            );
        });
    }
    parsed(CASES_VAR).unwrap_or(default)
}

/// The base seed of a randomized suite: variable `var` if set, else one from the clock, chosen once per process
/// and variable so that every shard of one run shares it (the suite prints it, with `var`, to replay the run).
pub fn seed(var: &str) -> u64 {
    static CHOSEN: Mutex<BTreeMap<String, u64>> = Mutex::new(BTreeMap::new());
    let mut chosen = CHOSEN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    *chosen.entry(var.to_owned()).or_insert_with(|| {
        parsed(var).unwrap_or_else(|| {
            #[expect(clippy::disallowed_methods, reason = "the default seed comes from the clock and is printed")]
            let now = std::time::SystemTime::now();
            let nanos = now.duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos() as u64;
            nanos ^ u64::from(std::process::id())
        })
    })
}

/// One of the [`SHARDS`] tests a randomized suite is split into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    /// Which shard, `0..count`.
    pub index: u32,
    /// How many shards the suite is split into.
    pub count: u32,
}

impl Shard {
    /// Shard `index` of [`SHARDS`].
    pub const fn of(index: u32) -> Self {
        assert!(index < SHARDS, "a shard index past SHARDS");
        Self { index, count: SHARDS }
    }

    /// All of a suite's cases in one test.
    pub const WHOLE: Self = Self { index: 0, count: 1 };

    /// This shard's cases out of `cases`: contiguous, and the shards together cover `0..cases` exactly once.
    pub fn range(self, cases: u64) -> Range<u64> {
        let (index, count) = (u64::from(self.index), u64::from(self.count));
        (cases * index / count)..(cases * (index + 1) / count)
    }

    /// Prints (past the test harness's capture, so a passing run shows it too) the suite's line for this shard:
    /// its cases, the base seed and how to replay the run.
    pub fn announce(self, suite: &str, cases: u64, seed_var: &str, seed: u64) {
        let range = self.range(cases);
        let _ = writeln!(
            std::io::stderr(),
            "{suite}, shard {self}: cases {}..{} of {cases}, base seed {seed} (replay: {seed_var}={seed} \
             {CASES_VAR}={cases})",
            range.start,
            range.end,
        );
    }
}

/// `2/4`: the shard's number, from 1, of how many.
impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index + 1, self.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shards_cover_every_case_once() {
        for cases in [0, 1, 3, 4, 5, 63, 64, 1000, 1001] {
            let mut covered = Vec::new();
            for index in 0..SHARDS {
                covered.extend(Shard::of(index).range(cases));
            }
            assert_eq!(covered, (0..cases).collect::<Vec<_>>(), "{cases} cases");
            assert_eq!(Shard::WHOLE.range(cases), 0..cases);
        }
    }
}
