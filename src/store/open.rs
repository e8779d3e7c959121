//! Opening a store: create the file atomically or open it, check it belongs to this job and target, bump the
//! epoch durably (through the mirror's takeover when there is one), find the orphans, start the writer.
use std::path::PathBuf;
use std::sync::Arc;

use super::Store;
use super::StoreSettings;
use crate::error::{Error, Result};
use crate::mirror::{MirrorConfig, Progress};
use crate::state::CheckpointState;
use crate::types::{CheckpointId, Epoch};
use crate::wal::apply::Tables;
use crate::wal::record::Record;
use crate::wal::tables::{CHECKPOINTS, Meta, STATES, STORE_FORMAT_VERSION, create_all, read_checkpoint};
use crate::wal::writer::{Shared, Shipper, Writer};
use redb::{Database, ReadableDatabase, StorageBackend};

/// Where the store's redb file lives.
pub(super) enum Location {
    Path(PathBuf),
    Backend(Box<dyn StorageBackend>),
}

/// Everything one open needs, gathered by [`super::StoreBuilder::open`]: the settings and the injected parts.
pub(super) struct OpenPlan {
    pub(super) settings: StoreSettings,
    pub(super) location: Location,
    pub(super) writer_tag: u128,
    pub(super) mirror: Option<MirrorConfig>,
}

/// Lets a boxed backend be handed to redb, which takes backends by value.
#[derive(Debug)]
struct BoxedBackend(Box<dyn StorageBackend>);

impl StorageBackend for BoxedBackend {
    fn len(&self) -> std::io::Result<u64> {
        self.0.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
        self.0.read(offset, out)
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.0.set_len(len)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        self.0.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        self.0.write(offset, data)
    }
    fn close(&self) -> std::io::Result<()> {
        self.0.close()
    }
}

/// The default writer tag: unique per process and open. It only has to differ between writers (it resolves an
/// ambiguous mirror put); tests inject their own with [`StoreBuilder::writer_tag`].
#[expect(clippy::disallowed_methods, reason = "the default writer tag is the one place that wants real entropy")]
pub(crate) fn random_tag() -> u128 {
    use std::hash::{BuildHasher, Hasher};
    let mut out = 0u128;
    for i in 0..2u64 {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(i);
        h.write_u128(
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0),
        );
        h.write_u32(std::process::id());
        out = (out << 64) | u128::from(h.finish());
    }
    out
}

pub(super) fn open_blocking(plan: OpenPlan) -> Result<Store> {
    let OpenPlan { settings, location, writer_tag, mirror } = plan;
    let settings = &settings;
    let db = match location {
        Location::Path(path) => {
            // With a mirror, a missing file is restored from it; the mirror says whether the store exists.
            if !settings.create_if_missing && mirror.is_none() && !path.exists() {
                return Err(Error::wrong_store(format!("no store at {}", path.display())));
            }
            if !path.exists() {
                create_file_atomically(&path)?;
            }
            let place = path.display().to_string();
            let created = redb::Builder::new().set_cache_size(settings.cache_bytes).create(&path);
            created.map_err(|e| crate::error::open_failed(&place, e))?
        }
        Location::Backend(backend) => {
            crate::wal::half_created::reset_backend(&*backend, settings.create_if_missing)?;
            let created =
                redb::Builder::new().set_cache_size(settings.cache_bytes).create_with_backend(BoxedBackend(backend));
            created.map_err(|e| crate::error::open_failed("the storage backend", e))?
        }
    };
    let db = Arc::new(db);
    if let Some(mirror) = mirror {
        let opened = crate::mirror::open(&db, &settings.identity(), writer_tag, mirror)?;
        let shipper: Box<dyn Shipper> = Box::new(opened.shipper);
        return start(db, opened.meta, opened.created, Vec::new(), settings, Some(shipper), Some(opened.progress));
    }
    let txn = db.begin_write()?;
    create_all(&txn)?;
    crate::mirror::refuse_without_mirror(&txn)?;
    let (meta, created, orphans) = {
        let mut tables = Tables::open(&txn)?;
        let existing = tables.read_meta()?;
        let created = existing.is_none();
        let mut meta = match existing {
            None => {
                if !settings.create_if_missing {
                    return Err(Error::wrong_store("the store is empty and create_if_missing is off"));
                }
                let identity = settings.identity();
                let mut meta = identity.new_meta(writer_tag);
                let create = identity.create_record();
                tables.append(&mut meta, 0, &create)?;
                meta
            }
            Some(mut meta) => {
                settings.identity().check(&meta)?;
                // An older format is this one with less in it (see STORE_FORMAT_VERSION): a writer stamps it.
                meta.format_version = STORE_FORMAT_VERSION;
                meta
            }
        };
        meta.epoch += 1;
        meta.writer_tag = writer_tag;
        let epoch = meta.epoch;
        tables.append(&mut meta, epoch, &Record::Open { writer_tag })?;
        tables.write_meta(&meta)?;
        (meta, created, Vec::new())
    };
    txn.commit()?;
    start(db, meta, created, orphans, settings, None, None)
}

