//! The committer: drives pending checkpoints into a [`Target`] under strictly sequential commit keys, and
//! recovers every in-flight key after a crash. It holds no state of its own: everything it decides from is in
//! the store, so a crash at any point leaves nothing the next run cannot see.

use std::sync::Arc;

use crate::commit::{CommitOutcome, ProbeOutcome, Target, TargetCommit};
use crate::error::{Error, ErrorKind, Result};
use crate::store::Store;
use crate::types::{CheckpointId, CommitKey, WriteResult};
use crate::wal::tables::CommitValue;

/// The protocol's named crash points, in the order a commit passes them.
pub mod crash_points {
    /// The intent (Committing, key n) is durable; the target has not been called.
    pub const AFTER_BEGIN_COMMIT: &str = "after-begin-commit";
    /// The target commit landed; the checkpoints are not yet marked committed (F1).
    pub const AFTER_TARGET_COMMIT_BEFORE_MARK: &str = "after-target-commit-before-mark";
    /// The target's answer was unknown and the key was marked CommitUnknown; no probe has run yet (U).
    pub const AFTER_MARK_UNKNOWN: &str = "after-mark-unknown";
    /// Every name above, for runners that visit them all.
    pub const ALL: [&str; 3] = [AFTER_BEGIN_COMMIT, AFTER_TARGET_COMMIT_BEFORE_MARK, AFTER_MARK_UNKNOWN];
}

/// Called at each named crash point; returning `true` stops the committer there with an error of kind
/// [`crate::ErrorKind::Poisoned`], as if the process had died (the caller then drops the store and reopens).
/// A process-level test may simply exit inside the hook.
pub type CrashHook = Arc<dyn Fn(&'static str) -> bool + Send + Sync>;

/// Why a job cannot finish yet.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Blocked {
    /// Commit key `key`'s outcome is unknown and a probe could not tell; it is re-probed on the next run.
    Unknown {
        /// The key.
        key: u64,
        /// What the target said.
        reason: String,
    },
    /// The target holds a commit under `key` with another set of checkpoints: an operator must look.
    Mismatch {
        /// The key.
        key: u64,
        /// The set the store recorded.
        recorded: Vec<CheckpointId>,
        /// The set the target holds.
        landed: Vec<CheckpointId>,
    },
}

/// What [`Committer::commit_pending`] did.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct CommitReport {
    /// The keys committed (including an in-flight key resolved first).
    pub committed_keys: Vec<u64>,
    /// The checkpoints without results marked committed without a target commit.
    pub committed_empty: usize,
}

/// What [`Committer::recover`] found and did.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct RecoveryReport {
    /// Checkpoints Staged by an older epoch: the caller seals complete ones, restarts or aborts the rest.
    pub orphans: Vec<CheckpointId>,
    /// F1: a key found landed with the recorded set, only marked committed.
    pub marked_landed: Option<u64>,
    /// F2: a key found not landed, re-committed under the same key.
    pub recommitted: Option<u64>,
    /// Keys begun for checkpoints that were Sealed at the crash.
    pub committed_keys: Vec<u64>,
    /// Why the job cannot finish yet, if it cannot.
    pub blocked: Option<Blocked>,
    /// Whether the job's final commit has landed: a rerun may skip scanning and writing entirely.
    pub finished: bool,
}

/// How one send of a recorded key ended, when it did not fail.
enum Sent {
    /// It landed, and its outcome is marked (committed).
    Marked,
    /// It was refused because an earlier send of the same intent landed first (a zombie of an older epoch sent
    /// it): the key is marked committed, as F1.
    EarlierLanded,
    /// The outcome was unknown, and the probe after it proved the send did not land (the error says so).
    ProvenNotLanded(Error),
}

/// Which send of a recorded key landed, once its outcome is marked committed.
enum Landed {
    /// This one.
    ThisSend,
    /// An earlier send of the same intent (an older epoch's): F1.
    EarlierSend,
}

/// Who may have sent a recorded key before a send, which decides what a refusal of that send means when a probe
/// then finds the key in the table.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum SentBefore {
    /// Nobody: this call began the key, and its first send was refused. A commit under the key is another
    /// writer's: the store is not the job's only driver.
    Nobody,
    /// The intent was recorded before this call, and every send of it that could still land carries its ids: an
    /// earlier epoch of this store (a zombie paused after its intent, whose commit lands after our probe). A
    /// commit of the recorded ids is that send's (F1); another set is a mismatch.
    ThisIntent,
    /// An earlier send of this handle may still land (an operator's verdict re-commits without a probe): the
    /// refusal stands, and the probe that follows decides.
    Unproven,
}

