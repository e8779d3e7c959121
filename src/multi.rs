//! One checkpoint across several tables: a sink that writes each input into two or more tables (facts into one,
//! an audit row into another) seals one checkpoint id in each table's own store and commits it exactly once into
//! each table, under that table's own keys, recovered table by table after any crash
//! (docs/protocols/multi-table.md).
//!
//! Each table keeps what a single-table job has: its own [`Store`] (one store per job and target), its own commit
//! key sequence and its own [`Committer`]. [`MultiTable`] adds the one rule that spans them: an input is
//! **processed only when it is processed in every table**. A crash between sealing an input in one table and in
//! the next leaves it sealed in some; the retry reads it as unprocessed, writes it again only into the tables
//! that lack it ([`MultiTable::lacking`]), and seals it there. A result offered for a table that already holds
//! the checkpoint is never staged there: it is recorded in that table's garbage ledger and returned as
//! [`MultiSealReport::cleanup`].
//!
//! The tables commit one after another, not atomically: a reader may see an input in one table before the other.
//! A catalog that commits several tables in one transaction is one [`Target`] to this crate (one store, one key
//! sequence, its commit writing every table): see the protocol document.

use std::collections::BTreeSet;

use crate::commit::{CommitReport, CrashHook, RecoveryReport};
use crate::commit::{Committer, Target};
use crate::error::{Error, Result, TransitionError};
use crate::limits::MULTI_TABLES_MAX;
use crate::state::CheckpointState;
use crate::store::checks::check_stage;
use crate::store::{StageOutcome, Store};
use crate::types::{Attempt, CheckpointId, Part, SourceKey, StagePart, TargetIdentity, WriteResult};

/// The named crash points between the per-table steps, in the order a checkpoint passes them. Each table's own
/// commit passes [`crate::commit::crash_points`] as well.
///
/// ```
/// use sinkpoint::multi::crash_points;
/// assert_eq!(crash_points::ALL, [crash_points::AFTER_TABLE_SEAL, crash_points::AFTER_TABLE_COMMIT]);
/// assert!(crash_points::ALL.iter().all(|p| !sinkpoint::commit::crash_points::ALL.contains(p)));
/// ```
pub mod crash_points {
    /// One table sealed the checkpoint (or found it held); the tables after it have not been offered it yet.
    pub const AFTER_TABLE_SEAL: &str = "multi-after-table-seal";
    /// One table's committer finished its round; the tables after it have not run theirs yet.
    pub const AFTER_TABLE_COMMIT: &str = "multi-after-table-commit";
    /// Every name above, for runners that visit them all.
    pub const ALL: [&str; 2] = [AFTER_TABLE_SEAL, AFTER_TABLE_COMMIT];
}

/// One table of a [`MultiTable`]: its store and the target its committer writes.
struct Table<'a> {
    store: &'a Store,
    target: &'a dyn Target,
}

/// One checkpoint over several tables: each table's store and target, in a fixed order that names them (the
/// index of a table is its position in [`MultiTable::builder`]).
///
/// ```
/// use sinkpoint::multi::{MultiPart, MultiTable};
/// use sinkpoint::{CheckpointId, DirTable, JobId, Store, TargetIdentity};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> sinkpoint::Result<()> {
/// let dir = tempfile::tempdir()?;
/// let (facts, audit) = (DirTable::local(dir.path().join("facts"))?, DirTable::local(dir.path().join("audit"))?);
/// let job = JobId::new("nightly")?;
/// let open = |name: &str| {
///     Store::builder(job.clone(), TargetIdentity::new(format!("file:///{name}")).unwrap())
///         .path(dir.path().join(format!("{name}.redb")))
///         .open()
/// };
/// let (facts_store, audit_store) = (open("facts").await?, open("audit").await?);
/// let multi = MultiTable::builder().table(&facts_store, &facts).table(&audit_store, &audit).build()?;
/// multi.recover().await?;
/// for input in ["a.csv", "b.csv"] {
///     let key = input.as_bytes().to_vec();
///     if multi.is_processed(&key)? {
///         continue; // processed in every table
///     }
///     let id = CheckpointId::new(input)?;
///     let mut part = MultiPart::new(vec![key]);
///     for table in multi.lacking(&id)? {
///         // Write only the tables that lack it; name each attempt's files apart.
///         let (store, dir_table) = if table == 0 { (&facts_store, &facts) } else { (&audit_store, &audit) };
///         let attempt = store.get(&id)?.map_or(0, |c| c.attempt.get() + 1);
///         let result = dir_table.write_data_file(&format!("{input}-{table}-a{attempt}"), b"row".to_vec()).await?;
///         part = part.results(table, vec![result]);
///     }
///     multi.seal(&id, part).await?;
/// }
/// let reports = multi.finish().await?; // one commit in each table, under each table's key 0
/// assert!(reports.iter().all(|r| r.committed_keys == [0]));
/// # Ok(()) }
/// ```
pub struct MultiTable<'a> {
    tables: Vec<Table<'a>>,
    crash: Option<CrashHook>,
}

