//! What every decoder of untrusted bytes must do, whatever the peer sends: the checks the
//! decoder fuzz targets share.

use bytes::BytesMut;
use keepwire_driver::{Codec, Decoded};

/// Feeds `data` to a fresh decoder of `codec` in chunks whose sizes come from `data`'s first
/// byte, and checks after every call: no panic (the fuzzer sees one), the decoder never grows
/// the buffer (room is taken as bytes arrive, not as lengths are announced), and after an error
/// nothing more is decoded (the driver closes the connection).
pub fn check(codec: &dyn Codec, data: &[u8]) {
    let Some((&chunk, data)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(chunk % 64) + 1;
    let mut decoder = codec.decoder();
    let mut buf = BytesMut::new();
    // Bytes received and not yet handed out in a payload: a decoder may keep the complete
    // parts of a response between calls (the PostgreSQL one does), so a payload is bounded by
    // what arrived over every call, not by what is buffered at the last one.
    let mut unreturned = 0usize;
    for piece in data.chunks(chunk) {
        buf.extend_from_slice(piece);
        unreturned += piece.len();
        loop {
            let (len, capacity) = (buf.len(), buf.capacity());
            match decoder.decode(&mut buf) {
                Ok(Some(decoded)) => {
                    assert!(buf.len() < len, "a response consumed no bytes");
                    let payload = match decoded {
                        Decoded::Next(p) | Decoded::Tagged { payload: p, .. } => p,
                        _ => continue,
                    };
                    assert!(
                        payload.len() <= unreturned,
                        "a payload of {} bytes when {unreturned} arrived",
                        payload.len()
                    );
                    unreturned -= payload.len();
                }
                Ok(None) => {
                    assert!(
                        buf.capacity() <= capacity,
                        "the decoder reserved {} bytes ahead of {} received",
                        buf.capacity(),
                        len
                    );
                    break;
                }
                Err(_violation) => return,
            }
        }
    }
}
