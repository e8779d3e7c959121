//! The core's integration tests, one module per file beside this one, in one binary: one link instead of one
//! per file, and `cargo test` runs them all on every core at once (a binary's tests run in parallel; binaries
//! run one after another). Run one file's tests with `cargo test --test suite <file>::`, e.g.
//! `cargo test --features testkit --test suite seal_window::`.
//!
//! The two memory tests (`attempt_memory`, `mirror_memory`) stay binaries of their own: they measure the peak
//! resident set of a child process running their binary, which other tests must not share.

mod common;
mod mirror_support;

#[path = "bad_input.rs"]
mod bad_input;
#[path = "collect.rs"]
mod collect;
#[path = "collect_model.rs"]
mod collect_model;
#[path = "commit_props.rs"]
mod commit_props;
#[path = "commit_protocol.rs"]
mod commit_protocol;
#[path = "concurrency.rs"]
mod concurrency;
#[path = "conformance.rs"]
mod conformance;
#[path = "crash_points.rs"]
mod crash_points;
#[path = "doc_refs.rs"]
mod doc_refs;
#[path = "driver_races.rs"]
mod driver_races;
#[path = "durability_contract.rs"]
mod durability_contract;
#[path = "fuzz_corpus.rs"]
mod fuzz_corpus;
#[path = "inspect_live.rs"]
mod inspect_live;
#[path = "kill.rs"]
mod kill;
#[path = "mirror_ambiguous.rs"]
mod mirror_ambiguous;
#[path = "mirror_async.rs"]
mod mirror_async;
#[path = "mirror_bounds.rs"]
mod mirror_bounds;
#[path = "mirror_corruption.rs"]
mod mirror_corruption;
#[path = "mirror_failover.rs"]
mod mirror_failover;
#[path = "mirror_fence.rs"]
mod mirror_fence;
#[path = "mirror_gc.rs"]
mod mirror_gc;
#[path = "mirror_gc_model.rs"]
mod mirror_gc_model;
#[path = "mirror_restore.rs"]
mod mirror_restore;
#[path = "mirror_view.rs"]
mod mirror_view;
#[path = "mirror_zombie.rs"]
mod mirror_zombie;
#[path = "model.rs"]
mod model;
#[path = "seal_window.rs"]
mod seal_window;
#[path = "shared.rs"]
mod shared;
#[path = "shared_model.rs"]
mod shared_model;
#[path = "shared_processes.rs"]
mod shared_processes;
#[path = "smoke.rs"]
mod smoke;
#[path = "stage_and_seal.rs"]
mod stage_and_seal;
#[path = "stale_mirror.rs"]
mod stale_mirror;
#[path = "two_drivers.rs"]
mod two_drivers;
