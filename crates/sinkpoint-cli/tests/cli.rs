//! The `sinkpoint` binary over real store files and mirrors (a local directory; moto's S3 API when
//! `SINKPOINT_S3_ENDPOINT` is set): every command, `--json` parsed, exit codes, golden text for `status` and
//! `show`, the hatches driven end to end, and a person's habits (help, wrong paths, a held store).

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;

use object_store::ObjectStore;
use serde_json::Value;
use sinkpoint::mirror::MirrorSettings;
use sinkpoint::testkit::{CommitFault, FaultyTarget, ProbeFault};
use sinkpoint::{Attempt, CheckpointId, Committer, DirTable, JobId, Part, StagePart, Store, TargetIdentity};

fn cli(args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_sinkpoint"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running sinkpoint: {e}"))
}

fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", stdout(out)))
}

/// A job's directory: the store file, the table and the mirror.
struct Job {
    dir: tempfile::TempDir,
}

impl Job {
    fn new() -> Self {
        Self { dir: tempfile::tempdir().unwrap_or_else(|e| panic!("{e}")) }
    }

    fn store_path(&self) -> PathBuf {
        self.dir.path().join("sink.redb")
    }

    fn store_arg(&self) -> String {
        self.store_path().to_string_lossy().into_owned()
    }

    fn mirror_url(&self) -> String {
        format!("file://{}/mirror/job", self.dir.path().display())
    }

    fn table(&self) -> DirTable {
        DirTable::local(self.dir.path().join("table")).unwrap_or_else(|e| panic!("{e}"))
    }

    fn mirror(&self) -> Arc<dyn ObjectStore> {
        let root = self.dir.path().join("mirror");
        std::fs::create_dir_all(&root).unwrap_or_else(|e| panic!("{e}"));
        Arc::new(object_store::local::LocalFileSystem::new_with_prefix(root).unwrap_or_else(|e| panic!("{e}")))
    }

    async fn open(&self) -> Store {
        let job = JobId::new("cli-job").unwrap_or_else(|e| panic!("{e}"));
        Store::builder(job, TargetIdentity::new("file://table").unwrap_or_else(|e| panic!("{e}")))
            .path(self.store_path())
            .mirror(self.mirror(), object_store::path::Path::from("job"), MirrorSettings::default())
            .open()
            .await
            .unwrap_or_else(|e| panic!("open: {e}"))
    }

    /// Stages and seals input `i` (one row, key `input-i`).
    async fn seal(&self, store: &Store, i: usize) {
        let id = CheckpointId::new(format!("input-{i}")).unwrap_or_else(|e| panic!("{e}"));
        let result = self.table().write_data_file(&format!("f{i}"), format!("row-{i}\n").into_bytes()).await;
        let part = StagePart::new(Attempt::FIRST, Part::FIRST)
            .keys(vec![format!("input-{i}").into_bytes()])
            .results(vec![result.unwrap_or_else(|e| panic!("{e}"))]);
        store.stage(&id, part).await.unwrap_or_else(|e| panic!("stage: {e}"));
        store.seal(&id, 1).await.unwrap_or_else(|e| panic!("seal: {e}"));
    }

    /// Two inputs committed under key 0, one sealed, one staged; closed.
    async fn ordinary(&self) {
        let store = self.open().await;
        for i in 0..2 {
            self.seal(&store, i).await;
        }
        Committer::new(&store, &self.table()).commit_pending().await.unwrap_or_else(|e| panic!("commit: {e}"));
        self.seal(&store, 2).await;
        let id = CheckpointId::new("input-3").unwrap_or_else(|e| panic!("{e}"));
        let part = StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![b"input-3".to_vec()]);
        store.stage(&id, part).await.unwrap_or_else(|e| panic!("{e}"));
        store.close_async().await;
    }

    /// Two inputs sealed, their key 0 sent with an unknown outcome that did not land, and no probe able to tell.
    async fn stuck(&self) {
        let store = self.open().await;
        for i in 0..2 {
            self.seal(&store, i).await;
        }
        let target = FaultyTarget::scripted(
            self.table(),
            vec![CommitFault::UnknownNotLanded],
            vec![ProbeFault::Pass, ProbeFault::Unknown, ProbeFault::Unknown],
        );
        let report = Committer::new(&store, &target).commit_pending().await;
        assert!(report.is_err() || report.is_ok_and(|r| r.committed_keys.is_empty()));
        store.close_async().await;
    }

    /// Runs the job to its end on the plain table; returns the table's rows, sorted.
    async fn finish(&self) -> Vec<String> {
        let store = self.open().await;
        let table = self.table();
        let committer = Committer::new(&store, &table);
        committer.recover().await.unwrap_or_else(|e| panic!("recover: {e}"));
        committer.finish().await.unwrap_or_else(|e| panic!("finish: {e}"));
        store.close_async().await;
        let mut rows = table.rows().await.unwrap_or_else(|e| panic!("{e}"));
        rows.sort();
        rows
    }
}

