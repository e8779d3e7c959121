//! The adapter's limits, checked where they apply.

/// How many times one commit re-reads the table after a foreign commit took version V + 1 before it gives up
/// (and answers NotLanded: every attempt was refused before anything of ours was written).
pub const FOREIGN_COMMIT_RETRIES_MAX: u32 = 32;

/// How many staged data files one commit checks for existence at a time, before it lands.
pub const STAGED_FILE_CHECKS_IN_FLIGHT_MAX: usize = 16;

/// How many commit files after a key's intent a probe reads to find the checkpoint ids the key landed with. Past
/// it (or once log cleanup removed one of them) the probe answers without ids: the job's `txn` alone says the key
/// landed.
pub const PROBE_COMMITS_READ_MAX: u64 = 64;

// A probe reads at least the commit file right after the intent; a commit checks at least one staged file at once.
const _: () = assert!(PROBE_COMMITS_READ_MAX >= 1 && STAGED_FILE_CHECKS_IN_FLIGHT_MAX >= 1);
