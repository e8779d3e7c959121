//! The clock everything timed reads, injected so tests run on a logical clock instead of wall time: the mirror
//! (the minimum age of its deletes, the asynchronous lag bound), the store builder that hands it to the mirror,
//! and the garbage collectors (`crate::gc`, which compare wall time with a file's or an object's modification).
//!
//! Durations are measured on a monotonic reading, so a step of the wall clock (an NTP correction, a VM resume)
//! can neither make every pending collection due at once nor freeze the lag bound; wall time is read only for what
//! people read (a manifest's `created_ms`) and for what is compared with storage's own times (a collector's ages).

use std::fmt::Debug;
use std::sync::OnceLock;
use std::time::Instant;

/// A source of the current time in milliseconds.
pub trait Clock: Send + Sync + Debug + 'static {
    /// A monotonic reading, in milliseconds since an arbitrary origin fixed for the clock's life: only differences
    /// between readings matter, and it never goes back.
    fn now_ms(&self) -> u64;

    /// Wall time in milliseconds since the Unix epoch, recorded in manifests and compared by the collectors with
    /// the modification times storage reports; never used to measure a duration of this process. Defaults to
    /// [`Clock::now_ms`], which suits a logical test clock.
    fn wall_ms(&self) -> u64 {
        self.now_ms()
    }
}

/// The system's clocks: a monotonic one ([`Instant`]) for durations, the wall clock for [`Clock::wall_ms`].
#[derive(Clone, Copy, Default, Debug)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[expect(clippy::disallowed_methods, reason = "this is the injected clock's real implementation")]
    fn now_ms(&self) -> u64 {
        // One origin for the process, so that every SystemClock value agrees.
        static ORIGIN: OnceLock<Instant> = OnceLock::new();
        let origin = *ORIGIN.get_or_init(Instant::now);
        u64::try_from(Instant::now().duration_since(origin).as_millis()).unwrap_or(u64::MAX)
    }

    #[expect(clippy::disallowed_methods, reason = "this is the injected clock's real implementation")]
    fn wall_ms(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_system_clock_measures_durations_from_a_process_origin_not_the_unix_epoch() {
        let clock = SystemClock;
        let (a, b) = (clock.now_ms(), clock.now_ms());
        assert!(b >= a, "a monotonic reading went back: {a} then {b}");
        // A wall-clock reading is decades of milliseconds; a monotonic one from this process's origin is not.
        assert!(a < clock.wall_ms() / 2, "now_ms {a} looks like wall time");
    }
}
