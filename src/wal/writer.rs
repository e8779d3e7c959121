//! Group commit: one thread owns every write. Concurrent callers queue their records; the thread folds up to
//! [`GROUP_COMMIT_CALLS_MAX`] of them into one redb write transaction and one fsync, validates each in order
//! against the state that includes the calls before it, and acks each caller only after the commit (and, when
//! a mirror is attached, after the mirror took the batch as its mode requires).
//!
//! A failed commit poisons the store: redb may or may not have made the transaction durable, so no later call
//! can be answered truthfully until the store is reopened and recovered.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use redb::{Database, Durability};
use tokio::sync::{mpsc, oneshot};

use crate::error::{Error, Result};
use crate::limits::{
    CHECKPOINT_BYTES_MAX, GROUP_COMMIT_CALLS_MAX, GROUP_COMMIT_LINGER_GAP_US, GROUP_COMMIT_LINGER_MAX_US,
    LOG_CUT_RECORDS_PER_COMMIT_MAX, LOG_RECORDS_RETAINED_MAX, WRITER_QUEUE_CALLS_MAX,
};
use crate::wal::apply::{Applied, Carry, Decided, Placement, Tables};
use crate::wal::record::Record;
use crate::wal::tables::Meta;

/// The receiver of each committed batch's frames: the mirror.
pub(crate) trait Shipper: Send {
    /// Hands the frames of one committed batch (never empty) to the mirror; `meta` is the state after it. Says
    /// which group must be in the mirror before the batch's calls are acked: this one when it is
    /// [`GroupKind::Waited`] (it holds a commit intent or another protocol record that must be there whatever the
    /// mode) or [`GroupKind::Durable`] under a synchronous mirror, none otherwise; and the lowest sequence number
    /// that must stay in the local log (everything below is safely in the mirror's snapshot). It may block for
    /// room under an asynchronous mirror's lag bounds. An error of kind `Fenced` means a newer writer has taken
    /// over.
    ///
    /// The writer does not wait for the group itself: it hands the batch's replies to [`Shipper::when_mirrored`]
    /// and commits the next batch while this one's put is in flight (docs/protocols/mirror.md, "Several puts
    /// in flight").
    fn ship(&mut self, meta: &Meta, frames: Vec<Vec<u8>>, kind: GroupKind) -> Result<Shipped>;

    /// A durable call without frames — a barrier that made unsynced [`GroupKind::Lagging`] groups durable, or a call that
    /// changed nothing (a retried seal) — promises what the groups before it hold: in synchronous mode, the last
    /// group handed over, which must be in the mirror before the call is acked.
    fn settle(&mut self) -> Result<Option<u64>>;

    /// Runs `done` once the group `ticket` is in the mirror (`Ok`), or once the mirror failed (its error), on
    /// whichever thread learns it first — at once if it already did.
    fn when_mirrored(&mut self, ticket: u64, done: Mirrored);
}

/// One call's answer: what each of its records did, or the transition it was refused.
type CallResult = Decided<Vec<Applied>>;

/// What a shipped group's callers wait for before they are acked.
pub(crate) type Mirrored = Box<dyn FnOnce(Result<()>) + Send>;

/// What [`Shipper::ship`] says about a group it took.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Shipped {
    /// The lowest sequence number the local log must keep.
    pub keep_from: u64,
    /// The group (its ticket) that must be in the mirror before the batch is acked, if any.
    pub wait_for: Option<u64>,
}

/// What a committed group promises, which decides who waits for its segment.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum GroupKind {
    /// Holds a record that is in the mirror before it is acked in every mode ([`MirrorWait::Always`]): a commit
    /// intent, or a protocol record but `MarkCommitted`.
    Waited,
    /// Holds a durable call's record of [`MirrorWait::IfSynchronous`]: in the mirror before it is acked in
    /// synchronous mode.
    Durable,
    /// Nobody waits for its segment, and the uploader may hold it briefly to put it with the groups that follow:
    /// committed without an fsync (non-durable staging, a `SealWindow`'s seals: nothing acked depends on them
    /// until a later durable group or barrier), or holding nothing but marks ([`MirrorWait::Never`]).
    Lagging,
}

