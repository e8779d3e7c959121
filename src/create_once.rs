//! Creating an object once: the one conditional create (`PutMode::Create`) of the crate, and the one way its
//! ambiguous outcome is settled.
//!
//! A conditional create is how this crate decides a race through the object store rather than by timing: the
//! mirror's claims, fences and log slots, shared staging's claims and seals, the reference table's commit objects.
//! Its answer is not always the truth. A put that times out or fails in transport may have landed; a retry (ours,
//! or the store client's own) answers `AlreadyExists` for the object our earlier attempt put. So an answer that
//! leaves the outcome open is settled by reading the object back and comparing bytes, never assumed: the callers'
//! bytes carry their writer's unique tag (a session, an epoch), so equal bytes mean ours, other bytes mean another
//! writer won, and an absent object means nothing landed and the create may be tried again, for `Create` admits
//! one object whatever happens.
//!
//! Each caller keeps its own meaning ([`Created::Taken`] hands it the winner's bytes to decode) and its own word
//! for a create that could not be settled ([`CreateError::Unsettled`]: the mirror poisons its store, shared
//! staging returns a transient error, the reference table reports its commit unknown). What differs between
//! callers is said by [`Ambiguity`], never by a copy of the loop.

use std::time::Duration;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, PutMode, PutOptions, PutPayload};

use crate::limits::CREATE_RETRY_PAUSE_STEP_MS;

/// What a settled create found at its path.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Created {
    /// Our bytes are there: this create put them, or an earlier attempt of it whose answer was lost did.
    Ours,
    /// Another writer's object is there: its bytes, for the caller to decode (and name the winner).
    Taken(Bytes),
}

/// How a create treats an answer that leaves its outcome open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ambiguity {
    /// Settle it here. After a failed or timed-out put, an `AlreadyExists`, or a `Precondition` (which some stores
    /// answer a create whose object exists), read the object back: ours, another writer's, or absent and put again,
    /// `attempts` puts at most (with a short pause between, growing by [`CREATE_RETRY_PAUSE_STEP_MS`]). For a
    /// caller that has no later chance to learn the outcome: a claim, a log slot, a seal.
    Settle {
        /// The most puts; at least one is made.
        attempts: u32,
    },
    /// Settle only `AlreadyExists`, with one read-back, and report any other failure (`Precondition` included)
    /// as unsettled at once, without a read-back or a second put. For a caller whose own protocol settles an
    /// unknown outcome later: the reference table reports its commit unknown, and the committer probes the key.
    Report,
}

/// A create's settings: how long one request may take, how an ambiguous answer is treated, and the largest
/// object a read-back reads. Plain data; [`CreateOnce::create`] does the work.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CreateOnce {
    timeout: Option<Duration>,
    ambiguity: Ambiguity,
    read_bytes_max: Option<u64>,
}

/// Why a create has no outcome. Both mean the caller must not assume either way.
#[derive(Debug)]
pub(crate) enum CreateError {
    /// The store refused the create as such (`NotSupported`, `NotImplemented`: it cannot create conditionally,
    /// or its process is gone). Trying again would only repeat the answer, so it is never retried.
    Unsupported(object_store::Error),
    /// The create could not be settled: whether it landed is unknown.
    Unsettled {
        /// The puts made.
        attempts: u32,
        /// The last failure seen, for the caller's message.
        last: String,
    },
}

impl std::fmt::Display for CreateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CreateError::Unsupported(e) => write!(f, "{e}"),
            CreateError::Unsettled { last, .. } => f.write_str(last),
        }
    }
}

impl CreateOnce {
    /// A create settled here, in `attempts` puts at most; no request timeout and no read-back limit yet.
    pub(crate) fn settling(attempts: u32) -> Self {
        Self { timeout: None, ambiguity: Ambiguity::Settle { attempts: attempts.max(1) }, read_bytes_max: None }
    }

    /// A create that settles only `AlreadyExists` and reports any other failure (see [`Ambiguity::Report`]).
    pub(crate) fn reporting() -> Self {
        Self { timeout: None, ambiguity: Ambiguity::Report, read_bytes_max: None }
    }

