//! Drives a keepwire Pool with arbitrary operations (nodes, requests, adapter reports, stale
//! handles, time moving forward and back) and checks the invariants after every step; see
//! `keepwire_proto::fuzzing`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    keepwire_proto::fuzzing::run(data);
});
