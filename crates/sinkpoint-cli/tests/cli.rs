//! The `sinkpoint` binary over real store files and mirrors (a local directory; moto's S3 API when
//! `SINKPOINT_S3_ENDPOINT` is set): every command, `--json` parsed, exit codes, golden text for `status` and
//! `show`, the hatches driven end to end, a person's habits (help, wrong paths, a held store: read from a copy,
//! never changed), and `gc`: it
//! deletes exactly the garbage past its age (the mirror still restores every checkpoint), keeps what is young,
//! and lists inbox parts no committer will adopt with the write results to clean up.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;

use object_store::{ObjectStore, ObjectStoreExt as _};
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
        self.open_with(MirrorSettings::default()).await
    }

    async fn open_with(&self, settings: MirrorSettings) -> Store {
        let job = JobId::new("cli-job").unwrap_or_else(|e| panic!("{e}"));
        Store::builder(job, TargetIdentity::new("file://table").unwrap_or_else(|e| panic!("{e}")))
            .path(self.store_path())
            .mirror(self.mirror(), object_store::path::Path::from("job"), settings)
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

    /// Seals inputs 0..6, commits them, seals 6..9, and closes `store`: with frequent snapshots and no
    /// collection of its own, a mirror full of superseded objects (what the `gc` tests collect).
    async fn seal_commit_seal_and_close(&self, store: Store) {
        for i in 0..6 {
            self.seal(&store, i).await;
        }
        Committer::new(&store, &self.table()).commit_pending().await.unwrap_or_else(|e| panic!("commit: {e}"));
        for i in 6..9 {
            self.seal(&store, i).await;
        }
        store.close_async().await;
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

/// Every file under `dir`, relative to it, sorted.
fn files_under(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(root, &path, out);
            } else if let Ok(rel) = path.strip_prefix(root) {
                out.push(rel.to_string_lossy().into_owned());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// Sets a file's modification time (an object's `last_modified` in a local object store) `back` earlier than it
/// is: how a test makes an object old without waiting.
fn backdate(path: &Path, back: std::time::Duration) {
    let file = std::fs::File::options().write(true).open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let modified = file.metadata().and_then(|m| m.modified()).unwrap_or_else(|e| panic!("{e}"));
    file.set_modified(modified - back).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// The paths a `gc --json` report lists under `section` (`mirror`, `inbox`) and `list` (`due`, `young`), sorted.
fn listed(report: &Value, section: &str, list: &str) -> Vec<String> {
    let mut paths: Vec<String> = report[section][list]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| o["path"].as_str().map(str::to_owned))
        .collect();
    paths.sort();
    paths
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
garbage      0 ledger entries
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
    let unbind = ["unbind", "0", "--reason", "not in the table", "--store", &job.store_arg()];
    let mirror_url = job.mirror_url();
    let unbind = [&unbind[..], &["--mirror", &mirror_url]].concat();
    let unchecked = cli(&unbind);
    assert_eq!(code(&unchecked), 2, "un-binding needs the table's word: {}", stderr(&unchecked));
    assert!(stderr(&unchecked).contains("--i-checked-the-table"), "{}", stderr(&unchecked));
    let table_url = format!("file://{}/table", job.dir.path().display());
    let out = cli(&[&unbind[..], &["--table", &table_url]].concat());
    assert_eq!(code(&out), 0, "the table does not hold key 0: {}", stderr(&out));
    let sealed = json(&cli(&["list", "--state", "sealed", "--json", "--mirror", &job.mirror_url()]));
    assert_eq!(sealed.as_array().map(Vec::len), Some(2), "the un-bind is in the mirror too: {sealed}");
    assert_eq!(job.finish().await, ["row-0", "row-1"]);
}

/// The way out of a key the table holds with part of its set: `settle-landed` records the named checkpoints
/// Committed under the key and the key's others Sealed again; an id the key never held is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_settled_as_landed_commits_the_named_checkpoints_and_seals_the_rest() {
    let job = Job::new();
    job.stuck().await;
    let mirror = ["--reason", "table checked", "--store", &job.store_arg(), "--mirror", &job.mirror_url()];
    let stranger = cli(&[&["settle-landed", "0", "input-0", "no-such-input"], &mirror[..]].concat());
    assert_eq!(code(&stranger), 2, "{}", stderr(&stranger));
    assert!(stderr(&stranger).contains("not among them"), "{}", stderr(&stranger));
    let out = cli(&[&["settle-landed", "0", "input-0"], &mirror[..]].concat());
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let sealed = json(&cli(&["list", "--state", "sealed", "--json", "--mirror", &job.mirror_url()]));
    assert_eq!(sealed.as_array().map(Vec::len), Some(1), "the key's other checkpoint is Sealed again: {sealed}");
    let committed = json(&cli(&["list", "--state", "committed", "--json", "--mirror", &job.mirror_url()]));
    assert_eq!(committed.as_array().map(Vec::len), Some(1), "{committed}");
}

/// Every changing command answers `--json` with one object (`command`, `changed`, `outcome` and its fields), and a
/// key settled as landed after an un-bind (the next key's path) keeps the operator's reason where `status` reads it
/// back. (Before, `--json` was refused by the changing commands, and that path recorded no reason.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_changing_commands_answer_json_and_a_settled_next_key_keeps_its_reason() {
    let job = Job::new();
    job.stuck().await;
    let mirror_url = job.mirror_url();
    let store = ["--store", &job.store_arg(), "--mirror", &mirror_url, "--json"];
    let resolved = json(&cli(&[&["resolve", "0", "not-committed", "--reason", "looked"], &store[..]].concat()));
    assert_eq!(
        (&resolved["command"], &resolved["changed"], &resolved["key"]),
        (&"resolve".into(), &true.into(), &0.into())
    );
    assert_eq!(resolved["verdict"], "not-committed", "{resolved}");
    let again = json(&cli(&[&["resolve", "0", "not-committed", "--reason", "looked"], &store[..]].concat()));
    assert_eq!(again["changed"], false, "the same verdict again changes nothing: {again}");
    let unbind = ["unbind", "0", "--reason", "looked", "--i-checked-the-table"];
    let unbound = json(&cli(&[&unbind[..], &store[..]].concat()));
    assert_eq!((&unbound["command"], &unbound["changed"]), (&"unbind".into(), &true.into()), "{unbound}");
    let settle = ["settle-landed", "0", "input-0", "input-1", "--reason", "the table holds both"];
    let settled = json(&cli(&[&settle[..], &store[..]].concat()));
    assert_eq!(settled["committed"], serde_json::json!(["input-0", "input-1"]), "{settled}");
    let status = json(&cli(&["status", "--store", &job.store_arg(), "--json"]));
    let last = &status["last_operator_record"];
    assert_eq!((&last["action"], &last["key"]), (&"resolve".into(), &0.into()), "{status}");
    let reason = last["reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("settle-landed of input-0, input-1: ") && reason.ends_with("the table holds both"),
        "{reason}"
    );

    let to = job.dir.path().join("restored.redb");
    let to_arg = to.display().to_string();
    let restored = json(&cli(&["restore", "--mirror", &mirror_url, "--to", &to_arg, "--take-over", "--json"]));
    assert_eq!((&restored["command"], &restored["commit_keys"]), (&"restore".into(), &1.into()), "{restored}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_abort_lists_the_results_to_clean_up_and_refuses_committed_checkpoints() {
    let job = Job::new();
    job.ordinary().await;
    let mirror = ["--store", &job.store_arg(), "--mirror", &job.mirror_url()];
    let out = cli(&[&["force-abort", "input-2", "--reason", "bad input", "--json"], &mirror[..]].concat());
    let aborted = json(&out);
    assert_eq!(aborted["aborted"], serde_json::json!(["input-2"]), "{aborted}");
    assert!(aborted["write_results"].to_string().contains("f2"), "the aborted data file is named: {aborted}");
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

/// A store of job `job` and target `target` at `dir/name` without a mirror, with one sealed checkpoint of `keys`
/// source keys (each about 60 bytes: `keys` prints them all), closed.
async fn store_of(dir: &Path, name: &str, job: &str, target: &str, keys: usize) -> PathBuf {
    let path = dir.join(name);
    let job = JobId::new(job).unwrap_or_else(|e| panic!("{e}"));
    let target = TargetIdentity::new(target).unwrap_or_else(|e| panic!("{e}"));
    let store = Store::builder(job, target).path(&path).open().await.unwrap_or_else(|e| panic!("open: {e}"));
    let id = CheckpointId::new("input-0").unwrap_or_else(|e| panic!("{e}"));
    let keys = (0..keys).map(|k| format!("s3://bucket/inputs/a-rather-long-source-key-{k:012}.csv").into_bytes());
    let part = StagePart::new(Attempt::FIRST, Part::FIRST).keys(keys.collect());
    store.stage(&id, part).await.unwrap_or_else(|e| panic!("stage: {e}"));
    store.seal(&id, 1).await.unwrap_or_else(|e| panic!("seal: {e}"));
    store.close_async().await;
    path
}

/// `sinkpoint keys … | head -1`: the reader closes the pipe after one line, while the command still prints
/// (600 kB, far over a pipe's buffer). No panic, no backtrace, and the command's own exit code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_closes_the_pipe_early_gets_no_panic_and_the_commands_exit_code() {
    use std::io::BufRead as _;
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let path = store_of(dir.path(), "big.redb", "cli-job", "file://table", 10_000).await;
    for command in ["keys", "export"] {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_sinkpoint"))
            .args([command, "--store", &path.to_string_lossy()])
            .env("RUST_BACKTRACE", "1")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{e}"));
        let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
        let mut first = String::new();
        std::io::BufReader::new(stdout).read_line(&mut first).unwrap_or_else(|e| panic!("{e}"));
        assert!(!first.is_empty(), "{command}: no first line");
        // The reader and its buffer are dropped here: the pipe is closed while the command still prints.
        let out = child.wait_with_output().unwrap_or_else(|e| panic!("{e}"));
        assert!(!stderr(&out).contains("panicked"), "{command}: {}", stderr(&out));
        assert_eq!((code(&out), stderr(&out)), (0, String::new()), "{command}");
    }
}

/// A store file cut to half its length (a bad copy, a full disk) is damage, exit 3, naming the file and saying
/// to restore it: never "transient; retry". Both a closed store's file and one a crash left unclean (read from
/// a copy in memory, where a page past the cut end is an I/O error of the copy).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_truncated_to_half_is_corrupt_naming_the_file() {
    let job = Job::new();
    let store = job.open().await;
    for i in 0..20 {
        job.seal(&store, i).await;
    }
    let crashed = job.dir.path().join("crashed.redb");
    std::fs::copy(job.store_path(), &crashed).unwrap_or_else(|e| panic!("{e}"));
    store.close_async().await;
    for path in [job.store_path(), crashed] {
        let file = std::fs::File::options().write(true).open(&path).unwrap_or_else(|e| panic!("{e}"));
        let len = file.metadata().unwrap_or_else(|e| panic!("{e}")).len();
        // Half, at a page boundary: a length redb's layout check accepts, so the damage shows only as a read
        // past the end.
        file.set_len(len / 2 / 4096 * 4096).unwrap_or_else(|e| panic!("{e}"));
        for command in ["status", "verify", "list"] {
            let out = cli(&[command, "--store", &path.to_string_lossy()]);
            let name = path.to_string_lossy();
            assert_eq!(code(&out), 3, "{command} {name}: {}", stderr(&out));
            assert!(stderr(&out).contains(&*name), "{command}: names the file: {}", stderr(&out));
            assert!(stderr(&out).contains("restore it from the mirror"), "{command}: {}", stderr(&out));
        }
    }
}

/// A directory given as the store file is called a directory, not missing.
#[test]
fn a_directory_given_as_the_store_is_called_a_directory() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let out = cli(&["status", "--store", &dir.path().to_string_lossy()]);
    assert_eq!(code(&out), 5, "{}", stderr(&out));
    assert!(stderr(&out).contains("is a directory, not a store file"), "{}", stderr(&out));
}

