//! Opening what a command names: a store file read-only, a mirror URL, or a store file as its writer.

use std::path::Path;
use std::sync::Arc;

use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;
use sinkpoint::inspect::Inspector;
use sinkpoint::mirror::MirrorSettings;
use sinkpoint::{Store, StoreBuilder};
use url::Url;

use crate::Source;
use crate::exit::{Code, Failure};

/// The object store and prefix a mirror URL names.
pub(crate) fn mirror(url: &str) -> Result<(Arc<dyn ObjectStore>, object_store::path::Path), Failure> {
    object_store_at("--mirror", url)
}

/// The object store and prefix the URL given to `flag` names (`--mirror`, `--shared`: said in messages).
pub(crate) fn object_store_at(
    flag: &str,
    url: &str,
) -> Result<(Arc<dyn ObjectStore>, object_store::path::Path), Failure> {
    let parsed = Url::parse(url).map_err(|e| {
        Failure::new(
            Code::Usage,
            format!("{flag} {url:?} is not a URL ({e}): use file:///dir/prefix or s3://bucket/prefix"),
        )
    })?;
    match parsed.scheme() {
        "file" => {
            // `file://dir/x` names host `dir`, not a relative path: say so, rather than object_store's generic error.
            if let Some(host) = parsed.host_str().filter(|h| !h.is_empty()) {
                return Err(Failure::new(
                    Code::Usage,
                    format!(
                        "{flag} {url}: a file URL takes an absolute path, file:///dir/prefix (this one reads \
                         {host:?} as a host); for a path relative to here use file://$PWD/{host}{}",
                        parsed.path()
                    ),
                ));
            }
            let (store, prefix) = object_store::parse_url(&parsed)
                .map_err(|e| Failure::new(Code::Usage, format!("{flag} {url}: {e}")))?;
            if !Path::new(parsed.path()).is_dir() {
                return Err(Failure::new(
                    Code::NotFound,
                    format!("{flag}: there is no directory at {}", parsed.path()),
                ));
            }
            Ok((Arc::from(store), prefix))
        }
        "s3" => s3(flag, url, &parsed),
        other => Err(Failure::new(
            Code::Usage,
            format!("{flag} {url}: scheme {other:?} is not supported; use file:// or s3://"),
        )),
    }
}

/// An S3 mirror configured from the environment, refused up front when no credentials are set: the SDK's
/// fallback (instance metadata) would otherwise stall for a minute before saying so.
fn s3(flag: &str, url: &str, parsed: &Url) -> Result<(Arc<dyn ObjectStore>, object_store::path::Path), Failure> {
    let has = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty());
    let credentials = (has("AWS_ACCESS_KEY_ID") && has("AWS_SECRET_ACCESS_KEY"))
        || has("AWS_WEB_IDENTITY_TOKEN_FILE")
        || has("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")
        || std::env::var("AWS_SKIP_SIGNATURE").is_ok_and(|v| v == "true");
    if !credentials {
        return Err(Failure::new(
            Code::Usage,
            format!(
                "{flag} {url}: no AWS credentials in the environment: set AWS_ACCESS_KEY_ID and \
                 AWS_SECRET_ACCESS_KEY (and AWS_REGION, AWS_ENDPOINT for a non-AWS endpoint)"
            ),
        ));
    }
    let store = AmazonS3Builder::from_env()
        .with_url(url)
        .build()
        .map_err(|e| Failure::new(Code::Usage, format!("{flag} {url}: {e}")))?;
    let prefix = object_store::path::Path::from(parsed.path().trim_start_matches('/'));
    Ok((Arc::new(store), prefix))
}

/// The inspector a reading command reads from: the file when one is given, else the mirror.
pub(crate) async fn inspector(source: &Source) -> Result<Inspector, Failure> {
    match (&source.store, &source.mirror) {
        (Some(path), _) => Ok(Inspector::open_file(path)?),
        (None, Some(url)) => mirror_inspector(url).await,
        (None, None) => Err(Failure::new(Code::Usage, "give --store PATH or --mirror URL")),
    }
}

/// The mirror at `url`, restored into memory.
pub(crate) async fn mirror_inspector(url: &str) -> Result<Inspector, Failure> {
    let (store, prefix) = mirror(url)?;
    Ok(Inspector::open_mirror(store, prefix).await?)
}

