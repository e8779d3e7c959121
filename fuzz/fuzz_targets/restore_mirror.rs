//! A small mirror's objects damaged as the bytes say, then restored from alone: refused as Corrupt or
//! WrongStore, or exactly the state the intact objects describe; never a panic.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sinkpoint::testkit::fuzz::restore_mirror(data));
