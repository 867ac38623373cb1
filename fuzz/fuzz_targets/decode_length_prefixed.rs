//! The built-in codec's decoder against untrusted bytes, fed in chunks the input chooses:
//! no panic, typed violations, and no room reserved ahead of the bytes received (a hostile
//! length costs nothing until its bytes come).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../decoders.rs"]
mod decoders;

fuzz_target!(|data: &[u8]| {
    decoders::check(&keepwire_driver::LengthPrefixed::new(64 * 1024), data);
});
