//! The vocabulary of the store: ids, keys, write results, epochs and commit keys.
//!
//! Every constructor that takes caller input checks it against [`crate::limits`] and says which limit was
//! broken and by how much.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{Error, InvalidInput};
use crate::limits::{
    CHECKPOINT_ID_BYTES_MAX, FORMAT_NAME_BYTES_MAX, JOB_ID_BYTES_MAX, SOURCE_KEY_BYTES_MAX, TARGET_IDENTITY_BYTES_MAX,
    WRITE_RESULT_BYTES_MAX,
};

fn check_segment(what: &'static str, value: &str, max: usize) -> Result<(), Error> {
    if value.is_empty() || value.len() > max {
        return Err(InvalidInput::Length { what, len: value.len(), max }.into());
    }
    if value == "." || value == ".." {
        return Err(InvalidInput::Syntax { what, value: value.to_owned() }.into());
    }
    if let Some(c) = value.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))) {
        return Err(InvalidInput::Character { what, value: value.to_owned(), found: c }.into());
    }
    Ok(())
}

/// A checkpoint id: chosen by the caller, deterministic per unit of input (`input-0017`), so that a retried task
/// maps to the same entry.
///
/// 1 to [`CHECKPOINT_ID_BYTES_MAX`] bytes of `[A-Za-z0-9._-]`, and neither `.` nor `..`, so it is safe as an
/// object-key segment.
///
/// ```
/// use sinkpoint::CheckpointId;
/// assert!(CheckpointId::new("input-0017").is_ok());
/// assert!(CheckpointId::new("..").is_err());
/// assert!(CheckpointId::new("a/b").is_err());
/// ```
// Deserialisation goes through `new`: an unchecked id, once written, would make every later read of the store
// fail. The encoding is unchanged: a newtype of a string encodes as the string.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String")]
pub struct CheckpointId(pub(crate) String);

impl CheckpointId {
    /// Checks `id` and wraps it.
    pub fn new(id: impl Into<String>) -> Result<Self, Error> {
        let id = id.into();
        check_segment("checkpoint id", &id, CHECKPOINT_ID_BYTES_MAX)?;
        Ok(Self(id))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Re-checks an id read back from disk or the mirror, where a bad one means corruption.
    pub(crate) fn is_valid(&self) -> bool {
        self.check().is_ok()
    }

    /// Re-checks the id at the store's boundary, so that no path into a record bypasses `new`.
    pub(crate) fn check(&self) -> Result<(), Error> {
        check_segment("checkpoint id", &self.0, CHECKPOINT_ID_BYTES_MAX)
    }
}

#[cfg(test)]
impl CheckpointId {
    /// Wraps `id` without checking it, to prove the store's boundary re-checks.
    pub(crate) fn unchecked(id: &str) -> Self {
        Self(id.to_owned())
    }
}

impl TryFrom<String> for CheckpointId {
    type Error = Error;

    fn try_from(id: String) -> Result<Self, Error> {
        Self::new(id)
    }
}

impl fmt::Display for CheckpointId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for CheckpointId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

/// The job id: stable for one logical write into one table, recorded when the store is created.
///
/// Same alphabet as [`CheckpointId`], up to [`JOB_ID_BYTES_MAX`] bytes.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String")]
pub struct JobId(String);

impl JobId {
    /// Checks `id` and wraps it.
    pub fn new(id: impl Into<String>) -> Result<Self, Error> {
        let id = id.into();
        check_segment("job id", &id, JOB_ID_BYTES_MAX)?;
        Ok(Self(id))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Re-checks the id where a store is created or opened.
    pub(crate) fn check(&self) -> Result<(), Error> {
        check_segment("job id", &self.0, JOB_ID_BYTES_MAX)
    }
}

#[cfg(test)]
impl JobId {
    /// Wraps `id` without checking it, to prove the store's boundary re-checks.
    pub(crate) fn unchecked(id: &str) -> Self {
        Self(id.to_owned())
    }
}

impl TryFrom<String> for JobId {
    type Error = Error;

