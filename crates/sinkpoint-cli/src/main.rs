//! `sinkpoint`: the operator's view of a sinkpoint store, and the hatches that settle a stuck job.
//!
//! Reading commands never write: they open the store file read-only (a file a running job holds, or one a crash
//! left unclean, is read from a copy in memory, a moment old) or restore its mirror into memory (never
//! disturbing the writer). Changing commands open the store as its writer, so they are
//! refused while the job runs, and each records who and why in the log. `gc` lists (by default) or deletes
//! garbage of a mirror or a shared-staging inbox by the core's rules: never a mirror object younger than the
//! minimum age, never an unclaimed inbox part younger than the grace period, so it needs no writer to stop. Exit codes are in [`exit`].
//! Long work (`restore`, `verify`, `gc`) shows progress on stderr when it is a terminal, never with `--json`
//! ([`progress`]).

#![forbid(unsafe_code)]
#![deny(missing_docs, unreachable_pub)]
#![deny(clippy::unwrap_used, clippy::expect_used)]

// Every print of this crate goes through `out::print`, which never panics on a closed pipe: these shadow the
// standard macros in every module declared below them.
macro_rules! print {
    ($($arg:tt)*) => { $crate::out::print(format_args!($($arg)*)) };
}
macro_rules! println {
    () => { $crate::out::print(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::out::print(format_args!("{}\n", format_args!($($arg)*))) };
}

mod exit;
mod gc;
mod hatch;
mod out;
mod progress;
mod read;
mod render;
mod source;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Inspect a sinkpoint store (a job's local file or its mirror), verify it, and settle a stuck job.
#[derive(Parser, Debug)]
#[command(name = "sinkpoint", version, after_help = exit::HELP)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Where a reading command reads the store from.
#[derive(Args, Debug, Clone)]
struct Source {
    /// The store file, never written: a running job's file, or one a crash left unclean, is read from a copy in
    /// memory (a moment old). With --mirror too, status compares the two.
    #[arg(long, value_name = "PATH", required_unless_present = "mirror")]
    store: Option<PathBuf>,
    /// The store's mirror, restored into memory (never disturbing the job): file:///dir/prefix, or
    /// s3://bucket/prefix configured from the AWS_* environment.
    #[arg(long, value_name = "URL")]
    mirror: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// The store a changing command opens as its writer.
#[derive(Args, Debug, Clone)]
struct Writable {
    /// The store file (refused while a running job holds it).
    #[arg(long, value_name = "PATH")]
    store: PathBuf,
    /// The job's mirror, if the job runs with one: the change is mirrored before the command returns.
    #[arg(long, value_name = "URL")]
    mirror: Option<String>,
    /// Why, recorded in the log with the change (required: the next operator reads it).
    #[arg(long)]
    reason: String,
    /// Confirms taking the job over when the mirror has seen a newer writer than this file (the job runs or ran
    /// elsewhere): that writer is fenced and stops. Without it such a command is refused, with nothing changed.
    #[arg(long)]
    take_over: bool,
    /// Print the outcome as one JSON object instead of text (errors stay one line on stderr, with the exit code).
    #[arg(long)]
    json: bool,
}

/// How a hatch that can lose rows on a wrong word learns what the table holds.
#[derive(Args, Debug, Clone)]
struct TableCheck {
    /// The job's table, when it is a DirTable (file:///dir/prefix or s3://bucket/prefix): the key is probed there
    /// and a verdict the table contradicts is refused.
    #[arg(long, value_name = "URL", conflicts_with = "i_checked_the_table")]
    table: Option<String>,
    /// Confirms that you looked at the table yourself and it agrees (for a table the CLI cannot read, e.g. Lance).
    #[arg(long)]
    i_checked_the_table: bool,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Job, target, epoch, checkpoints per state, the key in flight, the latest operator change and what blocks
    /// the job. With --store and --mirror: both must be the same job's, and how far apart they are.
    Status(Source),
    /// Checkpoints, by id (all states, or one).
    List {
        #[command(flatten)]
        source: Source,
        /// Only checkpoints in this state.
        #[arg(long, value_parser = state_parser())]
        state: Option<sinkpoint::StateFilter>,
    },
    /// One checkpoint, its commit key, and the operator changes that name them (with their reasons).
    Show {
        #[command(flatten)]
        source: Source,
        /// The checkpoint id.
        id: String,
    },
    /// Processed source keys (the skip set), in key order.
    Keys {
        #[command(flatten)]
        source: Source,
        /// Only keys starting with this text.
        #[arg(long, default_value = "")]
        prefix: String,
        /// At most this many keys.
        #[arg(long, value_name = "N")]
        limit: Option<u64>,
    },
    /// Every commit key begun: its checkpoints, prepared table version, state and the operator changes to it.
    Commits(Source),
    /// Reads and checks every checkpoint, commit and pending write result, and the log: a file's log frames, or the
    /// mirror's snapshot and every log record after it (as a restore checks them).
    Verify(Source),
    /// Every checkpoint, commit key, processed key and operator change (with its reason) as JSON lines.
    Export(Source),
    /// Restores the store from its mirror into a new file, taking the mirror over (a new epoch: the writer that
    /// held it is fenced, as when a machine that lost its disk resumes the job).
    Restore {
        /// The mirror to restore from.
        #[arg(long, value_name = "URL")]
        mirror: String,
        /// The new store file (must not exist).
        #[arg(long, value_name = "PATH")]
        to: PathBuf,
        /// Confirms the takeover: any writer still running on this mirror stops, fenced.
        #[arg(long)]
        take_over: bool,
        /// Print the outcome as one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Settles a key whose outcome is unknown (commit-unknown), after looking at the table. A key that is only
    /// being committed is settled by running the job, never here.
    ///
    /// `not-committed`: the next run re-sends the key once (a wrong one costs nothing: the table refuses the
    /// re-send). `committed`: the key's checkpoints are marked Committed without being sent; if the table does not
    /// hold the key, their rows are lost for good, so it needs the table's word: --table URL (a DirTable: the key is
    /// probed and a contradicting verdict refused) or, for a table the CLI cannot read (Lance: the job's mark in the
    /// table metadata), --i-checked-the-table.
    #[command(verbatim_doc_comment)]
    Resolve {
        #[command(flatten)]
        store: Writable,
        #[command(flatten)]
        table: TableCheck,
        /// The commit key.
        key: u64,
        /// What the table holds: `committed` or `not-committed`.
        #[arg(value_enum)]
        verdict: Verdict,
    },
    /// Aborts checkpoints that are not yet in a commit; prints their write results for cleanup.
    ForceAbort {
        #[command(flatten)]
        store: Writable,
        /// The checkpoint ids.
        #[arg(required = true)]
        ids: Vec<String>,
    },
    /// Un-binds the key in flight when the table does not hold it: its checkpoints go back to Sealed and the next
    /// run commits them under a fresh probe, losing nothing. If the table holds the key, every later run is refused
    /// (the table keeps the key): use settle-landed then. Needs the table's word: --table URL (a DirTable: the key
    /// is probed, and refused if the table holds it) or --i-checked-the-table.
    #[command(verbatim_doc_comment)]
    Unbind {
        #[command(flatten)]
        store: Writable,
        #[command(flatten)]
        table: TableCheck,
        /// The commit key.
        key: u64,
    },
    /// Records what a table that keeps every commit (Lance, Delta) holds under a key, after looking at it yourself:
    /// the checkpoints named are Committed under the key, the key's other checkpoints Sealed again for a later key.
    /// The key must be in flight (the ids among its checkpoints) or, after an un-bind, the next key (the ids
    /// Sealed). The way out of a mismatch or a key the table holds after an un-bind, without losing a row.
    SettleLanded {
        #[command(flatten)]
        store: Writable,
        /// The commit key.
        key: u64,
        /// The checkpoint ids the table's commit under the key holds.
        #[arg(required = true)]
        ids: Vec<String>,
    },
    /// Lists (by default) or deletes (--apply) mirror objects and inbox parts that nothing will read again.
    ///
    /// Mirror: older manifests and the slots and snapshots below the newest manifest's base, once that manifest
    /// is --min-age old; snapshots above the base that no manifest names (a writer died before naming them),
    /// once their every chunk is --min-age old. Never the newest manifest, anything a restore reads, or anything
    /// outside the prefix's manifest/, wal/ and snapshot/. Safe beside a running job: nothing younger than
    /// --min-age is deleted, so keep it at or above the job's gc_age_ms_min and far above any stall.
    ///
    /// Inbox: parts of attempts that lost their seal or whose key another checkpoint claimed (any age), and parts
    /// with no claim older than --grace (their worker died before sealing). Never a claim, never a winner's part.
    /// Each part's write results are printed: delete those data files yourself.
    #[command(verbatim_doc_comment)]
    Gc {
        /// The job's mirror: file:///dir/prefix or s3://bucket/prefix. Its garbage is collected; with --store and
        /// --apply, the store is opened with it too (a mirrored store's changes must reach its mirror).
        #[arg(long, value_name = "URL")]
        mirror: Option<String>,
        /// The job's shared staging (the prefix given to SharedStaging): file:///dir/prefix or s3://bucket/prefix.
        #[arg(long, value_name = "URL")]
        shared: Option<String>,
        /// The job whose inbox to collect (default: the mirror's job).
        #[arg(long, value_name = "NAME")]
        job: Option<String>,
        /// Mirror objects are deleted only this long after they stopped being referenced (ms, s, m, h, d).
        #[arg(long, value_name = "DURATION", default_value = gc::GC_MIN_AGE_DEFAULT, value_parser = gc::parse_duration_ms)]
        min_age: u64,
        /// The job's store file, to collect its orphan data files from --table. The dry run reads it (a running
        /// job's from a copy) and writes nothing; --apply is refused while the job runs.
        #[arg(long, value_name = "PATH", requires = "table")]
        store: Option<PathBuf>,
        /// The reference table (DirTable) whose orphan data files to collect: file:///dir/prefix or s3://bucket/prefix.
        /// Refused unless it is the store's target (its URL is the target's identity, or it holds the job's last
        /// committed key).
        #[arg(long, value_name = "URL", requires = "store")]
        table: Option<String>,
        /// Unclaimed inbox parts, and orphan data files, are deleted only when older than this (ms, s, m, h, d).
        #[arg(long, value_name = "DURATION", default_value = gc::GC_GRACE_DEFAULT, value_parser = gc::parse_duration_ms)]
        grace: u64,
        /// Only list what would be deleted (the default).
        #[arg(long, conflicts_with = "apply")]
        dry_run: bool,
        /// Delete what is listed.
        #[arg(long)]
        apply: bool,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// With --store and --mirror: confirms taking the job over when the mirror has seen a newer writer than
        /// the store file (that writer is fenced and stops); refused without it, with nothing changed.
        #[arg(long, requires = "store")]
        take_over: bool,
    },
}

/// A checkpoint state on the command line: the library's names, listed in `--help` as possible values.
fn state_parser() -> impl clap::builder::TypedValueParser<Value = sinkpoint::StateFilter> {
    use clap::builder::TypedValueParser as _;
    clap::builder::PossibleValuesParser::new(sinkpoint::StateFilter::ALL.map(|f| f.name()))
        .try_map(|name| name.parse::<sinkpoint::StateFilter>())
}

/// An operator's verdict on a key.
#[derive(ValueEnum, Clone, Copy, Debug)]
enum Verdict {
    Committed,
    NotCommitted,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => return exit::fail(&format!("cannot start the async runtime: {e}"), exit::Code::Io),
    };
    let result = runtime.block_on(run(cli.command));
    // The command's own failure first; else a failure to write its output (a closed pipe is none).
    match (result, out::finish()) {
        (Err(failure), _) | (Ok(_), Some(failure)) => exit::fail(&failure.message, failure.code),
        (Ok(code), None) => code.into(),
    }
}

async fn run(command: Command) -> Result<exit::Code, exit::Failure> {
    match command {
        Command::Status(source) => read::status(&source).await,
        Command::List { source, state } => read::list(&source, state).await,
        Command::Show { source, id } => read::show(&source, &id).await,
        Command::Keys { source, prefix, limit } => read::keys(&source, &prefix, limit).await,
        Command::Commits(source) => read::commits(&source).await,
        Command::Verify(source) => read::verify(&source).await,
        Command::Export(source) => read::export(&source).await,
        Command::Restore { mirror, to, take_over, json } => hatch::restore(&mirror, &to, take_over, json).await,
        Command::Resolve { store, table, key, verdict } => {
            hatch::resolve(&store, &table, key, verdict.resolution()).await
        }
        Command::ForceAbort { store, ids } => hatch::force_abort(&store, &ids).await,
        Command::Unbind { store, table, key } => hatch::unbind(&store, &table, key).await,
        Command::SettleLanded { store, key, ids } => hatch::settle_landed(&store, key, &ids).await,
        Command::Gc { mirror, shared, job, store, table, min_age, grace, dry_run: _, apply, json, take_over } => {
            let request = gc::Request {
                mirror: mirror.as_deref(),
                shared: shared.as_deref(),
                store: store.as_deref(),
                table: table.as_deref(),
                job: job.as_deref(),
                min_age_ms: min_age,
                grace_ms: grace,
                apply,
                json,
                take_over,
            };
            gc::gc(&request).await
        }
    }
}

impl Verdict {
    fn resolution(self) -> sinkpoint::Resolution {
        match self {
            Verdict::Committed => sinkpoint::Resolution::Committed,
            Verdict::NotCommitted => sinkpoint::Resolution::NotCommitted,
        }
    }
}
