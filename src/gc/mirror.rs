//! The operator's collection of a mirror (`sinkpoint gc --mirror`): what a writer's own collection could not reach, because
//! the writer died before its collection was due, or because no manifest ever referenced it (a snapshot whose
//! writer crashed before its manifest).
//!
//! The rules are the writer's own (`ship::maintainer::Maintainer`), made to hold for a process that is not the writer and
//! whose clock is not the writer's:
//!
//! - **Never deleted**: the newest manifest (it fences every older epoch, and it is what a restore reads); the
//!   manifest just before it when the newest is a claim (a restore may take its base from it, see
//!   `read::read_newest`); every WAL slot at or above the base (the slots a restore replays, and any slot beyond
//!   a gap: deleting it would turn a mirror a restore refuses into one that silently restores less); the
//!   snapshot at the base, every chunk of it; any object whose name is not one the mirror writes, and anything
//!   outside `manifest/`, `wal/` and `snapshot/` of the prefix (another job's objects included).
//! - **Superseded** (older manifests, slots and snapshots below the base): deleted once the newest manifest is
//!   at least the minimum age old by the object store's own time. A reader that could still use them began more
//!   than the minimum age ago, which the writer's own collection rules out as well.
//! - **Stray** (a snapshot above the base: chunks a writer put and then died before its manifest named them):
//!   deleted once every chunk of that snapshot is at least the minimum age old by the store's time. A live
//!   writer puts a snapshot's chunks and then its manifest within moments, so the minimum age is what keeps a
//!   snapshot being written now from being taken for a dead one — the same bound the writer's collection already
//!   assumes of every reader. A writer stalled longer than that between its last chunk and its manifest would
//!   name a snapshot that is gone (its restore then fails `Corrupt`, naming it): keep the minimum age well above
//!   any stall you expect, as for `MirrorSettings::gc_age_ms_min`.
//!
//! Ages are measured against the caller's wall time (`now_wall_ms`) and the store's `last_modified` (see the
//! vocabulary of `gc`): a clock skew between the two shortens or lengthens every age by the skew, so keep the
//! minimum age far above it.

use std::collections::BTreeMap;
use std::sync::Arc;

use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore};

use super::{Progress, ProgressFn, is_young, object_age_ms};
use crate::error::{Error, Result};
use crate::mirror::{ManifestName, MirrorSettings, Remote, read_newest};
use crate::types::{Epoch, JobId};

/// Why a mirror object is garbage.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum MirrorReason {
    /// The newest manifest no longer references it: an older manifest, or a slot or snapshot below its base.
    Superseded,
    /// No manifest ever referenced it: a snapshot above the newest manifest's base, left by a writer that died
    /// before writing the manifest that would have named it.
    Stray,
}

impl MirrorReason {
    /// A short name, for reports.
    pub fn name(self) -> &'static str {
        match self {
            MirrorReason::Superseded => "superseded",
            MirrorReason::Stray => "stray",
        }
    }
}

/// One object of a mirror that no restore needs.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct MirrorObject {
    /// Its path in the object store.
    pub path: Path,
    /// Its size in bytes.
    pub bytes: u64,
    /// How long it has been garbage, in milliseconds: since the newest manifest was written for a superseded
    /// object, since its snapshot's last chunk was put for a stray one (0 for a time in the future).
    pub age_ms: u64,
    /// Why it is garbage.
    pub reason: MirrorReason,
}

/// What [`find_mirror_garbage`] found.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct MirrorGarbage {
    /// The job the mirror belongs to (from its newest manifest).
    pub job: JobId,
    /// The newest manifest's epoch: the holder that fences every older writer.
    pub epoch: Epoch,
    /// The newest manifest's path (never deleted).
    pub newest_manifest: Path,
    /// The first slot a restore reads; slots from here on are never deleted.
    pub base_slot: u64,
    /// Garbage at least the minimum age old: what [`delete_mirror_garbage`] deletes.
    pub due: Vec<MirrorObject>,
    /// Garbage younger than the minimum age: kept (a reader or a writer may still use it).
    pub young: Vec<MirrorObject>,
}

impl MirrorGarbage {
    /// The bytes of the due objects.
    pub fn due_bytes(&self) -> u64 {
        self.due.iter().map(|o| o.bytes).sum()
    }

    /// The bytes of the young objects.
    pub fn young_bytes(&self) -> u64 {
        self.young.iter().map(|o| o.bytes).sum()
    }
}

/// Lists the garbage of the mirror at `prefix` of `store`: objects no restore needs (see the module's rules),
/// `due` if at least `age_ms_min` old at `now_wall_ms` (milliseconds since the Unix epoch, compared with the
/// store's `last_modified`), else `young`. Reads the manifest listing, the newest manifest (and its predecessor
/// if the newest is a claim) and the listings of `wal/` and `snapshot/`; deletes nothing. Tells `progress` how
/// many objects it has listed after each of its three listings ([`Progress::Listed`]).
///
/// A prefix without a manifest is [`crate::ErrorKind::WrongStore`] (it is not a mirror, or not this one); a
/// damaged newest manifest is [`crate::ErrorKind::Corrupt`]: nothing can be judged garbage then.
pub async fn find_mirror_garbage(
    store: Arc<dyn ObjectStore>,
    prefix: Path,
    now_wall_ms: u64,
    age_ms_min: u64,
    progress: ProgressFn,
) -> Result<MirrorGarbage> {
    blocking(store, prefix, move |remote| find(remote, now_wall_ms, age_ms_min, &*progress)).await
}

