//! Proves that bad input is refused at the boundary with the documented error, saying which limit and by how
//! much, and writing nothing; and that a damaged file fails closed: a corrupted checkpoint value and a corrupted
//! log frame are `Corrupt` errors naming the table and id or the frame's sequence number, while everything else
//! still reads back.

use std::path::Path;

use redb::{ReadableTable, TableDefinition};
use sinkpoint::limits::{
    CHECKPOINT_BYTES_MAX, CHECKPOINT_ID_BYTES_MAX, COMMIT_CHECKPOINTS_MAX, REASON_BYTES_MAX, SEAL_PARTS_MAX,
    SOURCE_KEY_BYTES_MAX, STAGE_BYTES_MAX, STAGE_KEYS_MAX, STAGE_RESULTS_MAX, WRITE_RESULT_BYTES_MAX,
};
use sinkpoint::testkit::RawProtocol;
use sinkpoint::testkit::whitebox::Record;
use sinkpoint::testkit::whitebox::frame::{self, decode_exact};
use sinkpoint::{Attempt, Part, StagePart};
use sinkpoint::{
    CheckpointId, CheckpointState, Error, ErrorKind, Format, JobId, Resolution, StageOutcome, Store, TargetIdentity,
    TransitionError, WriteResult,
};

const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("log");
const CHECKPOINTS: TableDefinition<&str, &[u8]> = TableDefinition::new("checkpoints");

fn cid(s: &str) -> CheckpointId {
    CheckpointId::new(s).unwrap()
}

fn result(s: &str) -> WriteResult {
    WriteResult::new(Format::Parquet, s.as_bytes().to_vec()).unwrap()
}

async fn open(path: &Path) -> Result<Store, Error> {
    Store::builder(JobId::new("job").unwrap(), TargetIdentity::new("file:///t").unwrap()).path(path).open().await
}

/// Asserts an `InvalidInput` error whose message holds every one of `parts`.
#[track_caller]
fn assert_invalid<T: std::fmt::Debug>(outcome: Result<T, Error>, parts: &[&str]) {
    let err = outcome.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    let message = err.to_string();
    for part in parts {
        assert!(message.contains(part), "{message:?} does not say {part:?}");
    }
}

