//! The example Redis client's decoder (`tests/src/protocols/redis.rs`) against untrusted
//! bytes, with the checks every decoder target shares (`fuzz/decoders.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../decoders.rs"]
mod decoders;

#[allow(dead_code, unreachable_pub, missing_docs)]
#[path = "../../tests/src/protocols/redis.rs"]
mod redis;

fuzz_target!(|data: &[u8]| {
    decoders::check(&redis::Redis::default(), data);
});
