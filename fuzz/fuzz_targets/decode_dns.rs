//! The example DNS client's decoder and message parser (`tests/src/protocols/dns.rs`) against
//! untrusted bytes: the decoder with the checks every decoder target shares
//! (`fuzz/decoders.rs`), and every message it cuts read by `Message::parse`, whose names
//! follow compression pointers; the whole stream is parsed as one message too.
#![no_main]

use bytes::Bytes;
use keepwire_driver::{Codec, Decoded};
use libfuzzer_sys::fuzz_target;

#[path = "../decoders.rs"]
mod decoders;

#[allow(dead_code, unreachable_pub, missing_docs)]
#[path = "../../tests/src/protocols/dns.rs"]
mod dns;

fuzz_target!(|data: &[u8]| {
    let codec = dns::Dns::default();
    decoders::check(&codec, data);
    // What `check` feeds the decoder: the input after its first byte (the chunk size).
    let stream = data.get(1..).unwrap_or_default();
    let _ = dns::Message::parse(&Bytes::copy_from_slice(stream));
    let mut decoder = codec.decoder();
    let mut buf = bytes::BytesMut::from(stream);
    while let Ok(Some(Decoded::Tagged { id, payload })) = decoder.decode(&mut buf) {
        if let Ok(message) = dns::Message::parse(&payload) {
            assert_eq!(u64::from(message.id), id, "the id the decoder read is the message's");
            assert!(message.response, "the decoder passes responses only");
        }
    }
});