/// `status --store A --mirror B` of two jobs is refused naming both; a file read behind its mirror is shown
/// behind, not as "lag 0".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_refuses_another_jobs_mirror_and_shows_a_file_behind_its_mirror() {
    let job = Job::new();
    job.ordinary().await;
    let other = store_of(job.dir.path(), "other.redb", "other-job", "file:///other-table", 1).await;
    let mixed = cli(&["status", "--store", &other.to_string_lossy(), "--mirror", &job.mirror_url()]);
    assert_eq!(code(&mixed), 5, "{}", stdout(&mixed));
    assert!(stderr(&mixed).contains("other-job") && stderr(&mixed).contains("cli-job"), "{}", stderr(&mixed));
    // A copy of the file taken now falls behind the mirror as the job goes on.
    let stale = job.dir.path().join("stale.redb");
    std::fs::copy(job.store_path(), &stale).unwrap_or_else(|e| panic!("{e}"));
    let store = job.open().await;
    job.seal(&store, 7).await;
    store.close_async().await;
    let args = ["status", "--store", &stale.to_string_lossy(), "--mirror", &job.mirror_url()];
    let value = json(&cli(&[&args[..], &["--json"]].concat()));
    assert_eq!(value["mirror_lag_records"], 0, "{value}");
    assert!(value["file_behind_mirror_records"].as_u64().is_some_and(|n| n > 0), "{value}");
    let text = stdout(&cli(&args));
    assert!(text.contains("behind its mirror"), "{text}");
}

/// A key in flight on a target that gives no version to retain: the retention line says why there is no
/// constraint, not "nothing in flight".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_says_why_there_is_no_constraint_while_a_key_is_in_flight() {
    let job = Job::new();
    job.stuck().await;
    let text = stdout(&cli(&["status", "--store", &job.store_arg()]));
    assert!(text.contains("in flight: key 0"), "{text}");
    assert!(text.contains("retention    no constraint (the target keeps no version to retain)"), "{text}");
}

/// The help of the reading commands says what they do with a running job's file: read a copy.
#[test]
fn the_store_flags_help_says_a_running_jobs_file_is_read_from_a_copy() {
    let help = stdout(&cli(&["status", "--help"]));
    assert!(!help.contains("refused while a running job holds it"), "{help}");
    assert!(help.contains("read from a copy in"), "{help}");
    let top = stdout(&cli(&["--help"]));
    assert!(top.contains("`| head`"), "the exit codes say what a closed pipe does: {top}");
}

/// Errors an operator reads name states and places in the CLI's words, not Rust's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_speak_the_operators_language() {
    let job = Job::new();
    job.stuck().await;
    let mirror = ["--store", &job.store_arg(), "--mirror", &job.mirror_url()];
    let refused = cli(&[&["force-abort", "input-0", "--reason", "bad input"], &mirror[..]].concat());
    assert_eq!(code(&refused), 7, "{}", stderr(&refused));
    assert!(stderr(&refused).contains("is commit-unknown under key 0"), "{}", stderr(&refused));
    assert!(!stderr(&refused).contains('{'), "no Rust Debug: {}", stderr(&refused));
    let unmirrored = cli(&["unbind", "0", "--reason", "x", "--store", &job.store_arg()]);
    for library in ["StoreBuilder::mirror", "LocalFileSystem("] {
        assert!(!stderr(&unmirrored).contains(library), "{}", stderr(&unmirrored));
    }
    let store = job.open().await;
    let held = cli(&[&["unbind", "0", "--reason", "x"], &mirror[..]].concat());
    store.close_async().await;
    assert_eq!(code(&held), 4, "{}", stderr(&held));
    assert!(!stderr(&held).contains("give this one its own file"), "{}", stderr(&held));
}

/// A mirror is named by its URL (with the leading `/`), and its verify says what it checked: the records its
/// restore replayed, not "0 log frames".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirror_is_named_by_its_url_and_its_verify_says_what_it_checked() {
    let job = Job::new();
    job.ordinary().await;
    let status = stdout(&cli(&["status", "--mirror", &job.mirror_url()]));
    assert!(status.starts_with(&format!("store        mirror at {}\n", job.mirror_url())), "{status}");
    let verify = cli(&["verify", "--mirror", &job.mirror_url()]);
    assert_eq!(code(&verify), 0, "{}", stderr(&verify));
    assert!(!stdout(&verify).contains("0 log frames"), "{}", stdout(&verify));
    assert!(stdout(&verify).contains("log records replayed"), "{}", stdout(&verify));
    let value = json(&cli(&["verify", "--mirror", &job.mirror_url(), "--json"]));
    assert!(value["mirror_records"].as_u64().is_some_and(|n| n > 0), "{value}");
}

