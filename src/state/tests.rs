//! Proves that the pure [`transition`] function implements every row of the state table in
//! docs/ARCHITECTURE.md, the extra rules of `state.rs` (missing and unexpected parts, key conflicts, seal
//! mismatches, orphan seals, empty commits, marks on wrong keys), and the commit-level rules ([`check_begin`], [`commit_transition`]). Each test is named after the row it covers.

use super::*;
use crate::limits::CHECKPOINT_BYTES_MAX;

const EPOCH: Epoch = 3;

fn id() -> CheckpointId {
    CheckpointId::new("input-0017").unwrap()
}

fn other() -> CheckpointId {
    CheckpointId::new("input-0042").unwrap()
}

fn rec(state: CheckpointState, attempt: u32, parts: u32, results: u32) -> CheckpointRecord {
    CheckpointRecord { state, attempt, epoch: EPOCH, parts, results }
}

fn staged(attempt: u32, results: u32) -> CheckpointRecord {
    rec(CheckpointState::Staged, attempt, 0, results)
}

fn sealed(parts: u32, results: u32) -> CheckpointRecord {
    rec(CheckpointState::Sealed, 1, parts, results)
}

fn stage(attempt: u32, part: u32, existing: PartMatch) -> Event<'static> {
    Event::Stage { attempt, part, existing, bytes: StageBytes { part: 1, attempt: 0, max: CHECKPOINT_BYTES_MAX } }
}

/// A stage of a part of `bytes` into an attempt already holding `attempt_bytes`.
fn stage_sized(attempt: u32, existing: PartMatch, bytes: u64, attempt_bytes: u64) -> Event<'static> {
    let bytes = StageBytes { part: bytes, attempt: attempt_bytes, max: CHECKPOINT_BYTES_MAX };
    Event::Stage { attempt, part: 7, existing, bytes }
}

fn seal(parts: u32, present: &[u32]) -> Event<'_> {
    seal_counted(parts, present, 0)
}

/// A seal whose parts hold `results` write results in all.
fn seal_counted(parts: u32, present: &[u32], results: u32) -> Event<'_> {
    Event::Seal { parts, present, key_conflict: None, results }
}

fn run(current: Option<&CheckpointRecord>, event: &Event<'_>) -> Result<Step, TransitionError> {
    transition(&id(), current, EPOCH, event)
}

/// Asserts a legal no-op: the record is unchanged and nothing else is written.
fn assert_noop(current: &CheckpointRecord, event: &Event<'_>) {
    let step = run(Some(current), event).unwrap();
    assert_eq!(step, Step { next: current.clone(), effect: Effect::None }, "{event:?} on {current:?}");
}

/// Every event, with facts that would make it legal on a suitable state (the part is new, all parts present).
fn every_event(present: &[u32]) -> Vec<Event<'_>> {
    vec![
        stage(1, 0, PartMatch::Absent),
        stage(1, 0, PartMatch::Same),
        stage(1, 0, PartMatch::Different),
        stage(1, 0, PartMatch::Released),
        seal(2, present),
        Event::Restart,
        Event::Abort,
        Event::ForceAbort,
        Event::BeginCommit { key: 5 },
        Event::CommitEmpty,
        Event::MarkCommitted { key: 5 },
        Event::MarkUnknown { key: 5 },
        Event::MarkNotCommitted { key: 5 },
        Event::Unbind { key: 5 },
    ]
}

fn every_state() -> Vec<CheckpointState> {
    use CheckpointState as S;
    vec![
        S::Staged,
        S::Sealed,
        S::Committing { key: 5 },
        S::CommitUnknown { key: 5 },
        S::Committed { key: Some(5) },
        S::Committed { key: None },
        S::Aborted,
    ]
}

// Row: absent | stage | Staged, attempt 0.

#[test]
fn absent_stage_gives_staged_attempt_0() {
    let step = run(None, &stage(0, 4, PartMatch::Absent)).unwrap();
    // No running count: a Staged checkpoint's results are counted by whoever reads them, and at the seal.
    assert_eq!(
        step.next,
        CheckpointRecord { state: CheckpointState::Staged, attempt: 0, epoch: EPOCH, parts: 0, results: 0 }
    );
    assert_eq!(step.effect, Effect::InsertPart);
}

#[test]
fn absent_stage_of_a_later_attempt_is_attempt_ahead() {
    let err = run(None, &stage(2, 0, PartMatch::Absent)).unwrap_err();
    assert_eq!(err, TransitionError::AttemptAhead { id: id(), offered: 2, current: 0 });
}

#[test]
fn absent_anything_but_stage_is_not_found() {
    for event in every_event(&[0, 1]).iter().filter(|e| !matches!(e, Event::Stage { .. })) {
        assert_eq!(run(None, event).unwrap_err(), TransitionError::NotFound { id: id() }, "{event:?}");
    }
}

// Row: Staged | stage (current attempt) | Staged; same part + same bytes = no-op, different bytes = conflict.

#[test]
fn staged_stage_of_a_new_part_adds_it_and_leaves_the_record_as_it_is() {
    // The record is not rewritten (docs/FORMATS.md, "Fresh parts"): a count left by store format 1 stays until the
    // seal counts the parts.
    let step = run(Some(&staged(1, 3)), &stage(1, 2, PartMatch::Absent)).unwrap();
    assert_eq!(step.next, staged(1, 3));
    assert_eq!(step.effect, Effect::InsertPart);
}