/// When a record must be in the mirror before its call is acked.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum MirrorWait {
    /// In every mode: a commit intent before the target is called, and the protocol records a caller or an
    /// operator acts on with nothing to re-derive them from.
    Always,
    /// In synchronous mode, when its call is durable: staging, seals, the open's records. These may lag an
    /// asynchronous mirror, since the rerun reads those inputs again.
    IfSynchronous,
    /// Never: `MarkCommitted`, a fact of the table. A lost mark leaves its key `Committing` with the intent in
    /// the mirror, which is the crash point after the target commit and before the mark: recovery probes the key
    /// and marks it again (F1), and the table holds the rows whatever the caller did after the ack. The next
    /// record somebody waits for ships behind the mark, in order.
    Never,
}

/// The one place that says which records wait for the mirror (docs/protocols/mirror.md, "The mark";
/// docs/decisions/0009-mark-never-waited-for.md).
fn mirror_wait(record: &Record) -> MirrorWait {
    match record {
        Record::BeginCommit { .. }
        | Record::MarkUnknown { .. }
        | Record::MarkNotCommitted { .. }
        | Record::Resolve { .. }
        | Record::CommitEmpty { .. }
        | Record::ForceAbort { .. }
        | Record::Unbind { .. }
        | Record::Finish
        | Record::ForgetGarbage { .. } => MirrorWait::Always,
        Record::Create { .. }
        | Record::Open { .. }
        | Record::Stage { .. }
        | Record::Seal { .. }
        | Record::Restart { .. }
        | Record::Abort { .. }
        | Record::Discard { .. } => MirrorWait::IfSynchronous,
        Record::MarkCommitted { .. } => MirrorWait::Never,
    }
}

/// Who waits for a committed batch's group: decided by the calls it holds. A protocol record that applied makes
/// it [`GroupKind::Waited`]. Any other durable call makes it [`GroupKind::Durable`] — a staging or a seal, but
/// also a barrier, a call that changed nothing and a refused call: their answers promise what the batch holds (a
/// `SealWindow` reports every seal answered before a durable answer as landed), so in synchronous mode they must
/// not come before the batch's group is in the mirror. Only a durable call that holds nothing but marks
/// ([`MirrorWait::Never`]) leaves the group [`GroupKind::Lagging`], with the non-durable calls.
fn group_kind(batch: &[Call], results: &[CallResult]) -> GroupKind {
    let waits = |call: &Call, wait: MirrorWait| call.records.iter().any(|r| mirror_wait(r) == wait);
    let marks_only =
        |call: &Call| !call.records.is_empty() && call.records.iter().all(|r| mirror_wait(r) == MirrorWait::Never);
    let calls = || batch.iter().zip(results);
    if calls().any(|(call, result)| matches!(result, Decided::Applied(_)) && waits(call, MirrorWait::Always)) {
        GroupKind::Waited
    } else if calls().any(|(call, _)| call.durability == CallDurability::Immediate && !marks_only(call)) {
        GroupKind::Durable
    } else {
        GroupKind::Lagging
    }
}

/// How durable a call must be before it is acked.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum CallDurability {
    /// fsynced before the ack.
    Immediate,
    /// Acked after the in-memory commit; lost on a crash until a later durable commit.
    None,
}

struct Call {
    /// One record, or several applied in order in one transaction (`Store::stage_and_seal`): the first refused
    /// one ends the call, and its answer is that refusal. None for a durable barrier (`Writer::submit_barrier`).
    records: Vec<Record>,
    durability: CallDurability,
    reply: oneshot::Sender<Result<Decided<Vec<Applied>>>>,
}