/// The reasons operators recorded are read back: `show`, `commits`, `status` and `export`, from the file and
/// from the mirror, text and JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reasons_operators_recorded_are_read_back() {
    let job = Job::new();
    job.stuck().await;
    let mirror = ["--store", &job.store_arg(), "--mirror", &job.mirror_url()];
    let resolved =
        cli(&[&["resolve", "0", "not-committed", "--reason", "not in the table, checked"], &mirror[..]].concat());
    assert_eq!(code(&resolved), 0, "{}", stderr(&resolved));
    let (store, url) = (job.store_arg(), job.mirror_url());
    for source in [["--store", store.as_str()], ["--mirror", url.as_str()]] {
        let run = |args: &[&str]| stdout(&cli(&[args, &source[..]].concat()));
        for command in [&["show", "input-0"][..], &["commits"], &["status"]] {
            let text = run(command);
            assert!(text.contains("not in the table, checked"), "{command:?} {source:?}: {text}");
        }
        let shown = json(&cli(&[&["show", "input-0", "--json"], &source[..]].concat()));
        assert_eq!(shown["operator_records"][0]["action"], "resolve", "{shown}");
        assert_eq!(shown["operator_records"][0]["resolution"], "not-committed", "{shown}");
        let commits = json(&cli(&[&["commits", "--json"], &source[..]].concat()));
        assert!(commits[0]["operator_records"][0]["reason"].as_str().is_some_and(|r| r.contains("checked")));
        let status = json(&cli(&[&["status", "--json"], &source[..]].concat()));
        assert_eq!(status["last_operator_record"]["key"], 0, "{status}");
        let export = run(&["export"]);
        assert!(
            export.lines().any(|l| l.contains("\"kind\":\"operator_record\"") && l.contains("checked")),
            "{export}"
        );
    }
}

/// After an un-bind, status shows it (the reason, and that the next run probes the key), not "nothing blocks
/// the job".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_a_recorded_unbind() {
    let job = Job::new();
    job.stuck().await;
    let mirror = ["--store", &job.store_arg(), "--mirror", &job.mirror_url()];
    let out = cli(
        &[&["unbind", "0", "--reason", "key 0 is not in the table", "--i-checked-the-table"], &mirror[..]].concat()
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&cli(&["status", "--store", &job.store_arg()]));
    assert!(!text.contains("nothing blocks the job"), "{text}");
    assert!(text.contains("key 0 was un-bound") && text.contains("key 0 is not in the table"), "{text}");
    assert!(text.contains("probes the table for key 0"), "{text}");
}

/// The garbage ledger's collector is named by the target's kind: a Lance job is pointed at the Lance
/// collector, not at `gc --table` (which reads a DirTable only).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_points_a_lance_job_at_the_lance_collector() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let path = dir.path().join("lance.redb");
    let job = JobId::new("lance-job").unwrap_or_else(|e| panic!("{e}"));
    let target = TargetIdentity::new("lance:/data/table.lance").unwrap_or_else(|e| panic!("{e}"));
    let store = Store::builder(job, target).path(&path).open().await.unwrap_or_else(|e| panic!("open: {e}"));
    let id = CheckpointId::new("input-0").unwrap_or_else(|e| panic!("{e}"));
    let result = sinkpoint::WriteResult::new(sinkpoint::Format::Parquet, b"data/f0.lance".to_vec());
    let part = StagePart::new(Attempt::FIRST, Part::FIRST).results(vec![result.unwrap_or_else(|e| panic!("{e}"))]);
    store.stage(&id, part).await.unwrap_or_else(|e| panic!("stage: {e}"));
    store.abort(&id).await.unwrap_or_else(|e| panic!("abort: {e}"));
    store.close_async().await;
    let text = stdout(&cli(&["status", "--store", &path.to_string_lossy()]));
    assert!(text.contains("garbage      1 ledger entries"), "{text}");
    assert!(text.contains("LanceSink.collect_orphans"), "{text}");
    assert!(!text.contains("--table URL collects them"), "{text}");
}

/// What a person tries first: help, a wrong path, a wrong URL, S3 without credentials, a store a job holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persons_habits_get_one_line_errors_and_the_right_exit_codes() {
    let help = cli(&["--help"]);
    assert_eq!(code(&help), 0);
    assert!(stdout(&help).contains("Exit codes:"), "{}", stdout(&help));
    for command in [
        "status",
        "list",
        "show",
        "keys",
        "commits",
        "verify",
        "export",
        "restore",
        "resolve",
        "force-abort",
        "unbind",
        "settle-landed",
    ] {
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
    // A reading command on a running job's file reads a copy (the file is the job's alone).
    let before = std::fs::read(job.store_path()).unwrap();
    let held = cli(&["status", "--store", &job.store_arg(), "--json"]);
    assert_eq!(code(&held), 0, "{}", stderr(&held));
    let status = json(&held);
    assert!(status["source"].as_str().unwrap().contains("held by a running job"), "{status}");
    assert_eq!(status["job"], "cli-job", "{status}");
    let listed = cli(&["list", "--store", &job.store_arg()]);
    assert_eq!(code(&listed), 0, "{}", stderr(&listed));
    assert_eq!(std::fs::read(job.store_path()).unwrap(), before, "reading a held file wrote it");
    let hatch = cli(&["unbind", "0", "--reason", "x", "--store", &job.store_arg()]);
    assert_eq!(code(&hatch), 4, "a hatch is refused while the job runs: {}", stderr(&hatch));
    // The mirror is readable while the job runs.
    assert_eq!(code(&cli(&["status", "--mirror", &job.mirror_url()])), 0);
    store.close_async().await;
    let unknown = cli(&["show", "no-such-id", "--store", &job.store_arg()]);
    assert_eq!(code(&unknown), 5, "{}", stderr(&unknown));
}

/// A new bucket on moto's S3 API (named after `test` and this process) and the store over it.
fn moto_bucket(endpoint: &str, test: &str) -> (String, Arc<dyn ObjectStore>) {
    let bucket = format!("sinkpoint-cli-{test}-{}", std::process::id());
    sinkpoint::testkit::create_s3_bucket(endpoint, &bucket).unwrap_or_else(|e| panic!("{e}"));
    let s3 = object_store::aws::AmazonS3Builder::new()
        .with_endpoint(endpoint)
        .with_allow_http(true)
        .with_bucket_name(&bucket)
        .with_access_key_id("test")
        .with_secret_access_key("test")
        .with_region("us-east-1")
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    (bucket, Arc::new(s3))
}

/// Runs the binary configured for moto the way an operator would: the AWS_* environment.
fn cli_s3(endpoint: &str, args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_sinkpoint"))
        .args(args)
        .env("AWS_ENDPOINT", endpoint)
        .env("AWS_ALLOW_HTTP", "true")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .output()
        .unwrap_or_else(|e| panic!("running sinkpoint: {e}"))
}

/// The same reads on a mirror in moto's S3 API, configured the way an operator would: the AWS_* environment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_reads_a_mirror_on_the_s3_api() {
    let Some(endpoint) = sinkpoint::testkit::s3_endpoint() else { return };
    let (bucket, s3) = moto_bucket(&endpoint, "status");
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let job = JobId::new("cli-s3-job").unwrap_or_else(|e| panic!("{e}"));
    let store = Store::builder(job, TargetIdentity::new("s3://t").unwrap_or_else(|e| panic!("{e}")))
        .path(dir.path().join("sink.redb"))
        .mirror(s3, object_store::path::Path::from("jobs/a"), MirrorSettings::default())
        .open()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let id = CheckpointId::new("input-0").unwrap_or_else(|e| panic!("{e}"));
    let part = StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![b"k0".to_vec()]);
    store.stage(&id, part).await.unwrap_or_else(|e| panic!("{e}"));
    store.seal(&id, 1).await.unwrap_or_else(|e| panic!("{e}"));
    let out = cli_s3(&endpoint, &["status", "--json", "--mirror", &format!("s3://{bucket}/jobs/a")]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let value = json(&out);
    assert_eq!((value["job"].as_str(), value["counts"]["sealed"].as_u64()), (Some("cli-s3-job"), Some(1)));
    store.close_async().await;
}