// Row: Staged / absent | stage of a new part past CHECKPOINT_BYTES_MAX | CheckpointTooLarge, nothing written.

#[test]
fn staged_stage_of_a_new_part_up_to_the_byte_limit_is_accepted() {
    let step = run(Some(&staged(1, 3)), &stage_sized(1, PartMatch::Absent, 10, CHECKPOINT_BYTES_MAX - 10)).unwrap();
    assert_eq!(step, Step { next: staged(1, 3), effect: Effect::InsertPart });
}

#[test]
fn staged_stage_of_a_new_part_past_the_byte_limit_is_checkpoint_too_large() {
    let err = run(Some(&staged(1, 3)), &stage_sized(1, PartMatch::Absent, 11, CHECKPOINT_BYTES_MAX - 10)).unwrap_err();
    let (bytes, limit) = (CHECKPOINT_BYTES_MAX + 1, CHECKPOINT_BYTES_MAX);
    assert_eq!(err, TransitionError::CheckpointTooLarge { id: id(), attempt: 1, bytes, limit });
    assert!(err.to_string().contains("over by 1"), "{err}");
}

#[test]
fn absent_stage_of_a_first_part_past_the_byte_limit_is_checkpoint_too_large() {
    let err = run(None, &stage_sized(0, PartMatch::Absent, CHECKPOINT_BYTES_MAX + 5, 0)).unwrap_err();
    let (bytes, limit) = (CHECKPOINT_BYTES_MAX + 5, CHECKPOINT_BYTES_MAX);
    assert_eq!(err, TransitionError::CheckpointTooLarge { id: id(), attempt: 0, bytes, limit });
}

/// A retried stage call after a lost ack stays a no-op (and a conflict stays a conflict) at the limit: the limit
/// refuses growth only.
#[test]
fn staged_stage_of_a_stored_part_at_the_byte_limit_is_still_a_noop_or_a_conflict() {
    assert_noop(&staged(1, 3), &stage_sized(1, PartMatch::Same, 10, CHECKPOINT_BYTES_MAX));
    let err = run(Some(&staged(1, 3)), &stage_sized(1, PartMatch::Different, 10, CHECKPOINT_BYTES_MAX)).unwrap_err();
    assert!(matches!(err, TransitionError::PartConflict { .. }), "{err}");
}

#[test]
fn staged_stage_of_the_same_part_with_the_same_bytes_is_a_noop() {
    assert_noop(&staged(1, 3), &stage(1, 0, PartMatch::Same));
}

#[test]
fn staged_stage_of_the_same_part_with_other_bytes_is_a_conflict() {
    for existing in [PartMatch::Different, PartMatch::Released] {
        let err = run(Some(&staged(1, 3)), &stage(1, 2, existing)).unwrap_err();
        assert_eq!(err, TransitionError::PartConflict { id: id(), attempt: 1, part: 2 }, "{existing:?}");
    }
}

// Row: Staged | stage (older attempt) | error: that attempt was dropped; nothing written.

#[test]
fn staged_stage_of_an_older_attempt_is_stale() {
    // Even with the same bytes: the dropped attempt's part must not come back.
    for existing in [PartMatch::Absent, PartMatch::Same] {
        let err = run(Some(&staged(3, 0)), &stage(1, 0, existing)).unwrap_err();
        assert_eq!(err, TransitionError::StaleAttempt { id: id(), offered: 1, current: 3 });
    }
}

#[test]
fn staged_stage_of_a_later_attempt_is_ahead() {
    let err = run(Some(&staged(3, 0)), &stage(4, 0, PartMatch::Absent)).unwrap_err();
    assert_eq!(err, TransitionError::AttemptAhead { id: id(), offered: 4, current: 3 });
}

// Row: Staged of an older epoch | stage | error Orphaned until restart or abort; seal of a complete one allowed.

fn orphan(attempt: u32) -> CheckpointRecord {
    CheckpointRecord { epoch: EPOCH - 1, ..staged(attempt, 1) }
}

#[test]
fn staged_of_an_older_epoch_stage_is_orphaned() {
    // Before any attempt check, and even for a retry of the very same part.
    for event in [stage(1, 0, PartMatch::Same), stage(1, 5, PartMatch::Absent), stage(0, 0, PartMatch::Absent)] {
        let err = run(Some(&orphan(1)), &event).unwrap_err();
        assert_eq!(err, TransitionError::Orphaned { id: id(), staged_epoch: EPOCH - 1, epoch: EPOCH }, "{event:?}");
    }
}

#[test]
fn staged_of_an_older_epoch_complete_seal_is_allowed() {
    let step = run(Some(&orphan(1)), &seal_counted(2, &[0, 1], 2)).unwrap();
    assert_eq!(step.next, CheckpointRecord { state: CheckpointState::Sealed, parts: 2, results: 2, ..orphan(1) });
    assert_eq!(step.effect, Effect::ClaimKeys);
}

#[test]
fn staged_of_an_older_epoch_incomplete_seal_names_the_missing_parts() {
    let err = run(Some(&orphan(1)), &seal(3, &[1])).unwrap_err();
    assert_eq!(err, TransitionError::MissingParts { id: id(), attempt: 1, expected: 3, count: 2, first: vec![0, 2] });
}