/// The tables of a [`MultiTable`], gathered in the order that names them ([`MultiTable::builder`]).
pub struct MultiTableBuilder<'a> {
    tables: Vec<Table<'a>>,
}

impl<'a> MultiTableBuilder<'a> {
    /// Adds a table: its store (one store per job and target) and the target its committer writes. Its index is
    /// the number of tables added before it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> sinkpoint::Result<()> {
    /// use sinkpoint::{multi::MultiTable, DirTable, JobId, Store, TargetIdentity};
    /// let dir = tempfile::tempdir()?;
    /// let table = DirTable::local(dir.path().join("t"))?;
    /// let store = Store::builder(JobId::new("j")?, TargetIdentity::new("file:///t")?)
    ///     .path(dir.path().join("t.redb"))
    ///     .open()
    ///     .await?;
    /// let multi = MultiTable::builder().table(&store, &table).build()?;
    /// assert_eq!(multi.targets().len(), 1);
    /// # Ok(()) }
    /// ```
    pub fn table(mut self, store: &'a Store, target: &'a dyn Target) -> Self {
        self.tables.push(Table { store, target });
        self
    }

    /// The multi-table checkpoint. Refuses (`InvalidInput`) no table, more than [`MULTI_TABLES_MAX`], and two
    /// stores of one target identity (one table written twice would hold every input twice).
    ///
    /// ```
    /// use sinkpoint::{multi::MultiTable, ErrorKind};
    /// assert_eq!(MultiTable::builder().build().unwrap_err().kind(), ErrorKind::InvalidInput);
    /// ```
    pub fn build(self) -> Result<MultiTable<'a>> {
        let tables = self.tables;
        if tables.is_empty() || tables.len() > MULTI_TABLES_MAX {
            return Err(Error::invalid_input(format!(
                "a multi-table checkpoint takes 1 to {MULTI_TABLES_MAX} tables, not {}",
                tables.len()
            )));
        }
        let mut seen: BTreeSet<&str> = BTreeSet::new();
        for table in &tables {
            if !seen.insert(table.store.target().as_str()) {
                return Err(Error::invalid_input(format!(
                    "two stores of target {} in one multi-table checkpoint: give each table once, with its one \
                     store",
                    table.store.target()
                )));
            }
        }
        Ok(MultiTable { tables, crash: None })
    }
}

impl std::fmt::Debug for MultiTableBuilder<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let targets: Vec<&TargetIdentity> = self.tables.iter().map(|t| t.store.target()).collect();
        f.debug_struct("MultiTableBuilder").field("targets", &targets).finish()
    }
}

/// What one input brings to a [`MultiTable::seal`]: its source keys (the same in every table) and, for each
/// table it was written into, that table's write results.
///
/// ```
/// use sinkpoint::multi::MultiPart;
/// use sinkpoint::{Format, WriteResult};
/// let facts = WriteResult::new(Format::Parquet, b"facts/part-1.parquet".to_vec())?;
/// let part = MultiPart::new(vec![b"s3://in/1.csv".to_vec()]).results(0, vec![facts]).results(1, vec![]);
/// assert_eq!(part.tables(), vec![0, 1]);
/// # Ok::<(), sinkpoint::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct MultiPart {
    keys: Vec<SourceKey>,
    results: Vec<(usize, Vec<WriteResult>)>,
}