#[test]
fn invalid_checkpoint_ids_are_refused_saying_why() {
    let long = "a".repeat(CHECKPOINT_ID_BYTES_MAX + 1);
    assert_invalid(CheckpointId::new(""), &["checkpoint id is empty", "1 to 128 bytes"]);
    assert_invalid(CheckpointId::new(long), &["checkpoint id is 129 bytes", "limit is 128", "over by 1"]);
    assert_invalid(CheckpointId::new("é".repeat(100)), &["200 bytes", "over by 72"]);
    assert_invalid(CheckpointId::new("."), &[r#"checkpoint id ".""#, "not allowed"]);
    assert_invalid(CheckpointId::new(".."), &[r#"checkpoint id "..""#, "not allowed"]);
    for (id, found) in [("/", "'/'"), ("a/b", "'/'"), ("café", "'é'"), ("input 1", "' '"), ("日本", "'日'")] {
        assert_invalid(CheckpointId::new(id), &[found, "only [A-Za-z0-9._-]"]);
    }
    // The edges that are allowed.
    for id in ["a", "...", "-_.", "input-0017", &"Z".repeat(CHECKPOINT_ID_BYTES_MAX)] {
        assert!(CheckpointId::new(id).is_ok(), "{id}");
    }
    assert_invalid(JobId::new("a/b"), &["job id", "'/'"]);
    assert_invalid(TargetIdentity::new(""), &["target identity is empty"]);
    assert_invalid(TargetIdentity::new("t".repeat(1025)), &["target identity is 1025 bytes", "over by 1"]);
}

#[test]
fn oversized_write_results_are_refused_saying_by_how_much() {
    let big = vec![0u8; WRITE_RESULT_BYTES_MAX + 10];
    assert_invalid(WriteResult::new(Format::Lance, big), &["write result is 1048586 bytes", "over by 10"]);
    assert_invalid(WriteResult::new(Format::Other(String::new()), vec![1]), &["format name is empty"]);
    assert_invalid(WriteResult::new(Format::Other("f".repeat(65)), vec![1]), &["format name is 65 bytes", "over by 1"]);
    assert!(WriteResult::new(Format::Lance, vec![0u8; WRITE_RESULT_BYTES_MAX]).is_ok());
}

#[tokio::test]
async fn oversized_calls_are_refused_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("s.redb")).await.unwrap();
    let a = cid("input-a");
    store
        .stage(&a, StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![b"k".to_vec()]).results(vec![result("r")]))
        .await
        .unwrap();
    store.seal(&a, 1).await.unwrap();
    store.begin_commit(0, std::slice::from_ref(&a), None, false).await.unwrap();
    let frames = store.log_frames().unwrap().len();
    let sent = store.stats().sent;
    let b = cid("input-b");

    let key = |n: usize| vec![7u8; n];
    assert_invalid(
        store.stage(&b, StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key(SOURCE_KEY_BYTES_MAX + 3)])).await,
        &["source key is 4099 bytes", "limit is 4096", "over by 3"],
    );
    assert_invalid(
        store.stage(&b, StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![Vec::new()])).await,
        &["source key is empty"],
    );
    assert_invalid(
        store.stage(&b, StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key(1); STAGE_KEYS_MAX + 1])).await,
        &["source keys in one stage call", "limit of 10000", "over by 1"],
    );
    assert_invalid(
        store
            .stage(&b, StagePart::new(Attempt::FIRST, Part::FIRST).results(vec![result("r"); STAGE_RESULTS_MAX + 2]))
            .await,
        &["write results in one stage call", "limit of 1000", "over by 2"],
    );
    let whole = WriteResult::new(Format::Parquet, vec![1u8; WRITE_RESULT_BYTES_MAX]).unwrap();
    let n = STAGE_BYTES_MAX / WRITE_RESULT_BYTES_MAX + 1;
    assert_invalid(
        store.stage(&b, StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key(5)]).results(vec![whole; n])).await,
        &["bytes in one stage call", &format!("{}", n * WRITE_RESULT_BYTES_MAX + 5), "over by 1048581"],
    );
    assert_invalid(
        store.stage(&b, StagePart::new(Attempt::FIRST, Part::new(SEAL_PARTS_MAX)).keys(vec![key(1)])).await,
        &["part index is 100000", "limit is 99999", "over by 1"],
    );
    assert_invalid(store.seal(&a, 0).await, &["sealed part count is 0", "minimum is 1", "under by 1"]);
    assert_invalid(store.seal(&a, SEAL_PARTS_MAX + 1).await, &["sealed part count is 100001", "over by 1"]);
    let many: Vec<CheckpointId> = (0..=COMMIT_CHECKPOINTS_MAX).map(|i| cid(&format!("c{i}"))).collect();
    assert_invalid(store.commit_empty(&many).await, &["checkpoints in one call", "over by 1"]);
    assert_invalid(store.begin_commit(1, &many, None, false).await, &["checkpoints in one call", "over by 1"]);
    let long = "r".repeat(REASON_BYTES_MAX + 4);
    assert_invalid(
        store.operator().resolve(0, Resolution::Committed, &long).await,
        &["operator reason is 1028 bytes", "over by 4"],
    );
    assert_invalid(store.operator().resolve(0, Resolution::Committed, "").await, &["operator reason is empty"]);
    assert_invalid(
        store.operator().force_abort(std::slice::from_ref(&a), &long).await,
        &["operator reason", "over by 4"],
    );

    // All refused at the boundary: nothing reached the writer, nothing was logged, nothing changed.
    assert_eq!(store.stats().sent, sent);
    assert_eq!(store.log_frames().unwrap().len(), frames);
    assert_eq!(store.get(&b).unwrap(), None);
    assert_eq!(store.get(&a).unwrap().unwrap().state, CheckpointState::Committing { key: 0 });
    // A too-long reason from the target is kept, truncated, rather than refused: an unknown outcome is always
    // recorded.
    store.mark_unknown(0, &long).await.unwrap();
    assert_eq!(store.get(&a).unwrap().unwrap().state, CheckpointState::CommitUnknown { key: 0 });
    store.close();
}

