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