#[test]
fn staged_of_an_older_epoch_restart_begins_an_attempt_of_this_epoch() {
    let step = run(Some(&orphan(1)), &Event::Restart).unwrap();
    assert_eq!(
        step.next,
        CheckpointRecord { state: CheckpointState::Staged, attempt: 2, epoch: EPOCH, parts: 0, results: 0 }
    );
    assert_eq!(step.effect, Effect::DropParts { attempt: 1 });
    // And the new attempt accepts stage calls again.
    assert!(run(Some(&step.next), &stage(2, 0, PartMatch::Absent)).is_ok());
}

#[test]
fn staged_of_an_older_epoch_abort_is_allowed() {
    let step = run(Some(&orphan(1)), &Event::Abort).unwrap();
    assert_eq!(step.next.state, CheckpointState::Aborted);
    assert_eq!(step.effect, Effect::DropParts { attempt: 1 });
}

// Row: Staged | restart | Staged, next attempt, parts dropped; returns the dropped write results.

#[test]
fn staged_restart_begins_the_next_attempt_and_drops_the_parts() {
    let step = run(Some(&staged(1, 5)), &Event::Restart).unwrap();
    assert_eq!(step.next, staged(2, 0));
    assert_eq!(step.effect, Effect::DropParts { attempt: 1 });
}

// Row: Staged | seal(parts expected) | Sealed if parts 0..n are all there, else an error naming the missing parts.

#[test]
fn staged_seal_with_every_part_gives_sealed_with_the_results_counted_and_claims_the_keys() {
    // The count comes from the parts, not from the Staged record (a format-1 running count, here 9, is ignored).
    let step = run(Some(&staged(1, 9)), &seal_counted(3, &[0, 1, 2], 4)).unwrap();
    assert_eq!(step.next, rec(CheckpointState::Sealed, 1, 3, 4));
    assert_eq!(step.effect, Effect::ClaimKeys);
}

#[test]
fn staged_seal_with_missing_parts_names_them() {
    let err = run(Some(&staged(1, 0)), &seal(4, &[0, 2])).unwrap_err();
    assert_eq!(err, TransitionError::MissingParts { id: id(), attempt: 1, expected: 4, count: 2, first: vec![1, 3] });
    // With nothing staged at all.
    let err = run(Some(&staged(1, 0)), &seal(1, &[])).unwrap_err();
    assert_eq!(err, TransitionError::MissingParts { id: id(), attempt: 1, expected: 1, count: 1, first: vec![0] });
}

#[test]
fn staged_seal_with_many_missing_parts_counts_all_and_lists_the_first_16() {
    let err = run(Some(&staged(0, 0)), &seal(100, &[3])).unwrap_err();
    let first: Vec<u32> = (0..17).filter(|p| *p != 3).collect();
    assert_eq!(err, TransitionError::MissingParts { id: id(), attempt: 0, expected: 100, count: 99, first });
}

#[test]
fn staged_seal_with_unexpected_parts_names_them() {
    let err = run(Some(&staged(1, 0)), &seal(2, &[0, 1, 2, 7])).unwrap_err();
    assert_eq!(err, TransitionError::UnexpectedParts { id: id(), attempt: 1, expected: 2, first: vec![2, 7] });
}

#[test]
fn staged_seal_with_a_key_owned_elsewhere_names_both_ids() {
    let conflict = Some(("s3://in/0017.csv".to_string(), other()));
    let event = Event::Seal { parts: 1, present: &[0], key_conflict: conflict, results: 1 };
    let err = run(Some(&staged(1, 1)), &event).unwrap_err();
    assert_eq!(err, TransitionError::KeyConflict { key: "s3://in/0017.csv".into(), id: id(), owner: other() });
    assert!(err.to_string().contains("input-0017") && err.to_string().contains("input-0042"), "{err}");
}

#[test]
fn staged_seal_reports_missing_parts_before_a_key_conflict() {
    let event = Event::Seal { parts: 2, present: &[0], key_conflict: Some(("k".into(), other())), results: 1 };
    let err = run(Some(&staged(1, 1)), &event).unwrap_err();
    assert!(matches!(err, TransitionError::MissingParts { count: 1, .. }), "{err:?}");
}

// Row: Staged | abort | Aborted; keys not processed; returns the discarded write results.

#[test]
fn staged_abort_gives_aborted_and_drops_the_parts() {
    let step = run(Some(&staged(2, 3)), &Event::Abort).unwrap();
    assert_eq!(step.next, rec(CheckpointState::Aborted, 2, 0, 0));
    assert_eq!(step.effect, Effect::DropParts { attempt: 2 });
    assert!(!step.next.state.keys_processed());
}

// Row: Aborted | restart | Staged, next attempt (an id is never stuck).

#[test]
fn aborted_restart_gives_staged_next_attempt() {
    let aborted = CheckpointRecord { epoch: EPOCH - 2, ..rec(CheckpointState::Aborted, 2, 0, 0) };
    let step = run(Some(&aborted), &Event::Restart).unwrap();
    assert_eq!(step.next, staged(3, 0));
    assert_eq!(step.effect, Effect::DropParts { attempt: 2 });
}

#[test]
fn aborted_abort_is_a_noop() {
    assert_noop(&rec(CheckpointState::Aborted, 2, 0, 0), &Event::Abort);
}

