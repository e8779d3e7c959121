//! A request-counting object store: wraps any store (written like object_store's own `throttle.rs` wrapper:
//! generic over the inner store, `Display` shows the nesting) and tallies requests and bytes per *area*, the
//! first segment of each path (`table/…`, `daft/…`, and later `mirror/…`), so one shared store can tell the
//! target's requests from the checkpoint state's.
//!
//! A request is what a cloud store bills: one per put, get, head, delete and copy, and one per page of 1,000
//! entries of a list (S3's page size), the first page counted when the list starts.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore, PutMultipartOptions,
    PutOptions, PutPayload, PutResult, RenameOptions, Result,
};

/// The entries of one billed list page.
const LIST_PAGE_ENTRIES: u64 = 1000;

/// What one area of the store was asked.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct Tally {
    pub puts: u64,
    pub gets: u64,
    pub heads: u64,
    pub lists: u64,
    pub deletes: u64,
    pub copies: u64,
    pub bytes_put: u64,
    pub bytes_got: u64,
    pub entries_listed: u64,
}

impl Tally {
    /// Every billed request.
    pub fn requests(&self) -> u64 {
        self.puts + self.gets + self.heads + self.lists + self.deletes + self.copies
    }

    /// Bytes moved either way.
    pub fn bytes(&self) -> u64 {
        self.bytes_put + self.bytes_got
    }

    /// `self - earlier`, field by field: what happened in between.
    pub fn since(&self, earlier: &Tally) -> Tally {
        Tally {
            puts: self.puts - earlier.puts,
            gets: self.gets - earlier.gets,
            heads: self.heads - earlier.heads,
            lists: self.lists - earlier.lists,
            deletes: self.deletes - earlier.deletes,
            copies: self.copies - earlier.copies,
            bytes_put: self.bytes_put - earlier.bytes_put,
            bytes_got: self.bytes_got - earlier.bytes_got,
            entries_listed: self.entries_listed - earlier.entries_listed,
        }
    }

    /// `puts/gets/lists` in a few characters, for the report.
    pub fn short(&self) -> String {
        format!("{} put, {} get, {} list, {} B", self.puts, self.gets + self.heads, self.lists, self.bytes())
    }
}

/// The tallies, shared by the store and whoever reads them.
#[derive(Clone, Default, Debug)]
pub struct Counts {
    areas: Arc<Mutex<BTreeMap<String, Tally>>>,
}

impl Counts {
    fn with(&self, path: Option<&Path>, f: impl FnOnce(&mut Tally)) {
        let area = path.and_then(|p| p.parts().next()).map(|p| p.as_ref().to_owned()).unwrap_or_default();
        let mut areas = self.areas.lock().expect("counts lock");
        f(areas.entry(area).or_default());
    }

    /// The tally of one area so far.
    pub fn area(&self, area: &str) -> Tally {
        self.areas.lock().expect("counts lock").get(area).copied().unwrap_or_default()
    }
}

/// Counts every request made to `inner`; see the module docs.
#[derive(Debug)]
pub struct CountingStore<T> {
    inner: T,
    counts: Counts,
}

impl<T> CountingStore<T> {
    pub fn new(inner: T) -> Self {
        Self { inner, counts: Counts::default() }
    }

    /// A handle on the tallies.
    pub fn counts(&self) -> Counts {
        self.counts.clone()
    }
}

impl<T: ObjectStore> std::fmt::Display for CountingStore<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CountingStore({})", self.inner)
    }
}

fn count_list(
    counts: Counts,
    prefix: Option<&Path>,
    stream: BoxStream<'static, Result<ObjectMeta>>,
) -> BoxStream<'static, Result<ObjectMeta>> {
    counts.with(prefix, |t| t.lists += 1);
    let prefix = prefix.cloned();
    let mut seen = 0u64;
    stream
        .inspect(move |entry| {
            if entry.is_ok() {
                seen += 1;
                let next_page = seen > 1 && (seen - 1).is_multiple_of(LIST_PAGE_ENTRIES);
                counts.with(prefix.as_ref(), |t| {
                    t.entries_listed += 1;
                    if next_page {
                        t.lists += 1;
                    }
                });
            }
        })
        .boxed()
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<T: ObjectStore> ObjectStore for CountingStore<T> {
    async fn put_opts(&self, location: &Path, payload: PutPayload, opts: PutOptions) -> Result<PutResult> {
        let len = payload.content_length() as u64;
        self.counts.with(Some(location), |t| {
            t.puts += 1;
            t.bytes_put += len;
        });
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(&self, location: &Path, opts: PutMultipartOptions) -> Result<Box<dyn MultipartUpload>> {
        // Nothing in the benches uploads in parts; counted as one put so that a future use is not invisible.
        self.counts.with(Some(location), |t| t.puts += 1);
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let head = options.head;
        let result = self.inner.get_opts(location, options).await;
        let got = match &result {
            Ok(r) if !head => r.range.end - r.range.start,
            _ => 0,
        };
        self.counts.with(Some(location), |t| {
            if head {
                t.heads += 1;
            } else {
                t.gets += 1;
            }
            t.bytes_got += got;
        });
        result
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        let got: u64 = ranges.iter().map(|r| r.end - r.start).sum();
        self.counts.with(Some(location), |t| {
            t.gets += ranges.len() as u64;
            t.bytes_got += got;
        });
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(&self, locations: BoxStream<'static, Result<Path>>) -> BoxStream<'static, Result<Path>> {
        let counts = self.counts.clone();
        let locations = locations
            .inspect(move |p| {
                if let Ok(p) = p {
                    counts.with(Some(p), |t| t.deletes += 1);
                }
            })
            .boxed();
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        count_list(self.counts.clone(), prefix, self.inner.list(prefix))
    }

    fn list_with_offset(&self, prefix: Option<&Path>, offset: &Path) -> BoxStream<'static, Result<ObjectMeta>> {
        count_list(self.counts.clone(), prefix, self.inner.list_with_offset(prefix, offset))
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        let result = self.inner.list_with_delimiter(prefix).await;
        let entries = result.as_ref().map(|r| (r.objects.len() + r.common_prefixes.len()) as u64).unwrap_or(0);
        self.counts.with(prefix, |t| {
            t.lists += 1 + entries.saturating_sub(1) / LIST_PAGE_ENTRIES;
            t.entries_listed += entries;
        });
        result
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.counts.with(Some(to), |t| t.copies += 1);
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        // A rename is a copy and a delete on every cloud store.
        self.counts.with(Some(to), |t| t.copies += 1);
        self.counts.with(Some(from), |t| t.deletes += 1);
        self.inner.rename_opts(from, to, options).await
    }
}
