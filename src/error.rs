//! Errors in two layers: a public [`Error`] whose [`ErrorKind`] tells the caller what to do, and an internal
//! enum with the rich message. [`Error::kind`] is the one exhaustive mapping between them.

use std::fmt;
use std::sync::Arc;

use crate::state::CheckpointState;
use crate::types::{CheckpointId, Epoch};

/// What the caller should do about an error.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The input is malformed or over a limit: fix it; retrying the same call fails the same way.
    InvalidInput,
    /// The call does not fit the checkpoint's or the commit's state (see [`Error::transition`]); nothing was
    /// written. Whether to skip, restart or abort depends on the [`TransitionError`].
    IllegalTransition,
    /// The store was opened against another job or target, or the target already holds this job's commits
    /// while the store is new (its state was lost), or its file is of a format this release does not open:
    /// fix the configuration (or use the release that wrote it); never start afresh.
    WrongStore,
    /// A writer with a newer epoch has taken over: stop this writer; nothing it writes is accepted any more.
    Fenced,
    /// Stored bytes are damaged (a frame, a mirror object, a table value): report it, naming the place; restore
    /// from the mirror if there is one. The store never continues on a partial state.
    Corrupt,
    /// An earlier write or fsync failed, so the store no longer knows what is durable: drop it, reopen and
    /// recover.
    Poisoned,
    /// Another writer (in this process or another) holds the store's file open: stop that writer or give this
    /// one its own file. Retrying succeeds only once the other writer closes it, so never retry in a tight loop.
    AlreadyOpen,
    /// A transient I/O or object-store failure: retrying may succeed.
    Io,
    /// The target failed or its answer is unknown; nothing was assumed. Retry later; a commit whose outcome is
    /// unknown is re-probed, never re-committed blindly.
    Target,
    /// The target holds a commit under our key with another set of checkpoints: an operator must look at the
    /// table and `resolve` it.
    CommitMismatch,
    /// An internal invariant was broken: a bug in sinkpoint. Report it.
    Bug,
}