#[test]
fn aborted_stage_and_seal_say_aborted() {
    let aborted = rec(CheckpointState::Aborted, 2, 0, 0);
    for event in [stage(2, 0, PartMatch::Absent), stage(3, 0, PartMatch::Absent), seal(1, &[0])] {
        assert_eq!(run(Some(&aborted), &event).unwrap_err(), TransitionError::Aborted { id: id() }, "{event:?}");
    }
}

#[test]
fn aborted_commit_events_are_refused() {
    let aborted = rec(CheckpointState::Aborted, 2, 0, 0);
    let state = CheckpointState::Aborted;
    for event in [Event::ForceAbort, Event::BeginCommit { key: 0 }, Event::CommitEmpty] {
        assert_eq!(run(Some(&aborted), &event).unwrap_err(), TransitionError::NotSealed { id: id(), state });
    }
    let err = run(Some(&aborted), &Event::MarkCommitted { key: 0 }).unwrap_err();
    assert!(matches!(err, TransitionError::CommitState { key: 0, state: CheckpointState::Aborted, .. }), "{err:?}");
}

// Row: Sealed, Committing, CommitUnknown, Committed | stage | error AlreadySealed, saying whether the part is the
// one sealed.

#[test]
fn sealed_and_later_stage_is_already_sealed_saying_whether_the_part_matches() {
    use CheckpointState as S;
    for state in [S::Sealed, S::Committing { key: 1 }, S::CommitUnknown { key: 1 }, S::Committed { key: Some(1) }] {
        let cur = rec(state, 1, 2, 2);
        for (existing, part_matches) in [
            (PartMatch::Same, Some(true)),
            (PartMatch::Different, Some(false)),
            (PartMatch::Absent, Some(false)),
            (PartMatch::Released, None),
        ] {
            let err = run(Some(&cur), &stage(1, 0, existing)).unwrap_err();
            assert_eq!(err, TransitionError::AlreadySealed { id: id(), state, part_matches }, "{state:?} {existing:?}");
        }
    }
}

// Row: Sealed | seal | no-op (and a seal with another count is a mismatch, in every later state too).

#[test]
fn sealed_seal_with_the_same_count_is_a_noop() {
    use CheckpointState as S;
    for state in [S::Sealed, S::Committing { key: 1 }, S::CommitUnknown { key: 1 }, S::Committed { key: None }] {
        assert_noop(&rec(state, 1, 3, 1), &seal(3, &[]));
    }
}

#[test]
fn sealed_seal_with_another_count_is_a_mismatch() {
    use CheckpointState as S;
    for state in [S::Sealed, S::Committing { key: 1 }, S::Committed { key: Some(1) }] {
        let err = run(Some(&rec(state, 1, 3, 1)), &seal(2, &[])).unwrap_err();
        assert_eq!(err, TransitionError::SealMismatch { id: id(), sealed: 3, offered: 2 }, "{state:?}");
    }
}

// Row: Sealed | abort | error: its keys are already skipped; only force_abort may.

#[test]
fn sealed_abort_is_refused() {
    let err = run(Some(&sealed(2, 1)), &Event::Abort).unwrap_err();
    assert_eq!(err, TransitionError::SealedCannotAbort { id: id() });
}

#[test]
fn sealed_restart_is_refused() {
    let err = run(Some(&sealed(2, 1)), &Event::Restart).unwrap_err();
    assert_eq!(err, TransitionError::AlreadySealed { id: id(), state: CheckpointState::Sealed, part_matches: None });
}

#[test]
fn sealed_force_abort_unclaims_the_keys_and_drops_the_parts() {
    let step = run(Some(&sealed(2, 1)), &Event::ForceAbort).unwrap();
    assert_eq!(step.next, rec(CheckpointState::Aborted, 1, 0, 0));
    assert_eq!(step.effect, Effect::UnclaimKeysDropParts { attempt: 1 });
}

#[test]
fn force_abort_of_anything_but_sealed_is_refused() {
    for state in every_state().into_iter().filter(|s| *s != CheckpointState::Sealed) {
        let err = run(Some(&rec(state, 1, 2, 1)), &Event::ForceAbort).unwrap_err();
        assert_eq!(err, TransitionError::NotSealed { id: id(), state });
    }
}

// Row: Sealed | begin_commit(n) | Committing(n).

#[test]
fn sealed_begin_commit_gives_committing() {
    let step = run(Some(&sealed(2, 1)), &Event::BeginCommit { key: 7 }).unwrap();
    assert_eq!(step.next, rec(CheckpointState::Committing { key: 7 }, 1, 2, 1));
    assert_eq!(step.effect, Effect::None);
}

#[test]
fn sealed_begin_commit_without_results_is_refused() {
    let err = run(Some(&sealed(2, 0)), &Event::BeginCommit { key: 7 }).unwrap_err();
    assert!(matches!(err, TransitionError::ResultCount { results: 0, .. }), "{err:?}");
}

#[test]
fn begin_commit_of_anything_but_sealed_is_refused() {
    for state in every_state().into_iter().filter(|s| *s != CheckpointState::Sealed) {
        let err = run(Some(&rec(state, 1, 2, 1)), &Event::BeginCommit { key: 9 }).unwrap_err();
        assert_eq!(err, TransitionError::NotSealed { id: id(), state });
    }
}

