//! Every limit of the store, as named constants with their units last.
//!
//! Each input is checked against these at the boundary (see [`crate::Error`] with
//! [`crate::ErrorKind::InvalidInput`]); the relations between them are checked at compile time below. The public
//! ones are those a caller passes, checks against or sets: the sizes of ids, keys, results and calls, the bounds of
//! settings and their defaults. The rest is internal tuning, crate-private (tests read a few through the testkit).

/// The longest checkpoint id, in bytes.
pub const CHECKPOINT_ID_BYTES_MAX: usize = 128;
/// The longest job id, in bytes.
pub const JOB_ID_BYTES_MAX: usize = 128;
/// The longest target identity (a table URI, say), in bytes.
pub const TARGET_IDENTITY_BYTES_MAX: usize = 1024;
/// The longest source key, in bytes.
pub const SOURCE_KEY_BYTES_MAX: usize = 4096;
/// The largest single write result, in bytes.
pub const WRITE_RESULT_BYTES_MAX: usize = 1024 * 1024;
/// The longest name of an `Other` write-result format, in bytes.
pub const FORMAT_NAME_BYTES_MAX: usize = 64;
/// The most source keys one stage call may carry.
pub const STAGE_KEYS_MAX: usize = 10_000;
/// The most write results one stage call may carry.
pub const STAGE_RESULTS_MAX: usize = 1_000;
/// The most bytes (keys plus results) one stage call may carry.
pub const STAGE_BYTES_MAX: usize = 16 * 1024 * 1024;
/// The most parts one attempt of a checkpoint may be sealed with.
pub const SEAL_PARTS_MAX: u32 = 100_000;
/// The most bytes one attempt of a checkpoint may hold: the stored size of all its staged parts (their source
/// keys and write results, plus a few bytes of encoding per key, per result and per part), checked at every
/// `stage`. Without it an attempt could grow to [`SEAL_PARTS_MAX`] parts of [`STAGE_BYTES_MAX`] each, about
/// 1.6 TB, more than a driver can hold when `pending` and the committer read its results, so it could be
/// neither committed nor (with `restart`, which returns its results) dropped. 256 MiB is 15 stage calls at
/// their limit, far more keys and file descriptions than one input holds in practice, and the size of a
/// mirror read window (`MIRROR_READ_WINDOW_BYTES_MAX`): what this crate already expects a driver to hold.
pub const CHECKPOINT_BYTES_MAX: u64 = 256 * 1024 * 1024;
/// The most checkpoints one target commit may cover.
pub const COMMIT_CHECKPOINTS_MAX: usize = 10_000;
/// The most write results one target commit may carry.
pub const COMMIT_RESULTS_MAX: usize = 100_000;
/// The most tables one multi-table checkpoint spans (`multi::MultiTable`): each is sealed and committed one
/// after another, so a checkpoint's cost grows with its tables.
pub const MULTI_TABLES_MAX: usize = 64;
/// The longest operator reason (for `resolve` and `force_abort`), in bytes.
pub const REASON_BYTES_MAX: usize = 1024;
/// The most calls folded into one group commit (one redb write transaction, one fsync).
pub const GROUP_COMMIT_CALLS_MAX: usize = 256;
/// How long the writer waits, at most, for the callers its last group commit answered to send their next calls
/// before it begins a durable group commit (see `wal::writer::linger`), in microseconds.
pub(crate) const GROUP_COMMIT_LINGER_MAX_US: u64 = 200;
/// The writer stops waiting when no call has come for this long, in microseconds.
pub(crate) const GROUP_COMMIT_LINGER_GAP_US: u64 = 20;
/// The most calls waiting for the writer before callers are made to wait for room.
pub(crate) const WRITER_QUEUE_CALLS_MAX: usize = 4096;
/// The most seals one [`crate::SealWindow`] keeps queued and unacknowledged: a group commit's worth
/// ([`GROUP_COMMIT_CALLS_MAX`]), so one worker's window never needs more than one group to drain.
pub const SEAL_WINDOW_SEALS_MAX: usize = GROUP_COMMIT_CALLS_MAX;
/// How long the mirror's uploader holds a segment that ends with a group nobody waits for, waiting for the groups
/// behind it, in milliseconds. Nobody waits for a group committed without an fsync (a `SealWindow`'s seals,
/// non-durable staging) in either mode, nor for any durable one but a commit intent's (or another protocol record's
/// but the mark) under an asynchronous mirror. The window's next durable seal, or an asynchronous worker's next calls
/// and its commit, usually come well within it, and one put then carries the lot. Nobody waits for the linger: a
/// group that is waited for ends it by arriving, and a `Store::flush`, a synchronous mirror's durable barrier or a
/// writer at an asynchronous mirror's lag bound ends it within a couple of milliseconds.
pub(crate) const MIRROR_LINGER_MS: u64 = 50;
/// The steps in which the mirror's uploader lingers ([`MIRROR_LINGER_MS`]), in milliseconds: how late it may
/// notice a caller waiting for everything.
pub(crate) const MIRROR_LINGER_STEP_MS: u64 = 2;
/// How often the mirror's uploader looks again for room to put while every slot it may use is in flight, in
/// milliseconds: a put takes tens of them, so the delay it adds is small, and groups keep joining the segment
/// meanwhile.
pub(crate) const MIRROR_ROOM_STEP_MS: u64 = 1;
/// The most groups a synchronous mirror lets queue (committed locally, not yet in the mirror) before the writer
/// waits for room. A synchronous call's acknowledgement waits for its group, but the writer does not, so this
/// bounds how far the local file runs ahead of the mirror, and what the queue holds; once it is reached, the calls
/// that arrive meanwhile fold into one group again.
pub(crate) const MIRROR_QUEUED_GROUPS_MAX: usize = 64;
/// The largest frame payload (one encoded WAL record), in bytes.
pub(crate) const FRAME_PAYLOAD_BYTES_MAX: usize = 64 * 1024 * 1024;
/// How many WAL records the local log keeps behind the materialised tables when nothing (no mirror) needs more:
/// at least this many and fewer than twice this many, for it is truncated in steps of this many.
pub(crate) const LOG_RECORDS_RETAINED_MAX: u64 = 1024;
/// The most log records one write transaction cuts off the log's head beyond twice the records it appends, once
/// the mirror no longer needs them. A snapshot that lands releases up to a snapshot interval of records at once
/// (`MIRROR_SNAPSHOT_LOG_RECORDS_MAX_DEFAULT`, 100,000); cut in one transaction, they would stall the calls that
/// share it for seconds. Cut in steps, the head catches up within a few hundred transactions, and each one cuts at
/// least twice what it appends, so the log never falls further behind.
pub(crate) const LOG_CUT_RECORDS_PER_COMMIT_MAX: u64 = 1024;
/// Fresh parts (staged parts kept in their stage records alone, see `wal::fresh`) held at most before they are
/// all written to their checkpoints' `parts` rows in one transaction (each checkpoint's are anyway before
/// anything else reads them). Also bounds the writer's index of them.
pub(crate) const FRESH_PARTS_MAX: usize = 4096;
/// Bytes of fresh parts (their `parts` rows' lengths) held at most, with the same effect as [`FRESH_PARTS_MAX`].
pub(crate) const FRESH_PART_BYTES_MAX: u64 = 16 * 1024 * 1024;
/// How far behind the log's end a fresh part's stage record may fall, in records, before its checkpoint is
/// settled: it bounds the log every reader of fresh parts scans (an open's rebuild of the index, `get` of a
/// Staged checkpoint, snapshots), which with a mirror is kept until the next snapshot.
pub(crate) const FRESH_PART_LOG_RECORDS_MAX: u64 = 8192;
/// The most garbage-ledger entries one `ForgetGarbage` record removes (a collection forgets more in several).
pub const GARBAGE_FORGET_ENTRIES_MAX: usize = 4096;
/// The most garbage-ledger entries the data-file collector judges at once (each a stat and maybe a delete).
pub(crate) const COLLECT_CONCURRENT_MAX: usize = 16;
/// The most garbage-ledger entries one read of the ledger returns.
pub const GARBAGE_PAGE_ENTRIES_MAX: usize = 4096;
/// The most keys one page of the processed-key iterator holds in memory.
pub(crate) const KEY_PAGE_KEYS_MAX: usize = 1024;
/// Checkpoints whose attempt sizes (`wal::apply::AttemptSizes`) the writer remembers at most, an entry each (an
/// id and three integers): past it the map starts again empty, and a stage of a forgotten checkpoint sums its
/// parts once more.
pub(crate) const ATTEMPT_SIZES_ENTRIES_MAX: usize = 65_536;
/// The most part numbers an error lists (the first missing parts of a seal, the first extra ones).
pub(crate) const LIST_PREVIEW_MAX: usize = 16;

