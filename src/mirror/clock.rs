//! The clock the mirror reads for everything timed (the minimum age of deletes, the asynchronous lag bound),
//! injected so tests run on a logical clock instead of wall time.

use std::fmt::Debug;

/// A source of the current time in milliseconds. Only differences between readings matter.
pub trait Clock: Send + Sync + Debug + 'static {
    /// The current time, in milliseconds since an arbitrary origin fixed for the clock's life.
    fn now_ms(&self) -> u64;
}

/// The system's wall clock: milliseconds since the Unix epoch.
#[derive(Clone, Copy, Default, Debug)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[expect(clippy::disallowed_methods, reason = "this is the injected clock's real implementation")]
    fn now_ms(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0)
    }
}