// Rule: a pending set with no write results is marked Committed without a target commit.

#[test]
fn sealed_commit_empty_without_results_gives_committed_without_a_key() {
    let step = run(Some(&sealed(2, 0)), &Event::CommitEmpty).unwrap();
    assert_eq!(step.next.state, CheckpointState::Committed { key: None });
    assert_noop(&step.next, &Event::CommitEmpty);
}

#[test]
fn sealed_commit_empty_with_results_is_refused() {
    let err = run(Some(&sealed(2, 3)), &Event::CommitEmpty).unwrap_err();
    assert!(matches!(err, TransitionError::ResultCount { results: 3, .. }), "{err:?}");
}

#[test]
fn commit_empty_of_anything_else_is_refused() {
    use CheckpointState as S;
    for state in every_state().into_iter().filter(|s| !matches!(s, S::Sealed | S::Committed { key: None })) {
        let err = run(Some(&rec(state, 1, 2, 0)), &Event::CommitEmpty).unwrap_err();
        assert_eq!(err, TransitionError::NotSealed { id: id(), state });
    }
}

// Row: Committing(n) | target commit succeeded | Committed.

#[test]
fn committing_mark_committed_gives_committed_and_releases_results() {
    let step =
        run(Some(&rec(CheckpointState::Committing { key: 4 }, 1, 2, 3)), &Event::MarkCommitted { key: 4 }).unwrap();
    assert_eq!(step.next, rec(CheckpointState::Committed { key: Some(4) }, 1, 2, 3));
    assert_eq!(step.effect, Effect::ReleaseResults);
    assert!(step.next.state.keys_processed() && !step.next.state.is_pending());
}

// Row: Committing(n) | target commit failed, definitely not landed | stays Committing(n).

#[test]
fn committing_mark_not_committed_stays_committing() {
    assert_noop(&rec(CheckpointState::Committing { key: 4 }, 1, 2, 3), &Event::MarkNotCommitted { key: 4 });
}

// Row: Committing(n) | target outcome unknown | CommitUnknown(n).

#[test]
fn committing_mark_unknown_gives_commit_unknown() {
    let step =
        run(Some(&rec(CheckpointState::Committing { key: 4 }, 1, 2, 3)), &Event::MarkUnknown { key: 4 }).unwrap();
    assert_eq!(step.next, rec(CheckpointState::CommitUnknown { key: 4 }, 1, 2, 3));
    assert_eq!(step.effect, Effect::None);
}

// Row: CommitUnknown(n) | probe: Committed(ids) equal to the recorded set | Committed.

#[test]
fn commit_unknown_mark_committed_gives_committed() {
    let step =
        run(Some(&rec(CheckpointState::CommitUnknown { key: 4 }, 1, 2, 3)), &Event::MarkCommitted { key: 4 }).unwrap();
    assert_eq!(step.next.state, CheckpointState::Committed { key: Some(4) });
    assert_eq!(step.effect, Effect::ReleaseResults);
}

// Row: CommitUnknown(n) | probe: Committed(ids) different | error CommitMismatch, stays. The commit protocol
// compares the sets before any event is offered; at this level "stays" means no event moves it except the ones
// below, and a repeated unknown answer is a no-op.

#[test]
fn commit_unknown_stays_unless_a_probe_or_resolve_moves_it() {
    let cur = rec(CheckpointState::CommitUnknown { key: 4 }, 1, 2, 3);
    for event in every_event(&[0, 1]) {
        let moves = matches!(event, Event::MarkCommitted { .. } | Event::MarkNotCommitted { .. });
        if let Ok(step) = run(Some(&cur), &event) {
            assert!(!moves, "{event:?} on the wrong key must not move it");
            assert_eq!(step.next, cur, "{event:?}");
        }
    }
}

// Row: CommitUnknown(n) | probe: NotCommitted | Committing(n), re-committed under the same n.

#[test]
fn commit_unknown_mark_not_committed_gives_committing_under_the_same_key() {
    let step = run(Some(&rec(CheckpointState::CommitUnknown { key: 4 }, 1, 2, 3)), &Event::MarkNotCommitted { key: 4 })
        .unwrap();
    assert_eq!(step.next, rec(CheckpointState::Committing { key: 4 }, 1, 2, 3));
}

// Row: Committing(n) / CommitUnknown(n) | unbind(n) | Sealed, same attempt, parts and results; other states refuse.

#[test]
fn unbind_of_the_bound_key_gives_sealed_and_nothing_else_moves() {
    for state in [CheckpointState::Committing { key: 4 }, CheckpointState::CommitUnknown { key: 4 }] {
        let step = run(Some(&rec(state, 1, 2, 3)), &Event::Unbind { key: 4 }).unwrap();
        assert_eq!((step.next, step.effect), (rec(CheckpointState::Sealed, 1, 2, 3), Effect::None));
        let err = run(Some(&rec(state, 1, 2, 3)), &Event::Unbind { key: 5 }).unwrap_err();
        assert!(matches!(err, TransitionError::CommitState { key: 5, .. }), "{err:?}");
    }
    for state in [CheckpointState::Sealed, CheckpointState::Committed { key: Some(4) }, CheckpointState::Staged] {
        let err = run(Some(&rec(state, 1, 2, 3)), &Event::Unbind { key: 4 }).unwrap_err();
        assert!(matches!(err, TransitionError::CommitState { key: 4, .. }), "{state:?}: {err:?}");
    }
}