// ---- gc ----

/// A report's paths relative to the job's mirror directory (`wal/…`, `snapshot/…`, `manifest/…`).
fn in_mirror(paths: Vec<String>) -> Vec<String> {
    paths.into_iter().map(|p| p.split_once("/mirror/job/").map_or(p.clone(), |(_, rel)| rel.to_owned())).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_deletes_exactly_the_mirror_objects_no_restore_needs_and_the_mirror_still_restores_every_checkpoint() {
    let job = Job::new();
    // A job that snapshots often and never collects itself: a writer that died before its collection was due.
    let settings = MirrorSettings {
        snapshot_interval_records: 3,
        snapshot_log_ratio_percent: 0,
        gc_age_ms_min: u64::MAX,
        ..MirrorSettings::default()
    };
    let store = job.open_with(settings).await;
    job.seal_commit_seal_and_close(store).await;
    let root = job.dir.path().join("mirror/job");
    let before_gc = files_under(&root);
    let slot_of = |name: &str| name.rsplit('/').next().and_then(|l| l.split('.').next()).map(str::to_owned);
    let snapshots: Vec<&String> = before_gc.iter().filter(|f| f.starts_with("snapshot/")).collect();
    let base =
        snapshots.iter().filter_map(|f| slot_of(f)).max().unwrap_or_else(|| panic!("no snapshot: {before_gc:?}"));
    let base_slot: u64 = base.parse().unwrap_or_else(|e| panic!("{e}"));
    let newest_manifest =
        before_gc.iter().filter(|f| f.starts_with("manifest/")).max().cloned().unwrap_or_else(|| panic!("no manifest"));
    // What superseded the newest manifest's base: every older manifest, every slot and snapshot below the base.
    let mut superseded: Vec<String> = before_gc
        .iter()
        .filter(|f| {
            (f.starts_with("manifest/") && **f != newest_manifest)
                || ((f.starts_with("wal/") || f.starts_with("snapshot/")) && slot_of(f).is_some_and(|s| s < base))
        })
        .cloned()
        .collect();
    assert!(superseded.iter().any(|f| f.starts_with("wal/")), "the job left no superseded segment: {before_gc:?}");
    assert!(superseded.iter().any(|f| f.starts_with("snapshot/")), "no superseded snapshot: {before_gc:?}");
    // A crashed writer's half-shipped snapshot above the base (chunk 1 and chunk 0, no manifest names it), and a
    // snapshot being written right now: its chunk 2 is old, its chunk 1 young, and a snapshot is as young as its
    // youngest chunk.
    let stray = |slot: u64, chunk: Option<u32>| {
        let leaf = chunk.map_or(format!("{slot:020}"), |c| format!("{slot:020}.{c:010}"));
        let path = root.join("snapshot").join(leaf);
        std::fs::write(&path, b"half-shipped").unwrap_or_else(|e| panic!("{e}"));
        format!("snapshot/{}", path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default())
    };
    let dead = vec![stray(base_slot + 100, Some(1)), stray(base_slot + 100, None)];
    let live = vec![stray(base_slot + 200, Some(1)), stray(base_slot + 200, Some(2))];
    // Everything is two hours old but the live snapshot.
    for file in files_under(&root) {
        if file != live[0] {
            backdate(&root.join(&file), std::time::Duration::from_secs(2 * 3600));
        }
    }
    let url = job.mirror_url();
    let listed_before = stdout(&cli(&["list", "--mirror", &url, "--json"]));
    let commits_before = stdout(&cli(&["commits", "--mirror", &url, "--json"]));
    let keys_before = stdout(&cli(&["keys", "--mirror", &url, "--json"]));

    // Younger than the minimum age: nothing is due, everything is kept.
    let young = json(&cli(&["gc", "--mirror", &url, "--min-age", "3h", "--json"]));
    assert_eq!(young["mirror"]["due_count"], 0, "{young}");
    assert_eq!(young["mirror"]["young_count"].as_u64(), Some((superseded.len() + dead.len() + live.len()) as u64));

    // The dry run (the default) lists exactly the superseded objects and the dead stray, and deletes nothing.
    let on_disk = files_under(&root);
    let dry = cli(&["gc", "--mirror", &url, "--min-age", "1h", "--json"]);
    assert_eq!(code(&dry), 0, "{}", stderr(&dry));
    let report = json(&dry);
    let mut expected: Vec<String> = superseded.iter().chain(&dead).cloned().collect();
    expected.sort();
    superseded.sort();
    assert_eq!(in_mirror(listed(&report, "mirror", "due")), expected);
    assert_eq!(in_mirror(listed(&report, "mirror", "young")), live);
    assert_eq!(report["mirror"]["base_slot"].as_u64(), Some(base_slot));
    assert_eq!(report["mirror"]["deleted"], Value::Null);
    let bytes: u64 = expected.iter().map(|f| std::fs::metadata(root.join(f)).map_or(0, |m| m.len())).sum();
    assert_eq!(report["mirror"]["due_bytes"].as_u64(), Some(bytes));
    assert_eq!(files_under(&root), on_disk, "a dry run deleted something");
    let text = cli(&["gc", "--mirror", &url, "--min-age", "1h"]);
    assert!(
        stdout(&text).contains(&format!("would delete {} objects, {bytes} bytes", expected.len())),
        "{}",
        stdout(&text)
    );
    assert!(stdout(&text).contains("dry run: nothing was deleted"), "{}", stdout(&text));

    // --apply deletes exactly those.
    let applied = json(&cli(&["gc", "--mirror", &url, "--min-age", "1h", "--apply", "--json"]));
    assert_eq!(applied["mirror"]["deleted"].as_u64(), Some(expected.len() as u64), "{applied}");
    let left: Vec<String> = on_disk.iter().filter(|f| !expected.contains(f)).cloned().collect();
    assert_eq!(files_under(&root), left);
    assert!(left.contains(&newest_manifest) && live.iter().all(|f| left.contains(f)));

    // The mirror still restores, with every checkpoint, commit and key as before.
    assert_eq!(stdout(&cli(&["list", "--mirror", &url, "--json"])), listed_before);
    let restored = job.dir.path().join("restored.redb");
    let restore = cli(&["restore", "--mirror", &url, "--to", &restored.to_string_lossy(), "--take-over"]);
    assert_eq!(code(&restore), 0, "{}", stderr(&restore));
    let file = restored.to_string_lossy().into_owned();
    assert_eq!(stdout(&cli(&["list", "--store", &file, "--json"])), listed_before);
    assert_eq!(stdout(&cli(&["commits", "--store", &file, "--json"])), commits_before);
    assert_eq!(stdout(&cli(&["keys", "--store", &file, "--json"])), keys_before);
    assert_eq!(code(&cli(&["verify", "--store", &file])), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_refuses_a_prefix_without_a_manifest_and_needs_something_to_collect() {
    let job = Job::new();
    job.ordinary().await;
    let parent = format!("file://{}/mirror", job.dir.path().display());
    let before = files_under(&job.dir.path().join("mirror"));
    let out = cli(&["gc", "--mirror", &parent, "--min-age", "0s", "--apply"]);
    assert_eq!(code(&out), 5, "{}", stderr(&out));
    assert!(stderr(&out).contains("not a mirror"), "{}", stderr(&out));
    assert_eq!(files_under(&job.dir.path().join("mirror")), before);
    let nothing = cli(&["gc"]);
    assert_eq!(code(&nothing), 2, "{}", stderr(&nothing));
    let both = cli(&["gc", "--mirror", &job.mirror_url(), "--apply", "--dry-run"]);
    assert_eq!(code(&both), 2, "{}", stderr(&both));
    let bad_age = cli(&["gc", "--mirror", &job.mirror_url(), "--min-age", "10 minutes"]);
    assert_eq!(code(&bad_age), 2, "{}", stderr(&bad_age));
    // A fresh job's mirror has nothing due at the default minimum age.
    let fresh = json(&cli(&["gc", "--mirror", &job.mirror_url(), "--apply", "--json"]));
    assert_eq!(fresh["mirror"]["due_count"], 0, "{fresh}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_lists_and_deletes_inbox_parts_no_committer_will_adopt_and_keeps_young_unclaimed_ones() {
    use sinkpoint::shared::{SharedStaging, Worker};
    use sinkpoint::{Format, WriteResult};
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let root = dir.path().join("staging");
    std::fs::create_dir_all(&root).unwrap_or_else(|e| panic!("{e}"));
    let bucket: Arc<dyn ObjectStore> =
        Arc::new(object_store::local::LocalFileSystem::new_with_prefix(&root).unwrap_or_else(|e| panic!("{e}")));
    let job = JobId::new("inbox-job").unwrap_or_else(|e| panic!("{e}"));
    let shared = SharedStaging::new(bucket, "", job).unwrap_or_else(|e| panic!("{e}"));
    let worker = |name: &str, session: u128| {
        Worker::with_session(shared.clone(), name, session).unwrap_or_else(|e| panic!("{e}"))
    };
    let part = |file: &str| {
        let result = WriteResult::new(Format::Parquet, file.as_bytes().to_vec()).unwrap_or_else(|e| panic!("{e}"));
        StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![file.as_bytes().to_vec()]).results(vec![result])
    };
    let (loser, winner, dead, running) =
        (worker("loser", 1), worker("winner", 2), worker("dead", 3), worker("running", 4));
    let contested = CheckpointId::new("contested").unwrap_or_else(|e| panic!("{e}"));
    // The loser staged, then crashed; the winner staged and sealed; no committer has adopted yet.
    loser.stage(&contested, part("loser.parquet")).await.unwrap_or_else(|e| panic!("{e}"));
    winner.stage(&contested, part("winner.parquet")).await.unwrap_or_else(|e| panic!("{e}"));
    winner.seal(&contested, 1).await.unwrap_or_else(|e| panic!("{e}"));
    // A worker that died before sealing, two days ago; one still running.
    dead.stage(&CheckpointId::new("dead").unwrap_or_else(|e| panic!("{e}")), part("dead.parquet"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    running
        .stage(&CheckpointId::new("running").unwrap_or_else(|e| panic!("{e}")), part("running.parquet"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let entry_of = |session: u128| {
        files_under(&root)
            .into_iter()
            .find(|f| {
                f.contains("/inbox/")
                    && f.rsplit('/').next().is_some_and(|n| n.starts_with(&format!("{session:032x}-")))
            })
            .unwrap_or_else(|| panic!("no inbox entry of session {session}: {:?}", files_under(&root)))
    };
    let (lost, won, unclaimed, young) = (entry_of(1), entry_of(2), entry_of(3), entry_of(4));
    backdate(&root.join(&unclaimed), std::time::Duration::from_secs(48 * 3600));
    let claims: Vec<String> = files_under(&root).into_iter().filter(|f| f.contains("/claims/")).collect();
    assert!(!claims.is_empty());

    let url = format!("file://{}", root.display());
    let relative = |paths: Vec<String>| -> Vec<String> {
        paths.into_iter().map(|p| p.split_once("/staging/").map_or(p.clone(), |(_, r)| r.to_owned())).collect()
    };
    let on_disk = files_under(&root);
    let dry = cli(&["gc", "--shared", &url, "--job", "inbox-job", "--json"]);
    assert_eq!(code(&dry), 0, "{}", stderr(&dry));
    let report = json(&dry);
    let mut due = vec![lost.clone(), unclaimed.clone()];
    due.sort();
    assert_eq!(relative(listed(&report, "inbox", "due")), due, "{report}");
    assert_eq!(relative(listed(&report, "inbox", "young")), vec![young.clone()]);
    let results: Vec<&str> = report["inbox"]["due"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|e| e["results"].as_array().into_iter().flatten().filter_map(|r| r["result"].as_str()))
        .collect();
    let mut results = results;
    results.sort_unstable();
    assert_eq!(results, ["dead.parquet", "loser.parquet"]);
    let reasons: Vec<&str> =
        report["inbox"]["due"].as_array().into_iter().flatten().filter_map(|e| e["reason"].as_str()).collect();
    assert!(reasons.contains(&"lost") && reasons.contains(&"unclaimed"), "{reasons:?}");
    assert_eq!(files_under(&root), on_disk, "a dry run deleted something");
    let text = stdout(&cli(&["gc", "--shared", &url, "--job", "inbox-job"]));
    assert!(text.contains("would delete 2 entries") && text.contains("result Parquet loser.parquet"), "{text}");
    assert!(text.contains("kept         1 unclaimed entries"), "{text}");

    // A grace period longer than the dead worker's age keeps its part too.
    let patient = json(&cli(&["gc", "--shared", &url, "--job", "inbox-job", "--grace", "3d", "--json"]));
    assert_eq!(relative(listed(&patient, "inbox", "due")), vec![lost.clone()]);

    let applied = json(&cli(&["gc", "--shared", &url, "--job", "inbox-job", "--apply", "--json"]));
    assert_eq!(applied["inbox"]["deleted"].as_u64(), Some(2), "{applied}");
    let left = files_under(&root);
    assert!(!left.contains(&lost) && !left.contains(&unclaimed), "{left:?}");
    assert!(left.contains(&won) && left.contains(&young), "the winner's or a young part was deleted: {left:?}");
    assert!(claims.iter().all(|c| left.contains(c)), "a claim was deleted: {left:?}");
    // Without the job's name there is nothing to find the inbox by.
    assert_eq!(code(&cli(&["gc", "--shared", &url])), 2);
}

/// The keys under `prefix` of `store`, relative to it, sorted.
async fn keys_under(store: &Arc<dyn ObjectStore>, prefix: &str) -> Vec<String> {
    use futures::TryStreamExt as _;
    let mut keys: Vec<String> = store
        .list(Some(&object_store::path::Path::from(prefix)))
        .map_ok(|m| m.location.as_ref().trim_start_matches(prefix).trim_start_matches('/').to_owned())
        .try_collect()
        .await
        .unwrap_or_else(|e| panic!("listing {prefix}: {e}"));
    keys.sort();
    keys
}

/// `gc --mirror s3://…` on moto: a job that never collected itself (superseded segments and snapshots) and a
/// crashed writer's snapshot no manifest names. S3 keeps its own times, so age is taken from `--min-age`: at 1h
/// everything is young and kept; at 0s the dry run lists exactly the garbage and deletes nothing, `--apply`
/// deletes exactly that, and the mirror still verifies and restores with every checkpoint, commit and key. With
/// stderr piped (not a terminal) no progress is drawn: stderr stays empty, and `--json` parses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_on_an_s3_mirror_deletes_exactly_its_garbage_and_the_mirror_still_restores() {
    let Some(endpoint) = sinkpoint::testkit::s3_endpoint() else { return };
    let (bucket, s3) = moto_bucket(&endpoint, "gc");
    let job = Job::new();
    let settings = MirrorSettings {
        snapshot_interval_records: 3,
        snapshot_log_ratio_percent: 0,
        gc_age_ms_min: u64::MAX,
        ..MirrorSettings::default()
    };
    let store = Store::builder(
        JobId::new("cli-s3-gc").unwrap_or_else(|e| panic!("{e}")),
        TargetIdentity::new("file://table").unwrap_or_else(|e| panic!("{e}")),
    )
    .path(job.store_path())
    .mirror(s3.clone(), object_store::path::Path::from("jobs/gc"), settings)
    .open()
    .await
    .unwrap_or_else(|e| panic!("open: {e}"));
    job.seal_commit_seal_and_close(store).await;

    let written = keys_under(&s3, "jobs/gc").await;
    let slot_of = |name: &str| -> Option<u64> {
        name.rsplit('/').next().and_then(|l| l.split('.').next()).and_then(|s| s.parse().ok())
    };
    let base = written
        .iter()
        .filter(|k| k.starts_with("snapshot/"))
        .filter_map(|k| slot_of(k))
        .max()
        .unwrap_or_else(|| panic!("no snapshot: {written:?}"));
    let newest_manifest =
        written.iter().filter(|k| k.starts_with("manifest/")).max().cloned().unwrap_or_else(|| panic!("no manifest"));
    // A crashed writer's half-shipped snapshot above the base (chunks 0 and 1; no manifest names it).
    let stray = vec![format!("snapshot/{:020}", base + 100), format!("snapshot/{:020}.{:010}", base + 100, 1)];
    for key in &stray {
        let path = object_store::path::Path::from(format!("jobs/gc/{key}"));
        s3.put(&path, b"half-shipped".to_vec().into()).await.unwrap_or_else(|e| panic!("{e}"));
    }
    let mut garbage: Vec<String> = written
        .iter()
        .filter(|k| {
            (k.starts_with("manifest/") && **k != newest_manifest)
                || ((k.starts_with("wal/") || k.starts_with("snapshot/")) && slot_of(k).is_some_and(|s| s < base))
        })
        .cloned()
        .chain(stray.iter().cloned())
        .collect();
    garbage.sort();
    assert!(garbage.iter().any(|k| k.starts_with("wal/")), "the job left no superseded segment: {written:?}");
    assert!(garbage.iter().any(|k| k.starts_with("manifest/")), "the job left no older manifest: {written:?}");

    let url = format!("s3://{bucket}/jobs/gc");
    let quiet = |out: &Output, what: &str| {
        assert_eq!(code(out), 0, "{what}: {}", stderr(out));
        assert_eq!(stderr(out), "", "{what}: stderr is not a terminal, so nothing may be drawn on it");
    };
    let read = |args: &[&str]| {
        let out = cli_s3(&endpoint, &[args, &["--mirror", &url]].concat());
        quiet(&out, &format!("{args:?}"));
        stdout(&out)
    };
    let (listed_before, commits_before, keys_before) =
        (read(&["list", "--json"]), read(&["commits", "--json"]), read(&["keys", "--json"]));
    let relative = |paths: Vec<String>| -> Vec<String> {
        paths.into_iter().map(|p| p.trim_start_matches("jobs/gc/").to_owned()).collect()
    };

    // Everything was written moments ago: at a minimum age of an hour all of it is young and kept.
    let young = cli_s3(&endpoint, &["gc", "--mirror", &url, "--min-age", "1h", "--json"]);
    quiet(&young, "gc --min-age 1h");
    let young = json(&young);
    assert_eq!(young["mirror"]["due_count"], 0, "{young}");
    assert_eq!(relative(listed(&young, "mirror", "young")), garbage, "{young}");

    // The dry run (the default) lists exactly the garbage and deletes nothing; the text form too.
    let on_s3 = keys_under(&s3, "jobs/gc").await;
    let dry = cli_s3(&endpoint, &["gc", "--mirror", &url, "--min-age", "0s", "--json"]);
    quiet(&dry, "gc dry run");
    let report = json(&dry);
    assert_eq!(relative(listed(&report, "mirror", "due")), garbage, "{report}");
    assert_eq!(report["mirror"]["base_slot"].as_u64(), Some(base), "{report}");
    assert_eq!(report["mirror"]["deleted"], Value::Null);
    let text = cli_s3(&endpoint, &["gc", "--mirror", &url, "--min-age", "0s"]);
    quiet(&text, "gc dry run, text");
    assert!(stdout(&text).contains(&format!("would delete {} objects", garbage.len())), "{}", stdout(&text));
    assert_eq!(keys_under(&s3, "jobs/gc").await, on_s3, "a dry run deleted something");

    // --apply deletes exactly the garbage.
    let applied = cli_s3(&endpoint, &["gc", "--mirror", &url, "--min-age", "0s", "--apply", "--json"]);
    quiet(&applied, "gc --apply");
    let applied = json(&applied);
    assert_eq!(applied["mirror"]["deleted"].as_u64(), Some(garbage.len() as u64), "{applied}");
    let left: Vec<String> = on_s3.iter().filter(|k| !garbage.contains(k)).cloned().collect();
    assert_eq!(keys_under(&s3, "jobs/gc").await, left);
    assert!(left.contains(&newest_manifest), "{left:?}");
    let again = json(&cli_s3(&endpoint, &["gc", "--mirror", &url, "--min-age", "0s", "--json"]));
    assert_eq!((again["mirror"]["due_count"].as_u64(), again["mirror"]["young_count"].as_u64()), (Some(0), Some(0)));

    // The mirror verifies and reads as before, and a restore from it holds every checkpoint, commit and key.
    let verified = json(&cli_s3(&endpoint, &["verify", "--json", "--mirror", &url]));
    assert_eq!((verified["ok"].as_bool(), verified["checkpoints"].as_u64()), (Some(true), Some(9)), "{verified}");
    assert_eq!(read(&["list", "--json"]), listed_before);
    assert_eq!(read(&["commits", "--json"]), commits_before);
    assert_eq!(read(&["keys", "--json"]), keys_before);
    let restored = job.dir.path().join("restored.redb");
    let file = restored.to_string_lossy().into_owned();
    let restore = cli_s3(&endpoint, &["restore", "--mirror", &url, "--to", &file, "--take-over"]);
    quiet(&restore, "restore");
    assert_eq!(stdout(&cli(&["list", "--store", &file, "--json"])), listed_before);
    assert_eq!(stdout(&cli(&["commits", "--store", &file, "--json"])), commits_before);
    assert_eq!(stdout(&cli(&["keys", "--store", &file, "--json"])), keys_before);
    quiet(&cli(&["verify", "--store", &file]), "verify the restored file");
}

/// `gc --shared s3://…` on moto: a loser's part and a dead worker's unclaimed part (due with `--grace 0s`, as
/// S3's times cannot be set back) are listed by the dry run and deleted by `--apply`; the winner's part and
/// every claim stay, and a second run finds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_on_an_s3_inbox_deletes_the_parts_no_committer_will_adopt() {
    use sinkpoint::shared::{SharedStaging, Worker};
    let Some(endpoint) = sinkpoint::testkit::s3_endpoint() else { return };
    let (bucket, s3) = moto_bucket(&endpoint, "gc-inbox");
    let shared = SharedStaging::new(s3.clone(), "staging", JobId::new("inbox-job").unwrap_or_else(|e| panic!("{e}")))
        .unwrap_or_else(|e| panic!("{e}"));
    let worker =
        |name: &str, session| Worker::with_session(shared.clone(), name, session).unwrap_or_else(|e| panic!("{e}"));
    let part = |key: &str| StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key.as_bytes().to_vec()]);
    let contested = CheckpointId::new("contested").unwrap_or_else(|e| panic!("{e}"));
    worker("loser", 1).stage(&contested, part("c")).await.unwrap_or_else(|e| panic!("{e}"));
    let winner = worker("winner", 2);
    winner.stage(&contested, part("c")).await.unwrap_or_else(|e| panic!("{e}"));
    winner.seal(&contested, 1).await.unwrap_or_else(|e| panic!("{e}"));
    let dead = CheckpointId::new("dead").unwrap_or_else(|e| panic!("{e}"));
    worker("dead", 3).stage(&dead, part("d")).await.unwrap_or_else(|e| panic!("{e}"));

    let url = format!("s3://{bucket}/staging");
    let before = keys_under(&s3, "staging").await;
    let gc = |extra: &[&str]| {
        let out =
            cli_s3(&endpoint, &[&["gc", "--shared", &url, "--job", "inbox-job", "--grace", "0s"], extra].concat());
        assert_eq!((code(&out), stderr(&out)), (0, String::new()), "gc {extra:?}");
        json(&out)
    };
    let dry = gc(&["--json"]);
    let due = listed(&dry, "inbox", "due");
    assert_eq!(due.len(), 2, "the loser's and the dead worker's parts: {dry}");
    let mut reasons: Vec<&str> =
        dry["inbox"]["due"].as_array().into_iter().flatten().filter_map(|e| e["reason"].as_str()).collect();
    reasons.sort_unstable();
    assert_eq!(reasons, ["lost", "unclaimed"], "{dry}");
    assert_eq!(keys_under(&s3, "staging").await, before, "a dry run deleted something");

    let applied = gc(&["--json", "--apply"]);
    assert_eq!(applied["inbox"]["deleted"].as_u64(), Some(2), "{applied}");
    let after = keys_under(&s3, "staging").await;
    let gone: Vec<String> = before.iter().filter(|k| !after.contains(k)).map(|k| format!("staging/{k}")).collect();
    let mut due = due;
    due.sort();
    assert_eq!(gone, due, "deleted other than what was listed");
    assert!(after.iter().any(|k| k.contains("/claims/")), "a claim was deleted: {after:?}");
    assert_eq!(gc(&["--json"])["inbox"]["due_count"], 0);
}

/// Long work (`verify`, `restore`, `gc`) draws progress only on a terminal: with stderr piped, as here, stderr
/// stays empty in text and in `--json`, and the JSON parses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_work_draws_nothing_on_a_stderr_that_is_not_a_terminal() {
    let job = Job::new();
    job.ordinary().await;
    let (store, url) = (job.store_arg(), job.mirror_url());
    let restored = job.dir.path().join("restored.redb").to_string_lossy().into_owned();
    for args in [
        vec!["verify", "--store", &store],
        vec!["verify", "--store", &store, "--json"],
        vec!["verify", "--mirror", &url],
        vec!["verify", "--mirror", &url, "--json"],
        vec!["gc", "--mirror", &url, "--min-age", "0s"],
        vec!["gc", "--mirror", &url, "--min-age", "0s", "--json"],
        vec!["gc", "--mirror", &url, "--min-age", "0s", "--apply", "--json"],
        vec!["restore", "--mirror", &url, "--to", &restored, "--take-over"],
    ] {
        let out = cli(&args);
        assert_eq!((code(&out), stderr(&out)), (0, String::new()), "{args:?}");
        if args.contains(&"--json") {
            let _ = json(&out);
        }
    }
}

/// `gc --store PATH --table URL`: the orphan data files of a stopped job's dropped attempts (a restart, an abort
/// and a force-abort) on a local reference table. The dry run lists them and deletes nothing; inside `--grace`
/// they are kept; `--apply` deletes exactly them, the table still holds every committed row once, and a second
/// run finds nothing. The dry run never writes the store (a running job's is read from a copy); `--apply` on a
/// running job's store is refused (exit 4), a table that is not the store's target too (exit 5), and `--table`
/// needs `--store` (exit 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_collects_the_data_files_of_dropped_attempts_and_nothing_the_table_or_a_live_checkpoint_names() {
    let job = Job::new();
    let table_dir = job.dir.path().join("table");
    let table = DirTable::local(&table_dir).unwrap();
    let store = Store::builder(JobId::new("job").unwrap(), TargetIdentity::new("dir:table").unwrap())
        .path(job.store_path())
        .open()
        .await
        .unwrap();
    let stage = async |name: &str, attempt: u32, file: &str| {
        let result = table.write_data_file(file, format!("{file}\n").into_bytes()).await.unwrap();
        let part = StagePart::new(Attempt::new(attempt), Part::FIRST)
            .keys(vec![name.as_bytes().to_vec()])
            .results(vec![result]);
        store.stage(&CheckpointId::new(name).unwrap(), part).await.unwrap();
    };
    let id = |name: &str| CheckpointId::new(name).unwrap();
    stage("a", 0, "a-0").await;
    store.restart(&id("a")).await.unwrap();
    stage("a", 1, "a-1").await;
    store.seal(&id("a"), 1).await.unwrap();
    stage("b", 0, "b-0").await;
    store.abort(&id("b")).await.unwrap();
    stage("c", 0, "c-0").await;
    store.seal(&id("c"), 1).await.unwrap();
    store.operator().force_abort(&[id("c")], "a test").await.unwrap();
    stage("d", 0, "d-0").await; // Staged when the job stops: live.
    Committer::new(&store, &table).commit_pending().await.unwrap();

    let table_url = format!("file://{}", table_dir.display());
    // A dry run reads a running job's store from a copy; --apply is refused while the job runs.
    let held = cli(&["gc", "--store", &job.store_arg(), "--table", &table_url, "--json"]);
    assert_eq!(json(&held)["data_files"]["entries"], 3, "a running job's store, dry run: {}", stderr(&held));
    let held = cli(&["gc", "--store", &job.store_arg(), "--table", &table_url, "--apply"]);
    assert_eq!(code(&held), 4, "a running job's store: {}", stderr(&held));
    store.close_async().await;
    let alone = cli(&["gc", "--table", &table_url]);
    assert_eq!(code(&alone), 2, "{}", stderr(&alone));
    // A table that is not the store's target (its identity is `dir:table`, not this URL, and it lacks the job's
    // committed key 0) is refused before anything is judged.
    let other_dir = job.dir.path().join("other-table");
    DirTable::local(&other_dir).unwrap();
    let other = cli(&["gc", "--store", &job.store_arg(), "--table", &format!("file://{}", other_dir.display())]);
    assert_eq!(code(&other), 5, "another table: {}", stderr(&other));
    assert!(stderr(&other).contains("does not hold the job's committed key 0"), "{}", stderr(&other));

    let data = table_dir.join("data");
    let status = json(&cli(&["status", "--store", &job.store_arg(), "--json"]));
    assert_eq!(status["garbage_entries"], 3, "{status}");
    let young = json(&cli(&["gc", "--store", &job.store_arg(), "--table", &table_url, "--json"]));
    assert_eq!(young["data_files"]["young"]["count"], 3, "{young}");
    assert_eq!(young["data_files"]["forgotten"], 0, "{young}");
    for file in ["a-0", "b-0", "c-0"] {
        backdate(&data.join(file), std::time::Duration::from_secs(2 * 86_400));
    }
    let before = std::fs::read(job.store_path()).unwrap();
    let dry = cli(&["gc", "--store", &job.store_arg(), "--table", &table_url]);
    assert_eq!(code(&dry), 0, "{}", stderr(&dry));
    assert!(stdout(&dry).contains("would delete 3 files, 12 bytes"), "{}", stdout(&dry));
    assert!(stdout(&dry).contains("dry run: nothing was deleted"), "{}", stdout(&dry));
    assert_eq!(files_under(&data), ["a-0", "a-1", "b-0", "c-0", "d-0"]);
    assert!(std::fs::read(job.store_path()).unwrap() == before, "a dry run wrote the store (took an epoch)");

    let done = json(&cli(&["gc", "--store", &job.store_arg(), "--table", &table_url, "--apply", "--json"]));
    assert_eq!(done["data_files"]["deleted"]["count"], 3, "{done}");
    assert_eq!(done["data_files"]["forgotten"], 3, "{done}");
    let mut verdicts: Vec<(String, String)> = done["data_files"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["file"].as_str().unwrap().to_owned(), f["verdict"].as_str().unwrap().to_owned()))
        .collect();
    verdicts.sort();
    assert_eq!(
        verdicts,
        [("a-0".into(), "deleted".into()), ("b-0".into(), "deleted".into()), ("c-0".into(), "deleted".into())]
    );
    assert_eq!(files_under(&data), ["a-1", "d-0"]);
    assert_eq!(DirTable::local(&table_dir).unwrap().rows().await.unwrap(), ["a-1"]);
    let again = json(&cli(&["gc", "--store", &job.store_arg(), "--table", &table_url, "--apply", "--json"]));
    assert_eq!(again["data_files"]["entries"], 0, "{again}");
    let status = json(&cli(&["status", "--store", &job.store_arg(), "--json"]));
    assert_eq!(status["garbage_entries"], 0, "{status}");
}