impl MultiPart {
    /// An input named by `keys`, not yet written into any table.
    ///
    /// ```
    /// let part = sinkpoint::multi::MultiPart::new(vec![b"s3://in/1.csv".to_vec()]);
    /// assert!(part.tables().is_empty());
    /// ```
    pub fn new(keys: Vec<SourceKey>) -> Self {
        Self { keys, results: Vec::new() }
    }

    /// The input's write results in table `table` (its index in [`MultiTable::builder`]). An empty list
    /// says the input writes nothing into that table: it is sealed there without results, so it still counts as
    /// processed there. Give each table once; a table given twice is refused by [`MultiTable::seal`].
    ///
    /// ```
    /// let part = sinkpoint::multi::MultiPart::new(vec![b"in/1".to_vec()]).results(1, vec![]);
    /// assert_eq!(part.tables(), [1]);
    /// ```
    pub fn results(mut self, table: usize, results: Vec<WriteResult>) -> Self {
        self.results.push((table, results));
        self
    }

    /// The tables this part has results for, in the order they were given.
    ///
    /// ```
    /// let part = sinkpoint::multi::MultiPart::new(vec![b"in/1".to_vec()]).results(1, vec![]).results(0, vec![]);
    /// assert_eq!(part.tables(), [1, 0]);
    /// ```
    pub fn tables(&self) -> Vec<usize> {
        self.results.iter().map(|(table, _)| *table).collect()
    }
}

/// What [`MultiTable::seal`] did in each table.
///
/// ```
/// use sinkpoint::multi::MultiSealReport;
/// let report = MultiSealReport::default();
/// assert!(report.sealed.is_empty() && report.held.is_empty() && report.cleanup.is_empty());
/// ```
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct MultiSealReport {
    /// The tables this call sealed the checkpoint in (or found it sealed with the very part offered: a retry
    /// after a lost answer).
    pub sealed: Vec<usize>,
    /// The tables that held the checkpoint (Sealed or later) before this call, other than with the very part
    /// offered.
    pub held: Vec<usize>,
    /// Write results no commit will publish, with their table: results offered for a table that already held
    /// the checkpoint, and those of the attempts a table dropped before sealing the new one. Each is in that
    /// table's garbage ledger, so [`crate::gc::collect_data_files`] deletes its files past the grace period,
    /// keeping any file a live checkpoint or a table version still names: prefer it to deleting them yourself.
    pub cleanup: Vec<(usize, WriteResult)>,
}

/// How one table answered the offer of a checkpoint.
enum Offered {
    /// Sealed by this offer, or already sealed with this very part.
    Sealed,
    /// Already held with another part (or released after commit): the offered results are garbage.
    Held,
}

