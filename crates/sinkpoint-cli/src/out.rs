//! Standard output. Every `print!`/`println!` of this crate comes here (the macros in `main.rs` shadow the
//! standard ones), so no write to stdout can panic. A reader that closed the pipe early (`sinkpoint list … |
//! head -1`) wants no more: the rest of the output is dropped quietly, the command finishes its work (a `gc
//! --apply` still deletes what it listed) and exits with its own code. Any other failure to write (a full disk
//! under a redirect) is kept and reported once at the end ([`finish`]), exit 6: the output is incomplete.

use std::io::Write as _;
use std::sync::{Mutex, PoisonError};

use crate::exit::{Code, Failure};

/// What became of stdout.
enum Stdout {
    Open,
    /// The reader is gone: nothing more is written.
    Closed,
    /// A write failed otherwise: nothing more is written, and the command fails at the end.
    Failed(String),
}

static STDOUT: Mutex<Stdout> = Mutex::new(Stdout::Open);

/// Writes `args` to stdout, unless it is closed or failed.
pub(crate) fn print(args: std::fmt::Arguments<'_>) {
    // A poisoned lock only means a print panicked elsewhere; the state it guards is still whole.
    let mut state = STDOUT.lock().unwrap_or_else(PoisonError::into_inner);
    if matches!(*state, Stdout::Open)
        && let Err(e) = std::io::stdout().lock().write_fmt(args)
    {
        *state = closed_or_failed(&e);
    }
}

fn closed_or_failed(error: &std::io::Error) -> Stdout {
    if error.kind() == std::io::ErrorKind::BrokenPipe { Stdout::Closed } else { Stdout::Failed(error.to_string()) }
}

/// Flushes stdout; the failure to report, if a write failed other than by a closed pipe.
pub(crate) fn finish() -> Option<Failure> {
    let mut state = STDOUT.lock().unwrap_or_else(PoisonError::into_inner);
    if matches!(*state, Stdout::Open)
        && let Err(e) = std::io::stdout().lock().flush()
    {
        *state = closed_or_failed(&e);
    }
    match &*state {
        Stdout::Failed(e) => {
            Some(Failure::new(Code::Io, format!("could not write the output to stdout ({e}): it is incomplete")))
        }
        Stdout::Open | Stdout::Closed => None,
    }
}