enum InFlight {
    None,
    Landed(u64),
    Recommitted(u64),
    Blocked(Blocked),
}

/// Drives one store's pending checkpoints into one target.
pub struct Committer<'a> {
    store: &'a Store,
    target: &'a dyn Target,
    crash: Option<CrashHook>,
}

impl<'a> Committer<'a> {
    /// A committer for `store` and `target`.
    pub fn new(store: &'a Store, target: &'a dyn Target) -> Self {
        Self { store, target, crash: None }
    }

    /// Installs a crash hook, called at every named crash point (tests and the quick-start job's crash flags).
    pub fn with_crash_hook(mut self, hook: CrashHook) -> Self {
        self.crash = Some(hook);
        self
    }

    fn crash_point(&self, name: &'static str) -> Result<()> {
        match &self.crash {
            Some(hook) if hook(name) => Err(Error::poisoned(format!("stopped at crash point {name}"))),
            _ => Ok(()),
        }
    }

    fn key(&self, n: u64) -> CommitKey {
        CommitKey { job: self.store.job().clone(), n }
    }

    /// Recovery after any crash (call it right after opening; calling it again later is harmless): refuses a
    /// fresh store whose job already has commits in the target that the store did not make, resolves the
    /// in-flight key by probing (F1: mark; F2: re-commit under the same key; unknown or mismatch: stay and
    /// report), then commits Sealed checkpoints under the next keys.
    pub async fn recover(&self) -> Result<RecoveryReport> {
        let mut report = RecoveryReport { orphans: self.store.orphans().to_vec(), ..RecoveryReport::default() };
        // Only a new store that has not begun key 0 itself: once it has, the target's key 0 is its own (a job
        // may call recover again on the same handle, after its own commits). Checked here even with nothing
        // Sealed, so a fresh store for a job already in the target is refused before any work.
        if self.store.created() && self.store.commit_info(0)?.is_none() && !self.store.target_checked() {
            self.refuse_key_0_landed().await?;
        }
        match self.resolve_in_flight().await? {
            InFlight::None => {}
            InFlight::Landed(n) => report.marked_landed = Some(n),
            InFlight::Recommitted(n) => report.recommitted = Some(n),
            InFlight::Blocked(blocked) => {
                report.blocked = Some(blocked);
                report.finished = self.store.is_finished()?;
                return Ok(report);
            }
        }
        report.committed_keys = self.commit_sealed(false).await?.committed_keys;
        report.finished = self.store.is_finished()?;
        Ok(report)
    }

    /// Before a store begins key 0 (a new store at `recover`, or key 0 un-bound): a target that already holds
    /// key 0 of the job got it from somewhere else. Starting afresh would duplicate everything, or, on a
    /// watermark target whose probe cannot tell one key 0 from another, mark unlanded results committed.
    async fn refuse_key_0_landed(&self) -> Result<()> {
        let since = self.target.version().await?;
        match self.target.probe(&self.key(0), None).await {
            ProbeOutcome::NotCommitted => {
                self.store.note_target_checked(since);
                Ok(())
            }
            // A newer epoch that took the mirror over explains key 0 too: that is Fenced (stop), not a loss.
            ProbeOutcome::Committed { .. } => {
                Err(self.store.refuse_if_superseded().await.err().unwrap_or_else(|| self.key_0_landed_error()))
            }
            ProbeOutcome::Unknown { reason } => Err(Error::target(format!(
                "before its first commit this store checks that the target does not already hold key {} (another \
                 driver's, or a lost store's); the target could not tell ({reason}). Nothing was begun or written: \
                 retry once the target answers",
                self.key(0)
            ))),
        }
    }