/// Finding 6: an attempt's stored bytes are bounded at `stage`, inside the write transaction. Fifteen stage calls at
/// their byte limit fit [`CHECKPOINT_BYTES_MAX`]; the sixteenth would pass it by its encoding overhead and is
/// refused naming the checkpoint, the bytes and the limit, writing nothing; a small part still fits, a retried
/// part is still a no-op, and the attempt next to the limit can still be restarted (returning every result), and
/// the next attempt staged and sealed.
#[tokio::test]
async fn a_stage_past_the_checkpoint_byte_limit_is_refused_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("s.redb")).await.unwrap();
    let a = cid("input-a");
    let whole = WriteResult::new(Format::Parquet, vec![1u8; WRITE_RESULT_BYTES_MAX]).unwrap();
    let full = vec![whole; STAGE_BYTES_MAX / WRITE_RESULT_BYTES_MAX];
    let fitting = (CHECKPOINT_BYTES_MAX / STAGE_BYTES_MAX as u64) as u32 - 1;
    for part in 0..fitting {
        store.stage(&a, StagePart::new(Attempt::FIRST, Part::new(part)).results(full.clone())).await.unwrap();
    }
    let before = store.get(&a).unwrap().unwrap();
    let frames = store.log_frames().unwrap().len();

    let err =
        store.stage(&a, StagePart::new(Attempt::FIRST, Part::new(fitting)).results(full.clone())).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::IllegalTransition, "{err}");
    assert!(
        matches!(err.transition(), Some(TransitionError::CheckpointTooLarge { id, attempt: 0, bytes, limit })
            if *id == a && *bytes > CHECKPOINT_BYTES_MAX && *limit == CHECKPOINT_BYTES_MAX),
        "{err}"
    );
    assert!(err.to_string().contains("restart it"), "{err}");
    assert_eq!(store.log_frames().unwrap().len(), frames);
    assert_eq!(store.get(&a).unwrap().unwrap(), before);

    // The limit is on bytes, not parts: a small part still fits, and a retried part is still a no-op.
    assert_eq!(
        store
            .stage(
                &a,
                StagePart::new(Attempt::FIRST, Part::new(fitting)).keys(vec![b"k".to_vec()]).results(vec![result("r")])
            )
            .await
            .unwrap(),
        StageOutcome::Staged
    );
    assert_eq!(
        store.stage(&a, StagePart::new(Attempt::FIRST, Part::FIRST).results(full.clone())).await.unwrap(),
        StageOutcome::AlreadyStaged
    );

    let dropped = store.restart(&a).await.unwrap();
    assert_eq!(dropped.len(), fitting as usize * full.len() + 1);
    store.stage(&a, StagePart::new(Attempt::new(1), Part::FIRST).results(full.clone())).await.unwrap();
    store.seal(&a, 1).await.unwrap();
    assert_eq!(store.get(&a).unwrap().unwrap().state, CheckpointState::Sealed);
    store.close();
}

/// A store of three sealed checkpoints, closed; returns the seq of the frame staging `input-b`.
async fn three_sealed(path: &Path) -> u64 {
    let store = open(path).await.unwrap();
    for (name, key) in [("input-a", "ka"), ("input-b", "kb"), ("input-c", "kc")] {
        let id = cid(name);
        store
            .stage(
                &id,
                StagePart::new(Attempt::FIRST, Part::FIRST)
                    .keys(vec![key.as_bytes().to_vec()])
                    .results(vec![result(name)]),
            )
            .await
            .unwrap();
        store.seal(&id, 1).await.unwrap();
    }
    let seq = store
        .log_frames()
        .unwrap()
        .iter()
        .map(|bytes| decode_exact(bytes, "test").unwrap())
        .find(|f| matches!(Record::from_payload(f.payload, "test").unwrap(), Record::Stage { ref id, .. } if id.as_str() == "input-b"))
        .unwrap()
        .seq;
    assert_eq!(store.verify_log().unwrap(), 8, "create, open, and three stage and seal records");
    store.close();
    seq
}

