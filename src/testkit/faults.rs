//! A fault-injecting object store, written like `object_store`'s own wrappers (`ThrottledStore`, `LimitStore`):
//! generic over the inner store, `Display` shows the nesting, and every method of the trait passes through it.
//!
//! It can fail a put before it lands or after it landed (a lost ack), hold puts at a gate until released (so a
//! test decides when an upload finishes, without wall-clock sleeps), add latency, count requests and bytes, and
//! crash at its k-th operation: that operation and every later one fail, as if the process lost the network for
//! good. Clones share one state, so a test keeps a clone to steer the one it handed to the store.
//!
//! It can also be part of a simulated process ([`FaultStore::attach`]): each request, and the moment a put has
//! landed, is then one of the process's crash points, and once the process is dead every request fails at
//! once with `NotSupported` (a dead process settles nothing, so its threads must not sit in retries).
//!
//! With a [`Journal`] it records, in order, every change that reached the inner store (so a test can rebuild
//! the bucket as it stood after any prefix of its history: a stale replica, a rolled-back bucket) and every put
//! a dead process tried but never sent (so a test can deliver it late, after other writers moved on: a stalled
//! request).

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt as _;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore, PutMultipartOptions,
    PutOptions, PutPayload, PutResult, RenameOptions, Result,
};
use tokio::sync::watch;

use crate::testkit::process::{Component, ProcessCrash};

/// How an injected put fault behaves.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PutFault {
    /// The put fails before anything lands.
    FailBefore,
    /// The put lands, then fails: the caller never learns it landed (a lost ack, a timeout after the write).
    FailAfter,
}

/// Requests and bytes seen by a [`FaultStore`] (failed requests included).
#[derive(Clone, Copy, PartialEq, Eq, Default, Debug)]
pub struct Counts {
    /// Put requests (multipart uploads count once).
    pub puts: u64,
    /// Get requests.
    pub gets: u64,
    /// List requests.
    pub lists: u64,
    /// Objects the listings returned: what a listing costs grows with it, not with `lists`.
    pub listed: u64,
    /// Deleted paths.
    pub deletes: u64,
    /// Copies and renames.
    pub copies: u64,
    /// Bytes put.
    pub bytes_put: u64,
    /// Bytes of objects got.
    pub bytes_got: u64,
}

#[derive(Debug)]
struct Rule {
    /// `None` for a get fault.
    fault: Option<PutFault>,
    path_contains: String,
    times: u32,
}

#[derive(Debug, Default)]
struct Faults {
    ops: u64,
    crash_at: Option<u64>,
    crashed: bool,
    rules: Vec<Rule>,
    latency: Duration,
    counts: Counts,
    put_paths: Vec<String>,
    waiting: usize,
    /// Gets that find nothing answer only after this delay, this many times, for paths containing the string.
    stale: Vec<(String, Duration, u32)>,
    /// The process this store's requests belong to.
    process: Option<ProcessCrash>,
    /// Where changes and unsent puts are recorded.
    journal: Option<Journal>,
}

/// One change to an object store, as a [`Journal`] keeps it.
#[derive(Clone, Debug)]
pub enum Mutation {
    /// A put, with the options it was sent with (a conditional put stays conditional when replayed).
    Put {
        /// Where.
        location: Path,
        /// The bytes.
        payload: PutPayload,
        /// Its mode and attributes.
        opts: PutOptions,
    },
    /// A delete.
    Delete {
        /// Where.
        location: Path,
    },
}

impl Mutation {
    /// Applies the change to `store`: a put with its original options (so a conditional one may be refused), a
    /// delete as it was.
    ///
    /// # Errors
    ///
    /// What the store answered, such as `AlreadyExists` or `Precondition` for a refused conditional put.
    pub async fn apply(&self, store: &dyn ObjectStore) -> Result<()> {
        match self {
            Mutation::Put { location, payload, opts } => {
                store.put_opts(location, payload.clone(), opts.clone()).await.map(drop)
            }
            Mutation::Delete { location } => {
                let one = futures::stream::once(futures::future::ready(Ok(location.clone()))).boxed();
                store.delete_stream(one).next().await.unwrap_or(Ok(location.clone())).map(drop)
            }
        }
    }