/// The default grace period of the data-file collector (`gc::CollectSettings::grace_ms`), in milliseconds: a day,
/// like the inbox's ([`INBOX_GRACE_MS_DEFAULT`]). It must exceed any task's time from writing a file to staging it.
pub const DATA_FILE_GRACE_MS_DEFAULT: u64 = 24 * 60 * 60 * 1000;
/// The default grace period of unclaimed inbox entries (`gc::find_inbox_garbage`), in milliseconds (24 hours):
/// far above any task's time from stage to seal.
pub const INBOX_GRACE_MS_DEFAULT: u64 = 24 * 60 * 60 * 1000;
/// The most inbox entries one collection of an inbox looks at; past it the report says `truncated` and a second
/// run takes the rest (the first run deleted what it listed).
pub const INBOX_GC_ENTRIES_MAX: usize = 1_000_000;

/// The longest name of a shared-staging worker, in bytes (it is recorded in every object it writes, for messages).
pub const WORKER_NAME_BYTES_MAX: usize = 256;
/// The most sealed checkpoints a worker handle remembers (an entry each, without their parts): a long-lived
/// worker's memory stays bounded, whatever it seals. A call on an older one is answered by its claim in the object
/// store (a retried `stage_and_seal` finds its own seal there and returns `Ok`).
pub(crate) const WORKER_SEALED_REMEMBERED_MAX: usize = 4096;
/// The highest generation a shared-staging claim reaches: a checkpoint's seal can be released (its adopted
/// checkpoint force-aborted) this many times at most, and a claim that names a higher generation is `Corrupt`.
/// Readers follow a released claim's generations one read each, so this also bounds what one `is_processed` can
/// cost.
pub const CLAIM_GENERATIONS_MAX: u32 = 1_000;
/// The default of how long one shared-staging request to the object store may take before it is abandoned (and,
/// for a put, settled by reading), in milliseconds (`SharedStaging::with_request_timeout_ms` sets another).
pub const SHARED_REQUEST_TIMEOUT_MS: u64 = 30_000;
/// The most object-store requests one committer round of shared staging (or one collection of an inbox) has in
/// flight at once.
pub(crate) const SHARED_CONCURRENT_MAX: usize = 16;
/// The most claim reads, and the most adoptions into the store, one committer round has in flight at once: as
/// many as the seals 64 workers with 4 tasks each make at once, so a round keeps up with them (the store folds the
/// concurrent adoptions into group commits of up to `GROUP_COMMIT_CALLS_MAX`).
pub(crate) const ADOPT_IN_FLIGHT_MAX: usize = 256;
/// The most inbox entries, and the most claims not known yet, one committer round takes on (the rest wait for
/// the next round): bounds a round's memory and time however many parts dead workers left behind or seals
/// arrived at once. The claims listing itself is never cut short: known claims are passed over, not kept.
/// (More than this many parts of dead, never sealed attempts would starve newer ones, for the listing order is
/// by hash: collecting them is `sinkpoint gc --shared`, `gc::find_inbox_garbage`.)
pub(crate) const SHARED_ROUND_ENTRIES_MAX: usize = 100_000;
/// The most checkpoint ids one [`crate::shared::Inbox::adopt_expected`] round takes (a caller with more splits
/// them into rounds): bounds the round's memory and time, as the entries limit bounds a listing round's.
pub const ADOPT_EXPECTED_IDS_MAX: usize = 100_000;
/// The most objects one bulk delete request carries (S3's `DeleteObjects` limit; object_store batches by it).
pub(crate) const DELETE_BATCH_OBJECTS_MAX: usize = 1_000;
/// The objects one list request returns at most (S3's page; object_store's S3 listing pages by it): what a
/// listing's request count is reckoned by.
pub(crate) const LIST_PAGE_OBJECTS_MAX: u64 = 1_000;