    /// What a store that finds key 0 in the target before it begins it is told: what it most likely is, from
    /// what the store knows of its own history.
    fn key_0_landed_error(&self) -> Error {
        let key = self.key(0);
        if self.store.created() {
            Error::wrong_store(format!(
                "the target already holds commit key {key}, which this new store never began: the job's state was \
                 lost (a deleted file or mirror prefix, a wrong path) or another driver runs the job. Restore the \
                 job's store from its mirror instead of starting afresh, or use a new job id"
            ))
        } else {
            Error::wrong_store(format!(
                "the target holds commit key {key}, which this store holds as not committed (the key was un-bound, \
                 or its first send was refused): another writer's commit, or one this store cannot account for. \
                 Nothing was sent. If the landed commit is this job's, record it with `store.operator().settle_landed` \
                 (the CLI's `settle-landed`); otherwise stop the other driver of this job"
            ))
        }
    }

    /// Commits everything pending: first the in-flight key (probing before any re-commit), then every Sealed
    /// checkpoint under the next keys, none flagged final. Call it as often as the job likes (a periodic commit);
    /// end the job with [`Committer::finish`]. An unknown outcome or a mismatch is an error of kind
    /// [`crate::ErrorKind::Target`] or [`crate::ErrorKind::CommitMismatch`].
    pub async fn commit_pending(&self) -> Result<CommitReport> {
        self.commit_all(false).await
    }

    /// [`Committer::finish`] when `last`, else [`Committer::commit_pending`]: for the suites whose workloads
    /// choose one at random.
    #[cfg(any(test, feature = "testkit"))]
    pub(crate) async fn commit_or_finish(&self, last: bool) -> Result<CommitReport> {
        if last { self.finish().await } else { self.commit_pending().await }
    }

    /// Ends the job: commits everything pending (the last key flagged final, if there is one), then records the
    /// job's end durably if that key did not (no key was left to flag: a periodic commit took every checkpoint,
    /// the checkpoints carried no results, or a crash interrupted an earlier final commit), so that every rerun's
    /// [`Committer::recover`] reports `finished`. Call it once the job has sealed its last checkpoint: a
    /// checkpoint still Staged does not stop it (its keys are not processed, but a rerun that takes the fast path
    /// will not read its input again), so seal, restart or abort orphans first.
    pub async fn finish(&self) -> Result<CommitReport> {
        let report = self.commit_all(true).await?;
        if !self.store.is_finished()? {
            self.store.protocol().mark_finished().await?;
        }
        Ok(report)
    }

    async fn commit_all(&self, final_commit: bool) -> Result<CommitReport> {
        let mut report = CommitReport::default();
        match self.resolve_in_flight().await? {
            InFlight::None => {}
            InFlight::Landed(n) | InFlight::Recommitted(n) => report.committed_keys.push(n),
            InFlight::Blocked(Blocked::Unknown { key, reason }) => {
                return Err(Error::target(format!(
                    "commit key {} has an unknown outcome ({reason}); no later key can begin until a probe answers",
                    self.key(key)
                )));
            }
            InFlight::Blocked(Blocked::Mismatch { key, recorded, landed }) => {
                return Err(mismatch_error(&self.key(key), &recorded, &landed));
            }
        }
        let sealed = self.commit_sealed(final_commit).await?;
        report.committed_keys.extend(sealed.committed_keys);
        report.committed_empty = sealed.committed_empty;
        Ok(report)
    }

    /// Commits the Sealed checkpoints under the next keys, one commit's worth at a time (each page read after
    /// the last is begun, so memory is one commit's ids, not the backlog's).
    async fn commit_sealed(&self, final_commit: bool) -> Result<CommitReport> {
        let mut report = CommitReport::default();
        // Every page moves at least one checkpoint out of Sealed. Bounded by what was Sealed at the start:
        // checkpoints sealed meanwhile by other tasks wait for the next call rather than keep this one going.
        let pages_max = self.store.sealed_count()?.saturating_add(1);
        for _ in 0..pages_max {
            let page = self.store.sealed_page_off_runtime().await?;
            if page.empty.is_empty() && page.batch.is_empty() {
                break;
            }
            if !page.empty.is_empty() {
                self.store.protocol().commit_empty(&page.empty).await?;
                report.committed_empty += page.empty.len();
            }
            if page.batch.is_empty() {
                continue;
            }
            let n = page.next_key;
            self.refuse_target_ahead(n).await?;
            let is_final = final_commit && !page.more;
            // The first key after the probe is prepared against the version before it, so that its key check
            // covers every version since the probe: a key another writer landed in between is refused.
            let version = match self.store.take_probe_baseline() {
                Some(since) => since,
                None => self.target.version().await?,
            };
            self.store.protocol().begin_commit(n, &page.batch, version, is_final).await?;
            self.crash_point(crash_points::AFTER_BEGIN_COMMIT)?;
            // The results bound to the key now, not the ones read before: a checkpoint force-aborted and
            // re-sealed in between must send its sealed attempt.
            let (info, results) = self.store.commit_results(n)?;
            // Never sent before, so a refusal means another writer's commit holds the key.
            self.send(n, &info.ids, &results, is_final, version, SentBefore::Nobody).await?;
            report.committed_keys.push(n);
        }
        Ok(report)
    }