/// Opens the closed store's file with redb directly and lets `damage` rewrite it.
fn tamper(path: &Path, damage: impl FnOnce(&redb::WriteTransaction)) {
    let db = redb::Database::open(path).unwrap();
    let txn = db.begin_write().unwrap();
    damage(&txn);
    txn.commit().unwrap();
}

fn read_frame(txn: &redb::WriteTransaction, seq: u64) -> Vec<u8> {
    txn.open_table(LOG).unwrap().get(seq).unwrap().unwrap().value().to_vec()
}

fn write_frame(txn: &redb::WriteTransaction, seq: u64, bytes: &[u8]) {
    txn.open_table(LOG).unwrap().insert(seq, bytes).unwrap();
}

#[track_caller]
fn assert_corrupt<T: std::fmt::Debug>(outcome: Result<T, Error>, parts: &[&str]) {
    let err = outcome.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
    let message = err.to_string();
    for part in parts {
        assert!(message.contains(part), "{message:?} does not say {part:?}");
    }
}

#[tokio::test]
async fn a_damaged_frame_and_a_damaged_checkpoint_fail_closed_and_nothing_else_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let seq = three_sealed(&path).await;
    tamper(&path, |txn| {
        let mut bytes = read_frame(txn, seq);
        bytes[frame::FRAME_HEADER_BYTES + 2] ^= 0x20;
        write_frame(txn, seq, &bytes);
        let mut checkpoints = txn.open_table(CHECKPOINTS).unwrap();
        let mut value = checkpoints.get("input-c").unwrap().unwrap().value().to_vec();
        value[1] ^= 0x01;
        checkpoints.insert("input-c", value.as_slice()).unwrap();
    });

    // (a) A writer's open reads the log's fresh window (staged parts are kept in their stage records until
    // settled), and cannot tell whether a damaged frame there held one: it refuses, naming the frame and what to do.
    assert_corrupt(open(&path).await.map(Store::close), &["table log", &format!("seq {seq}"), "CRC32", "mirror"]);
    let inspector = sinkpoint::inspect::Inspector::open_file(&path).unwrap();
    // (b) The damaged checkpoint is an error naming its table and id, as is every read that needs it.
    assert_corrupt(inspector.get(&cid("input-c")), &["table checkpoints", "input-c", "CRC32"]);
    assert_corrupt(inspector.list(sinkpoint::StateFilter::Sealed), &["input-c"]);
    // (c) The check names the damaged frame's sequence number.
    assert_corrupt(inspector.verify(), &["table log", &format!("seq {seq}"), "CRC32"]);
    // Nothing else was lost: the other checkpoints and every key still read back.
    for name in ["input-a", "input-b"] {
        let info = inspector.get(&cid(name)).unwrap().unwrap();
        assert_eq!((info.state, info.parts, info.results), (CheckpointState::Sealed, 1, 1), "{name}");
    }
    let keys: Vec<Vec<u8>> = inspector.processed_keys().map(|k| k.unwrap()).collect();
    assert_eq!(keys, [b"ka".to_vec(), b"kb".to_vec(), b"kc".to_vec()]);
}