impl<'a> MultiTable<'a> {
    /// Starts a multi-table checkpoint: add each table with [`MultiTableBuilder::table`], then
    /// [`MultiTableBuilder::build`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> sinkpoint::Result<()> {
    /// use sinkpoint::{multi::MultiTable, DirTable, ErrorKind, JobId, Store, TargetIdentity};
    /// let dir = tempfile::tempdir()?;
    /// let table = DirTable::local(dir.path().join("t"))?;
    /// let store = Store::builder(JobId::new("j")?, TargetIdentity::new("file:///t")?)
    ///     .path(dir.path().join("t.redb"))
    ///     .open()
    ///     .await?;
    /// let twice = MultiTable::builder().table(&store, &table).table(&store, &table).build();
    /// assert_eq!(twice.unwrap_err().kind(), ErrorKind::InvalidInput);
    /// # Ok(()) }
    /// ```
    pub fn builder() -> MultiTableBuilder<'a> {
        MultiTableBuilder { tables: Vec::new() }
    }

    /// Installs a crash hook, called at every named crash point of [`crash_points`] and of each table's
    /// committer (tests, and jobs with crash flags). Returning `true` stops the call there with an error of kind
    /// [`crate::ErrorKind::Poisoned`], as if the process had died.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> sinkpoint::Result<()> {
    /// use std::sync::Arc;
    /// use sinkpoint::{multi::MultiTable, DirTable, JobId, Store, TargetIdentity};
    /// let dir = tempfile::tempdir()?;
    /// let table = DirTable::local(dir.path().join("t"))?;
    /// let store = Store::builder(JobId::new("j")?, TargetIdentity::new("file:///t")?)
    ///     .path(dir.path().join("t.redb"))
    ///     .open()
    ///     .await?;
    /// let multi = MultiTable::builder().table(&store, &table).build()?.with_crash_hook(Arc::new(|_point| false));
    /// multi.finish().await?;
    /// # Ok(()) }
    /// ```
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

    /// The tables' target identities, in the order that names them.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> sinkpoint::Result<()> {
    /// use sinkpoint::{multi::MultiTable, DirTable, JobId, Store, TargetIdentity};
    /// let dir = tempfile::tempdir()?;
    /// let table = DirTable::local(dir.path().join("t"))?;
    /// let store = Store::builder(JobId::new("j")?, TargetIdentity::new("file:///t")?)
    ///     .path(dir.path().join("t.redb"))
    ///     .open()
    ///     .await?;
    /// let multi = MultiTable::builder().table(&store, &table).build()?;
    /// assert_eq!(multi.targets()[0].as_str(), "file:///t");
    /// # Ok(()) }
    /// ```
    pub fn targets(&self) -> Vec<&TargetIdentity> {
        self.tables.iter().map(|t| t.store.target()).collect()
    }

    /// Whether a source key is processed in **every** table: the one answer a retried job may skip an input on.
    /// A key processed in some tables only belongs to an input a crash interrupted between tables; the job
    /// writes it again into the tables that lack it ([`MultiTable::lacking`]). Answers from each store's local
    /// commit, as [`Store::is_processed`] does.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> sinkpoint::Result<()> {
    /// use sinkpoint::{multi::MultiTable, DirTable, JobId, Store, TargetIdentity};
    /// let dir = tempfile::tempdir()?;
    /// let table = DirTable::local(dir.path().join("t"))?;
    /// let store = Store::builder(JobId::new("j")?, TargetIdentity::new("file:///t")?)
    ///     .path(dir.path().join("t.redb"))
    ///     .open()
    ///     .await?;
    /// assert!(!MultiTable::builder().table(&store, &table).build()?.is_processed(b"in/1")?);
    /// # Ok(()) }
    /// ```
    pub fn is_processed(&self, key: &[u8]) -> Result<bool> {
        for table in &self.tables {
            if !table.store.is_processed(key)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The tables that do not hold checkpoint `id` (not Sealed or later there), by index: the ones its input must
    /// be written into. Empty once every table holds it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> sinkpoint::Result<()> {
    /// use sinkpoint::{multi::MultiTable, CheckpointId, DirTable, JobId, Store, TargetIdentity};
    /// let dir = tempfile::tempdir()?;
    /// let table = DirTable::local(dir.path().join("t"))?;
    /// let store = Store::builder(JobId::new("j")?, TargetIdentity::new("file:///t")?)
    ///     .path(dir.path().join("t.redb"))
    ///     .open()
    ///     .await?;
    /// assert_eq!(MultiTable::builder().table(&store, &table).build()?.lacking(&CheckpointId::new("in-1")?)?, [0]);
    /// # Ok(()) }
    /// ```
    pub fn lacking(&self, id: &CheckpointId) -> Result<Vec<usize>> {
        id.check()?;
        let mut out = Vec::new();
        for (index, table) in self.tables.iter().enumerate() {
            if !holds(table.store, id)? {
                out.push(index);
            }
        }
        Ok(out)
    }

    /// Seals checkpoint `id` in every table that lacks it, one table after another in their order, each with
    /// the part's keys and that table's results as its one part (`Store::stage_and_seal`, in a new attempt when
    /// the table holds it Staged or Aborted). A table that already holds it is left as it is: results offered
    /// for it are never staged, but recorded in its garbage ledger and returned in
    /// [`MultiSealReport::cleanup`], unless they are the very part it sealed (a retry after a lost answer).
    ///
    /// Refused before anything is written (`InvalidInput`): a table index out of range or given twice, keys or
    /// results a store's `stage` would refuse, and a table that lacks the checkpoint with no results for it
    /// (write the input into every table [`MultiTable::lacking`] names). A crash part-way leaves the checkpoint sealed in the first tables only;
    /// the retry calls `seal` again and finishes the rest. The acknowledgement rules of [`Store::seal`] apply to
    /// each table.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> sinkpoint::Result<()> {
    /// use sinkpoint::multi::{MultiPart, MultiTable};
    /// use sinkpoint::{CheckpointId, DirTable, JobId, Store, TargetIdentity};
    /// let dir = tempfile::tempdir()?;
    /// let table = DirTable::local(dir.path().join("t"))?;
    /// let store = Store::builder(JobId::new("j")?, TargetIdentity::new("file:///t")?)
    ///     .path(dir.path().join("t.redb"))
    ///     .open()
    ///     .await?;
    /// let multi = MultiTable::builder().table(&store, &table).build()?;
    /// let id = CheckpointId::new("in-1")?;
    /// let first = table.write_data_file("in-1-a0", b"row".to_vec()).await?;
    /// let report = multi.seal(&id, MultiPart::new(vec![b"in/1".to_vec()]).results(0, vec![first])).await?;
    /// assert_eq!(report.sealed, [0]);
    /// // A task that writes the input again (it did not ask `lacking`): its file is garbage, never committed.
    /// let again = table.write_data_file("in-1-a1", b"row".to_vec()).await?;
    /// let report = multi.seal(&id, MultiPart::new(vec![b"in/1".to_vec()]).results(0, vec![again.clone()])).await?;
    /// assert_eq!((report.held, report.cleanup), (vec![0], vec![(0, again)]));
    /// # Ok(()) }
    /// ```
    pub async fn seal(&self, id: &CheckpointId, part: MultiPart) -> Result<MultiSealReport> {
        id.check()?;
        let offered = self.offered_results(id, &part.keys, part.results)?;
        let mut report = MultiSealReport::default();
        for (index, (table, results)) in self.tables.iter().zip(offered).enumerate() {
            let Some(results) = results else {
                report.held.push(index);
                self.crash_point(crash_points::AFTER_TABLE_SEAL)?;
                continue;
            };
            match offer(table.store, id, part.keys.clone(), results.clone(), &mut report.cleanup, index).await? {
                Offered::Sealed => report.sealed.push(index),
                Offered::Held => {
                    report.held.push(index);
                    discard(table.store, id, results, &mut report.cleanup, index).await?;
                }
            }
            self.crash_point(crash_points::AFTER_TABLE_SEAL)?;
        }
        Ok(report)
    }

    /// The part's results laid out by table (`None`: not offered), checked against the tables before anything
    /// is written.
    fn offered_results(
        &self,
        id: &CheckpointId,
        keys: &[SourceKey],
        given: Vec<(usize, Vec<WriteResult>)>,
    ) -> Result<Vec<Option<Vec<WriteResult>>>> {
        let mut offered: Vec<Option<Vec<WriteResult>>> = vec![None; self.tables.len()];
        for (index, results) in given {
            let slot = offered.get_mut(index).ok_or_else(|| {
                Error::invalid_input(format!(
                    "results for table {index}, but this multi-table checkpoint has {} tables (0 to {})",
                    self.tables.len(),
                    self.tables.len() - 1
                ))
            })?;
            if slot.replace(results).is_some() {
                return Err(Error::invalid_input(format!("results for table {index} given twice in one part")));
            }
        }
        // Checked as each store's stage checks them, so that a refusal comes before any table is written.
        for results in offered.iter().flatten() {
            check_stage(Part::FIRST, keys, results)?;
        }
        for index in self.lacking(id)? {
            if offered.get(index).is_some_and(Option::is_none) {
                return Err(Error::invalid_input(format!(
                    "checkpoint {id} is not sealed in table {index} ({}), and the part has no results for it: \
                     write the input into every table `lacking` names (an empty list if it writes nothing there)",
                    self.tables.get(index).map_or("?", |t| t.store.target().as_str())
                )));
            }
        }
        Ok(offered)
    }

    /// Begins the next attempt of checkpoint `id` in every table that lacks it and holds it Staged or Aborted
    /// (an orphan a crash left, one a refused seal left staged); the tables that hold it sealed keep it. Returns
    /// the dropped results with their table (each also in that table's garbage ledger). [`MultiTable::seal`]
    /// does this itself, so a job calls it only to drop an attempt it will not seal.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> sinkpoint::Result<()> {
    /// use sinkpoint::{multi::MultiTable, CheckpointId, DirTable, JobId, Store, TargetIdentity};
    /// let dir = tempfile::tempdir()?;
    /// let table = DirTable::local(dir.path().join("t"))?;
    /// let store = Store::builder(JobId::new("j")?, TargetIdentity::new("file:///t")?)
    ///     .path(dir.path().join("t.redb"))
    ///     .open()
    ///     .await?;
    /// let multi = MultiTable::builder().table(&store, &table).build()?;
    /// assert!(multi.restart(&CheckpointId::new("never-staged")?).await?.is_empty());
    /// # Ok(()) }
    /// ```
    pub async fn restart(&self, id: &CheckpointId) -> Result<Vec<(usize, WriteResult)>> {
        id.check()?;
        let mut dropped = Vec::new();
        for (index, table) in self.tables.iter().enumerate() {
            if table.store.get(id)?.is_some_and(|c| !c.state.keys_processed()) {
                dropped.extend(table.store.restart(id).await?.into_iter().map(|r| (index, r)));
            }
        }
        Ok(dropped)
    }

    /// Aborts checkpoint `id` in every table, so that no table will ever hold its input: refused, with nothing
    /// written, while any table holds it sealed (`SealedCannotAbort`: a half-sealed input is finished by
    /// [`MultiTable::seal`]; to take a sealed input back, an operator force-aborts it in each table). Returns the
    /// dropped results with their table.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> sinkpoint::Result<()> {
    /// use sinkpoint::{multi::MultiTable, CheckpointId, DirTable, JobId, Store, TargetIdentity};
    /// let dir = tempfile::tempdir()?;
    /// let table = DirTable::local(dir.path().join("t"))?;
    /// let store = Store::builder(JobId::new("j")?, TargetIdentity::new("file:///t")?)
    ///     .path(dir.path().join("t.redb"))
    ///     .open()
    ///     .await?;
    /// let multi = MultiTable::builder().table(&store, &table).build()?;
    /// assert!(multi.abort(&CheckpointId::new("never-staged")?).await?.is_empty());
    /// # Ok(()) }
    /// ```
    pub async fn abort(&self, id: &CheckpointId) -> Result<Vec<(usize, WriteResult)>> {
        id.check()?;
        let mut states = Vec::with_capacity(self.tables.len());
        for table in &self.tables {
            let state = table.store.get(id)?.map(|c| c.state);
            if state.is_some_and(CheckpointState::keys_processed) {
                return Err(TransitionError::SealedCannotAbort { id: id.clone() }.into());
            }
            states.push(state);
        }
        let mut dropped = Vec::new();
        for (index, (table, state)) in self.tables.iter().zip(states).enumerate() {
            if state == Some(CheckpointState::Staged) {
                dropped.extend(table.store.abort(id).await?.into_iter().map(|r| (index, r)));
            }
        }
        Ok(dropped)
    }

    /// The checkpoints Staged by an older epoch in any table, sorted: [`MultiTable::seal`] restarts them where it
    /// seals, and [`MultiTable::abort`] drops them.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> sinkpoint::Result<()> {
    /// use sinkpoint::{multi::MultiTable, DirTable, JobId, Store, TargetIdentity};
    /// let dir = tempfile::tempdir()?;
    /// let table = DirTable::local(dir.path().join("t"))?;
    /// let store = Store::builder(JobId::new("j")?, TargetIdentity::new("file:///t")?)
    ///     .path(dir.path().join("t.redb"))
    ///     .open()
    ///     .await?;
    /// assert!(MultiTable::builder().table(&store, &table).build()?.orphans().is_empty());
    /// # Ok(()) }
    /// ```
    pub fn orphans(&self) -> Vec<CheckpointId> {
        let all: BTreeSet<&CheckpointId> = self.tables.iter().flat_map(|t| t.store.orphans()).collect();
        all.into_iter().cloned().collect()
    }

    /// Whether every table's job has finished ([`Store::is_finished`] in each): the fast path of a rerun. One
    /// table finished alone says nothing about the others (a crash between the tables' `finish`).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> sinkpoint::Result<()> {
    /// use sinkpoint::{multi::MultiTable, DirTable, JobId, Store, TargetIdentity};
    /// let dir = tempfile::tempdir()?;
    /// let table = DirTable::local(dir.path().join("t"))?;
    /// let store = Store::builder(JobId::new("j")?, TargetIdentity::new("file:///t")?)
    ///     .path(dir.path().join("t.redb"))
    ///     .open()
    ///     .await?;
    /// let multi = MultiTable::builder().table(&store, &table).build()?;
    /// assert!(!multi.is_finished()?);
    /// multi.finish().await?;
    /// assert!(multi.is_finished()?);
    /// # Ok(()) }
    /// ```
    pub fn is_finished(&self) -> Result<bool> {
        for table in &self.tables {
            if !table.store.is_finished()? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn committer(&self, table: &Table<'a>) -> Committer<'a> {
        let committer = Committer::new(table.store, table.target);
        match &self.crash {
            Some(hook) => committer.with_crash_hook(hook.clone()),
            None => committer,
        }
    }

    /// Recovers each table after any crash, one after another ([`Committer::recover`]: probe its key in flight,
    /// mark or re-commit it, commit what is Sealed under its next keys), and answers each table's report in
    /// table order. A table that fails stops the call there; a rerun recovers again from the first table.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> sinkpoint::Result<()> {
    /// use sinkpoint::{multi::MultiTable, DirTable, JobId, Store, TargetIdentity};
    /// let dir = tempfile::tempdir()?;
    /// let table = DirTable::local(dir.path().join("t"))?;
    /// let store = Store::builder(JobId::new("j")?, TargetIdentity::new("file:///t")?)
    ///     .path(dir.path().join("t.redb"))
    ///     .open()
    ///     .await?;
    /// let reports = MultiTable::builder().table(&store, &table).build()?.recover().await?;
    /// assert_eq!(reports.len(), 1);
    /// # Ok(()) }
    /// ```
    pub async fn recover(&self) -> Result<Vec<RecoveryReport>> {
        let mut reports = Vec::with_capacity(self.tables.len());
        for table in &self.tables {
            reports.push(self.committer(table).recover().await?);
            self.crash_point(crash_points::AFTER_TABLE_COMMIT)?;
        }
        Ok(reports)
    }

    /// [`Committer::commit_pending`] in each table, one after another; each table's report in table order.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> sinkpoint::Result<()> {
    /// use sinkpoint::{multi::MultiTable, DirTable, JobId, Store, TargetIdentity};
    /// let dir = tempfile::tempdir()?;
    /// let table = DirTable::local(dir.path().join("t"))?;
    /// let store = Store::builder(JobId::new("j")?, TargetIdentity::new("file:///t")?)
    ///     .path(dir.path().join("t.redb"))
    ///     .open()
    ///     .await?;
    /// let reports = MultiTable::builder().table(&store, &table).build()?.commit_pending().await?;
    /// assert!(reports[0].committed_keys.is_empty());
    /// # Ok(()) }
    /// ```
    pub async fn commit_pending(&self) -> Result<Vec<CommitReport>> {
        self.commit_each(false).await
    }

    /// [`Committer::finish`] in each table, one after another: call it once every input is processed in every
    /// table. Each table's report in table order.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> sinkpoint::Result<()> {
    /// use sinkpoint::{multi::MultiTable, DirTable, JobId, Store, TargetIdentity};
    /// let dir = tempfile::tempdir()?;
    /// let table = DirTable::local(dir.path().join("t"))?;
    /// let store = Store::builder(JobId::new("j")?, TargetIdentity::new("file:///t")?)
    ///     .path(dir.path().join("t.redb"))
    ///     .open()
    ///     .await?;
    /// MultiTable::builder().table(&store, &table).build()?.finish().await?;
    /// assert!(store.is_finished()?);
    /// # Ok(()) }
    /// ```
    pub async fn finish(&self) -> Result<Vec<CommitReport>> {
        self.commit_each(true).await
    }

    /// Each table's committer round in turn. The one place the tables' commits are sequenced: they are
    /// independent (each its own keys and recovery), so an order among them is all a failure can interrupt.
    async fn commit_each(&self, finish: bool) -> Result<Vec<CommitReport>> {
        let mut reports = Vec::with_capacity(self.tables.len());
        for table in &self.tables {
            let committer = self.committer(table);
            reports.push(if finish { committer.finish().await? } else { committer.commit_pending().await? });
            self.crash_point(crash_points::AFTER_TABLE_COMMIT)?;
        }
        Ok(reports)
    }
}

/// Whether `store` holds checkpoint `id` Sealed or later (its keys processed there).
fn holds(store: &Store, id: &CheckpointId) -> Result<bool> {
    Ok(store.get(id)?.is_some_and(|c| c.state.keys_processed()))
}

/// Offers checkpoint `id`'s part to one table's store: seals it in a new attempt when the table lacks it (the
/// attempt a crash or a refused seal left is dropped first, its results into `cleanup`), or finds it held.
async fn offer(
    store: &Store,
    id: &CheckpointId,
    keys: Vec<SourceKey>,
    results: Vec<WriteResult>,
    cleanup: &mut Vec<(usize, WriteResult)>,
    index: usize,
) -> Result<Offered> {
    let attempt = match store.get(id)? {
        None => Attempt::FIRST,
        Some(info) if info.state.keys_processed() => info.attempt,
        Some(info) => {
            // An orphan refuses `stage`, and a part the last attempt staged may differ: begin the next attempt.
            let dropped = store.restart(id).await?;
            cleanup.extend(dropped.into_iter().filter(|r| !results.contains(r)).map(|r| (index, r)));
            info.attempt.next()
        }
    };
    let part = StagePart::new(attempt, Part::FIRST).keys(keys).results(results);
    match store.stage_and_seal(id, part, 1).await {
        Ok(StageOutcome::Staged | StageOutcome::AlreadyStaged) => Ok(Offered::Sealed),
        Err(e)
            if matches!(
                e.transition(),
                Some(TransitionError::AlreadySealed { part_matches: Some(false) | None, .. })
            ) =>
        {
            Ok(Offered::Held)
        }
        Err(e) => Err(e),
    }
}

/// Records results offered for a table that already holds checkpoint `id` in that table's garbage ledger (the
/// collector keeps any file a table version names, so a result released after its commit is safe there too), and
/// returns them in `cleanup`.
async fn discard(
    store: &Store,
    id: &CheckpointId,
    results: Vec<WriteResult>,
    cleanup: &mut Vec<(usize, WriteResult)>,
    index: usize,
) -> Result<()> {
    if results.is_empty() {
        return Ok(());
    }
    let attempt = store.get(id)?.map_or(Attempt::FIRST, |c| c.attempt);
    store.discard(id, attempt, results.clone()).await?;
    cleanup.extend(results.into_iter().map(|r| (index, r)));
    Ok(())
}

impl std::fmt::Debug for MultiTable<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultiTable")
            .field("targets", &self.targets())
            .field("crash_hook", &self.crash.is_some())
            .finish_non_exhaustive()
    }
}