    /// Before the first key `n` this open begins, whether or not `recover` ran first: the target must not hold
    /// it, since after `begin_commit` it is too late to ask (a watermark target's probe cannot tell our `n` from
    /// another's, so a crash after the intent would mark our unlanded results committed). Once it answered, the
    /// key is prepared against the version read before the probe, so that the target's key check covers every
    /// version since; every later key follows this store's own commits. Another writer's key landing is refused
    /// by the target's key exclusivity and caught by [`Self::refuse_foreign_key`], which makes the next begin
    /// probe again. So a job costs one probe an open, not one a key.
    async fn refuse_target_ahead(&self, n: u64) -> Result<()> {
        match (self.store.target_checked(), n) {
            (true, _) => Ok(()),
            (false, 0) => self.refuse_key_0_landed().await,
            (false, _) => self.refuse_stale_state(n).await,
        }
    }

    /// Before key `n` > 0 is begun: a target that already holds `n` proves this store is behind the table (it
    /// was restored from a mirror that went backwards: a replica failover, a bucket rollback, a lost tail).
    /// Beginning `n` would duplicate rows on a watermark target, or end in a mismatch.
    async fn refuse_stale_state(&self, n: u64) -> Result<()> {
        let since = self.target.version().await?;
        match self.target.probe(&self.key(n), None).await {
            ProbeOutcome::NotCommitted => {
                self.store.note_target_checked(since);
                Ok(())
            }
            ProbeOutcome::Committed { .. } => Err(Error::wrong_store(format!(
                "the mirror/store is behind the table: the target already holds commit key {}, which this store \
                 is about to begin; its mirror went backwards (a replica failover, a bucket rollback, a lost \
                 tail). Restore from the mirror that holds the whole history; never go on from this one",
                self.key(n)
            ))),
            ProbeOutcome::Unknown { reason } => Err(Error::target(format!(
                "the target cannot tell whether it holds key {} ({reason}), which this store is about to begin; \
                 retry",
                self.key(n)
            ))),
        }
    }

    /// Key `n`, begun by this call, was refused on its first send (`error`): ours did not land. If the target now
    /// holds a commit under `n`, it is another writer's (this store never sent `n` before): un-bind `n` so no
    /// later probe marks our checkpoints with it, and refuse the store. Otherwise `error` stands.
    async fn refuse_foreign_key(&self, n: u64, error: Error) -> Error {
        if !matches!(self.target.probe(&self.key(n), None).await, ProbeOutcome::Committed { .. }) {
            return error;
        }
        let reason = "another writer's commit holds this key: this store is not the job's only driver";
        if let Err(e) = self.store.operator().unbind(n, reason).await {
            return e;
        }
        tracing::error!(key = n, "another writer's commit holds our key; the key was un-bound");
        Error::wrong_store(format!(
            "the target holds commit key {} from another writer ({error}), and this store had just begun it: two \
             drivers run this job (a second one without a mirror, or a copy of the store). Nothing was marked; \
             its checkpoints are Sealed again. Stop the other driver; go on with the store that wrote the table's \
             key {}",
            self.key(n),
            n
        ))
    }

