//! A codec with a bug: [`PanicsOnBoom`], for the tests of what a panic in user code costs
//! (`real_panics`) and how it is told (`real_tracing`).

use bytes::BytesMut;
use keepwire_driver::{Codec, Correlation, Decoded, Decoder, EncodeError, LengthPrefixed};
use keepwire_proto::Violation;

/// The built-in codec, except that it panics (with the message `codec bug`) framing a `bang`
/// request and decoding a `boom` response.
#[derive(Debug)]
pub struct PanicsOnBoom;

impl Codec for PanicsOnBoom {
    fn correlation(&self) -> Correlation {
        LengthPrefixed::default().correlation()
    }

    fn encode(
        &self,
        payload: &[u8],
        id: Option<u64>,
        dst: &mut BytesMut,
    ) -> Result<(), EncodeError> {
        assert!(payload != b"bang", "codec bug");
        LengthPrefixed::default().encode(payload, id, dst)
    }

    fn decoder(&self) -> Box<dyn Decoder> {
        Box::new(PanicsOnBoom)
    }
}

impl Decoder for PanicsOnBoom {
    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Decoded>, Violation> {
        let response = LengthPrefixed::default().decode(buf)?;
        if let Some(Decoded::Tagged { payload, .. }) = &response {
            assert!(payload != "boom", "codec bug");
        }
        Ok(response)
    }
}