    fn try_from(id: String) -> Result<Self, Error> {
        Self::new(id)
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

/// The identity of the target table (its URI, say), recorded when the store is created; opening the store
/// against another target is an error.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize, Debug)]
#[serde(try_from = "String")]
pub struct TargetIdentity(String);

impl TargetIdentity {
    /// Checks `identity` (1 to [`TARGET_IDENTITY_BYTES_MAX`] bytes, any text) and wraps it.
    pub fn new(identity: impl Into<String>) -> Result<Self, Error> {
        let identity = identity.into();
        if identity.is_empty() || identity.len() > TARGET_IDENTITY_BYTES_MAX {
            return Err(InvalidInput::Length {
                what: "target identity",
                len: identity.len(),
                max: TARGET_IDENTITY_BYTES_MAX,
            }
            .into());
        }
        Ok(Self(identity))
    }

    /// The identity as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Re-checks the identity where a store is created or opened.
    pub(crate) fn check(&self) -> Result<(), Error> {
        Self::new(self.0.as_str()).map(drop)
    }
}

impl TryFrom<String> for TargetIdentity {
    type Error = Error;

    fn try_from(identity: String) -> Result<Self, Error> {
        Self::new(identity)
    }
}

impl fmt::Display for TargetIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A checkpoint's generation: 0 for the first; `restart` begins the next one and drops every part of the
/// current one. A newtype, so that it cannot be swapped with a [`Part`] at a call site.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Debug)]
pub struct Attempt(u32);

impl Attempt {
    /// The first attempt of every checkpoint.
    pub const FIRST: Self = Self(0);

    /// Attempt number `n`.
    pub const fn new(n: u32) -> Self {
        Self(n)
    }

    /// Its number.
    pub const fn get(self) -> u32 {
        self.0
    }

    /// The attempt a [`crate::Store::restart`] of this one begins.
    #[must_use]
    pub const fn next(self) -> Self {
        // Saturating: an attempt past the last number is refused by the store as not the current one.
        Self(self.0.saturating_add(1))
    }
}

impl fmt::Display for Attempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The caller's index of one stage call within an attempt: 0, 1, 2…, below [`crate::limits::SEAL_PARTS_MAX`]
/// (checked by [`crate::Store::stage`]). A seal with `parts` = p takes parts `0..p`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Debug)]
pub struct Part(u32);

impl Part {
    /// The first (and, for a checkpoint staged in one call, the only) part.
    pub const FIRST: Self = Self(0);

    /// Part number `n`.
    pub const fn new(n: u32) -> Self {
        Self(n)
    }

    /// Its number.
    pub const fn get(self) -> u32 {
        self.0
    }
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// One call of [`crate::Store::stage`]: which part of which attempt, and the source keys and write results it
/// carries (either may be empty, not both).
///
/// ```
/// use sinkpoint::{Attempt, Format, Part, StagePart, WriteResult};
/// let result = WriteResult::new(Format::Parquet, b"data/part-0.parquet".to_vec())?;
/// let part = StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![b"s3://in/0.csv".to_vec()]).results(vec![result]);
/// assert_eq!(part.keys.len(), 1);
/// # Ok::<(), sinkpoint::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct StagePart {
    /// The checkpoint's current attempt (a stage call for another attempt is refused).
    pub attempt: Attempt,
    /// The part's index within the attempt.
    pub part: Part,
    /// The source keys it marks processed once the checkpoint is sealed.
    pub keys: Vec<SourceKey>,
    /// The write results it contributes to the commit.
    pub results: Vec<WriteResult>,
}

impl StagePart {
    /// Part `part` of attempt `attempt`, with no keys and no results yet.
    pub fn new(attempt: Attempt, part: Part) -> Self {
        Self { attempt, part, keys: Vec::new(), results: Vec::new() }
    }

    /// With these source keys.
    #[must_use]
    pub fn keys(mut self, keys: Vec<SourceKey>) -> Self {
        self.keys = keys;
        self
    }

    /// With these write results.
    #[must_use]
    pub fn results(mut self, results: Vec<WriteResult>) -> Self {
        self.results = results;
        self
    }
}

/// A writer's generation: bumped every time a writer opens the store, carried in every record, mirror object
/// and commit, so that a zombie writer is refused.
pub type Epoch = u64;

/// Opaque bytes naming one input (a file path, a partition, a row key), 1 to [`SOURCE_KEY_BYTES_MAX`] bytes.
pub type SourceKey = Vec<u8>;

/// Checks one source key against its limits.
pub(crate) fn check_source_key(key: &[u8]) -> Result<(), Error> {
    if key.is_empty() || key.len() > SOURCE_KEY_BYTES_MAX {
        return Err(InvalidInput::Length { what: "source key", len: key.len(), max: SOURCE_KEY_BYTES_MAX }.into());
    }
    Ok(())
}

/// The format of a write result. The store never interprets the bytes; the tag tells the target adapter.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize, Debug)]
#[serde(try_from = "FormatRepr")]
#[non_exhaustive]
pub enum Format {
    /// A Lance fragment.
    Lance,
    /// A Parquet data file.
    Parquet,
    /// An Iceberg data file.
    Iceberg,
    /// A Delta data file (add action).
    Delta,
    /// An Arrow IPC file.
    ArrowIpc,
    /// Anything else, named (1 to [`FORMAT_NAME_BYTES_MAX`] bytes).
    Other(String),
}

/// The unchecked shape of [`Format`] that deserialisation reads before `Format::try_from` checks it; its
/// variants are [`Format`]'s, in the same order, so the encoding is the same.
#[derive(Deserialize)]
#[serde(rename = "Format")]
enum FormatRepr {
    Lance,
    Parquet,
    Iceberg,
    Delta,
    ArrowIpc,
    Other(String),
}

impl TryFrom<FormatRepr> for Format {
    type Error = Error;

    fn try_from(repr: FormatRepr) -> Result<Self, Error> {
        let format = match repr {
            FormatRepr::Lance => Format::Lance,
            FormatRepr::Parquet => Format::Parquet,
            FormatRepr::Iceberg => Format::Iceberg,
            FormatRepr::Delta => Format::Delta,
            FormatRepr::ArrowIpc => Format::ArrowIpc,
            FormatRepr::Other(name) => Format::Other(name),
        };
        check_format(&format)?;
        Ok(format)
    }
}

fn check_format(format: &Format) -> Result<(), Error> {
    if let Format::Other(name) = format
        && (name.is_empty() || name.len() > FORMAT_NAME_BYTES_MAX)
    {
        return Err(InvalidInput::Length { what: "format name", len: name.len(), max: FORMAT_NAME_BYTES_MAX }.into());
    }
    Ok(())
}

/// Opaque bytes describing data files a worker wrote for one input, with their format.
///
/// ```
/// use sinkpoint::{Format, WriteResult};
/// let result = WriteResult::new(Format::Parquet, b"s3://bucket/t/part-0.parquet".to_vec()).unwrap();
/// assert_eq!(result.format(), &Format::Parquet);
/// ```
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "WriteResultRepr")]
pub struct WriteResult {
    format: Format,
    #[serde(with = "crate::byte_serde::byte_string")]
    bytes: Vec<u8>,
}

/// The unchecked shape of [`WriteResult`], field for field, so the encoding is the same.
#[derive(Deserialize)]
#[serde(rename = "WriteResult")]
struct WriteResultRepr {
    format: Format,
    #[serde(with = "crate::byte_serde::byte_string")]
    bytes: Vec<u8>,
}

impl TryFrom<WriteResultRepr> for WriteResult {
    type Error = Error;