    /// The same create with each request (a put, a read-back) abandoned after `timeout`: an abandoned put is then
    /// ambiguous like any other failed one.
    #[must_use]
    pub(crate) fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// The same create refusing to read back an object over `bytes` long (it fails that read-back, which is then
    /// not settled), for a caller that bounds what it reads.
    #[must_use]
    pub(crate) fn read_bytes_max(mut self, bytes: u64) -> Self {
        self.read_bytes_max = Some(bytes);
        self
    }

    /// Creates `path` holding `bytes` in `store` and settles what is there (see the module docs and
    /// [`Ambiguity`]).
    pub(crate) async fn create(
        &self,
        store: &dyn ObjectStore,
        path: &Path,
        bytes: &Bytes,
    ) -> Result<Created, CreateError> {
        let attempts = match self.ambiguity {
            Ambiguity::Settle { attempts } => attempts,
            Ambiguity::Report => 1,
        };
        let mut last = String::from("no error");
        for attempt in 0..attempts {
            if attempt > 0 {
                // A short pause between attempts; the store's own client retries with backoff within each one.
                tokio::time::sleep(Duration::from_millis(CREATE_RETRY_PAUSE_STEP_MS * u64::from(attempt))).await;
            }
            match put_create(store, path, bytes.clone(), self.timeout).await {
                Ok(()) => return Ok(Created::Ours),
                Err(e @ (object_store::Error::NotSupported { .. } | object_store::Error::NotImplemented { .. })) => {
                    return Err(CreateError::Unsupported(e));
                }
                Err(e @ object_store::Error::AlreadyExists { .. }) => last = e.to_string(),
                Err(e) if self.ambiguity == Ambiguity::Report => {
                    return Err(CreateError::Unsettled { attempts: attempt + 1, last: e.to_string() });
                }
                Err(e @ object_store::Error::Precondition { .. }) => last = e.to_string(),
                Err(e) => {
                    tracing::warn!(path = %path, error = %e, attempt, "a conditional create failed ambiguously; reading it back");
                    last = e.to_string();
                }
            }
            match self.read_back(store, path).await {
                Ok(Some(found)) if found == *bytes => return Ok(Created::Ours),
                Ok(Some(found)) => return Ok(Created::Taken(found)),
                // Absent: nothing landed (yet); creating it again is safe, as `Create` admits one object.
                Ok(None) => {}
                Err(e) => last = format!("reading {path} back: {e}"),
            }
        }
        Err(CreateError::Unsettled { attempts, last })
    }

    /// The object's bytes, `None` if it is absent; one request within the timeout, refused over the limit.
    async fn read_back(&self, store: &dyn ObjectStore, path: &Path) -> object_store::Result<Option<Bytes>> {
        let read = async {
            let got = store.get_opts(path, object_store::GetOptions::default()).await?;
            if let Some(max) = self.read_bytes_max
                && got.meta.size > max
            {
                return Err(object_store::Error::Generic {
                    store: "sinkpoint",
                    source: format!("{path}: {} bytes is over the object limit of {max} bytes", got.meta.size).into(),
                });
            }
            got.bytes().await
        };
        match timed(self.timeout, read).await {
            Ok(bytes) => Ok(Some(bytes)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// One conditional create, not settled: the store's answer as it came (a request abandoned after `timeout` fails
/// like any other). For an object whose bytes carry no writer's tag, where a read-back could not tell ours from a
/// twin (the reference table's data files); every other create goes through [`CreateOnce::create`].
pub(crate) async fn put_create(
    store: &dyn ObjectStore,
    path: &Path,
    bytes: Bytes,
    timeout: Option<Duration>,
) -> object_store::Result<()> {
    let opts = PutOptions { mode: PutMode::Create, ..PutOptions::default() };
    timed(timeout, store.put_opts(path, PutPayload::from_bytes(bytes), opts)).await.map(drop)
}

/// `future` within `timeout` (if any): a request still running then is abandoned, and fails like any other.
async fn timed<T>(
    timeout: Option<Duration>,
    future: impl Future<Output = object_store::Result<T>>,
) -> object_store::Result<T> {
    let Some(timeout) = timeout else { return future.await };
    match tokio::time::timeout(timeout, future).await {
        Ok(result) => result,
        Err(_) => Err(object_store::Error::Generic {
            store: "sinkpoint",
            source: format!("the request timed out after {} ms", timeout.as_millis()).into(),
        }),
    }
}

#[cfg(test)]
mod tests;