/// What the writer has done since the store was opened (see [`crate::Store::stats`]). Cheap to read: a few
/// relaxed atomic loads.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct WriterStats {
    /// Calls handed to the writer (each one WAL record or a refusal).
    pub sent: u64,
    /// Calls the writer has answered.
    pub calls: u64,
    /// Group commits formed: each is one redb write transaction holding up to
    /// [`GROUP_COMMIT_CALLS_MAX`] calls.
    pub batches: u64,
    /// Group commits that wrote something and were committed (one fsync each when durable); a batch of only
    /// refusals and no-ops is aborted instead.
    pub commits: u64,
}

impl WriterStats {
    /// Calls handed to the writer and not yet answered.
    pub fn queued(&self) -> u64 {
        self.sent.saturating_sub(self.calls)
    }
}

#[derive(Default)]
struct Counters {
    sent: AtomicU64,
    calls: AtomicU64,
    batches: AtomicU64,
    commits: AtomicU64,
}

/// State shared by the writer thread and the readers.
#[derive(Default)]
pub(crate) struct Shared {
    /// Why the store refuses everything, and whether it is because it was fenced (sticky either way).
    poisoned: Mutex<Option<(bool, String)>>,
    counters: Counters,
    #[cfg(any(test, feature = "testkit"))]
    hold: hold::Hold,
}

impl Shared {
    pub(crate) fn stats(&self) -> WriterStats {
        let c = &self.counters;
        // A call is counted as sent just after its send returns, so the writer may answer it first: `sent` is
        // never reported below `calls`.
        let calls = c.calls.load(Ordering::Acquire);
        WriterStats {
            sent: c.sent.load(Ordering::Acquire).max(calls),
            calls,
            batches: c.batches.load(Ordering::Acquire),
            commits: c.commits.load(Ordering::Acquire),
        }
    }

    #[cfg(any(test, feature = "testkit"))]
    pub(crate) fn hold(&self) -> &hold::Hold {
        &self.hold
    }

    pub(crate) fn check(&self) -> Result<()> {
        match &*self.poisoned.lock().map_err(|_| Error::bug("poison lock"))? {
            Some((true, reason)) => Err(Error::fenced(reason.clone())),
            Some((false, reason)) => Err(Error::poisoned(reason.clone())),
            None => Ok(()),
        }
    }

    pub(crate) fn poison(&self, reason: String) {
        self.stop(false, reason);
    }

    /// Makes every later call fail with `Fenced`: a newer writer has taken over.
    pub(crate) fn fence(&self, reason: String) {
        self.stop(true, reason);
    }

    fn stop(&self, fenced: bool, reason: String) {
        if let Ok(mut p) = self.poisoned.lock()
            && p.is_none()
        {
            tracing::error!(%reason, fenced, "sinkpoint store stopped");
            *p = Some((fenced, reason));
        }
    }
}

/// A call in the writer thread's queue; awaiting it waits for its group commit (durable for an `Immediate`
/// call, only applied for a `None` one). Dropping it does not withdraw the call: it is applied all the same, and
/// its answer is discarded. It may be awaited by `&mut` (cancel-safe until it is ready) and must not be polled
/// again once it has answered.
pub(crate) struct Submitted {
    rx: oneshot::Receiver<Result<Decided<Vec<Applied>>>>,
}

impl std::future::Future for Submitted {
    /// The answers of the call's records once their group is committed (and fsynced, for an `Immediate` call),
    /// or the refusal that stopped them.
    type Output = Result<Decided<Vec<Applied>>>;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.rx).poll(cx).map(|answer| {
            answer.map_err(|_| Error::poisoned("the writer thread stopped before answering".to_string()))?
        })
    }
}

/// The handle on the writer thread.
pub(crate) struct Writer {
    tx: Option<mpsc::Sender<Call>>,
    thread: Option<JoinHandle<()>>,
    shared: Arc<Shared>,
}