    /// The path it changes.
    pub fn location(&self) -> &Path {
        match self {
            Mutation::Put { location, .. } | Mutation::Delete { location } => location,
        }
    }
}

/// The history of an object store as seen through the [`FaultStore`]s that share this journal: the changes that
/// landed, in order, and the puts of dead processes that were never sent. Clones share one journal.
#[derive(Clone, Debug, Default)]
pub struct Journal {
    inner: Arc<Mutex<JournalEntries>>,
}

#[derive(Debug, Default)]
struct JournalEntries {
    landed: Vec<Mutation>,
    unsent: Vec<Mutation>,
}

impl Journal {
    /// An empty journal.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, JournalEntries> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every change that landed, in order.
    pub fn landed(&self) -> Vec<Mutation> {
        self.lock().landed.clone()
    }

    /// Takes the puts that dead processes tried and never sent, oldest first.
    pub fn take_unsent(&self) -> Vec<Mutation> {
        std::mem::take(&mut self.lock().unsent)
    }

    /// A new bucket holding what the journaled store held after its first `changes` changes (every put applied
    /// unconditionally: the history already decided which landed).
    ///
    /// # Errors
    ///
    /// When the in-memory store refuses a change (it does not).
    pub async fn replay(&self, changes: usize) -> Result<object_store::memory::InMemory> {
        let bucket = object_store::memory::InMemory::new();
        for change in self.landed().into_iter().take(changes) {
            let change = match change {
                Mutation::Put { location, payload, .. } => {
                    Mutation::Put { location, payload, opts: PutOptions::default() }
                }
                delete => delete,
            };
            change.apply(&bucket).await?;
        }
        Ok(bucket)
    }
}

#[derive(Debug)]
struct State {
    faults: Mutex<Faults>,
    /// Puts of paths containing this string wait at the gate (`Some("")`: every put).
    hold: watch::Sender<Option<String>>,
}

/// The operations a [`FaultStore`] tells apart.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Op {
    Put,
    Get,
    List,
    Delete,
    Copy,
}

/// An object store that injects faults into an inner one (see the module docs).
#[derive(Debug)]
pub struct FaultStore<T: ObjectStore> {
    inner: Arc<T>,
    state: Arc<State>,
}

impl<T: ObjectStore> Clone for FaultStore<T> {
    fn clone(&self) -> Self {
        Self { inner: self.inner.clone(), state: self.state.clone() }
    }
}

impl<T: ObjectStore> fmt::Display for FaultStore<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultStore({})", self.inner)
    }
}

fn generic(message: String) -> object_store::Error {
    object_store::Error::Generic { store: "FaultStore", source: message.into() }
}

fn process_dead(what: &str) -> object_store::Error {
    object_store::Error::NotSupported { source: format!("FaultStore: the process is dead ({what})").into() }
}

impl<T: ObjectStore> FaultStore<T> {
    /// Wraps `inner`, injecting nothing yet.
    pub fn new(inner: T) -> Self {
        let (hold, _) = watch::channel(None);
        Self { inner: Arc::new(inner), state: Arc::new(State { faults: Mutex::default(), hold }) }
    }

    fn lock(&self) -> MutexGuard<'_, Faults> {
        // A test thread that panicked while holding the lock leaves plain counters; they stay usable.
        self.state.faults.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The wrapped store.
    pub fn inner(&self) -> &T {
        &self.inner
    }

    /// Makes the next `times` puts whose path contains `path_contains` fail as `fault` says.
    pub fn fail_puts(&self, fault: PutFault, path_contains: &str, times: u32) {
        self.lock().rules.push(Rule { fault: Some(fault), path_contains: path_contains.to_owned(), times });
    }

    /// Makes the next `times` gets whose path contains `path_contains` fail (nothing is read).
    pub fn fail_gets(&self, path_contains: &str, times: u32) {
        self.lock().rules.push(Rule { fault: None, path_contains: path_contains.to_owned(), times });
    }