pub(super) fn start(
    db: Arc<Database>,
    meta: Meta,
    created: bool,
    orphans: Vec<CheckpointId>,
    settings: &StoreSettings,
    shipper: Option<Box<dyn Shipper>>,
    progress: Option<Arc<Progress>>,
) -> Result<Store> {
    let mut store_orphans = orphans;
    store_orphans.extend(scan_orphans(&db, meta.epoch)?);
    let shared = Arc::new(Shared::default());
    if let Some(progress) = &progress {
        progress.attach(shared.clone());
    }
    let writer = Writer::start(db.clone(), meta.clone(), shared.clone(), shipper)?;
    tracing::info!(job = %meta.job, epoch = meta.epoch, created, orphans = store_orphans.len(), "sinkpoint store opened");
    Ok(Store {
        db,
        writer,
        shared,
        epoch: meta.epoch,
        job: meta.job,
        target: meta.target,
        created,
        orphans: store_orphans,
        settings: settings.clone(),
        progress,
        target_check: std::sync::Mutex::default(),
        collecting: Arc::default(),
    })
}

/// Creates an initialised, empty redb file at `path` without ever leaving a half-written one there: redb
/// initialises a new file in several writes, and a process killed between them leaves a file that no later open
/// accepts ("not a redb database"). The file is built beside `path` and renamed into place once complete.
pub(super) fn create_file_atomically(path: &std::path::Path) -> Result<()> {
    let mut staging = path.as_os_str().to_owned();
    staging.push(".creating");
    let staging = PathBuf::from(staging);
    // A leftover from a creation that was killed holds nothing: it was never renamed into place.
    match std::fs::remove_file(&staging) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e.into()),
    }
    drop(Database::create(&staging)?);
    std::fs::File::open(&staging)?.sync_all()?;
    std::fs::rename(&staging, path)?;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::File::open(parent)?.sync_all()?;
    }
    Ok(())
}

pub(super) fn scan_orphans(db: &Database, epoch: Epoch) -> Result<Vec<CheckpointId>> {
    let txn = db.begin_read()?;
    let states = txn.open_table(STATES)?;
    let checkpoints = txn.open_table(CHECKPOINTS)?;
    let mut out = Vec::new();
    let code = CheckpointState::Staged.code();
    for entry in states.range((code, "")..(code + 1, ""))? {
        let (k, _) = entry?;
        let id = stored_id(k.value().1)?;
        if let Some(record) = read_checkpoint(&checkpoints, &id)?
            && record.epoch < epoch
        {
            out.push(id);
        }
    }
    Ok(out)
}

pub(super) fn stored_id(s: &str) -> Result<CheckpointId> {
    CheckpointId::new(s).map_err(|_| Error::corrupt(format!("an index holds the invalid checkpoint id {s:?}")))
}

#[cfg(test)]
mod tests {
    use crate::wal::record::{decode_value, encode_value};
    use crate::wal::tables::{META, META_KEY, Meta, STORE_FORMAT_VERSION};
    use crate::{Attempt, CheckpointId, ErrorKind, JobId, Part, StagePart, Store, TargetIdentity};
    use redb::{ReadableDatabase as _, ReadableTable as _};

    async fn open(path: &std::path::Path) -> crate::Result<Store> {
        Store::builder(JobId::new("job").unwrap(), TargetIdentity::new("mem://t").unwrap()).path(path).open().await
    }

    /// Rewrites the file's meta to say `version`: a format no code wrote yet cannot have a frozen file (the formats
    /// that exist have theirs in tests/fixtures/).
    fn rewrite(path: &std::path::Path, version: u32) {
        let db = redb::Database::create(path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut table = txn.open_table(META).unwrap();
            let mut meta: Meta =
                decode_value(table.get(META_KEY).unwrap().unwrap().value(), &|| "meta".into()).unwrap();
            meta.format_version = version;
            table.insert(META_KEY, encode_value(&meta).unwrap().as_slice()).unwrap();
        }
        txn.commit().unwrap();
    }

    /// The meta as stored (not as read: `tables::read_meta` completes its next seq from the log).
    fn stored_meta(store: &Store) -> Meta {
        let txn = store.database().begin_read().unwrap();
        decode_value(txn.open_table(META).unwrap().get(META_KEY).unwrap().unwrap().value(), &|| "meta".into()).unwrap()
    }