impl Writer {
    pub(crate) fn start(
        db: Arc<Database>,
        meta: Meta,
        shared: Arc<Shared>,
        shipper: Option<Box<dyn Shipper>>,
    ) -> Result<Self> {
        let (tx, rx) = mpsc::channel(WRITER_QUEUE_CALLS_MAX);
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("sinkpoint-writer".into())
            .spawn(move || run(&db, meta, &thread_shared, shipper, rx))?;
        Ok(Self { tx: Some(tx), thread: Some(thread), shared })
    }

    /// Queues records applied in order in one transaction, and waits for their group commit: the answers of
    /// all, or the refusal that stopped them (the records before it are applied).
    pub(crate) async fn call(&self, records: Vec<Record>, durability: CallDurability) -> Result<Decided<Vec<Applied>>> {
        self.submit(records, durability).await?.await
    }

    /// Queues records as [`Writer::call`] does, but returns as soon as the writer thread's queue holds them (it
    /// waits only for room in the queue): the group commit goes on while the caller does other work, and
    /// awaiting the [`Submitted`] waits for it. Calls are applied in the order they were queued.
    pub(crate) async fn submit(&self, records: Vec<Record>, durability: CallDurability) -> Result<Submitted> {
        if records.is_empty() {
            return Err(Error::bug("a writer call without records"));
        }
        self.send(records, durability).await
    }

    /// Queues a durable barrier: a call without records whose group commit is made durable if anything before
    /// it is not yet (one fsync), and costs nothing otherwise. Its answer is an empty list of answers.
    pub(crate) async fn submit_barrier(&self) -> Result<Submitted> {
        self.send(Vec::new(), CallDurability::Immediate).await
    }

    async fn send(&self, records: Vec<Record>, durability: CallDurability) -> Result<Submitted> {
        let (reply, rx) = oneshot::channel();
        let tx = self.tx.as_ref().ok_or_else(|| Error::bug("writer already closed"))?;
        tx.send(Call { records, durability, reply })
            .await
            .map_err(|_| Error::poisoned("the writer thread has stopped".to_string()))?;
        self.shared.counters.sent.fetch_add(1, Ordering::AcqRel);
        Ok(Submitted { rx })
    }