/// A mirror of job `job` (target `file://other`) under `dir/mirror/job`, opened once and closed; its URL.
async fn other_jobs_mirror(dir: &Path, job: &str) -> String {
    let root = dir.join("mirror");
    std::fs::create_dir_all(&root).unwrap_or_else(|e| panic!("{e}"));
    let objects =
        Arc::new(object_store::local::LocalFileSystem::new_with_prefix(&root).unwrap_or_else(|e| panic!("{e}")));
    let store = Store::builder(
        JobId::new(job).unwrap_or_else(|e| panic!("{e}")),
        TargetIdentity::new("file://other").unwrap_or_else(|e| panic!("{e}")),
    )
    .path(dir.join("other.redb"))
    .mirror(objects, object_store::path::Path::from("job"), MirrorSettings::default())
    .open()
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    store.close_async().await;
    format!("file://{}/mirror/job", dir.display())
}

/// Refused hatches write nothing: a store a crash left unclean keeps every byte (its evidence) when the mirror is
/// missing, is another job's, or was taken over by a newer writer (a job running elsewhere); `--take-over` is the
/// operator's confirmation of that takeover, and the job then ends with every row once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_hatch_leaves_the_file_as_it_was_and_a_newer_writer_is_taken_over_only_when_told() {
    let job = Job::new();
    job.stuck().await;
    // The same store as a crash leaves it: copied from a live writer.
    let store = job.open().await;
    let crashed = job.dir.path().join("crashed.redb");
    std::fs::copy(job.store_path(), &crashed).unwrap_or_else(|e| panic!("{e}"));
    store.close_async().await;
    std::fs::copy(&crashed, job.store_path()).unwrap_or_else(|e| panic!("{e}"));
    let bytes = || std::fs::read(job.store_path()).unwrap_or_else(|e| panic!("{e}"));
    let before = bytes();
    let resolve = ["resolve", "0", "not-committed", "--reason", "table checked", "--store", &job.store_arg()];

    let unmirrored = cli(&resolve);
    assert_eq!(code(&unmirrored), 2, "{}", stderr(&unmirrored));
    assert!(stderr(&unmirrored).contains("--mirror URL"), "{}", stderr(&unmirrored));
    assert!(bytes() == before, "a refusal for a missing --mirror wrote the file");

    let other = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let other_url = other_jobs_mirror(other.path(), "other-job").await;
    let wrong = cli(&[&resolve[..], &["--mirror", &other_url]].concat());
    assert_eq!(code(&wrong), 5, "{}", stderr(&wrong));
    assert!(stderr(&wrong).contains("other-job"), "{}", stderr(&wrong));
    assert!(bytes() == before, "a refusal for another job's mirror wrote the file");

    // Another machine restores the mirror and runs the job: the mirror's epoch passes this file's.
    let elsewhere = job.dir.path().join("elsewhere.redb");
    let restore = cli(&["restore", "--mirror", &job.mirror_url(), "--to", &elsewhere.to_string_lossy(), "--take-over"]);
    assert_eq!(code(&restore), 0, "{}", stderr(&restore));
    let mirror_url = job.mirror_url();
    let mirrored = [&resolve[..], &["--mirror", &mirror_url]].concat();
    let held = cli(&mirrored);
    assert_eq!(code(&held), 4, "{}", stderr(&held));
    assert!(stderr(&held).contains("--take-over"), "{}", stderr(&held));
    assert!(bytes() == before, "a refused takeover wrote the file");

    let taken = cli(&[&mirrored[..], &["--take-over"]].concat());
    assert_eq!(code(&taken), 0, "{}", stderr(&taken));
    assert_eq!(job.finish().await, ["row-0", "row-1"]);
}