// Row: CommitUnknown(n) | probe: Unknown | stays.

#[test]
fn commit_unknown_mark_unknown_stays() {
    assert_noop(&rec(CheckpointState::CommitUnknown { key: 4 }, 1, 2, 3), &Event::MarkUnknown { key: 4 });
}

// Rule: every mark names the checkpoint's own key; another key is an error, whatever the state.

#[test]
fn marks_on_the_wrong_key_are_refused() {
    use CheckpointState as S;
    for state in [S::Committing { key: 4 }, S::CommitUnknown { key: 4 }, S::Committed { key: Some(4) }] {
        let cur = rec(state, 1, 2, 3);
        for event in
            [Event::MarkCommitted { key: 5 }, Event::MarkUnknown { key: 3 }, Event::MarkNotCommitted { key: 0 }]
        {
            let err = run(Some(&cur), &event).unwrap_err();
            assert!(matches!(err, TransitionError::CommitState { state: s, .. } if s == state), "{event:?}: {err:?}");
        }
    }
}

#[test]
fn marks_on_a_checkpoint_not_in_a_commit_are_refused() {
    use CheckpointState as S;
    for state in [S::Staged, S::Sealed, S::Aborted, S::Committed { key: None }] {
        for event in
            [Event::MarkCommitted { key: 0 }, Event::MarkUnknown { key: 0 }, Event::MarkNotCommitted { key: 0 }]
        {
            let err = run(Some(&rec(state, 1, 2, 3)), &event).unwrap_err();
            assert!(matches!(err, TransitionError::CommitState { key: 0, .. }), "{state:?} {event:?}: {err:?}");
        }
    }
}

// Row: Committed | anything but reads | no-op or error; never back.

#[test]
fn committed_anything_is_a_noop_or_an_error_never_back() {
    for state in [CheckpointState::Committed { key: Some(5) }, CheckpointState::Committed { key: None }] {
        let cur = rec(state, 1, 2, 1);
        for event in every_event(&[0, 1]) {
            if let Ok(step) = run(Some(&cur), &event) {
                assert_eq!(step, Step { next: cur.clone(), effect: Effect::None }, "{event:?} on {state:?}");
            }
        }
        // The legal no-ops that exist: the same seal, and the same mark for a keyed commit.
        assert_noop(&cur, &seal(2, &[]));
    }
    assert_noop(&rec(CheckpointState::Committed { key: Some(5) }, 1, 2, 1), &Event::MarkCommitted { key: 5 });
    let err = run(Some(&rec(CheckpointState::Committed { key: Some(5) }, 1, 2, 1)), &Event::MarkUnknown { key: 5 });
    assert!(matches!(err, Err(TransitionError::CommitState { .. })), "{err:?}");
    let err =
        run(Some(&rec(CheckpointState::Committed { key: Some(5) }, 1, 2, 1)), &Event::MarkNotCommitted { key: 5 });
    assert!(matches!(err, Err(TransitionError::CommitState { .. })), "{err:?}");
}

// The whole table at once: every legal (state, event) pair moves along an edge of the diagram, and the record's
// attempt never goes back.

#[test]
fn every_legal_step_follows_an_edge_of_the_diagram() {
    use CheckpointState as S;
    let edge = |from: S, to: S| {
        from == to
            || matches!(
                (from, to),
                (S::Staged, S::Sealed | S::Aborted)
                    | (S::Aborted, S::Staged)
                    | (S::Sealed, S::Committing { .. } | S::Committed { key: None } | S::Aborted)
                    | (S::Committing { .. }, S::CommitUnknown { .. } | S::Committed { key: Some(_) } | S::Sealed)
                    | (S::CommitUnknown { .. }, S::Committing { .. } | S::Committed { key: Some(_) } | S::Sealed)
            )
    };
    let mut legal = 0;
    for state in every_state() {
        for epoch in [EPOCH - 1, EPOCH] {
            let cur = CheckpointRecord { epoch, ..rec(state, 1, 2, 1) };
            for event in every_event(&[0, 1]) {
                if let Ok(step) = transition(&id(), Some(&cur), EPOCH, &event) {
                    legal += 1;
                    assert!(edge(state, step.next.state), "{state:?} --{event:?}--> {:?}", step.next.state);
                    assert!(step.next.attempt >= cur.attempt, "{event:?} moved the attempt back");
                    if step.next.state.keys_processed() != state.keys_processed() {
                        // Keys change hands only by sealing or by the operator's force_abort.
                        assert!(matches!(step.effect, Effect::ClaimKeys | Effect::UnclaimKeysDropParts { .. }));
                    }
                }
            }
        }
    }
    assert!(legal > 20, "only {legal} legal steps: the sweep is not exercising the table");
}

#[test]
fn the_state_code_is_unique_and_matches_the_filter() {
    let states = every_state();
    for (a, b) in states.iter().zip(states.iter().skip(1)) {
        if std::mem::discriminant(a) != std::mem::discriminant(b) {
            assert_ne!(a.code(), b.code(), "{a:?} {b:?}");
        }
    }
    let filters = [
        (StateFilter::Staged, CheckpointState::Staged),
        (StateFilter::Sealed, CheckpointState::Sealed),
        (StateFilter::Committing, CheckpointState::Committing { key: 9 }),
        (StateFilter::CommitUnknown, CheckpointState::CommitUnknown { key: 9 }),
        (StateFilter::Committed, CheckpointState::Committed { key: None }),
        (StateFilter::Aborted, CheckpointState::Aborted),
    ];
    for (filter, state) in filters {
        assert_eq!(filter.code(), state.code(), "{filter:?}");
    }
}