/// The default size of redb's page cache, in bytes (redb's own default is 1 GiB).
pub const STORE_CACHE_BYTES_DEFAULT: usize = 64 * 1024 * 1024;
/// The smallest page cache a store accepts, in bytes.
pub const STORE_CACHE_BYTES_MIN: usize = 1024 * 1024;

// A stage call at its limits must fit one frame, with room for the record's own fields.
const _: () = assert!(STAGE_BYTES_MAX + 1024 * 1024 <= FRAME_PAYLOAD_BYTES_MAX);
const _: () = assert!(STAGE_KEYS_MAX * SOURCE_KEY_BYTES_MAX / 4 <= STAGE_BYTES_MAX * 4);
const _: () = assert!(WRITE_RESULT_BYTES_MAX <= STAGE_BYTES_MAX);
const _: () = assert!(COMMIT_CHECKPOINTS_MAX * CHECKPOINT_ID_BYTES_MAX <= FRAME_PAYLOAD_BYTES_MAX);
const _: () = assert!(GROUP_COMMIT_CALLS_MAX <= WRITER_QUEUE_CALLS_MAX);
// One stage call at its limit, with its encoding (a few bytes per key and result), fits an empty attempt; and a
// checkpoint stays far below what one commit may carry.
const _: () = assert!(STAGE_BYTES_MAX as u64 + 1024 * 1024 <= CHECKPOINT_BYTES_MAX);
const _: () = assert!(16 * CHECKPOINT_BYTES_MAX <= (COMMIT_RESULTS_MAX * WRITE_RESULT_BYTES_MAX) as u64);
// Stage calls refuse parts at or past SEAL_PARTS_MAX, so a checkpoint's result count always fits its u32.
const _: () = assert!((SEAL_PARTS_MAX as u64) * (STAGE_RESULTS_MAX as u64) <= u32::MAX as u64);

