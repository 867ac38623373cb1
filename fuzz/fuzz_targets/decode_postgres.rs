//! The example postgres client's decoder (`tests/src/protocols/postgres.rs`) against untrusted
//! bytes, with the checks every decoder target shares (`fuzz/decoders.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../decoders.rs"]
mod decoders;

#[allow(dead_code, unreachable_pub, missing_docs)]
#[path = "../../tests/src/protocols/postgres.rs"]
mod postgres;

fuzz_target!(|data: &[u8]| {
    decoders::check(&postgres::Postgres::default(), data);
});