fn masked(text: &str, dir: &Path) -> String {
    text.replace(&dir.display().to_string(), "<dir>")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_prints_the_golden_text_and_parses_as_json() {
    let job = Job::new();
    job.ordinary().await;
    let out = cli(&["status", "--store", &job.store_arg()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let golden = "\
store        store file <dir>/sink.redb
job          cli-job
target       file://table
epoch        1
checkpoints  staged 1, sealed 1, committing 0, commit-unknown 0, committed 2, aborted 0
commits      next key 1, in flight: none
finished     no
retention    no constraint (nothing in flight)
next         nothing blocks the job
";
    assert_eq!(masked(&stdout(&out), job.dir.path()), golden);
    let value = json(&cli(&["status", "--store", &job.store_arg(), "--json"]));
    assert_eq!(value["job"], "cli-job");
    assert_eq!(value["counts"]["committed"], 2);
    assert_eq!(value["counts"]["sealed"], 1);
    assert_eq!(value["blocked"], false);
    // With the file and its mirror: how far the mirror is behind (synchronous mode: not at all).
    let both = json(&cli(&["status", "--store", &job.store_arg(), "--mirror", &job.mirror_url(), "--json"]));
    assert_eq!(both["mirror_lag_records"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_reading_command_answers_from_the_file_and_from_the_mirror() {
    let job = Job::new();
    job.ordinary().await;
    let (store, mirror) = (job.store_arg(), job.mirror_url());
    for source in [["--store", store.as_str()], ["--mirror", mirror.as_str()]] {
        let run = |args: &[&str]| {
            let out = cli(&[args, &source[..], &["--json"]].concat());
            assert_eq!(code(&out), 0, "{args:?} {source:?}: {}", stderr(&out));
            json(&out)
        };
        assert_eq!(run(&["status"])["counts"]["staged"], 1, "{source:?}");
        let list = run(&["list"]);
        let ids: Vec<&str> = list.as_array().into_iter().flatten().filter_map(|c| c["id"].as_str()).collect();
        assert_eq!(ids, ["input-0", "input-1", "input-2", "input-3"], "{source:?}");
        assert_eq!(run(&["list", "--state", "sealed"]).as_array().map(Vec::len), Some(1));
        let shown = run(&["show", "input-0"]);
        assert_eq!((shown["state"].as_str(), shown["commit"]["key"].as_u64()), (Some("committed"), Some(0)));
        let keys = run(&["keys", "--prefix", "input-"]);
        assert_eq!(keys.as_array().map(Vec::len), Some(3), "sealed or committed keys only: {keys}");
        assert_eq!(run(&["keys", "--limit", "1"]).as_array().map(Vec::len), Some(1));
        let commits = run(&["commits"]);
        assert_eq!(commits[0]["ids"], serde_json::json!(["input-0", "input-1"]));
        assert_eq!(run(&["verify"])["checkpoints"], 4);
    }
    let export = cli(&["export", "--store", &store]);
    assert_eq!(code(&export), 0);
    let kinds: Vec<String> = stdout(&export)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("{e}: {l}"))["kind"].to_string())
        .collect();
    assert_eq!(kinds.iter().filter(|k| k.contains("checkpoint")).count(), 4);
    assert_eq!(kinds.iter().filter(|k| k.contains("commit")).count(), 1);
    assert_eq!(kinds.iter().filter(|k| k.contains("key")).count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_prints_the_golden_text() {
    let job = Job::new();
    job.ordinary().await;
    let out = cli(&["show", "input-1", "--store", &job.store_arg()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let golden = "\
id           input-1
state        committed
attempt      0 (begun by epoch 1)
parts        1
results      1
commit       key 0  committed  2 checkpoints  prepared at version (none given)  epoch 1
";
    assert_eq!(stdout(&out), golden);
}

/// An unknown key no probe can settle: status says so (exit 1); the operator, having looked at the table,
/// resolves it not-committed; the next run re-commits once and the table holds every row once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_key_resolved_not_committed_commits_every_row_once() {
    let job = Job::new();
    job.stuck().await;
    let status = cli(&["status", "--store", &job.store_arg()]);
    assert_eq!(code(&status), 1, "{}", stdout(&status));
    assert!(stdout(&status).contains("BLOCKED      key 0's outcome is unknown"), "{}", stdout(&status));
    let resolve = ["resolve", "0", "not-committed", "--reason", "table checked", "--store", &job.store_arg()];
    let unmirrored = cli(&resolve);
    assert_eq!(code(&unmirrored), 2, "a mirrored store needs its mirror: {}", stderr(&unmirrored));
    assert!(stderr(&unmirrored).contains("--mirror URL"), "{}", stderr(&unmirrored));
    let resolved = cli(&[&resolve[..], &["--mirror", &job.mirror_url()]].concat());
    assert_eq!(code(&resolved), 0, "{}", stderr(&resolved));
    let after = json(&cli(&["status", "--store", &job.store_arg(), "--json"]));
    assert_eq!(after["in_flight"]["awaits_recommit"], true, "{after}");
    assert_eq!(job.finish().await, ["row-0", "row-1"]);
}

/// The lossless way out: un-bind the stuck key; its checkpoints are Sealed again and the next run commits them
/// once under a fresh probe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unbound_key_commits_every_row_once() {
    let job = Job::new();
    job.stuck().await;
    let out = cli(&[
        "unbind",
        "0",
        "--reason",
        "not in the table",
        "--store",
        &job.store_arg(),
        "--mirror",
        &job.mirror_url(),
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let sealed = json(&cli(&["list", "--state", "sealed", "--json", "--mirror", &job.mirror_url()]));
    assert_eq!(sealed.as_array().map(Vec::len), Some(2), "the un-bind is in the mirror too: {sealed}");
    assert_eq!(job.finish().await, ["row-0", "row-1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_abort_lists_the_results_to_clean_up_and_refuses_committed_checkpoints() {
    let job = Job::new();
    job.ordinary().await;
    let mirror = ["--store", &job.store_arg(), "--mirror", &job.mirror_url()];
    let out = cli(&[&["force-abort", "input-2", "--reason", "bad input"], &mirror[..]].concat());
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).contains("f2"), "the aborted data file is named: {}", stdout(&out));
    let refused = cli(&[&["force-abort", "input-0", "--reason", "oops"], &mirror[..]].concat());
    assert_eq!(code(&refused), 7, "{}", stderr(&refused));
    assert_eq!(stderr(&refused).lines().count(), 1, "{}", stderr(&refused));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_takes_the_mirror_over_only_when_told() {
    let job = Job::new();
    job.ordinary().await;
    let to = job.dir.path().join("restored.redb");
    let to_arg = to.to_string_lossy().into_owned();
    let refused = cli(&["restore", "--mirror", &job.mirror_url(), "--to", &to_arg]);
    assert_eq!(code(&refused), 2);
    assert!(stderr(&refused).contains("--take-over"), "{}", stderr(&refused));
    let out = cli(&["restore", "--mirror", &job.mirror_url(), "--to", &to_arg, "--take-over"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let restored = json(&cli(&["status", "--store", &to_arg, "--json"]));
    assert_eq!((restored["counts"]["committed"].as_u64(), restored["epoch"].as_u64()), (Some(2), Some(2)));
}

/// A store a crashed job left unclean (here: the bytes of a live store, as a crash would leave them) needs
/// redb's repair, which a read-only open refuses: the inspector repairs a copy in memory and never writes the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_reads_a_store_a_crash_left_unclean_without_writing_it() {
    let job = Job::new();
    let store = job.open().await;
    for i in 0..2 {
        job.seal(&store, i).await;
    }
    let crashed = job.dir.path().join("crashed.redb");
    std::fs::copy(job.store_path(), &crashed).unwrap_or_else(|e| panic!("{e}"));
    store.close_async().await;
    let before = std::fs::read(&crashed).unwrap_or_else(|e| panic!("{e}"));
    let out = cli(&["status", "--json", "--store", &crashed.to_string_lossy()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let value = json(&out);
    assert_eq!(value["counts"]["sealed"], 2, "{value}");
    assert!(value["source"].as_str().is_some_and(|s| s.contains("repaired in memory")), "{value}");
    assert_eq!(std::fs::read(&crashed).unwrap_or_else(|e| panic!("{e}")), before, "the file was written");
}

/// What a person tries first: help, a wrong path, a wrong URL, S3 without credentials, a store a job holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persons_habits_get_one_line_errors_and_the_right_exit_codes() {
    let help = cli(&["--help"]);
    assert_eq!(code(&help), 0);
    assert!(stdout(&help).contains("Exit codes:"), "{}", stdout(&help));
    for command in
        ["status", "list", "show", "keys", "commits", "verify", "export", "restore", "resolve", "force-abort", "unbind"]
    {
        let out = cli(&[command, "--help"]);
        assert_eq!(code(&out), 0, "{command} --help");
    }
    assert_eq!(code(&cli(&[])), 2);
    assert_eq!(code(&cli(&["status"])), 2, "neither --store nor --mirror");
    let missing = cli(&["status", "--store", "/nonexistent/sink.redb"]);
    assert_eq!((code(&missing), stderr(&missing).lines().count()), (5, 1), "{}", stderr(&missing));
    let bad_url = cli(&["status", "--mirror", "not a url"]);
    assert_eq!(code(&bad_url), 2, "{}", stderr(&bad_url));
    let no_dir = cli(&["status", "--mirror", "file:///nonexistent/mirror"]);
    assert_eq!(code(&no_dir), 5, "{}", stderr(&no_dir));
    let s3 = std::process::Command::new(env!("CARGO_BIN_EXE_sinkpoint"))
        .args(["status", "--mirror", "s3://bucket/prefix"])
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .env_remove("AWS_WEB_IDENTITY_TOKEN_FILE")
        .env_remove("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(code(&s3), 2, "{}", stderr(&s3));
    assert!(stderr(&s3).contains("AWS_ACCESS_KEY_ID"), "{}", stderr(&s3));

    let job = Job::new();
    job.ordinary().await;
    let store = job.open().await;
    let held = cli(&["status", "--store", &job.store_arg()]);
    assert_eq!(code(&held), 4, "{}", stderr(&held));
    assert_eq!(stderr(&held).lines().count(), 1, "{}", stderr(&held));
    let hatch = cli(&["unbind", "0", "--reason", "x", "--store", &job.store_arg()]);
    assert_eq!(code(&hatch), 4, "a hatch is refused while the job runs: {}", stderr(&hatch));
    // The mirror is readable while the job runs.
    assert_eq!(code(&cli(&["status", "--mirror", &job.mirror_url()])), 0);
    store.close_async().await;
    let unknown = cli(&["show", "no-such-id", "--store", &job.store_arg()]);
    assert_eq!(code(&unknown), 5, "{}", stderr(&unknown));
}

/// The same reads on a mirror in moto's S3 API, configured the way an operator would: the AWS_* environment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_reads_a_mirror_on_the_s3_api() {
    let Some(endpoint) = sinkpoint::testkit::s3_endpoint() else { return };
    let bucket = format!("sinkpoint-cli-{}", std::process::id());
    sinkpoint::testkit::create_s3_bucket(&endpoint, &bucket).unwrap_or_else(|e| panic!("{e}"));
    let s3 = object_store::aws::AmazonS3Builder::new()
        .with_endpoint(&endpoint)
        .with_allow_http(true)
        .with_bucket_name(&bucket)
        .with_access_key_id("test")
        .with_secret_access_key("test")
        .with_region("us-east-1")
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let job = JobId::new("cli-s3-job").unwrap_or_else(|e| panic!("{e}"));
    let store = Store::builder(job, TargetIdentity::new("s3://t").unwrap_or_else(|e| panic!("{e}")))
        .path(dir.path().join("sink.redb"))
        .mirror(Arc::new(s3), object_store::path::Path::from("jobs/a"), MirrorSettings::default())
        .open()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let id = CheckpointId::new("input-0").unwrap_or_else(|e| panic!("{e}"));
    let part = StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![b"k0".to_vec()]);
    store.stage(&id, part).await.unwrap_or_else(|e| panic!("{e}"));
    store.seal(&id, 1).await.unwrap_or_else(|e| panic!("{e}"));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sinkpoint"))
        .args(["status", "--json", "--mirror", &format!("s3://{bucket}/jobs/a")])
        .env("AWS_ENDPOINT", &endpoint)
        .env("AWS_ALLOW_HTTP", "true")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let value = json(&out);
    assert_eq!((value["job"].as_str(), value["counts"]["sealed"].as_u64()), (Some("cli-s3-job"), Some(1)));
    store.close_async().await;
}
