//! One simulated process's crash point, shared by every component that does I/O for it.
//!
//! A [`CrashBackend`](crate::testkit::CrashBackend), a [`FaultStore`](crate::testkit::FaultStore) and the
//! crash-point runner's target wrapper can all be attached to one `ProcessCrash`. Each of their I/O operations
//! (a redb write, resize or sync; an object-store request, and the moment a put has landed; a target call, and
//! the moment a commit has landed) is one *point*, counted across all of them. At point k the process dies:
//! that operation and every later one of every attached component fail, so nothing more reaches the durable
//! local image, the mirror or the target — which is what a process killed at that instant leaves behind.

use std::sync::{Arc, Mutex, MutexGuard};

/// Which component an I/O point belongs to (for reports and for the runner's per-component counts).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Component {
    /// The local redb file.
    Local,
    /// The mirror's object store.
    Mirror,
    /// The target table.
    Target,
}

#[derive(Debug, Default)]
struct State {
    ops: u64,
    crash_at: Option<u64>,
    dead: bool,
    /// The point that killed the process: its component and what it was.
    killed_by: Option<(u64, Component, String)>,
    /// Points per component, in the order of [`Component`].
    per_component: [u64; 3],
}

/// A crash point shared by the components of one simulated process; clones share it.
#[derive(Clone, Debug, Default)]
pub struct ProcessCrash {
    state: Arc<Mutex<State>>,
}

impl ProcessCrash {
    /// A process that never crashes (until [`ProcessCrash::crash_at`] says otherwise).
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A test thread that panicked while holding the lock leaves plain counters behind.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes the process die at point `k` (counted from 1 across every attached component); `None` never.
    pub fn crash_at(&self, k: Option<u64>) {
        let mut state = self.lock();
        state.crash_at = k;
        if k.is_some_and(|k| k <= state.ops) {
            state.dead = true;
        }
    }

    /// Counts one point of `component` (`what` names it for reports). Returns `false` when the process is dead
    /// (it died at this point or earlier): the operation must then fail without any effect.
    pub fn tick(&self, component: Component, what: impl FnOnce() -> String) -> bool {
        let mut state = self.lock();
        if state.dead {
            return false;
        }
        state.ops += 1;
        state.per_component[component as usize] += 1;
        if state.crash_at == Some(state.ops) {
            state.dead = true;
            state.killed_by = Some((state.ops, component, what()));
            return false;
        }
        true
    }

    /// Whether the process has died.
    pub fn is_dead(&self) -> bool {
        self.lock().dead
    }

    /// The points counted so far.
    pub fn ops(&self) -> u64 {
        self.lock().ops
    }

    /// The points counted so far, per component.
    pub fn ops_of(&self, component: Component) -> u64 {
        self.lock().per_component[component as usize]
    }

    /// The point that killed the process, if it died at one: its number, component and description.
    pub fn killed_by(&self) -> Option<(u64, Component, String)> {
        self.lock().killed_by.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dies_at_the_chosen_point_across_components() {
        let p = ProcessCrash::new();
        p.crash_at(Some(3));
        assert!(p.tick(Component::Local, || "w".into()));
        assert!(p.tick(Component::Mirror, || "put".into()));
        assert!(!p.tick(Component::Target, || "commit".into()));
        assert!(p.is_dead());
        assert!(!p.tick(Component::Local, || "w".into()), "a dead process does nothing more");
        assert_eq!(p.ops(), 3);
        assert_eq!((p.ops_of(Component::Local), p.ops_of(Component::Mirror)), (1, 1));
        assert_eq!(p.killed_by().map(|k| (k.0, k.1)), Some((3, Component::Target)));
    }
}