    fn stored(store: &Store) -> (u32, u64) {
        let mut fresh = 0;
        crate::wal::fresh::visit_stored(&store.database().begin_read().unwrap(), None, |_, _| {
            fresh += 1;
            Ok(())
        })
        .unwrap();
        (stored_meta(store).format_version, fresh)
    }

    /// Copies `tests/fixtures/format-N` (a store, its mirror and its table, as the code of store format N wrote
    /// them) into `dir`.
    fn copy_fixture(format: u32, dir: &std::path::Path) {
        fn copy(from: &std::path::Path, to: &std::path::Path) {
            std::fs::create_dir_all(to).unwrap();
            for entry in std::fs::read_dir(from).unwrap() {
                let entry = entry.unwrap();
                if entry.file_type().unwrap().is_dir() {
                    copy(&entry.path(), &to.join(entry.file_name()));
                } else {
                    std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
                }
            }
        }
        // The checkout cargo runs the test in, not the one the binary was built in (it may not be rebuilt).
        let fixture = std::env::var_os("CARGO_MANIFEST_DIR")
            .map_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")), Into::into)
            .join(format!("tests/fixtures/format-{format}"));
        copy(&fixture, dir);
    }

    #[tokio::test]
    async fn a_format_1_file_opens_and_is_stamped_with_this_format() {
        let dir = tempfile::tempdir().unwrap();
        // What the format-1 code wrote (tests/fixtures/README.md): every part in table parts, e's too.
        copy_fixture(1, dir.path());
        let path = dir.path().join("store.redb");
        let on_disk = redb::Database::open(&path).unwrap();
        let meta: Meta = decode_value(
            on_disk.begin_read().unwrap().open_table(META).unwrap().get(META_KEY).unwrap().unwrap().value(),
            &|| "meta".into(),
        )
        .unwrap();
        assert_eq!(meta.format_version, 1, "the fixture is format 1");
        drop(on_disk);
        let mirror = std::sync::Arc::new(
            object_store::local::LocalFileSystem::new_with_prefix(dir.path().join("mirror")).unwrap(),
        );
        let store =
            Store::builder(JobId::new("fixture").unwrap(), TargetIdentity::new("file:///fixture-table").unwrap())
                .path(&path)
                .mirror(mirror, object_store::path::Path::from("fixture"), crate::mirror::MirrorSettings::default())
                .open()
                .await
                .unwrap();
        assert_eq!(stored(&store), (STORE_FORMAT_VERSION, 0));
        let e = CheckpointId::new("e").unwrap();
        assert_eq!(store.get(&e).unwrap().unwrap().results, 1, "e's part, counted from table parts");
        let other = CheckpointId::new("g").unwrap();
        store.stage(&other, StagePart::new(Attempt::FIRST, Part::FIRST)).await.unwrap();
        assert_eq!(stored(&store), (STORE_FORMAT_VERSION, 1), "staged fresh in the upgraded file");
        store.close_async().await;
    }

    #[tokio::test]
    async fn a_stage_leaves_the_stored_meta_and_a_reopened_store_numbers_its_records_after_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb");
        let (a, b) = (CheckpointId::new("a").unwrap(), CheckpointId::new("b").unwrap());
        let store = open(&path).await.unwrap();
        let after_open = stored_meta(&store).next_seq;
        for part in 0..3 {
            store.stage(&a, StagePart::new(Attempt::FIRST, Part::new(part))).await.unwrap();
        }
        // Three records appended, the meta not rewritten: the log's last frame says the next seq.
        assert_eq!(stored_meta(&store).next_seq, after_open, "a stage rewrote the meta");
        assert_eq!(store.verify_log().unwrap(), after_open + 3);
        store.close_async().await;
        // Reopened, the `Open` record and the next stage take the seqs after the log's last frame, not the stored
        // value's: numbered from the stored value they would overwrite the stages' frames.
        let store = open(&path).await.unwrap();
        store.stage(&b, StagePart::new(Attempt::FIRST, Part::FIRST)).await.unwrap();
        assert_eq!(store.verify_log().unwrap(), after_open + 5);
        store.seal(&a, 3).await.unwrap();
        assert_eq!(store.get(&a).unwrap().unwrap().parts, 3);
        store.close_async().await;
    }

    #[tokio::test]
    async fn a_newer_format_is_refused_with_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb");
        open(&path).await.unwrap().close_async().await;
        rewrite(&path, STORE_FORMAT_VERSION + 1);
        let err = open(&path).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::WrongStore, "{err}");
        assert!(err.to_string().contains("open it with the sinkpoint release that wrote it"), "{err}");
        // The reader the CLI uses refuses it too, instead of reading a format it does not know. (Failed when
        // only the writer's open checked the format.)
        let err = crate::inspect::Inspector::open_file(&path).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::WrongStore, "{err}");
    }
}
