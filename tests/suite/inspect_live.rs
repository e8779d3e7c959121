//! Reading a store file a running job holds (`Inspector::open_file`, what `sinkpoint status --store` runs): the
//! inspector reads a copy, which a commit during the copy may tear. Each read must still be a whole state the
//! job committed (every frame and value verified, the summary agreeing with it), while the job commits as fast as
//! it can. (A read may be a commit older than an earlier one: a torn copy's repair falls back to the previous
//! commit slot. So no order between reads is asserted.)

use sinkpoint::inspect::Inspector;
use sinkpoint::{Attempt, CheckpointId, JobId, Part, StagePart, StateFilter, Store, TargetIdentity};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_of_a_file_a_job_is_writing_are_whole_committed_states() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("live.redb");
    let store = Store::builder(JobId::new("live").unwrap(), TargetIdentity::new("mem://t").unwrap())
        .path(&path)
        .open()
        .await
        .unwrap();
    let writer = async {
        for n in 0..400u32 {
            let id = CheckpointId::new(format!("input-{n:04}")).unwrap();
            let part = StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![format!("k{n}").into_bytes()]);
            store.stage_and_seal(&id, part, 1).await.unwrap();
        }
    };
    let reader = async {
        let mut last = 0;
        let mut reads = 0;
        while last < 400 {
            let path = path.clone();
            let (sealed, verified) = tokio::task::spawn_blocking(move || {
                let inspector = Inspector::open_file(&path).unwrap_or_else(|e| panic!("reading a held file: {e}"));
                assert!(inspector.source().contains("held by a running job"), "{}", inspector.source());
                let report = inspector.verify().unwrap_or_else(|e| panic!("a read that is not a whole state: {e}"));
                (inspector.summary().unwrap().count(StateFilter::Sealed), report.checkpoints)
            })
            .await
            .unwrap();
            assert_eq!(sealed, verified, "the summary and the verification read different states");
            last = last.max(sealed);
            reads += 1;
        }
        reads
    };
    let ((), reads) = tokio::join!(writer, reader);
    println!("{reads} reads of the held file while 400 checkpoints were sealed");
    assert!(reads > 1);
    store.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_summary_counts_each_state_as_its_listing_does() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("counts.redb");
    let store = Store::builder(JobId::new("counts").unwrap(), TargetIdentity::new("dir:table").unwrap())
        .path(&path)
        .open()
        .await
        .unwrap();
    let table = sinkpoint::DirTable::local(dir.path().join("table")).unwrap();
    let id = |n: u32| CheckpointId::new(format!("cp-{n:03}")).unwrap();
    let part = |n: u32| StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![format!("k{n}").into_bytes()]);
    // 40 committed, then 3 sealed, 2 staged and 4 aborted beside them.
    for n in 0..40 {
        store.stage_and_seal(&id(n), part(n), 1).await.unwrap();
    }
    sinkpoint::Committer::new(&store, &table).finish().await.unwrap();
    for n in 40..43 {
        store.stage_and_seal(&id(n), part(n), 1).await.unwrap();
    }
    for n in 43..49 {
        store.stage(&id(n), part(n)).await.unwrap();
    }
    for n in 45..49 {
        store.abort(&id(n)).await.unwrap();
    }
    let want: Vec<(StateFilter, u64)> =
        StateFilter::ALL.iter().map(|f| (*f, store.list(*f).unwrap().len() as u64)).collect();
    assert_eq!(want.iter().map(|(_, n)| *n).collect::<Vec<_>>(), vec![2, 3, 0, 0, 40, 4]);
    store.close_async().await;
    let summary = Inspector::open_file(&path).unwrap().summary().unwrap();
    for (filter, count) in want {
        assert_eq!(summary.count(filter), count, "{filter:?}");
    }
}