/// An illegal transition of a checkpoint or commit, refused before anything was written.
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransitionError {
    /// No checkpoint has this id.
    #[error("checkpoint {id} does not exist")]
    NotFound {
        /// The id asked for.
        id: CheckpointId,
    },
    /// The checkpoint is Staged by an older epoch; `restart` or `abort` it (a complete one may be sealed).
    #[error(
        "checkpoint {id} was staged by epoch {staged_epoch}, before this writer (epoch {epoch}): restart or abort it"
    )]
    Orphaned {
        /// The checkpoint.
        id: CheckpointId,
        /// The epoch that staged its current attempt.
        staged_epoch: Epoch,
        /// This writer's epoch.
        epoch: Epoch,
    },
    /// The offered attempt was dropped by a `restart`.
    #[error("checkpoint {id}: attempt {offered} was dropped, the current attempt is {current}")]
    StaleAttempt {
        /// The checkpoint.
        id: CheckpointId,
        /// The attempt the call carried.
        offered: u32,
        /// The checkpoint's current attempt.
        current: u32,
    },
    /// The offered attempt has not begun: `restart` begins the next attempt.
    #[error("checkpoint {id}: attempt {offered} has not begun, the current attempt is {current}")]
    AttemptAhead {
        /// The checkpoint.
        id: CheckpointId,
        /// The attempt the call carried.
        offered: u32,
        /// The checkpoint's current attempt (0 for a new one).
        current: u32,
    },
    /// The part was staged before with other bytes.
    #[error("checkpoint {id} attempt {attempt}: part {part} was staged before with other bytes")]
    PartConflict {
        /// The checkpoint.
        id: CheckpointId,
        /// The attempt.
        attempt: u32,
        /// The part.
        part: u32,
    },
    /// The checkpoint is sealed (or further): its input is done; skip it.
    #[error("checkpoint {id} is {}; the offered part {}", state_text(*state), match part_matches { Some(true) => "is the one sealed", Some(false) => "differs from the one sealed", None => "cannot be compared (results released)" })]
    AlreadySealed {
        /// The checkpoint.
        id: CheckpointId,
        /// Its state.
        state: CheckpointState,
        /// Whether the offered part equals the sealed one; `None` once its results were released.
        part_matches: Option<bool>,
    },
    /// The checkpoint was aborted: `restart` it to begin a new attempt.
    #[error("checkpoint {id} is aborted: restart it to begin a new attempt")]
    Aborted {
        /// The checkpoint.
        id: CheckpointId,
    },
    /// `seal` named more parts than were staged.
    #[error("checkpoint {id} attempt {attempt}: {count} parts missing of {expected} expected, first {first:?}")]
    MissingParts {
        /// The checkpoint.
        id: CheckpointId,
        /// The attempt.
        attempt: u32,
        /// The part count the call expected.
        expected: u32,
        /// How many parts are missing.
        count: u32,
        /// The first missing parts (at most 16).
        first: Vec<u32>,
    },
    /// Parts beyond the expected count were staged; sealing would drop their rows.
    #[error("checkpoint {id} attempt {attempt}: parts staged beyond the {expected} expected, first {first:?}")]
    UnexpectedParts {
        /// The checkpoint.
        id: CheckpointId,
        /// The attempt.
        attempt: u32,
        /// The part count the call expected.
        expected: u32,
        /// The first extra parts (at most 16).
        first: Vec<u32>,
    },
    /// The checkpoint was sealed with another part count.
    #[error("checkpoint {id} was sealed with {sealed} parts, not {offered}")]
    SealMismatch {
        /// The checkpoint.
        id: CheckpointId,
        /// Its sealed part count.
        sealed: u32,
        /// The count offered.
        offered: u32,
    },
    /// A source key of this checkpoint belongs to another checkpoint (invariant 3): in a store, one that sealed
    /// it; in shared staging, one whose attempt claimed it first, which may not have sealed (yet, or ever).
    #[error(
        "source key {key:?} of checkpoint {id} already belongs to checkpoint {owner} (sealed with it, or, in shared \
         staging, claimed by an attempt of it that may not have sealed): a key belongs to one checkpoint for good; \
         process it under {owner}'s id, or leave it out of {id}"
    )]
    KeyConflict {
        /// The key, lossily as text.
        key: String,
        /// The checkpoint being sealed.
        id: CheckpointId,
        /// The checkpoint that owns the key.
        owner: CheckpointId,
    },
    /// Another attempt of this checkpoint (a retried or speculative task, on any worker) won its seal; this
    /// attempt's results were not sealed and never will be: delete their data files and stop the task.
    #[error(
        "checkpoint {id} was sealed by another attempt ({winner}); this attempt's {} write results were not \
         sealed and never will be: delete their data files and stop this task",
        results.len()
    )]
    SealLost {
        /// The checkpoint.
        id: CheckpointId,
        /// Who sealed it: the worker's name and its session.
        winner: String,
        /// This attempt's write results, for cleanup.
        results: Vec<crate::types::WriteResult>,
    },
    /// The operation needs a Sealed checkpoint.
    #[error("checkpoint {id} is {}, not Sealed", state_text(*state))]
    NotSealed {
        /// The checkpoint.
        id: CheckpointId,
        /// Its state.
        state: CheckpointState,
    },
    /// A sealed checkpoint's keys are already skipped by readers; only `force_abort` may abort it.
    #[error("checkpoint {id} is sealed: its keys are already skipped; only an operator's force_abort may abort it")]
    SealedCannotAbort {
        /// The checkpoint.
        id: CheckpointId,
    },
    /// Commit keys are strictly sequential.
    #[error("commit key {offered} is out of sequence: the next key is {expected}")]
    CommitOutOfSequence {
        /// The key offered.
        offered: u64,
        /// The next key.
        expected: u64,
    },
    /// Key n+1 is not begun until key n is committed.
    #[error("commit key {key} is still in flight: it must be committed before the next key begins")]
    CommitInFlight {
        /// The key in flight.
        key: u64,
    },
    /// No commit was begun under this key.
    #[error("commit key {key} was never begun")]
    UnknownCommitKey {
        /// The key.
        key: u64,
    },
    /// The commit is in a state that does not allow the operation.
    #[error("commit key {key} is {state:?}: {what} is not allowed there")]
    CommitState {
        /// The key.
        key: u64,
        /// Its state.
        state: CheckpointState,
        /// The operation.
        what: &'static str,
    },
    /// A checkpoint was named twice in one call.
    #[error("checkpoint {id} is named twice")]
    DuplicateId {
        /// The checkpoint.
        id: CheckpointId,
    },
    /// A commit must cover at least one checkpoint with results; one without results is committed empty.
    #[error("checkpoint {id} has {results} write results: {what}")]
    ResultCount {
        /// The checkpoint.
        id: CheckpointId,
        /// Its result count.
        results: u32,
        /// What was wrong.
        what: &'static str,
    },
    /// The checkpoints of one commit carry more write results than one target commit may.
    #[error("the commit would carry {results} write results; the limit is {max} (over by {})", results - max)]
    CommitTooLarge {
        /// The results the checkpoints carry.
        results: u64,
        /// [`crate::limits::COMMIT_RESULTS_MAX`].
        max: u64,
    },
    /// The part would take the attempt past [`crate::limits::CHECKPOINT_BYTES_MAX`]. Retrying fails the same way:
    /// restart the checkpoint and split its input over more checkpoints.
    #[error(
        "checkpoint {id} attempt {attempt}: the part would bring it to {bytes} bytes; the limit is {limit} (over by {}): restart it and split its input over more checkpoints",
        bytes.saturating_sub(*limit)
    )]
    CheckpointTooLarge {
        /// The checkpoint.
        id: CheckpointId,
        /// The attempt.
        attempt: u32,
        /// The attempt's stored bytes with the offered part.
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// A call named no checkpoint.
    #[error("the call names no checkpoint")]
    NoCheckpoints,
    /// The job cannot be recorded finished while a checkpoint's results wait for the target.
    #[error("checkpoint {id} is {state:?}: commit it before the job is finished")]
    Unfinished {
        /// The first such checkpoint.
        id: CheckpointId,
        /// Its state.
        state: CheckpointState,
    },
}