// check_begin: strictly the next key, with no key in flight.

#[test]
fn check_begin_accepts_exactly_the_next_key() {
    let seq = CommitSequence { next_key: 3, in_flight: None };
    assert_eq!(check_begin(&seq, 3), Ok(()));
    assert_eq!(check_begin(&seq, 2), Err(TransitionError::CommitOutOfSequence { offered: 2, expected: 3 }));
    assert_eq!(check_begin(&seq, 4), Err(TransitionError::CommitOutOfSequence { offered: 4, expected: 3 }));
}

#[test]
fn check_begin_refuses_any_key_while_one_is_in_flight() {
    let seq = CommitSequence { next_key: 3, in_flight: Some(2) };
    for key in [2, 3, 4] {
        assert_eq!(check_begin(&seq, key), Err(TransitionError::CommitInFlight { key: 2 }));
    }
}

// commit_transition: the commit-level rules, each refused with nothing written.

fn committing(key: u64) -> CheckpointState {
    CheckpointState::Committing { key }
}

#[test]
fn commit_begin_takes_the_next_key_with_sorted_distinct_ids() {
    let seq = CommitSequence { next_key: 3, in_flight: None };
    let ids = [id(), other()];
    assert_eq!(commit_transition(&seq, &CommitEvent::Begin { key: 3, ids: &ids, results: 2 }), Ok(CommitStep::Apply));
    let refused = commit_transition(&seq, &CommitEvent::Begin { key: 4, ids: &ids, results: 2 });
    assert_eq!(refused, Err(TransitionError::CommitOutOfSequence { offered: 4, expected: 3 }));
    let in_flight = CommitSequence { next_key: 3, in_flight: Some(2) };
    let refused = commit_transition(&in_flight, &CommitEvent::Begin { key: 3, ids: &ids, results: 2 });
    assert_eq!(refused, Err(TransitionError::CommitInFlight { key: 2 }));
}

#[test]
fn commit_begin_refuses_no_ids_duplicates_and_unsorted_ids() {
    let seq = CommitSequence { next_key: 0, in_flight: None };
    assert_eq!(
        commit_transition(&seq, &CommitEvent::Begin { key: 0, ids: &[], results: 0 }),
        Err(TransitionError::NoCheckpoints)
    );
    for ids in [[id(), id()], [other(), id()]] {
        let refused = commit_transition(&seq, &CommitEvent::Begin { key: 0, ids: &ids, results: 0 });
        assert_eq!(refused, Err(TransitionError::DuplicateId { id: ids[1].clone() }));
    }
}

#[test]
fn commit_begin_refuses_too_many_results_unless_one_checkpoint_goes_alone() {
    let seq = CommitSequence { next_key: 0, in_flight: None };
    let over = COMMIT_RESULTS_MAX as u64 + 1;
    let refused = commit_transition(&seq, &CommitEvent::Begin { key: 0, ids: &[id(), other()], results: over });
    assert_eq!(refused, Err(TransitionError::CommitTooLarge { results: over, max: COMMIT_RESULTS_MAX as u64 }));
    let alone = commit_transition(&seq, &CommitEvent::Begin { key: 0, ids: &[id()], results: over });
    assert_eq!(alone, Ok(CommitStep::Apply));
}

#[test]
fn commit_move_refuses_an_unknown_key_and_any_move_of_a_committed_one() {
    let seq = CommitSequence { next_key: 3, in_flight: Some(2) };
    let committed = CheckpointState::Committed { key: Some(2) };
    let unknown = CheckpointState::CommitUnknown { key: 2 };
    let never = commit_transition(&seq, &CommitEvent::Move { key: 7, current: None, to: committed });
    assert_eq!(never, Err(TransitionError::UnknownCommitKey { key: 7 }));
    let step = commit_transition(&seq, &CommitEvent::Move { key: 2, current: Some(committing(2)), to: unknown });
    assert_eq!(step, Ok(CommitStep::Apply));
    let again = commit_transition(&seq, &CommitEvent::Move { key: 2, current: Some(committed), to: committed });
    assert_eq!(again, Ok(CommitStep::Unchanged), "a retried mark changes nothing");
    let back = commit_transition(&seq, &CommitEvent::Move { key: 2, current: Some(committed), to: committing(2) });
    assert_eq!(back, Err(TransitionError::CommitState { key: 2, state: committed, what: "moving a committed key" }));
}

#[test]
fn commit_unbind_takes_only_the_key_in_flight() {
    let seq = CommitSequence { next_key: 3, in_flight: Some(2) };
    assert_eq!(
        commit_transition(&seq, &CommitEvent::Unbind { key: 2, current: Some(committing(2)) }),
        Ok(CommitStep::Apply)
    );
    let committed = CheckpointState::Committed { key: Some(1) };
    assert_eq!(
        commit_transition(&seq, &CommitEvent::Unbind { key: 1, current: Some(committed) }),
        Err(TransitionError::CommitState { key: 1, state: committed, what: "unbinding a key" })
    );
    assert_eq!(
        commit_transition(&seq, &CommitEvent::Unbind { key: 9, current: None }),
        Err(TransitionError::UnknownCommitKey { key: 9 })
    );
}