    /// A re-send of a recorded intent (`SentBefore::ThisIntent`) was refused (`error`). The intent was recorded
    /// before this call, possibly by an older epoch that is still alive: its send of the same intent may land
    /// after our probe and before our re-send. A commit of the recorded ids (or, on a watermark target, any
    /// commit under `n`) is therefore this intent's, and is marked committed (F1); another set is a mismatch.
    async fn settle_refused_resend(
        &self,
        n: u64,
        ids: &[CheckpointId],
        prepared_version: Option<u64>,
        error: Error,
    ) -> Result<Sent> {
        match self.target.probe(&self.key(n), prepared_version).await {
            ProbeOutcome::Committed { ids: Some(landed) } if !same_set(&landed, ids) => {
                tracing::error!(key = n, "commit mismatch: the target holds another set under our key");
                Err(mismatch_error(&self.key(n), ids, &landed))
            }
            ProbeOutcome::Committed { .. } => {
                tracing::warn!(key = n, "an earlier send of this key's intent landed before our re-send");
                self.store.protocol().mark_committed(n).await?;
                Ok(Sent::EarlierLanded)
            }
            ProbeOutcome::NotCommitted | ProbeOutcome::Unknown { .. } => Err(error),
        }
    }

    /// Commits a recorded key, and sends it once more right away when the probe after an unknown outcome
    /// proves it did not land: waiting for the next call would leave a window in which another writer's commit
    /// of the key lands and the next probe takes it for ours. `before` says who may have sent it already, which
    /// decides what a refusal means. Answers which send landed.
    async fn send(
        &self,
        n: u64,
        ids: &[CheckpointId],
        results: &[WriteResult],
        final_commit: bool,
        prepared_version: Option<u64>,
        before: SentBefore,
    ) -> Result<Landed> {
        let sent = match self.commit_once(n, ids, results, final_commit, prepared_version, before).await? {
            Sent::ProvenNotLanded(_) => {
                // The probe proved our own send did not land; whoever else may send this intent still may.
                let before = if before == SentBefore::Unproven { SentBefore::ThisIntent } else { before };
                self.commit_once(n, ids, results, final_commit, prepared_version, before).await?
            }
            sent => sent,
        };
        match sent {
            Sent::Marked => Ok(Landed::ThisSend),
            Sent::EarlierLanded => Ok(Landed::EarlierSend),
            Sent::ProvenNotLanded(error) => Err(error),
        }
    }

    /// One target commit under a recorded key, and the marking of its outcome.
    async fn commit_once(
        &self,
        n: u64,
        ids: &[CheckpointId],
        results: &[WriteResult],
        final_commit: bool,
        prepared_version: Option<u64>,
        before: SentBefore,
    ) -> Result<Sent> {
        let key = self.key(n);
        let commit =
            TargetCommit { key: &key, ids, epoch: self.store.epoch(), results, final_commit, prepared_version };
        match self.target.commit(&commit).await {
            CommitOutcome::Committed => {
                self.crash_point(crash_points::AFTER_TARGET_COMMIT_BEFORE_MARK)?;
                self.store.protocol().mark_committed(n).await.map(|()| Sent::Marked)
            }
            CommitOutcome::NotLanded { reason } => {
                let error = Error::target(format!(
                    "commit key {key} did not land ({reason}); it stays recorded and is probed, then re-committed \
                     under the same key, on the next call"
                ));
                match before {
                    SentBefore::Nobody => Err(self.refuse_foreign_key(n, error).await),
                    SentBefore::ThisIntent => self.settle_refused_resend(n, ids, prepared_version, error).await,
                    SentBefore::Unproven => Err(error),
                }
            }
            CommitOutcome::Unknown { reason } => {
                self.store.protocol().mark_unknown(n, &reason).await?;
                self.crash_point(crash_points::AFTER_MARK_UNKNOWN)?;
                // One probe right away: most unknown outcomes are resolved by it.
                match self.probe_key(n, ids, prepared_version).await? {
                    InFlight::Landed(_) => Ok(Sent::Marked),
                    InFlight::Blocked(Blocked::Mismatch { key, recorded, landed }) => {
                        Err(mismatch_error(&self.key(key), &recorded, &landed))
                    }
                    InFlight::Blocked(Blocked::Unknown { reason: why, .. }) => Err(Error::target(format!(
                        "commit key {key} has an unknown outcome ({reason}; probe: {why}); it is re-probed, never \
                         re-committed blindly"
                    ))),
                    InFlight::None | InFlight::Recommitted(_) => Ok(Sent::ProvenNotLanded(Error::target(format!(
                        "commit key {key} did not land ({reason}); it is re-committed under the same key on the \
                         next call"
                    )))),
                }
            }
        }
    }

