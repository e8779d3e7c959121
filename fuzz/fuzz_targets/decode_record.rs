//! Arbitrary bytes into every decoder: an error, never a panic; what decodes re-encodes to the same bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sinkpoint::testkit::fuzz::decode_record(data));