    /// Stops the thread after the queued calls and waits for it.
    pub(crate) fn close(&mut self) {
        self.tx = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Writer {
    /// Outside a runtime, joins the writer as `close` does. Inside one, detaches it instead: joining could hold
    /// a runtime thread for minutes behind a slow mirror put. The detached writer still finishes the calls
    /// already queued and the uploads already handed over; every acknowledged call is already durable in the
    /// local file, but an asynchronous-mode group still uploading when the process exits is only local (the
    /// next open ships it). Until it finishes, reopening the file is `ErrorKind::AlreadyOpen`.
    fn drop(&mut self) {
        if tokio::runtime::Handle::try_current().is_ok() {
            self.tx = None;
            drop(self.thread.take());
        } else {
            self.close();
        }
    }
}

fn run(
    db: &Database,
    meta: Meta,
    shared: &Shared,
    mut shipper: Option<Box<dyn Shipper>>,
    mut rx: mpsc::Receiver<Call>,
) {
    let mut batch: Vec<Call> = Vec::with_capacity(GROUP_COMMIT_CALLS_MAX);
    let mut carried = Carried { meta, unsynced: false, keep_from: 0, carry: Carry::default() };
    // The size of the last group commit: the callers it answered, which may be about to call again.
    let mut last_batch = 0usize;
    while let Some(first) = rx.blocking_recv() {
        batch.push(first);
        // A test may hold the writer here, so that the calls it fires meanwhile all land in the next batch.
        #[cfg(any(test, feature = "testkit"))]
        shared.hold().wait();
        while batch.len() < GROUP_COMMIT_CALLS_MAX {
            match rx.try_recv() {
                Ok(call) => batch.push(call),
                Err(_) => break,
            }
        }
        linger(&mut rx, &mut batch, last_batch);
        last_batch = batch.len();
        shared.counters.batches.fetch_add(1, Ordering::AcqRel);
        let results = match shared.check() {
            Err(e) => Err(e),
            Ok(()) => commit_batch(db, &mut carried, &batch, shipper.as_deref_mut(), shared),
        };
        // Counted before the replies, so that a caller who has its answer sees its call counted.
        shared.counters.calls.fetch_add(batch.len() as u64, Ordering::AcqRel);
        match results {
            Ok((results, Some(ticket))) => {
                let replies: Vec<_> = batch.drain(..).map(|call| call.reply).zip(results).collect();
                let done: Mirrored = Box::new(move |mirrored: Result<()>| {
                    for (reply, result) in replies {
                        let _ = reply.send(mirrored.clone().map(|()| result));
                    }
                });
                match shipper.as_deref_mut() {
                    Some(shipper) => shipper.when_mirrored(ticket, done),
                    None => done(Err(Error::bug("a group to wait for without a mirror"))),
                }
            }
            Ok((results, None)) => {
                for (call, result) in batch.drain(..).zip(results) {
                    let _ = call.reply.send(Ok(result));
                }
            }
            Err(e) => {
                let fenced = e.kind() == crate::ErrorKind::Fenced;
                if fenced {
                    shared.fence(e.message());
                } else {
                    shared.poison(e.message());
                }
                for call in batch.drain(..) {
                    let _ = call.reply.send(Err(shared.check().err().unwrap_or_else(|| Error::bug("not stopped"))));
                }
            }
        }
    }
}

/// Before a durable group commit, waits a little for the callers the last one answered to call again, so that
/// concurrent callers share one fsync instead of splitting into two cohorts that alternate (each answered
/// cohort's next calls arrive while the other's commit runs, so every commit held about half of them: 16–17
/// calls with 32 stagers). It waits only when the batch holds a durable call and the last commit answered more
/// than one call (a lone caller never waits), until `last_batch` more calls came, none came for
/// [`GROUP_COMMIT_LINGER_GAP_US`], or [`GROUP_COMMIT_LINGER_MAX_US`] passed.
#[expect(
    clippy::disallowed_methods,
    reason = "a wait of microseconds that only shapes batches: no state, answer or test outcome depends on the time"
)]
fn linger(rx: &mut mpsc::Receiver<Call>, batch: &mut Vec<Call>, last_batch: usize) {
    let durable = batch.iter().any(|c| c.durability == CallDurability::Immediate);
    if !durable || last_batch <= 1 {
        return;
    }
    let target = (batch.len() + last_batch).min(GROUP_COMMIT_CALLS_MAX);
    let start = Instant::now();
    let mut last_arrival = start;
    while batch.len() < target {
        match rx.try_recv() {
            Ok(call) => {
                batch.push(call);
                last_arrival = Instant::now();
            }
            Err(mpsc::error::TryRecvError::Disconnected) => return,
            Err(mpsc::error::TryRecvError::Empty) => {
                let now = Instant::now();
                let idle = now.duration_since(last_arrival) > Duration::from_micros(GROUP_COMMIT_LINGER_GAP_US);
                if idle || now.duration_since(start) > Duration::from_micros(GROUP_COMMIT_LINGER_MAX_US) {
                    return;
                }
                // The callers run on the runtime's threads, on the same two cores: let them.
                std::thread::yield_now();
            }
        }
    }
}

/// What the writer thread carries from one transaction to the next.
struct Carried {
    meta: Meta,
    /// Whether a non-durable commit has happened since the last durable one: a durable no-op call must then
    /// still fsync, or it would ack state that a crash can lose.
    unsynced: bool,
    /// The lowest sequence number the mirror still needs in the local log, as the shipper last said.
    keep_from: u64,
    /// The caches of the tables (attempt sizes, fresh parts) the last committed transaction left.
    carry: Carry,
}