    /// Makes the next `times` gets of a path containing `path_contains` that find nothing answer only after
    /// `delay`: the caller's view that the object is absent is stale by the time it acts, so a concurrent writer
    /// can land it first (the race a takeover has with a writer it is fencing).
    pub fn stale_absence(&self, path_contains: &str, delay: Duration, times: u32) {
        self.lock().stale.push((path_contains.to_owned(), delay, times));
    }

    /// Crashes at operation `k` (counted from 1 since creation, over every method): it and all later ones fail.
    pub fn crash_at(&self, k: u64) {
        let mut faults = self.lock();
        faults.crash_at = Some(k);
        if k <= faults.ops {
            faults.crashed = true;
        }
    }

    /// Crashes now.
    pub fn crash(&self) {
        self.lock().crashed = true;
    }

    /// Records the store's changes and its dead process's unsent puts in `journal` (see the module docs).
    pub fn journal(&self, journal: &Journal) {
        self.lock().journal = Some(journal.clone());
    }

    fn record(&self, change: Mutation, landed: bool) {
        if let Some(journal) = self.lock().journal.clone() {
            let mut entries = journal.lock();
            if landed { entries.landed.push(change) } else { entries.unsent.push(change) }
        }
    }

    /// Makes the store's requests part of `process` (see the module docs).
    pub fn attach(&self, process: &ProcessCrash) {
        self.lock().process = Some(process.clone());
    }

    /// A store over the same inner store with a fresh state: no faults, no process, no counts (a new process
    /// reaching the same objects).
    pub fn fresh(&self) -> Self {
        let (hold, _) = watch::channel(None);
        Self { inner: self.inner.clone(), state: Arc::new(State { faults: Mutex::default(), hold }) }
    }

    /// Undoes a crash (a new process on the same object store).
    pub fn revive(&self) {
        let mut faults = self.lock();
        faults.crashed = false;
        faults.crash_at = None;
    }

    /// The operations seen so far.
    pub fn ops(&self) -> u64 {
        self.lock().ops
    }

    /// Adds `latency` before every operation.
    pub fn set_latency(&self, latency: Duration) {
        self.lock().latency = latency;
    }

    /// Holds every put at a gate before it reaches the inner store (`true`) or lets them through (`false`).
    pub fn hold_puts(&self, hold: bool) {
        self.state.hold.send_replace(hold.then(String::new));
    }

    /// Holds only the puts of paths containing `path_contains` (until `hold_puts(false)`).
    pub fn hold_puts_under(&self, path_contains: &str) {
        self.state.hold.send_replace(Some(path_contains.to_owned()));
    }

    /// How many puts are waiting at the gate.
    pub fn held_puts(&self) -> usize {
        self.lock().waiting
    }

    /// The requests and bytes seen so far.
    pub fn counts(&self) -> Counts {
        self.lock().counts
    }

    /// The path of every put so far, in order.
    pub fn put_paths(&self) -> Vec<String> {
        self.lock().put_paths.clone()
    }

