//! The core's integration tests, one module per file in this folder, in one binary: one link instead of one per
//! file, and `cargo test` runs them all on every core at once (a binary's tests run in parallel; binaries run one
//! after another). Run one file's tests with `cargo test --test suite <file>::`, e.g.
//! `cargo test --features testkit --test suite seal_window::`.
//!
//! `process/` holds the tests that spawn processes (the quick-start job, SIGKILLed, stopped or run twice at once):
//! a folder module of this binary rather than a binary of their own, because they need nothing but the job
//! example cargo builds before any integration test, and as modules they share this binary's one link and run in
//! parallel with the rest instead of after it (`cargo test --test suite process::` runs them; a file's filter such
//! as `kill::` still matches). `common/` and `mirror_support/` are the shared helpers; `frozen_stores` reads the
//! frozen stores in `tests/fixtures/`.
//!
//! The two memory tests (`tests/memory/`: `attempt_memory`, `mirror_memory`) are binaries of their own: they
//! measure the peak resident set of a child process running their binary, which other tests must not share.

mod common;
mod mirror_support;
mod process;

mod bad_input;
mod code_shape;
mod collect;
mod collect_model;
mod commit_props;
mod commit_protocol;
mod concurrency;
mod conformance;
mod crash_points;
mod doc_refs;
mod driver_races;
mod durability_contract;
mod frozen_stores;
mod fuzz_corpus;
mod inspect_live;
mod mirror_ambiguous;
mod mirror_async;
mod mirror_bounds;
mod mirror_corruption;
mod mirror_failover;
mod mirror_fence;
mod mirror_gc;
mod mirror_gc_model;
mod mirror_restore;
mod mirror_view;
mod mirror_zombie;
mod model;
mod multi_table;
mod seal_window;
mod shared;
mod shared_model;
mod shared_split_model;
mod smoke;
mod stage_and_seal;
mod stale_mirror;
