//! Progress on stderr for long work (`restore`, `verify`, `gc`), with `indicatif`.
//!
//! Drawn only when stderr is a terminal and the command prints text: with `--json`, or with stderr piped or
//! redirected, no bar is made at all, so nothing is written to stderr (not even the cursor codes a hidden bar
//! could send) and stdout is untouched either way. A bar never claims more than it knows: a phase with no
//! count is a spinner naming the phase; `gc` shows the core's own counts (`sinkpoint::gc::Progress`):
//! objects listed while listing, then `done/of` while reading or deleting.

use std::io::IsTerminal as _;
use std::sync::Arc;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use sinkpoint::gc::{self, ProgressFn};

/// How often a spinner redraws while the work blocks the command's thread.
const TICK_MS: u64 = 120;

/// A progress display on stderr, or nothing (see the module docs). Cleared when dropped, so that an error line
/// printed afterwards stands alone.
pub(crate) struct Progress {
    bar: Option<ProgressBar>,
}

/// Whether a command may draw progress: it prints text (not `--json`) and stderr is a terminal.
fn wanted(json: bool) -> bool {
    !json && std::io::stderr().is_terminal()
}

fn spinner_style() -> ProgressStyle {
    ProgressStyle::with_template("{spinner} {msg} ({elapsed})").unwrap_or_else(|_| ProgressStyle::default_spinner())
}

fn bar_style() -> ProgressStyle {
    ProgressStyle::with_template("{spinner} {msg} [{bar:30}] {pos}/{len} ({elapsed})")
        .map(|s| s.progress_chars("=> "))
        .unwrap_or_else(|_| ProgressStyle::default_bar())
}

impl Progress {
    /// A spinner saying `phase` (e.g. "restoring the mirror into memory"), if the command may draw progress.
    pub(crate) fn start(json: bool, phase: &str) -> Self {
        if !wanted(json) {
            return Self { bar: None };
        }
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        bar.set_style(spinner_style());
        bar.set_message(phase.to_owned());
        bar.enable_steady_tick(Duration::from_millis(TICK_MS));
        Self { bar: Some(bar) }
    }

    /// Moves to the next phase: a spinner saying `phase`.
    pub(crate) fn phase(&self, phase: &str) {
        if let Some(bar) = &self.bar {
            show_phase(bar, phase);
        }
    }

    /// A callback for the core's collection functions that shows their counts under `what` ("mirror", "inbox").
    pub(crate) fn gc(&self, what: &'static str) -> ProgressFn {
        let Some(bar) = self.bar.clone() else {
            return Arc::new(|_| {});
        };
        Arc::new(move |step| match step {
            gc::Progress::Listed(n) => show_phase(&bar, &format!("{what}: listed {n} objects")),
            gc::Progress::Read { done, of } => show_count(&bar, &format!("{what}: reading"), done, of),
            gc::Progress::Deleted { done, of } => show_count(&bar, &format!("{what}: deleting"), done, of),
            // A kind of progress this CLI does not know yet: keep what is shown.
            _ => {}
        })
    }
}

fn show_phase(bar: &ProgressBar, phase: &str) {
    if bar.length().is_some() {
        bar.unset_length();
        bar.set_position(0);
        bar.set_style(spinner_style());
    }
    bar.set_message(phase.to_owned());
}

fn show_count(bar: &ProgressBar, phase: &str, done: u64, of: u64) {
    if bar.length().is_none() {
        bar.set_style(bar_style());
    }
    bar.set_length(of);
    bar.set_position(done);
    bar.set_message(phase.to_owned());
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}