/// The store file at `path` opened as its writer (and with its mirror), for a command that changes it. The
/// job and target are read from the file first: the operator never retypes them. Every refusal comes from that
/// read-only look (and a read of the mirror), before the file is opened for writing, so a refused command leaves
/// the file as it was, byte for byte (an unclean file keeps its evidence too).
///
/// Opening with the mirror claims a new epoch, fencing any writer of the job elsewhere: when the mirror has seen
/// a newer epoch than this file (another machine runs the job, or a restore took it over), that needs `take_over`.
pub(crate) async fn writer(path: &Path, mirror_url: Option<&str>, take_over: bool) -> Result<Store, Failure> {
    let summary = check_writable(path, mirror_url, take_over).await?;
    open_writer(path, summary, mirror_url).await
}

/// Opens the file at `path`, whose refusals [`check_writable`] already made (`summary` is its answer), as its writer.
pub(crate) async fn open_writer(
    path: &Path,
    summary: sinkpoint::inspect::StoreSummary,
    mirror_url: Option<&str>,
) -> Result<Store, Failure> {
    let mut builder: StoreBuilder = Store::builder(summary.job, summary.target).path(path).must_exist();
    if let Some(url) = mirror_url {
        let (store, prefix) = mirror(url)?;
        builder = builder.mirror(store, prefix, MirrorSettings::default());
    }
    Ok(builder.open().await?)
}

/// Every refusal [`writer`] makes, read-only: the store's summary when the file may be opened as its writer.
pub(crate) async fn check_writable(
    path: &Path,
    mirror_url: Option<&str>,
    take_over: bool,
) -> Result<sinkpoint::inspect::StoreSummary, Failure> {
    let inspector = Inspector::open_file(path)?;
    if inspector.held_by_a_writer() {
        return Err(Failure::new(
            Code::Held,
            format!(
                "a running job holds {}: stop it first, then run the command again (nothing was changed)",
                path.display()
            ),
        ));
    }
    let summary = inspector.summary()?;
    // Its read-only handle on the file would keep the writer's open below from taking the file's lock.
    drop(inspector);
    match (mirror_url, &summary.mirrored_at) {
        (None, Some(at)) => {
            return Err(Failure::new(
                Code::Usage,
                format!(
                    "the store is mirrored at {at}: give its mirror with --mirror URL, or the change would never \
                     reach it (nothing was changed)"
                ),
            ));
        }
        (Some(url), _) => check_mirror_before_writing(&summary, url, take_over).await?,
        (None, None) => {}
    }
    Ok(summary)
}

/// Refuses, before anything is written, a mirror of another job, and a mirror a newer writer took over unless the
/// operator confirms the takeover.
async fn check_mirror_before_writing(
    file: &sinkpoint::inspect::StoreSummary,
    url: &str,
    take_over: bool,
) -> Result<(), Failure> {
    let mirrored = mirror_inspector(url).await?.summary()?;
    if mirrored.job != file.job || mirrored.target != file.target {
        return Err(Failure::new(
            Code::NotFound,
            format!(
                "the mirror at {url} belongs to job {} and target {}, not this file's job {} and target {} \
                 (nothing was changed)",
                mirrored.job, mirrored.target, file.job, file.target
            ),
        ));
    }
    if mirrored.epoch > file.epoch && !take_over {
        return Err(Failure::new(
            Code::Held,
            format!(
                "the mirror at {url} was opened by a newer writer (epoch {}) than this file's last (epoch {}): \
                 the job runs elsewhere, or was restored. Opening this file with the mirror fences that writer. \
                 Stop it and run the command where it ran, or add --take-over to take the job over (nothing was \
                 changed)",
                mirrored.epoch, file.epoch
            ),
        ));
    }
    Ok(())
}

/// Whether the DirTable at `url` holds a commit under `job`'s key `key`; a table that cannot tell is a transient
/// failure (exit 6), with nothing changed.
pub(crate) async fn dir_table_holds(
    table: &sinkpoint::DirTable,
    url: &str,
    job: &sinkpoint::JobId,
    key: u64,
) -> Result<bool, Failure> {
    use sinkpoint::Target as _;
    match table.probe(&sinkpoint::CommitKey { job: job.clone(), n: key }, None).await {
        sinkpoint::ProbeOutcome::Committed { .. } => Ok(true),
        sinkpoint::ProbeOutcome::NotCommitted => Ok(false),
        sinkpoint::ProbeOutcome::Unknown { reason } => Err(Failure::new(
            Code::Io,
            format!(
                "the table at {url} cannot tell whether it holds key {key} ({reason}); retry (nothing was changed)"
            ),
        )),
    }
}