#[tokio::test]
async fn every_kind_of_frame_damage_is_named_by_its_sequence_number() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("base.redb");
    let seq = three_sealed(&base).await;
    type Damage = Box<dyn Fn(&redb::WriteTransaction)>;
    let cases: Vec<(&str, Damage, Vec<String>)> = vec![
        (
            "another version",
            Box::new(move |txn| {
                let mut bytes = read_frame(txn, seq);
                bytes[4] = 2;
                write_frame(txn, seq, &bytes);
            }),
            vec![format!("seq {seq}"), "version 2".into()],
        ),
        (
            "a flipped CRC",
            Box::new(move |txn| {
                let mut bytes = read_frame(txn, seq);
                *bytes.last_mut().unwrap() ^= 0xff;
                write_frame(txn, seq, &bytes);
            }),
            vec![format!("seq {seq}"), "CRC32".into()],
        ),
        (
            "trailing bytes",
            Box::new(move |txn| {
                let mut bytes = read_frame(txn, seq);
                bytes.push(0);
                write_frame(txn, seq, &bytes);
            }),
            vec![format!("seq {seq}"), "trailing".into()],
        ),
        (
            "a valid frame with an undecodable record",
            Box::new(move |txn| write_frame(txn, seq, &frame::encode(seq, 1, &[0xff, 0xff]).unwrap())),
            vec![format!("table log, seq {seq}"), "undecodable record".into()],
        ),
        (
            "a frame moved from another seq",
            Box::new(move |txn| {
                let other = read_frame(txn, seq + 1);
                write_frame(txn, seq, &other);
            }),
            vec![format!("table log, seq {seq}"), format!("says it is seq {}", seq + 1)],
        ),
        (
            "a missing frame",
            Box::new(move |txn| {
                txn.open_table(LOG).unwrap().remove(seq).unwrap();
            }),
            vec![format!("seq {seq} is missing")],
        ),
    ];
    for (what, damage, parts) in cases {
        let path = dir.path().join("damaged.redb");
        std::fs::copy(&base, &path).unwrap();
        tamper(&path, damage);
        let inspector = sinkpoint::inspect::Inspector::open_file(&path).unwrap();
        let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
        let err = inspector.verify().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Corrupt, "{what}: {err}");
        for part in &parts {
            assert!(err.to_string().contains(part), "{what}: {err} does not say {part:?}");
        }
        // The materialised tables are untouched by log damage.
        assert_eq!(inspector.list(sinkpoint::StateFilter::Sealed).unwrap().len(), 3, "{what}");
        drop(inspector);
        // A writer's open refuses damage in the fresh window, naming the same seq; it decodes only the stage
        // records there (by their first byte, under the frame's CRC), so a well-framed record of another kind that
        // does not decode is left to `verify`.
        if what == "a valid frame with an undecodable record" {
            open(&path).await.unwrap().close();
            continue;
        }
        let err = open(&path).await.map(Store::close).expect_err(what);
        assert_eq!(err.kind(), ErrorKind::Corrupt, "{what}: {err}");
        assert!(err.to_string().contains(&format!("seq {seq}")), "{what}: {err}");
    }
    // A missing last frame. The stored meta's next seq is a lower bound (a stage or seal does not rewrite it; the
    // log's last frame says the next seq), so a log cut below it is refused at open, saying where it ends. An
    // open writes the meta and its `Open` record is then the last frame: that is the one cut here.
    let path = dir.path().join("damaged.redb");
    std::fs::copy(&base, &path).unwrap();
    open(&path).await.unwrap().close();
    let mut last = 0;
    tamper(&path, |txn| {
        last = txn.open_table(LOG).unwrap().last().unwrap().unwrap().0.value();
        txn.open_table(LOG).unwrap().remove(last).unwrap();
    });
    let err = open(&path).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
    let says = format!("table log ends at seq {}, but table meta says", last - 1);
    assert!(err.to_string().contains(&says), "{err} does not say {says:?}");
}

#[tokio::test]
async fn a_damaged_staged_checkpoint_makes_open_fail_closed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let store = open(&path).await.unwrap();
    store.stage(&cid("input-s"), StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![b"k".to_vec()])).await.unwrap();
    store.close();
    tamper(&path, |txn| {
        let mut checkpoints = txn.open_table(CHECKPOINTS).unwrap();
        checkpoints.insert("input-s", [1u8, 2, 3].as_slice()).unwrap();
    });
    // Open looks for orphans among the Staged checkpoints; it refuses to go on without knowing them.
    assert_corrupt(open(&path).await.map(Store::close), &["table checkpoints", "input-s"]);
}

/// Every id the constructors refuse, with a reason to refuse it.
fn bad_ids() -> Vec<String> {
    let long = "a".repeat(CHECKPOINT_ID_BYTES_MAX + 1);
    ["", ".", "..", "a/b", "/", "a\0b", "café", "input 1", "日本", "a\\b", &long].map(String::from).to_vec()
}