/// Deletes the due objects of `garbage` (found by [`find_mirror_garbage`] on the same `store` and `prefix`); an
/// object already gone counts as deleted. Returns how many were deleted, and tells `progress` after each delete
/// how many of the due objects are deleted so far ([`Progress::Deleted`]). Objects only grow older, and a newer
/// manifest only supersedes more, so a report stays true until it is applied.
pub async fn delete_mirror_garbage(
    store: Arc<dyn ObjectStore>,
    prefix: Path,
    garbage: &MirrorGarbage,
    progress: ProgressFn,
) -> Result<u64> {
    let paths: Vec<Path> = garbage.due.iter().map(|o| o.path.clone()).collect();
    let of = paths.len() as u64;
    blocking(store, prefix, move |remote| {
        let mut deleted = 0;
        for path in &paths {
            if path.prefix_match(remote.layout.prefix()).is_none() {
                return Err(Error::invalid_input(format!(
                    "{path} is not under the mirror's prefix {}: the report is of another mirror",
                    remote.layout.prefix()
                )));
            }
            remote.delete(path)?;
            deleted += 1;
            progress(Progress::Deleted { done: deleted, of });
        }
        Ok(deleted)
    })
    .await
}

/// Runs `f` on a [`Remote`] of the mirror on a blocking thread (the remote blocks on its own runtime).
async fn blocking<T: Send + 'static>(
    store: Arc<dyn ObjectStore>,
    prefix: Path,
    f: impl FnOnce(&Remote) -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(move || {
        let remote = Remote::new(store, prefix, MirrorSettings::default().request_timeout_ms)?;
        f(&remote)
    })
    .await
    .map_err(|e| Error::bug(format!("mirror collection task: {e}")))?
}

fn find(remote: &Remote, now_wall_ms: u64, age_ms_min: u64, progress: &dyn Fn(Progress)) -> Result<MirrorGarbage> {
    let mut listed = 0;
    let mut list = |dir: &str| -> Result<Vec<ObjectMeta>> {
        let objects = remote.list(dir)?;
        listed += objects.len() as u64;
        progress(Progress::Listed(listed));
        Ok(objects)
    };
    let mut manifests: Vec<(ManifestName, ObjectMeta)> = list("manifest")?
        .into_iter()
        .filter_map(|m| remote.layout.parse_manifest(&m.location).map(|n| (n, m)))
        .collect();
    manifests.sort_by_key(|(name, _)| *name);
    let names: Vec<ManifestName> = manifests.iter().map(|(n, _)| *n).collect();
    let Some((newest, body)) = read_newest(remote, &names)? else {
        return Err(Error::wrong_store(format!(
            "there is no manifest at {}: it is not a mirror (or not this job's); check the URL. Nothing was \
             collected",
            remote.describe(&remote.layout.dir("manifest"))
        )));
    };
    let at = names.iter().position(|n| *n == newest).ok_or_else(|| Error::bug("the newest manifest not listed"))?;
    // The newest may have vanished since the listing only if a newer one superseded it; the one read is kept.
    let superseded_age = object_age_ms(now_wall_ms, &manifests[at].1);
    // A claim's predecessor may lend it its base (`read_newest`): keep it with the claim.
    let keep_from = if newest.update == 0 { at.saturating_sub(1) } else { at };
    let base = body.first_slot;

    let mut garbage = Vec::new();
    for (_, meta) in manifests.into_iter().take(keep_from) {
        garbage.push((meta, MirrorReason::Superseded, superseded_age));
    }
    for meta in list("wal")? {
        if remote.layout.parse_slot(&meta.location, "wal").is_some_and(|slot| slot < base) {
            garbage.push((meta, MirrorReason::Superseded, superseded_age));
        }
    }
    // Snapshots above the base are grouped by slot: a stray one is only as old as its youngest chunk.
    let mut strays: BTreeMap<u64, Vec<ObjectMeta>> = BTreeMap::new();
    for meta in list("snapshot")? {
        match remote.layout.parse_slot(&meta.location, "snapshot") {
            Some(slot) if slot < base => garbage.push((meta, MirrorReason::Superseded, superseded_age)),
            Some(slot) if slot > base => strays.entry(slot).or_default().push(meta),
            // The base's snapshot (every chunk: which ones it counts is in chunk 0), or a name not ours.
            _ => {}
        }
    }
    for chunks in strays.into_values() {
        let youngest = chunks.iter().map(|m| object_age_ms(now_wall_ms, m)).min().unwrap_or(0);
        garbage.extend(chunks.into_iter().map(|m| (m, MirrorReason::Stray, youngest)));
    }

    let (mut due, mut young) = (Vec::new(), Vec::new());
    for (meta, reason, age_ms) in garbage {
        let object = MirrorObject { path: meta.location, bytes: meta.size, age_ms, reason };
        if is_young(age_ms, age_ms_min) { young.push(object) } else { due.push(object) }
    }
    due.sort_by(|a, b| a.path.cmp(&b.path));
    young.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(MirrorGarbage {
        job: body.job,
        epoch: newest.epoch,
        newest_manifest: remote.layout.manifest(newest),
        base_slot: base,
        due,
        young,
    })
}