/// The operator's night: a key only being committed (the crash came before its send) is refused a committed
/// verdict, which would lose its rows, with the file unchanged and the advice to run the job; a reason of spaces
/// is refused; the run then commits every row once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committed_verdict_on_a_key_being_committed_is_refused_and_the_run_commits_every_row_once() {
    use sinkpoint::testkit::RawProtocol as _;
    let job = Job::new();
    let store = job.open().await;
    for i in 0..2 {
        job.seal(&store, i).await;
    }
    let ids: Vec<CheckpointId> =
        (0..2).map(|i| CheckpointId::new(format!("input-{i}")).unwrap_or_else(|e| panic!("{e}"))).collect();
    store.begin_commit(0, &ids, None, false).await.unwrap_or_else(|e| panic!("{e}"));
    store.close_async().await;
    let before = std::fs::read(job.store_path()).unwrap_or_else(|e| panic!("{e}"));
    let resolve = |reason: &str| {
        cli(&[
            "resolve",
            "0",
            "committed",
            "--reason",
            reason,
            "--store",
            &job.store_arg(),
            "--mirror",
            &job.mirror_url(),
        ])
    };
    let blank = resolve("   ");
    assert_eq!(code(&blank), 2, "{}", stderr(&blank));
    let wrong = resolve("it must have landed");
    assert_eq!(code(&wrong), 7, "{}", stderr(&wrong));
    assert!(stderr(&wrong).contains("running the job"), "{}", stderr(&wrong));
    assert!(
        std::fs::read(job.store_path()).unwrap_or_else(|e| panic!("{e}")) == before,
        "a refused verdict wrote the file"
    );
    assert_eq!(job.finish().await, ["row-0", "row-1"]);
}