/// Finding 28: a deserialised id carries the same checks as `new`, so a crafted record or a caller's config
/// file cannot smuggle in an id that, once written, makes `list` and `verify_log` fail and the store unopenable.
#[test]
fn deserialising_a_bad_id_is_refused_like_its_constructor() {
    for bad in bad_ids() {
        let bytes = postcard::to_allocvec(&bad).unwrap();
        assert!(postcard::from_bytes::<CheckpointId>(&bytes).is_err(), "checkpoint id {bad:?} deserialised");
        assert!(postcard::from_bytes::<JobId>(&bytes).is_err(), "job id {bad:?} deserialised");
    }
    let empty = postcard::to_allocvec("").unwrap();
    assert!(postcard::from_bytes::<TargetIdentity>(&empty).is_err(), "an empty target identity deserialised");
    let bad_format = postcard::to_allocvec(&Format::Other(String::new())).unwrap();
    assert!(postcard::from_bytes::<Format>(&bad_format).is_err(), "an empty format name deserialised");
    // The good ones still round-trip, with the encoding unchanged (the on-disk format depends on it).
    let good = cid("input-0017");
    let bytes = postcard::to_allocvec(&good).unwrap();
    assert_eq!(bytes, postcard::to_allocvec("input-0017").unwrap());
    assert_eq!(postcard::from_bytes::<CheckpointId>(&bytes).unwrap(), good);
}

/// Finding 25: a file that is not a store is never `Io` (documented as transient, so a driver would retry it
/// forever): it is `Corrupt`, naming the path and what to do; a file another writer holds says so.
#[tokio::test]
async fn a_file_that_is_not_a_store_is_corrupt_naming_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("text");
    std::fs::write(&text, b"this is a text file, not a store\n".repeat(100)).unwrap();
    let zeroed = dir.path().join("zeroed");
    let cut = dir.path().join("cut");
    for path in [&zeroed, &cut] {
        let store = open(path).await.unwrap();
        store.stage(&cid("a"), StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![b"k".to_vec()])).await.unwrap();
        store.close();
    }
    let mut bytes = std::fs::read(&zeroed).unwrap();
    bytes[..512].fill(0);
    std::fs::write(&zeroed, bytes).unwrap();
    std::fs::OpenOptions::new().write(true).open(&cut).unwrap().set_len(100).unwrap();
    for path in [&text, &zeroed, &cut] {
        let err = open(path).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Corrupt, "{}: {err}", path.display());
        let message = err.to_string();
        assert!(message.contains(&path.display().to_string()), "{message:?} does not name the path");
        assert!(message.contains("restore"), "{message:?} does not say what to do");
    }
}

/// Finding 25: a second open of a file another writer holds is `AlreadyOpen`, not a transient `Io`.
#[tokio::test]
async fn a_file_another_writer_holds_is_already_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let first = open(&path).await.unwrap();
    let err = open(&path).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AlreadyOpen, "{err}");
    assert!(err.to_string().contains("another writer holds"), "{err}");
    first.close();
}

/// Finding 24: an adapter outside the crate builds errors of the kind it means, with its cause attached once:
/// `Display` shows each message once along the `source()` chain, and errors clone.
#[test]
fn adapter_errors_keep_their_kind_and_show_each_source_once() {
    let cause = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "catalog connection reset");
    let err = Error::target_with_source("could not commit to the catalog", cause);
    assert_eq!(err.kind(), ErrorKind::Target);
    assert_eq!(Error::target("rejected").kind(), ErrorKind::Target);
    assert_eq!(Error::invalid_input("table schema lacks column id").kind(), ErrorKind::InvalidInput);
    assert_eq!(Error::corrupt("table manifest unreadable").kind(), ErrorKind::Corrupt);
    assert_eq!(Error::wrong_store("table belongs to another job").kind(), ErrorKind::WrongStore);
    let copy = err.clone();
    assert_eq!(copy.to_string(), err.to_string());
    let mut chain = Vec::new();
    let mut next: Option<&dyn std::error::Error> = Some(&err);
    while let Some(e) = next {
        chain.push(e.to_string());
        next = e.source();
    }
    let joined = chain.join(": ");
    for message in ["could not commit to the catalog", "catalog connection reset"] {
        assert_eq!(joined.matches(message).count(), 1, "{message:?} in {joined:?}");
    }
}