#[test]
fn commit_finish_waits_for_everything_pending_and_is_recorded_once() {
    let idle = CommitSequence { next_key: 3, in_flight: None };
    let finish = |seq: &CommitSequence, finished, unfinished| {
        commit_transition(seq, &CommitEvent::Finish { finished, unfinished })
    };
    assert_eq!(finish(&idle, false, None), Ok(CommitStep::Apply));
    assert_eq!(finish(&idle, true, None), Ok(CommitStep::Unchanged));
    let sealed = Some((id(), CheckpointState::Sealed));
    assert_eq!(
        finish(&idle, false, sealed),
        Err(TransitionError::Unfinished { id: id(), state: CheckpointState::Sealed })
    );
    let busy = CommitSequence { next_key: 3, in_flight: Some(2) };
    assert_eq!(finish(&busy, false, None), Err(TransitionError::CommitInFlight { key: 2 }));
}

#[test]
fn adoption_of_a_claims_generation_never_adopts_a_seal_the_store_dropped() {
    use CheckpointState as S;
    // Generation 0: the first seal, adopted as attempt 0 (or completed after a crash left it Staged).
    assert_eq!(adoption(None, 0), Adoption::First);
    assert_eq!(adoption(Some((S::Staged, 0)), 0), Adoption::First);
    // A later generation with no record: not this store's.
    assert_eq!(adoption(None, 1), Adoption::Unaccounted);
    // Adopted: nothing to do, whatever the generation.
    for state in [S::Sealed, S::Committing { key: 1 }, S::CommitUnknown { key: 1 }, S::Committed { key: None }] {
        assert_eq!(adoption(Some((state, 2)), 2), Adoption::Already);
    }
    // Force-aborted at attempt a: its seal (generation <= a) is released, the one after it (a + 1) adopted.
    assert_eq!(adoption(Some((S::Aborted, 0)), 0), Adoption::Retire { abort_first: false });
    assert_eq!(adoption(Some((S::Aborted, 3)), 2), Adoption::Retire { abort_first: false });
    assert_eq!(adoption(Some((S::Aborted, 3)), 3), Adoption::Retire { abort_first: false });
    assert_eq!(adoption(Some((S::Aborted, 3)), 4), Adoption::Next);
    assert_eq!(adoption(Some((S::Aborted, 3)), 5), Adoption::Unaccounted);
    // Restarted by an operator to attempt a: a seal below a is dropped; one of a or a + 1 came after.
    assert_eq!(adoption(Some((S::Staged, 1)), 0), Adoption::Retire { abort_first: true });
    assert_eq!(adoption(Some((S::Staged, 1)), 1), Adoption::Next);
    assert_eq!(adoption(Some((S::Staged, 1)), 2), Adoption::Next);
    assert_eq!(adoption(Some((S::Staged, 0)), 1), Adoption::Next);
    assert_eq!(adoption(Some((S::Staged, 1)), 3), Adoption::Unaccounted);
    // The rule behind it: a seal of generation g is adopted into attempt >= g, so once the store has dropped
    // it (Aborted at a >= g, or restarted past it), it is never adopted again.
    for attempt in 0..6u32 {
        for generation in 0..=attempt {
            assert!(!matches!(adoption(Some((S::Aborted, attempt)), generation), Adoption::First | Adoption::Next));
        }
    }
}

/// Every state's name reads back as the same state (`Display` then `FromStr`), and the names are distinct.
#[test]
fn state_filter_names_round_trip() {
    for filter in StateFilter::ALL {
        let name = filter.to_string();
        assert_eq!(name, filter.name());
        assert_eq!(name.parse::<StateFilter>(), Ok(filter), "{name}");
    }
    let names: std::collections::HashSet<_> = StateFilter::ALL.iter().map(|f| f.name()).collect();
    assert_eq!(names.len(), StateFilter::ALL.len());
    assert_eq!(StateFilter::CommitUnknown.to_string(), "commit-unknown");
    assert_eq!("commit_unknown".parse::<StateFilter>(), Ok(StateFilter::CommitUnknown), "Python's spelling");
}

/// A name that is no state's is refused, and the message lists every name.
#[test]
fn state_filter_unknown_name_is_refused_with_the_names() {
    for bad in ["", "Sealed", "unknown", "commit unknown", "sealed "] {
        let err = bad.parse::<StateFilter>().unwrap_err();
        let message = err.to_string();
        assert!(message.contains(&format!("{bad:?}")), "{message}");
        for filter in StateFilter::ALL {
            assert!(message.contains(filter.name()), "{message}");
        }
    }
}

/// Each state maps to the filter that lists it.
#[test]
fn state_filter_from_state_matches_its_code() {
    use CheckpointState as S;
    let states = [
        S::Staged,
        S::Sealed,
        S::Committing { key: 1 },
        S::CommitUnknown { key: 2 },
        S::Committed { key: Some(3) },
        S::Committed { key: None },
        S::Aborted,
    ];
    for state in states {
        assert_eq!(StateFilter::from(state).code(), state.code(), "{state:?}");
    }
}