/// Malformed or oversized input, found at the boundary.
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
pub(crate) enum InvalidInput {
    #[error("{}", length_message(what, *len, *max))]
    Length { what: &'static str, len: usize, max: usize },
    #[error("{what} {value:?} is not allowed")]
    Syntax { what: &'static str, value: String },
    #[error("{what} {value:?} holds {found:?}; only [A-Za-z0-9._-] are allowed")]
    Character { what: &'static str, value: String, found: char },
    #[error("{what}: {count} is over the limit of {max} (over by {})", count.saturating_sub(*max))]
    Count { what: &'static str, count: usize, max: usize },
    #[error("{}", range_message(what, *value, *min, *max))]
    Range { what: &'static str, value: u64, min: u64, max: u64 },
    /// An adapter's own refusal, built with [`Error::invalid_input`].
    #[error("{0}")]
    Adapter(String),
}

/// A state as an operator reads it in a message (the same words as `sinkpoint list`), not Rust's `Debug`.
fn state_text(state: CheckpointState) -> String {
    match state {
        CheckpointState::Staged => "staged".into(),
        CheckpointState::Sealed => "sealed".into(),
        CheckpointState::Committing { key } => format!("committing under key {key}"),
        CheckpointState::CommitUnknown { key } => format!("commit-unknown under key {key} (its outcome is unknown)"),
        CheckpointState::Committed { key: Some(key) } => format!("committed under key {key}"),
        CheckpointState::Committed { key: None } => "committed (it had no write results)".into(),
        CheckpointState::Aborted => "aborted".into(),
    }
}

fn cause_suffix(cause: Option<&(dyn std::error::Error + Send + Sync)>) -> String {
    cause.map(|c| format!(": {c}")).unwrap_or_default()
}

fn length_message(what: &str, len: usize, max: usize) -> String {
    if len == 0 {
        format!("{what} is empty; it must be 1 to {max} bytes")
    } else {
        format!("{what} is {len} bytes; the limit is {max} (over by {})", len.saturating_sub(max))
    }
}

fn range_message(what: &str, value: u64, min: u64, max: u64) -> String {
    if value < min {
        format!("{what} is {value}; the minimum is {min} (under by {})", min - value)
    } else {
        format!("{what} is {value}; the limit is {max} (over by {})", value.saturating_sub(max))
    }
}

/// The internal layer: every failure with its full message.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Inner {
    #[error("invalid input: {0}")]
    InvalidInput(#[from] InvalidInput),
    #[error("illegal transition: {0}")]
    Transition(#[from] TransitionError),
    #[error("wrong store: {0}")]
    WrongStore(String),
    #[error("fenced: {0}")]
    Fenced(String),
    #[error("corrupt: {0}")]
    Corrupt(String),
    #[error("the store is poisoned after an earlier failure ({0}); drop it, reopen and recover")]
    Poisoned(String),
    #[error("already open: {0}")]
    AlreadyOpen(String),
    #[error("redb: {0}")]
    Redb(#[from] redb::Error),
    #[error("object store: {0}")]
    ObjectStore(#[from] object_store::Error),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("target: {message}{}", cause_suffix(cause.as_deref()))]
    Target { message: String, cause: Option<Arc<dyn std::error::Error + Send + Sync>> },
    #[error("commit mismatch: {0}")]
    CommitMismatch(String),
    #[error("bug in sinkpoint: {0}")]
    Bug(String),
}

/// A sinkpoint error: [`Error::kind`] says what to do, `Display` says what happened and where.
///
/// `Display` already includes the message of the failure it wraps, so [`std::error::Error::source`] skips that
/// failure and returns its own cause: a report walking the chain prints each message once. Errors clone cheaply
/// (the inner error is shared).
///
/// Adapters (a target, a driver) build errors of the kind they mean with the public constructors:
///
/// ```
/// use sinkpoint::{Error, ErrorKind};
/// let cause = std::io::Error::new(std::io::ErrorKind::TimedOut, "catalog timed out");
/// let err = Error::target_with_source("could not commit to the catalog", cause);
/// assert_eq!(err.kind(), ErrorKind::Target);
/// assert_eq!(err.to_string(), "target: could not commit to the catalog: catalog timed out");
/// assert_eq!(Error::invalid_input("the table has no column `id`").kind(), ErrorKind::InvalidInput);
/// ```
#[derive(Clone)]
pub struct Error {
    inner: Arc<Inner>,
}

impl Error {
    /// What the caller should do about it.
    pub fn kind(&self) -> ErrorKind {
        match &*self.inner {
            Inner::InvalidInput(_) => ErrorKind::InvalidInput,
            Inner::Transition(_) => ErrorKind::IllegalTransition,
            Inner::WrongStore(_) => ErrorKind::WrongStore,
            Inner::Fenced(_) => ErrorKind::Fenced,
            Inner::Corrupt(_) => ErrorKind::Corrupt,
            Inner::Poisoned(_) => ErrorKind::Poisoned,
            Inner::AlreadyOpen(_) => ErrorKind::AlreadyOpen,
            Inner::Redb(e) => redb_kind(e),
            Inner::ObjectStore(_) | Inner::Io(_) => ErrorKind::Io,
            Inner::Target { .. } => ErrorKind::Target,
            Inner::CommitMismatch(_) => ErrorKind::CommitMismatch,
            Inner::Bug(_) => ErrorKind::Bug,
        }
    }

    /// The illegal transition, when [`Error::kind`] is [`ErrorKind::IllegalTransition`].
    pub fn transition(&self) -> Option<&TransitionError> {
        match &*self.inner {
            Inner::Transition(t) => Some(t),
            _ => None,
        }
    }

    /// The message without the wrapper of a `Poisoned` or `Fenced` error, to carry it into another one.
    pub(crate) fn message(&self) -> String {
        match &*self.inner {
            Inner::Poisoned(m) | Inner::Fenced(m) => m.clone(),
            _ => self.to_string(),
        }
    }

    /// The target failed, or its answer is unknown ([`ErrorKind::Target`]): the caller retries later, and a
    /// commit whose outcome is unknown is probed, never re-committed blindly.
    pub fn target(message: impl Into<String>) -> Self {
        Inner::Target { message: message.into(), cause: None }.into()
    }

    /// [`Error::target`] with the failure that caused it, shown once in `Display` and reachable through
    /// `source()`'s chain.
    pub fn target_with_source(
        message: impl Into<String>,
        cause: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Inner::Target { message: message.into(), cause: Some(Arc::new(cause)) }.into()
    }

    /// The caller's input is malformed or over a limit ([`ErrorKind::InvalidInput`]): say which input and why;
    /// retrying the same call fails the same way.
    pub fn invalid_input(message: impl Into<String>) -> Self {
        InvalidInput::Adapter(message.into()).into()
    }

    /// Stored bytes are damaged ([`ErrorKind::Corrupt`]): name the place; nothing continues on a partial state.
    pub fn corrupt(message: impl Into<String>) -> Self {
        Inner::Corrupt(message.into()).into()
    }

    pub(crate) fn bug(message: impl Into<String>) -> Self {
        Inner::Bug(message.into()).into()
    }

    pub(crate) fn fenced(message: impl Into<String>) -> Self {
        Inner::Fenced(message.into()).into()
    }

    /// The store or table belongs to another job or target ([`ErrorKind::WrongStore`]): fix the configuration;
    /// never start afresh.
    pub fn wrong_store(message: impl Into<String>) -> Self {
        Inner::WrongStore(message.into()).into()
    }

    pub(crate) fn poisoned(message: impl Into<String>) -> Self {
        Inner::Poisoned(message.into()).into()
    }

    pub(crate) fn mismatch(message: impl Into<String>) -> Self {
        Inner::CommitMismatch(message.into()).into()
    }

    /// A transient failure with its message ([`ErrorKind::Io`]): a request timed out or could not be settled.
    pub(crate) fn io(message: impl Into<String>) -> Self {
        Inner::Io(std::io::Error::other(message.into())).into()
    }

    pub(crate) fn count(what: &'static str, count: usize, max: usize) -> Self {
        InvalidInput::Count { what, count, max }.into()
    }
}

/// Maps redb's failure to open the file at `place`: a file redb cannot read as a database is
/// damage, not a transient failure a driver would retry forever, and a file another writer holds says so.
pub(crate) fn open_failed(place: &str, error: redb::DatabaseError) -> Error {
    use redb::{DatabaseError, StorageError};
    match error {
        DatabaseError::DatabaseAlreadyOpen | DatabaseError::LockProtocolMismatch => Inner::AlreadyOpen(format!(
            "another writer holds {place} ({error}): a running job (or another program) has it open; wait until \
             it stops, or stop it, and retry then (a writer of another job needs a store file of its own)"
        ))
        .into(),
        DatabaseError::UpgradeRequired(version) => Error::wrong_store(format!(
            "{place} is in redb file format {version}, which this version cannot read: open it with the \
             sinkpoint version that wrote it"
        )),
        DatabaseError::Storage(StorageError::Corrupted(detail)) => unreadable(place, &detail),
        DatabaseError::Storage(StorageError::Io(e)) if is_unreadable(&e) => unreadable(place, &e.to_string()),
        other => other.into(),
    }
}

/// Maps a failure met while reading the store at `place` after its open. redb's damage (and an I/O failure
/// that says the bytes are malformed) is reported as damage naming the file. `in_memory`: the store was read
/// into memory (a copy of a file, a restored mirror), so no read does I/O at all: any I/O error redb reports
/// (a page that points past the copy's end, as in a truncated file) is damage of the bytes, never transient.
/// Every other failure is kept as it is: a genuine I/O failure of a file stays [`ErrorKind::Io`].
pub(crate) fn read_failed(place: &str, in_memory: bool, error: Error) -> Error {
    let Inner::Redb(e) = &*error.inner else { return error };
    match redb_kind(e) {
        ErrorKind::Corrupt => unreadable(place, &e.to_string()),
        ErrorKind::Io if in_memory => unreadable(place, &e.to_string()),
        _ => error,
    }
}

fn unreadable(place: &str, detail: &str) -> Error {
    Error::corrupt(format!(
        "{place} is not a readable store ({detail}): if it is this job's store, restore it from the mirror or a \
         backup; if the path is wrong, fix it. sinkpoint never overwrites it"
    ))
}

fn redb_kind(error: &redb::Error) -> ErrorKind {
    // A damaged file is corruption; everything else from redb is an I/O failure that poisons the writer (the
    // writer maps those to Poisoned itself), or a transient failure of a read.
    match error {
        redb::Error::Corrupted(_) => ErrorKind::Corrupt,
        redb::Error::PreviousIo => ErrorKind::Poisoned,
        redb::Error::DatabaseAlreadyOpen | redb::Error::LockProtocolMismatch => ErrorKind::AlreadyOpen,
        redb::Error::UpgradeRequired(_) => ErrorKind::WrongStore,
        // Tables of other types, or bytes redb cannot parse: not a store, or a damaged one; a retry reads the
        // same bytes.
        redb::Error::TableTypeMismatch { .. }
        | redb::Error::TableIsMultimap(_)
        | redb::Error::TableIsNotMultimap(_)
        | redb::Error::TypeDefinitionChanged { .. }
        | redb::Error::TableDoesNotExist(_) => ErrorKind::Corrupt,
        redb::Error::Io(e) if is_unreadable(e) => ErrorKind::Corrupt,
        // Misuse of redb that sinkpoint's own limits and code rule out.
        redb::Error::ValueTooLarge(_) | redb::Error::UnorderedKey | redb::Error::TableAlreadyOpen(..) => ErrorKind::Bug,
        _ => ErrorKind::Io,
    }
}

/// Whether an I/O error says the bytes are malformed, which no retry changes.
fn is_unreadable(error: &std::io::Error) -> bool {
    matches!(error.kind(), std::io::ErrorKind::InvalidData | std::io::ErrorKind::UnexpectedEof)
}

#[cfg(test)]
mod redb_kind_tests {
    use super::*;

    /// No `Io` (transient, retried) for a condition that a retry cannot change.
    #[test]
    fn redb_failures_a_retry_cannot_change_are_not_io() {
        let malformed = redb::Error::Io(std::io::Error::new(std::io::ErrorKind::InvalidData, "bad page"));
        assert_eq!(redb_kind(&malformed), ErrorKind::Corrupt);
        assert_eq!(redb_kind(&redb::Error::TableDoesNotExist("log".into())), ErrorKind::Corrupt);
        assert_eq!(redb_kind(&redb::Error::ValueTooLarge(1 << 40)), ErrorKind::Bug);
        assert_eq!(redb_kind(&redb::Error::DatabaseAlreadyOpen), ErrorKind::AlreadyOpen);
        let reset = redb::Error::Io(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "nfs"));
        assert_eq!(redb_kind(&reset), ErrorKind::Io);
    }

    /// A read of a store held in memory does no I/O: redb's I/O error there (a page past the end of a truncated
    /// file's copy) is damage naming the file; the same error reading the file itself stays transient.
    #[test]
    fn an_io_error_reading_a_copy_in_memory_is_damage_and_reading_the_file_stays_transient() {
        let out_of_range = || Error::from(redb::Error::Io(std::io::Error::other("Index out-of-range.")));
        let copy = read_failed("store file s.redb", true, out_of_range());
        assert_eq!(copy.kind(), ErrorKind::Corrupt);
        assert!(copy.to_string().contains("store file s.redb") && copy.to_string().contains("restore"), "{copy}");
        assert_eq!(read_failed("store file s.redb", false, out_of_range()).kind(), ErrorKind::Io);
        let other = read_failed("store file s.redb", true, Error::invalid_input("x"));
        assert_eq!(other.kind(), ErrorKind::InvalidInput);
    }
}

impl<T: Into<Inner>> From<T> for Error {
    fn from(inner: T) -> Self {
        Self { inner: Arc::new(inner.into()) }
    }
}

macro_rules! from_redb {
    ($($t:ty),*) => {$(
        impl From<$t> for Inner {
            fn from(e: $t) -> Self {
                Inner::Redb(e.into())
            }
        }
    )*};
}
from_redb!(
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError,
    redb::SetDurabilityError
);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.inner, f)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Error({:?}: {})", self.kind(), self.inner)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        // Inner's Display already shows its direct source (thiserror's `{0}`), so the chain starts one below.
        match &*self.inner {
            Inner::Target { cause, .. } => cause.as_deref().and_then(|c| c.source()),
            inner => std::error::Error::source(inner).and_then(|s| s.source()),
        }
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
