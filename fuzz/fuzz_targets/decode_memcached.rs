//! The example memcached client's decoder (`tests/src/protocols/memcached.rs`) against untrusted
//! bytes, with the checks every decoder target shares (`fuzz/decoders.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../decoders.rs"]
mod decoders;

// The request builders, re-exported for the tests crate, go unused here.
#[allow(dead_code, unreachable_pub, missing_docs, unused_imports)]
#[path = "../../tests/src/protocols/memcached.rs"]
mod memcached;

fuzz_target!(|data: &[u8]| {
    decoders::check(&memcached::Memcached::default(), data);
});
