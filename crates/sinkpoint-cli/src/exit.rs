//! Exit codes: what a script calling `sinkpoint` branches on. Stable: changing one is a breaking change.

use std::process::ExitCode;

use sinkpoint::ErrorKind;

/// The exit codes, as `--help` lists them.
pub(crate) const HELP: &str = "\
Exit codes:
  0  done; for status: nothing blocks the job
  1  needs attention: a key's outcome is unknown, or a commit mismatched (status says what to do)
  2  usage: a wrong flag or argument, or input over a limit
  3  corrupt: stored bytes are damaged (restore from the mirror)
  4  held: a running job holds the store, or a newer writer fenced it
  5  not found: no store, mirror or checkpoint there, or it belongs to another job
  6  transient: I/O or object-store failure; retry
  7  refused: the change does not fit the checkpoint's or key's state; nothing was written
 70  a bug in sinkpoint: report it
A reader that closes the output early (`| head`) changes no code: the rest of the output is dropped.";

/// One exit code.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Code {
    Ok = 0,
    Attention = 1,
    Usage = 2,
    Corrupt = 3,
    Held = 4,
    NotFound = 5,
    Io = 6,
    Refused = 7,
    Bug = 70,
}

impl From<Code> for ExitCode {
    fn from(code: Code) -> Self {
        ExitCode::from(code as u8)
    }
}

/// A command that failed: one line for the operator, and the code.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) message: String,
    pub(crate) code: Code,
}

impl Failure {
    pub(crate) fn new(code: Code, message: impl Into<String>) -> Self {
        Self { message: message.into(), code }
    }
}

impl From<sinkpoint::Error> for Failure {
    fn from(error: sinkpoint::Error) -> Self {
        let code = match error.kind() {
            ErrorKind::InvalidInput => Code::Usage,
            ErrorKind::IllegalTransition => Code::Refused,
            ErrorKind::WrongStore => Code::NotFound,
            ErrorKind::Fenced | ErrorKind::AlreadyOpen => Code::Held,
            ErrorKind::Corrupt => Code::Corrupt,
            ErrorKind::Poisoned | ErrorKind::Io | ErrorKind::Target => Code::Io,
            ErrorKind::CommitMismatch => Code::Attention,
            _ => Code::Bug,
        };
        Self::new(code, error.to_string())
    }
}

/// Prints `message` as one line on stderr and returns `code`.
pub(crate) fn fail(message: &str, code: Code) -> ExitCode {
    // One line, whatever the error's own text holds: scripts and log scrapers read it.
    eprintln!("sinkpoint: error: {}", message.replace('\n', " "));
    code.into()
}