    /// Counts every object `listing` returns, as the caller reads it.
    fn count_listed(&self, listing: BoxStream<'static, Result<ObjectMeta>>) -> BoxStream<'static, Result<ObjectMeta>> {
        let this = self.clone();
        listing
            .inspect(move |item| {
                if item.is_ok() {
                    this.lock().counts.listed += 1;
                }
            })
            .boxed()
    }

    /// Counts one operation and fails it if the store or its process has crashed; returns the latency to add.
    fn op(&self, op: Op, place: &dyn fmt::Display) -> Result<Duration> {
        let mut faults = self.lock();
        if let Some(process) = &faults.process
            && !process.tick(Component::Mirror, || format!("mirror {op:?} {place}"))
        {
            return Err(process_dead(&format!("{op:?} {place}")));
        }
        faults.ops += 1;
        match op {
            Op::Put => faults.counts.puts += 1,
            Op::Get => faults.counts.gets += 1,
            Op::List => faults.counts.lists += 1,
            Op::Delete => faults.counts.deletes += 1,
            Op::Copy => faults.counts.copies += 1,
        }
        if faults.crash_at == Some(faults.ops) {
            faults.crashed = true;
        }
        if faults.crashed {
            return Err(generic(format!("crashed (operation {}, a {op:?})", faults.ops)));
        }
        Ok(faults.latency)
    }

    /// Takes one matching rule of the kind asked for (`put`: a put fault; otherwise a get fault).
    fn take_fault(&self, location: &Path, put: bool) -> Option<Option<PutFault>> {
        let mut faults = self.lock();
        let rule = faults
            .rules
            .iter_mut()
            .find(|r| r.times > 0 && r.fault.is_some() == put && location.as_ref().contains(&r.path_contains))?;
        rule.times -= 1;
        let fault = rule.fault;
        faults.rules.retain(|r| r.times > 0);
        Some(fault)
    }

    async fn pass_gate(&self, location: &Path) {
        let held = |hold: &Option<String>| hold.as_ref().is_some_and(|p| location.as_ref().contains(p.as_str()));
        let mut rx = self.state.hold.subscribe();
        if held(&rx.borrow()) {
            self.lock().waiting += 1;
            let _ = rx.wait_for(|hold| !held(hold)).await;
            self.lock().waiting -= 1;
        }
    }
}

async fn pause(latency: Duration) {
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<T: ObjectStore> ObjectStore for FaultStore<T> {
    async fn put_opts(&self, location: &Path, payload: PutPayload, opts: PutOptions) -> Result<PutResult> {
        let unsent = || Mutation::Put { location: location.clone(), payload: payload.clone(), opts: opts.clone() };
        let dead = |e: object_store::Error| {
            if matches!(e, object_store::Error::NotSupported { .. }) {
                self.record(unsent(), false);
            }
            e
        };
        let latency = self.op(Op::Put, location).map_err(dead)?;
        pause(latency).await;
        self.pass_gate(location).await;
        {
            let mut faults = self.lock();
            // A crash while the put waited at the gate stops it too.
            if faults.crashed {
                return Err(generic(format!("crashed while the put of {location} was held")));
            }
            if faults.process.as_ref().is_some_and(ProcessCrash::is_dead) {
                drop(faults);
                return Err(dead(process_dead(&format!("while the put of {location} was held"))));
            }
            faults.counts.bytes_put += payload.content_length() as u64;
            faults.put_paths.push(location.to_string());
        }
        match self.take_fault(location, true).flatten() {
            Some(PutFault::FailBefore) => Err(generic(format!("injected failure before the put of {location}"))),
            Some(PutFault::FailAfter) => {
                self.inner.put_opts(location, payload.clone(), opts.clone()).await?;
                self.record(unsent(), true);
                Err(generic(format!("injected failure after the put of {location} landed")))
            }
            None => {
                let put = self.inner.put_opts(location, payload.clone(), opts.clone()).await?;
                self.record(unsent(), true);
                // The put has landed; a process that dies now never learns it.
                let process = self.lock().process.clone();
                if let Some(process) = process
                    && !process.tick(Component::Mirror, || format!("mirror put {location} landed"))
                {
                    return Err(process_dead(&format!("after the put of {location} landed")));
                }
                Ok(put)
            }
        }
    }

    async fn put_multipart_opts(&self, location: &Path, opts: PutMultipartOptions) -> Result<Box<dyn MultipartUpload>> {
        pause(self.op(Op::Put, location)?).await;
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        pause(self.op(Op::Get, location)?).await;
        if self.take_fault(location, false).is_some() {
            return Err(generic(format!("injected failure of the get of {location}")));
        }
        let got = match self.inner.get_opts(location, options).await {
            Ok(got) => got,
            Err(e @ object_store::Error::NotFound { .. }) => {
                let delay = {
                    let mut faults = self.lock();
                    let rule = faults.stale.iter_mut().find(|r| r.2 > 0 && location.as_ref().contains(&r.0));
                    rule.map(|r| {
                        r.2 -= 1;
                        r.1
                    })
                };
                pause(delay.unwrap_or_default()).await;
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        self.lock().counts.bytes_got += got.range.end - got.range.start;
        Ok(got)
    }

    async fn get_ranges(&self, location: &Path, ranges: &[std::ops::Range<u64>]) -> Result<Vec<bytes::Bytes>> {
        pause(self.op(Op::Get, location)?).await;
        let got = self.inner.get_ranges(location, ranges).await?;
        self.lock().counts.bytes_got += got.iter().map(|b| b.len() as u64).sum::<u64>();
        Ok(got)
    }

    fn delete_stream(&self, locations: BoxStream<'static, Result<Path>>) -> BoxStream<'static, Result<Path>> {
        let this = self.clone();
        locations
            .then(move |location| {
                let this = this.clone();
                async move {
                    let location = location?;
                    pause(this.op(Op::Delete, &location)?).await;
                    let one = futures::stream::once(futures::future::ready(Ok(location.clone()))).boxed();
                    let deleted = this
                        .inner
                        .delete_stream(one)
                        .next()
                        .await
                        .unwrap_or_else(|| Err(generic("the inner store answered no delete".into())));
                    if deleted.is_ok() {
                        this.record(Mutation::Delete { location }, true);
                    }
                    deleted
                }
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        match self.op(Op::List, &prefix.cloned().unwrap_or_default()) {
            Ok(_) => self.count_listed(self.inner.list(prefix)),
            Err(e) => futures::stream::once(async move { Err(e) }).boxed(),
        }
    }

    fn list_with_offset(&self, prefix: Option<&Path>, offset: &Path) -> BoxStream<'static, Result<ObjectMeta>> {
        match self.op(Op::List, &prefix.cloned().unwrap_or_default()) {
            Ok(_) => self.count_listed(self.inner.list_with_offset(prefix, offset)),
            Err(e) => futures::stream::once(async move { Err(e) }).boxed(),
        }
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        pause(self.op(Op::List, &prefix.cloned().unwrap_or_default())?).await;
        let listed = self.inner.list_with_delimiter(prefix).await?;
        self.lock().counts.listed += (listed.objects.len() + listed.common_prefixes.len()) as u64;
        Ok(listed)
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        pause(self.op(Op::Copy, to)?).await;
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        pause(self.op(Op::Copy, to)?).await;
        self.inner.rename_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::ObjectStoreExt as _;
    use object_store::memory::InMemory;

    #[tokio::test]
    async fn faults_fire_as_configured() {
        let store = FaultStore::new(InMemory::new());
        assert_eq!(store.to_string(), "FaultStore(InMemory)");
        let a = Path::from("a/x");
        store.fail_puts(PutFault::FailBefore, "a/", 1);
        assert!(store.put(&a, "1".into()).await.is_err());
        assert!(store.get(&a).await.is_err(), "a put that failed before landing left an object");
        store.fail_puts(PutFault::FailAfter, "a/", 1);
        assert!(store.put(&a, "2".into()).await.is_err());
        assert_eq!(store.get(&a).await.unwrap().bytes().await.unwrap(), "2");
        store.put(&a, "3".into()).await.unwrap();
        let counts = store.counts();
        assert_eq!((counts.puts, counts.gets, counts.bytes_put), (3, 2, 3));
        store.crash_at(store.ops() + 2);
        store.get(&a).await.unwrap();
        assert!(store.get(&a).await.is_err());
        assert!(store.put(&a, "4".into()).await.is_err(), "a crashed store must refuse everything");
        store.revive();
        store.fail_gets("a/", 1);
        assert!(store.get(&a).await.is_err());
        assert_eq!(store.get(&a).await.unwrap().bytes().await.unwrap(), "3");
    }

    #[tokio::test]
    async fn held_puts_wait_at_the_gate() {
        let store = FaultStore::new(InMemory::new());
        store.hold_puts(true);
        let s = store.clone();
        let put = tokio::spawn(async move { s.put(&Path::from("p"), "x".into()).await });
        while store.held_puts() == 0 {
            tokio::task::yield_now().await;
        }
        assert!(store.inner().get(&Path::from("p")).await.is_err(), "a held put landed");
        store.hold_puts(false);
        put.await.unwrap().unwrap();
        assert!(store.inner().get(&Path::from("p")).await.is_ok());
    }
}