/// The table's word decides the verdicts that lose rows when wrong: with `--table`, `resolve committed` of a key the
/// table lacks is refused (its rows would be lost) and `unbind` of a key the table holds is refused (every later run
/// would be refused); the verdict the table supports is taken and the job ends with every row once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_table_a_verdict_it_contradicts_is_refused_and_the_one_it_supports_is_taken() {
    let job = Job::new();
    let store = job.open().await;
    for i in 0..2 {
        job.seal(&store, i).await;
    }
    // Key 0 lands, its acknowledgement is lost, and no probe can tell: the table holds it, the store does not know.
    let target = FaultyTarget::scripted(
        job.table(),
        vec![CommitFault::LandThenLoseAck],
        vec![ProbeFault::Pass, ProbeFault::Unknown, ProbeFault::Unknown],
    );
    let _ = Committer::new(&store, &target).commit_pending().await;
    store.close_async().await;
    let table_url = format!("file://{}/table", job.dir.path().display());
    let mirror_url = job.mirror_url();
    let base = ["--reason", "checked", "--store", &job.store_arg(), "--mirror", &mirror_url, "--table", &table_url];
    let before = std::fs::read(job.store_path()).unwrap_or_else(|e| panic!("{e}"));
    let unbind = cli(&[&["unbind", "0"], &base[..]].concat());
    assert_eq!(code(&unbind), 7, "{}", stderr(&unbind));
    assert!(stderr(&unbind).contains("holds a commit under key 0"), "{}", stderr(&unbind));
    assert!(std::fs::read(job.store_path()).unwrap_or_else(|e| panic!("{e}")) == before, "a refusal wrote the file");
    // The same store against an empty table: a committed verdict there would lose both rows.
    let empty = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let empty_url = format!("file://{}", empty.path().display());
    let lossy = cli(&[&["resolve", "0", "committed"], &base[..6], &["--table", &empty_url]].concat());
    assert_eq!(code(&lossy), 7, "{}", stderr(&lossy));
    assert!(stderr(&lossy).contains("lose its rows"), "{}", stderr(&lossy));
    let resolved = cli(&[&["resolve", "0", "committed"], &base[..]].concat());
    assert_eq!(code(&resolved), 0, "{}", stderr(&resolved));
    assert_eq!(job.finish().await, ["row-0", "row-1"]);
}