/// Where a transaction that appended `appended` records cuts the log's head under a mirror: at `keep_from`, the
/// lowest record the mirror still needs, but at most `LOG_CUT_RECORDS_PER_COMMIT_MAX` records (or twice
/// `appended`, if more) past `log_start`, so a landed snapshot's release is spread over the next transactions.
fn mirror_cut(log_start: u64, keep_from: u64, appended: u64) -> u64 {
    let step = LOG_CUT_RECORDS_PER_COMMIT_MAX.max(appended.saturating_mul(2));
    keep_from.min(log_start.saturating_add(step)).max(log_start)
}

fn commit_batch(
    db: &Database,
    carried: &mut Carried,
    batch: &[Call],
    shipper: Option<&mut (dyn Shipper + '_)>,
    shared: &Shared,
) -> Result<(Vec<CallResult>, Option<u64>)> {
    let Carried { meta, unsynced, keep_from, carry } = carried;
    let mut next = meta.clone();
    let mut txn = db.begin_write()?;
    let durable = batch.iter().any(|c| c.durability == CallDurability::Immediate);
    txn.set_durability(if durable { Durability::Immediate } else { Durability::None })?;
    let mut frames = Vec::new();
    let mut results = Vec::with_capacity(batch.len());
    // Taken out for the transaction, so that a failure leaves the writer none (its entries are not rolled back).
    let updated = {
        let mut tables = Tables::open_with(&txn, std::mem::take(carry))?;
        for call in batch {
            let mut applied = Vec::with_capacity(call.records.len());
            let mut refused = None;
            for (i, record) in call.records.iter().enumerate() {
                let placement = Placement::of(record, call.records.get(i + 1));
                match tables.execute_placed(&mut next, record, placement, &mut frames, CHECKPOINT_BYTES_MAX)? {
                    Decided::Applied(a) => applied.push(a),
                    Decided::Refused(t) => {
                        refused = Some(t);
                        break;
                    }
                }
            }
            results.push(refused.map_or(Decided::Applied(applied), Decided::Refused));
        }
        if !frames.is_empty() {
            // Without a mirror the log is cut in steps of LOG_RECORDS_RETAINED_MAX records, once it holds twice that:
            // cutting a record or two off its head in every batch would dirty (write and fsync) the log's first
            // pages as well as its last in nearly every commit. With a mirror, the shipper says what it still needs,
            // and the head is cut in steps (LOG_CUT_RECORDS_PER_COMMIT_MAX): a landed snapshot releases many records.
            match shipper {
                None if next.next_seq.saturating_sub(next.log_start) >= 2 * LOG_RECORDS_RETAINED_MAX => {
                    let keep = next.next_seq - LOG_RECORDS_RETAINED_MAX;
                    tables.truncate_log(&mut next, keep)?;
                }
                None => {}
                Some(_) => {
                    let keep = mirror_cut(next.log_start, *keep_from, frames.len() as u64);
                    tables.truncate_log(&mut next, keep)?;
                }
            }
            // A transaction that only appended records leaves the stored meta as it is: the log's last frame says
            // the next seq (`tables::read_meta`), so a stage call writes one b-tree fewer.
            if next.must_overwrite(meta) {
                tables.write_meta(&next)?;
            }
        }
        tables.into_carry()
    };
    if frames.is_empty() && !(durable && *unsynced) {
        // Nothing to write (every call was rejected or a no-op) and nothing unsynced to make durable.
        txn.abort()?;
        *carry = updated.after_abort();
    } else {
        txn.commit()?;
        *carry = updated;
        shared.counters.commits.fetch_add(1, Ordering::AcqRel);
        *unsynced = !durable;
        *meta = next;
    }
    let Some(shipper) = shipper else { return Ok((results, None)) };
    if frames.is_empty() {
        // A durable batch without a group of its own — a barrier behind unsynced groups, or a call that changed
        // nothing (a retried seal) — promises what the groups before it hold, whose puts may be in flight: under a
        // synchronous mirror it is acked once every group handed over is in the mirror.
        return Ok((results, if durable { shipper.settle()? } else { None }));
    }
    let shipped = shipper.ship(meta, frames, group_kind(batch, &results))?;
    *keep_from = shipped.keep_from;
    Ok((results, shipped.wait_for))
}

#[cfg(any(test, feature = "testkit"))]
pub(crate) mod hold {
    //! A test-only gate in front of the writer's next batch (see [`crate::Store::hold_writer`]).

    use std::sync::{Condvar, Mutex};

    #[derive(Default)]
    pub(crate) struct Hold {
        held: Mutex<u32>,
        released: Condvar,
    }

    impl Hold {
        pub(crate) fn acquire(&self) {
            *self.held.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        }

        pub(crate) fn release(&self) {
            let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            *held = held.saturating_sub(1);
            self.released.notify_all();
        }

        /// Blocks the writer thread while any hold is taken.
        pub(crate) fn wait(&self) {
            let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            while *held > 0 {
                held = self.released.wait(held).unwrap_or_else(|e| e.into_inner());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(durability: CallDurability) -> Call {
        let (reply, _) = oneshot::channel();
        Call { records: Vec::new(), durability, reply }
    }

    /// A queue holding `n` calls of `durability`, as if sent while a commit ran.
    fn queued(n: usize, durability: CallDurability) -> mpsc::Receiver<Call> {
        let (tx, rx) = mpsc::channel(WRITER_QUEUE_CALLS_MAX);
        for _ in 0..n {
            tx.try_send(call(durability)).unwrap();
        }
        // Dropped senders would end the wait at once ("disconnected"): keep one alive for the test's length.
        std::mem::forget(tx);
        rx
    }

    fn call_of(records: Vec<Record>, durability: CallDurability) -> Call {
        Call { records, ..call(durability) }
    }

    /// Who waits for a group: an applied protocol record always, any durable call in synchronous mode (a barrier
    /// and a refused call too), a mark never (alone it lags even when fsynced).
    #[test]
    fn a_groups_kind_follows_its_applied_records_and_a_mark_alone_lags() {
        use CallDurability::{Immediate, None as Unsynced};
        let id = crate::types::CheckpointId::new("c").unwrap();
        let mark = || Record::MarkCommitted { key: 0 };
        let seal = || Record::Seal { id: id.clone(), parts: 1 };
        let ok = || -> CallResult { Decided::Applied(Vec::new()) };
        let refused = || -> CallResult { Decided::Refused(crate::error::TransitionError::NotFound { id: id.clone() }) };
        let kind = |calls: Vec<(Vec<Record>, CallDurability, CallResult)>| {
            let (batch, results): (Vec<Call>, Vec<CallResult>) =
                calls.into_iter().map(|(records, durability, result)| (call_of(records, durability), result)).unzip();
            group_kind(&batch, &results)
        };
        assert_eq!(kind(vec![(vec![Record::Finish], Unsynced, ok())]), GroupKind::Waited);
        assert_eq!(
            kind(vec![(vec![mark()], Immediate, ok()), (vec![Record::Finish], Immediate, ok())]),
            GroupKind::Waited
        );
        assert_eq!(kind(vec![(vec![seal()], Immediate, ok())]), GroupKind::Durable);
        assert_eq!(kind(vec![(vec![mark()], Immediate, ok()), (vec![seal()], Immediate, ok())]), GroupKind::Durable);
        assert_eq!(kind(vec![(vec![mark()], Immediate, ok())]), GroupKind::Lagging, "a fsynced mark alone");
        assert_eq!(kind(vec![(vec![seal()], Unsynced, ok())]), GroupKind::Lagging, "a window's seal");
        // A caller waits on each of these answers, and a window reports the unsynced seals before them landed.
        let unsynced = || (vec![seal()], Unsynced, ok());
        assert_eq!(kind(vec![unsynced(), (Vec::new(), Immediate, ok())]), GroupKind::Durable, "a barrier");
        assert_eq!(kind(vec![unsynced(), (vec![seal()], Immediate, refused())]), GroupKind::Durable, "a refused seal");
        assert_eq!(
            kind(vec![(vec![seal()], Immediate, refused()), (vec![mark()], Immediate, ok())]),
            GroupKind::Durable
        );
        assert_eq!(kind(vec![(vec![Record::Finish], Immediate, refused())]), GroupKind::Durable);
        assert_eq!(kind(vec![unsynced(), (vec![mark()], Immediate, ok())]), GroupKind::Lagging, "marks only");
        assert_eq!(kind(vec![(vec![mark()], Immediate, refused())]), GroupKind::Lagging, "a refused mark");
    }

    /// A landed snapshot releases up to a snapshot interval of records; cut in one transaction, they stall the
    /// calls sharing it. The cut goes in steps that outpace the appends, and never past what the mirror still needs.
    #[test]
    fn a_landed_snapshots_release_is_cut_in_steps_that_outpace_the_appends() {
        assert_eq!(mirror_cut(0, 100_000, 1), LOG_CUT_RECORDS_PER_COMMIT_MAX);
        assert_eq!(mirror_cut(7, 500, 1), 500, "within a step: cut to what the mirror needs");
        assert_eq!(mirror_cut(0, 100_000, 10_000), 20_000, "a large transaction cuts twice what it appends");
        assert_eq!(mirror_cut(900, 100, 1), 900, "never moves the head back");
        let (mut log_start, mut next_seq, keep_from) = (0u64, 100_000u64, 100_000u64);
        let mut transactions = 0;
        while log_start < keep_from {
            let appended = 1 + transactions % 50;
            next_seq += appended;
            let cut = mirror_cut(log_start, keep_from, appended);
            assert!(cut - log_start <= LOG_CUT_RECORDS_PER_COMMIT_MAX.max(2 * appended) && cut <= keep_from);
            log_start = cut;
            transactions += 1;
        }
        assert!(transactions <= 100_000 / LOG_CUT_RECORDS_PER_COMMIT_MAX + 1, "{transactions} transactions");
        assert!(next_seq > log_start);
    }

    #[test]
    fn a_lone_caller_and_a_batch_that_will_not_fsync_never_wait() {
        for (durability, last_batch) in [(CallDurability::Immediate, 1), (CallDurability::None, 32)] {
            let mut rx = queued(2, durability);
            let mut batch = vec![call(durability)];
            linger(&mut rx, &mut batch, last_batch);
            assert_eq!((batch.len(), rx.len()), (1, 2), "{durability:?} after a batch of {last_batch}");
        }
    }

    #[test]
    fn a_durable_batch_waits_for_as_many_calls_as_the_last_commit_answered_and_no_longer() {
        let mut rx = queued(5, CallDurability::Immediate);
        let mut batch = vec![call(CallDurability::Immediate)];
        linger(&mut rx, &mut batch, 3);
        assert_eq!((batch.len(), rx.len()), (4, 2), "three callers came back; the next two wait for the next commit");
        // Nobody calls: the wait ends after the gap, far below a commit's time.
        let mut rx = queued(0, CallDurability::Immediate);
        let mut batch = vec![call(CallDurability::Immediate)];
        #[expect(clippy::disallowed_methods, reason = "bounds the wait of a function that reads the real time")]
        let start = Instant::now();
        linger(&mut rx, &mut batch, 32);
        assert_eq!(batch.len(), 1);
        assert!(start.elapsed() < Duration::from_millis(20), "waited {:?}", start.elapsed());
    }
}