    fn try_from(repr: WriteResultRepr) -> Result<Self, Error> {
        Self::new(repr.format, repr.bytes)
    }
}

impl WriteResult {
    /// Checks the result against [`WRITE_RESULT_BYTES_MAX`] and [`FORMAT_NAME_BYTES_MAX`] and wraps it.
    pub fn new(format: Format, bytes: Vec<u8>) -> Result<Self, Error> {
        let result = Self { format, bytes };
        result.check()?;
        Ok(result)
    }

    pub(crate) fn check(&self) -> Result<(), Error> {
        if self.bytes.len() > WRITE_RESULT_BYTES_MAX {
            return Err(InvalidInput::Length {
                what: "write result",
                len: self.bytes.len(),
                max: WRITE_RESULT_BYTES_MAX,
            }
            .into());
        }
        check_format(&self.format)
    }

    /// The format tag.
    pub fn format(&self) -> &Format {
        &self.format
    }

    /// The opaque bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Takes the bytes out.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }
}

impl fmt::Debug for WriteResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WriteResult({:?}, {} bytes)", self.format, self.bytes.len())
    }
}

/// A commit key `(job, n)`: n = 0, 1, 2… strictly in sequence per job, bound forever to the exact set of
/// checkpoint ids recorded with it before the target was called.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize, Debug)]
pub struct CommitKey {
    /// The job this key belongs to.
    pub job: JobId,
    /// The key's number in the job's sequence.
    pub n: u64,
}

impl fmt::Display for CommitKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({}, {})", self.job, self.n)
    }
}