/// A verdict the key already stands at changes nothing and says so; a relative `file://` URL (the form a job's
/// target may print) gets the absolute form to use, not a generic URL error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verdict_already_standing_changes_nothing_and_a_relative_file_url_is_explained() {
    let job = Job::new();
    job.ordinary().await;
    let before = std::fs::read(job.store_path()).unwrap_or_else(|e| panic!("{e}"));
    let mirror_url = job.mirror_url();
    let again = cli(&[
        "resolve",
        "0",
        "committed",
        "--reason",
        "again",
        "--store",
        &job.store_arg(),
        "--mirror",
        &mirror_url,
        "--i-checked-the-table",
    ]);
    assert_eq!(code(&again), 0, "{}", stderr(&again));
    assert!(stdout(&again).contains("already stands committed: nothing changed"), "{}", stdout(&again));
    assert!(std::fs::read(job.store_path()).unwrap_or_else(|e| panic!("{e}")) == before, "a no-op wrote the file");
    let relative = cli(&["status", "--mirror", "file://target/sinkpoint-demo/mirror/demo-job"]);
    assert_eq!(code(&relative), 2, "{}", stderr(&relative));
    assert!(stderr(&relative).contains("file://$PWD/target/sinkpoint-demo/mirror/demo-job"), "{}", stderr(&relative));
    // The directory above the job's mirror (the one the job was given) holds no manifest: the message names the
    // job's mirror one level down.
    let above = format!("file://{}/mirror", job.dir.path().display());
    let high = cli(&["status", "--mirror", &above]);
    assert_eq!(code(&high), 5, "{}", stderr(&high));
    assert!(stderr(&high).contains(&format!("give {above}/job")), "{}", stderr(&high));
}