    /// Probes key `n`, recorded with `recorded`, and records what the probe proves. Never re-commits.
    async fn probe_key(&self, n: u64, recorded: &[CheckpointId], prepared_version: Option<u64>) -> Result<InFlight> {
        match self.target.probe(&self.key(n), prepared_version).await {
            ProbeOutcome::Committed { ids } => match ids {
                Some(landed) if !same_set(&landed, recorded) => {
                    tracing::error!(key = n, "commit mismatch: the target holds another set under our key");
                    Ok(InFlight::Blocked(Blocked::Mismatch { key: n, recorded: recorded.to_vec(), landed }))
                }
                _ => {
                    self.store.protocol().mark_committed(n).await?;
                    Ok(InFlight::Landed(n))
                }
            },
            ProbeOutcome::NotCommitted => {
                self.store.protocol().mark_not_committed(n).await?;
                Ok(InFlight::None)
            }
            // Recorded, so the key reads as unknown (not merely being committed) and an operator who checks the
            // table can settle it; a later probe that answers still decides first.
            ProbeOutcome::Unknown { reason } => {
                self.store.protocol().mark_unknown(n, &reason).await?;
                Ok(InFlight::Blocked(Blocked::Unknown { key: n, reason }))
            }
        }
    }

    /// Resolves the key in flight, if any: probe first; landed → mark (F1); not landed → re-commit under the
    /// same key (F2); unknown or mismatch → blocked.
    async fn resolve_in_flight(&self) -> Result<InFlight> {
        let Some(n) = self.store.in_flight_key()? else { return Ok(InFlight::None) };
        let (info, results) = self.store.commit_results(n)?;
        if info.awaits_recommit() {
            return self.recommit_on_verdict(n, &info, &results).await;
        }
        match self.probe_key(n, &info.ids, info.target_version).await? {
            InFlight::None => {}
            other => return Ok(other),
        }
        // Not landed when probed: re-commit the retained results under the same key. An older epoch's send of
        // this intent may still land first (a zombie); the refusal's probe then finds it.
        match self.send(n, &info.ids, &results, info.final_commit, info.target_version, SentBefore::ThisIntent).await? {
            Landed::EarlierSend => Ok(InFlight::Landed(n)),
            Landed::ThisSend => Ok(InFlight::Recommitted(n)),
        }
    }

    /// An operator resolved key `n` NotCommitted: re-commit it once without probing first (its probe may never
    /// answer again). If the operator was wrong, key exclusivity makes the target refuse the send; the verdict is
    /// then dropped (back to plain Committing) and the probe decides, as for any refused re-commit.
    async fn recommit_on_verdict(&self, n: u64, info: &CommitValue, results: &[WriteResult]) -> Result<InFlight> {
        let sent = self.send(n, &info.ids, results, info.final_commit, info.target_version, SentBefore::Unproven).await;
        let error = match sent {
            Ok(Landed::EarlierSend) => return Ok(InFlight::Landed(n)),
            Ok(Landed::ThisSend) => return Ok(InFlight::Recommitted(n)),
            Err(e) if e.kind() == ErrorKind::Target => e,
            Err(e) => return Err(e),
        };
        // Only a refused send leaves the verdict standing (an unknown answer already replaced it).
        if !self.store.commit_value(n)?.is_some_and(|c| c.awaits_recommit()) {
            return Err(error);
        }
        self.store.protocol().mark_not_committed(n).await?;
        match self.probe_key(n, &info.ids, info.target_version).await? {
            InFlight::None => Err(error),
            other => Ok(other),
        }
    }
}

fn mismatch_error(key: &CommitKey, recorded: &[CheckpointId], landed: &[CheckpointId]) -> Error {
    Error::mismatch(format!(
        "the target holds commit key {key} with checkpoints {landed:?}, but the store recorded {recorded:?}; \
         nothing was marked: check the table and resolve the key by hand"
    ))
}

/// Whether a probe's landed ids are the recorded set: compared as sets, so a target may return them in any order.
fn same_set(landed: &[CheckpointId], recorded: &[CheckpointId]) -> bool {
    let mut landed: Vec<&CheckpointId> = landed.iter().collect();
    let mut recorded: Vec<&CheckpointId> = recorded.iter().collect();
    landed.sort_unstable();
    recorded.sort_unstable();
    landed == recorded
}

impl std::fmt::Debug for Committer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Committer")
            .field("job", self.store.job())
            .field("target", self.store.target())
            .field("crash_hook", &self.crash.is_some())
            .finish_non_exhaustive()
    }
}