/// The most WAL slots one writer has in flight: it puts slot `s` only once every slot below
/// `s + 1 - MIRROR_SLOTS_IN_FLIGHT_MAX` landed (acknowledging them in slot order), so a 20 ms object store does
/// not serialise a job whose calls each wait for their own put. **Part of the mirror's format**: a writer that
/// stopped can leave present slots up to `MIRROR_SLOTS_IN_FLIGHT_MAX - 1` past the first absent one (a torn tail,
/// never acknowledged), and a takeover's first slots may meet them as voids; readers accept exactly that much
/// (docs/protocols/mirror.md, "Several puts in flight"). Raising it is a format change.
pub const MIRROR_SLOTS_IN_FLIGHT_MAX: u64 = 4;
const _: () = assert!(MIRROR_SLOTS_IN_FLIGHT_MAX >= 1);
/// The most slots a takeover tries while racing an older writer for the fence slot, before it gives up.
pub(crate) const MIRROR_FENCE_ATTEMPTS_MAX: u32 = 1024;
/// The most epochs a writer tries to claim (each lost race to a concurrent claim moves to the next).
pub(crate) const MIRROR_CLAIM_ATTEMPTS_MAX: u32 = 64;
/// The most times one mirror put is resolved (read back, re-put) after an ambiguous failure before the writer
/// gives up and poisons the store.
pub(crate) const MIRROR_PUT_ATTEMPTS_MAX: u32 = 5;
/// The most times one conditional create of shared staging (a claim, a seal) is put after ambiguous answers
/// before the caller is told it could not be settled (a transient error: the call is idempotent).
pub(crate) const SHARED_CREATE_ATTEMPTS_MAX: u32 = 5;
/// The pause before the second put of a conditional create not settled yet, in milliseconds; each later put waits
/// this much longer again (the object store's own client retries with backoff within each put).
pub(crate) const CREATE_RETRY_PAUSE_STEP_MS: u64 = 10;
/// The most bytes of frames in one segment: when a takeover re-ships a local tail the mirror lacks, and when
/// the uploader folds the groups queued behind a put into the next one.
pub(crate) const MIRROR_TAIL_SEGMENT_BYTES_MAX: usize = 64 * 1024 * 1024;
/// The largest mirror object a reader accepts, in bytes (a single S3 PUT is at most 5 GiB).
pub(crate) const MIRROR_OBJECT_BYTES_MAX: u64 = 5 * 1024 * 1024 * 1024;
/// The most mirror objects one reader fetches at once (a restore reading the log's slots): enough to hide an
/// object store's round trip behind the others, few enough to stay a polite client.
pub(crate) const MIRROR_READS_CONCURRENT_MAX: usize = 16;
/// The most prefixes below a mirror's URL a reader looks into for a manifest when the URL itself holds none (to
/// name the job's mirror one level down in its message).
pub(crate) const MIRROR_HINT_PREFIXES_MAX: usize = 8;
/// The most bytes of segments (by the listing's sizes) one reader fetches at once while reading the log: with
/// [`MIRROR_READS_CONCURRENT_MAX`] it bounds a restore's memory, whatever the log's length. A single larger
/// segment is still read, alone.
pub(crate) const MIRROR_READ_WINDOW_BYTES_MAX: u64 = 256 * 1024 * 1024;
/// The default of `MirrorSettings::snapshot_interval_bytes`: a snapshot after this many bytes of frames shipped
/// since the last one, so that what a restore replays stays about one read window long.
pub const MIRROR_SNAPSHOT_INTERVAL_BYTES_DEFAULT: u64 = 256 * 1024 * 1024;
/// The default of `MirrorSettings::snapshot_log_ratio_percent`: the next snapshot once the log since the last one
/// is as long as that snapshot (in records against its entries, or in bytes), so the snapshots written over a job
/// come to at most about the log's own size, and a restore replays at most about one snapshot's worth of log.
pub const MIRROR_SNAPSHOT_LOG_RATIO_PERCENT_DEFAULT: u32 = 100;
/// The default of `MirrorSettings::snapshot_log_records_max`: an open then reads, and a restore replays, at most
/// about this many records past the newest snapshot, and a store of four million rows (a million one-key
/// checkpoints) pays about 40 snapshot entries a record, where a fixed 10,000-record interval pays 400.
pub const MIRROR_SNAPSHOT_LOG_RECORDS_MAX_DEFAULT: u64 = 100_000;
/// The largest `MirrorSettings::snapshot_log_ratio_percent`: a log up to 100 times the state would make a
/// restore replay far more than it loads.
pub const MIRROR_SNAPSHOT_LOG_RATIO_PERCENT_MAX: u64 = 10_000;
/// The largest object of a snapshot the writer puts, in bytes: a larger snapshot is put in several chunks, so the
/// writer holds one chunk at a time and never puts an object a reader refuses.
pub(crate) const MIRROR_SNAPSHOT_CHUNK_BYTES_MAX: u64 = 256 * 1024 * 1024;
// Any snapshot entry (one table value: at most one stage call's keys and results) fits one chunk, and a chunk
// fits what a reader accepts.
const _: () = assert!(2 * FRAME_PAYLOAD_BYTES_MAX as u64 <= MIRROR_SNAPSHOT_CHUNK_BYTES_MAX);
const _: () = assert!(MIRROR_SNAPSHOT_CHUNK_BYTES_MAX <= MIRROR_OBJECT_BYTES_MAX);
/// The most frames one segment may hold.
pub(crate) const MIRROR_SEGMENT_FRAMES_MAX: u32 = 1 << 24;
/// The most epoch openings a manifest remembers; a local store older than the oldest cannot be reconciled.
pub(crate) const MIRROR_HISTORY_EPOCHS_MAX: usize = 4096;
const _: () = assert!(STORE_CACHE_BYTES_MIN <= STORE_CACHE_BYTES_DEFAULT);
/// The largest store file an [`crate::inspect::Inspector`] repairs in memory, in bytes: a file a crashed job left
/// unclean needs redb's repair, which the inspector makes on a copy in memory so the file itself is never
/// written. A larger one is refused with the advice to inspect the mirror (or let the job reopen it) instead.
pub(crate) const INSPECT_REPAIR_BYTES_MAX: u64 = 1024 * 1024 * 1024;
/// How many copies an [`crate::inspect::Inspector`] takes of a store file a running job holds before it reports
/// the damage it found in each (a copy read while the job commits may be torn; the next one is not, unless the
/// file is damaged).
pub(crate) const INSPECT_LIVE_COPY_ATTEMPTS_MAX: u32 = 3;
/// How many of the newest operator records (see [`crate::inspect::Inspector::operator_records`]) a mirror's
/// restore into memory keeps while it replays the log: enough for every hatch of an incident, bounded whatever
/// the log holds.
pub(crate) const INSPECT_OPERATOR_RECORDS_MAX: usize = 256;
