//! Races between drivers of one job that end at the table: a second driver without a mirror whose probe came
//! before the first driver's commit is refused, never lands the key again; a store told what it holds is told
//! truly; and a key that landed with other content than recorded has a lossless way out on a table that keeps
//! every commit (`Operator::settle_landed`).

use sinkpoint::Committer;
use sinkpoint::testkit::{CrashBackend, HistoryTable};
use sinkpoint::{
    Attempt, CheckpointId, CheckpointState, CommitKey, ErrorKind, Format, JobId, Part, StagePart, Store, Target,
    TargetCommit, TargetIdentity, WriteResult,
};

fn job() -> JobId {
    JobId::new("races").unwrap()
}

fn id(name: &str) -> CheckpointId {
    CheckpointId::new(name).unwrap()
}

async fn open(backend: &CrashBackend) -> Store {
    Store::builder(job(), TargetIdentity::new("history://t").unwrap()).backend(backend.clone()).open().await.unwrap()
}

fn result(text: &str) -> WriteResult {
    WriteResult::new(Format::Other("rows".into()), text.as_bytes().to_vec()).unwrap()
}

/// Seals input `name` with one write result `text`.
async fn seal(store: &Store, name: &str, text: &str) {
    let part = StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![format!("in/{name}").into_bytes()]);
    store.stage_and_seal(&id(name), part.results(vec![result(text)]), 1).await.unwrap();
}

fn landed(table: &HistoryTable) -> Vec<String> {
    table.results().iter().map(|r| String::from_utf8(r.bytes().to_vec()).unwrap()).collect()
}

/// Two new stores of one job without a mirror on a table whose key check reads only the versions after the
/// commit's prepared one. Driver 2 recovers first (its probe finds key 0 absent); driver 1 commits key 0; then
/// driver 2 begins key 0. The probe's version bounds driver 2's key check, so it sees driver 1's key 0 and is
/// refused (`WrongStore`). (Fails when key 0 is prepared against the version read at its begin: driver 2's
/// commit lands too, and the table holds input x twice.)
#[tokio::test]
async fn a_second_driver_without_a_mirror_whose_probe_came_first_is_refused() {
    let table = HistoryTable::new();
    let (b1, b2) = (CrashBackend::new(), CrashBackend::new());
    let d2 = open(&b2).await;
    Committer::new(&d2, &table).recover().await.unwrap();
    let d1 = open(&b1).await;
    let c1 = Committer::new(&d1, &table);
    c1.recover().await.unwrap();
    seal(&d1, "x", "x-d1").await;
    c1.commit_pending().await.unwrap();
    seal(&d2, "x", "x-d2").await;
    let refused = Committer::new(&d2, &table).commit_pending().await.unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::WrongStore, "{refused}");
    assert!(refused.to_string().contains("two drivers run this job"), "{refused}");
    assert_eq!(landed(&table), vec!["x-d1"], "key 0 landed twice");
    assert_eq!(d2.get(&id("x")).unwrap().unwrap().state, CheckpointState::Sealed, "nothing marked");
}

/// `store` records its intent for key 0 over `recorded`; then a commit under key 0 of `landed` alone (one
/// result a checkpoint, `<id>-rows`) lands in `table`, as a commit the store cannot account for would.
async fn begin_key_0_and_land(store: &Store, table: &HistoryTable, recorded: &[&str], landed: &[&str]) {
    let version = table.version().await.unwrap();
    let recorded: Vec<CheckpointId> = recorded.iter().map(|r| id(r)).collect();
    sinkpoint::testkit::RawProtocol::begin_commit(store, 0, &recorded, version, false).await.unwrap();
    let key = CommitKey { job: job(), n: 0 };
    let ids: Vec<CheckpointId> = landed.iter().map(|l| id(l)).collect();
    let results: Vec<WriteResult> = landed.iter().map(|l| result(&format!("{l}-rows"))).collect();
    let commit = TargetCommit {
        key: &key,
        ids: &ids,
        epoch: store.epoch(),
        results: &results,
        final_commit: false,
        prepared_version: version,
    };
    assert_eq!(table.commit(&commit).await, sinkpoint::CommitOutcome::Committed);
}

/// A store with x and y bound to key 0 (its intent recorded), on a table that holds key 0 with x alone (a
/// commit this store cannot account for). The committer reports the mismatch; `settle_landed(0, [x])` records
/// x Committed under key 0 and y Sealed again, and the next commit takes y under key 1: each row once.
#[tokio::test]
async fn a_key_that_landed_with_part_of_its_set_is_settled_without_loss() {
    let table = HistoryTable::new();
    let backend = CrashBackend::new();
    let store = open(&backend).await;
    seal(&store, "x", "x-rows").await;
    seal(&store, "y", "y-rows").await;
    begin_key_0_and_land(&store, &table, &["x", "y"], &["x"]).await;

    let committer = Committer::new(&store, &table);
    let mismatch = committer.commit_pending().await.unwrap_err();
    assert_eq!(mismatch.kind(), ErrorKind::CommitMismatch, "{mismatch}");
    // Refused, with nothing written: an id the key never held, a key not in flight.
    let stranger = store.operator().settle_landed(0, &[id("x"), id("z")], "checked the table").await.unwrap_err();
    assert_eq!(stranger.kind(), ErrorKind::InvalidInput, "{stranger}");
    let not_in_flight = store.operator().settle_landed(1, &[id("x")], "checked the table").await.unwrap_err();
    assert_eq!(not_in_flight.kind(), ErrorKind::InvalidInput, "{not_in_flight}");
    assert!(matches!(store.get(&id("y")).unwrap().unwrap().state, CheckpointState::Committing { key: 0 }));

    store.operator().settle_landed(0, &[id("x")], "the table holds key 0 with x alone").await.unwrap();
    assert_eq!(store.get(&id("x")).unwrap().unwrap().state, CheckpointState::Committed { key: Some(0) });
    assert_eq!(store.get(&id("y")).unwrap().unwrap().state, CheckpointState::Sealed);
    let report = committer.finish().await.unwrap();
    assert_eq!(report.committed_keys, vec![1]);
    assert_eq!(landed(&table), vec!["x-rows", "y-rows"]);
    assert!(store.is_finished().unwrap());
}

/// The same key un-bound first (the old way out): the next begin finds key 0 in the table and refuses, and the
/// error names what happened and the way out — not "the job's state was lost" (this store holds the job's
/// history). `settle_landed` of the next key then records what landed. (Fails with the old message.)
#[tokio::test]
async fn an_unbound_key_still_in_the_table_is_refused_with_the_way_out() {
    let table = HistoryTable::new();
    let backend = CrashBackend::new();
    let store = open(&backend).await;
    seal(&store, "x", "x-rows").await;
    begin_key_0_and_land(&store, &table, &["x"], &["x"]).await;
    store.operator().unbind(0, "an operator un-bound it").await.unwrap();
    // The operator's hatch runs in a process of its own: the job's next run opens the store again.
    store.close();
    let store = open(&backend).await;
    let refused = Committer::new(&store, &table).commit_pending().await.unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::WrongStore, "{refused}");
    let message = refused.to_string();
    assert!(!message.contains("state was lost"), "{message}");
    assert!(message.contains("settle-landed"), "{message}");
    store.operator().settle_landed(0, &[id("x")], "the table holds key 0 with x").await.unwrap();
    assert!(Committer::new(&store, &table).finish().await.unwrap().committed_keys.is_empty());
    assert_eq!(landed(&table), vec!["x-rows"]);
}
