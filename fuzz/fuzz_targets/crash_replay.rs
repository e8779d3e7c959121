//! Bytes into a workload and a crash point: crash there, recover, check the invariants, finish, compare.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sinkpoint::testkit::fuzz::crash_replay(data));
