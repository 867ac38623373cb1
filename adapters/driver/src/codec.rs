//! Framing: how a request is put on the wire with its correlation id, and how responses are
//! cut out of the bytes a connection receives.
//!
//! The built-in [`LengthPrefixed`] codec frames every message as
//!
//! ```text
//! +----------------+-----------------------+-------------------+
//! | length: u32 BE | correlation id: u64 BE | payload           |
//! +----------------+-----------------------+-------------------+
//!                  |<------------------ length --------------->|
//! ```
//!
//! `length` counts the correlation id and the payload, so a length below 8 is a malformed
//! header. The correlation id is [`RequestId::as_u64`]; a server echoes it in its response.

use std::fmt;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use keepwire_proto::{RequestId, Violation};

/// Encodes requests and decodes responses for one protocol.
///
/// One codec serves every connection of a client, so it holds no per-connection state: the
/// driver keeps each connection's receive buffer and hands it to [`Codec::decode`].
pub trait Codec: Send + Sync + fmt::Debug + 'static {
    /// Frames `payload` as request `id`.
    fn encode(&self, id: RequestId, payload: &[u8]) -> Result<Bytes, EncodeError>;

    /// Cuts the first complete response off the front of `buf`.
    ///
    /// `Ok(None)` means more bytes are needed (leave `buf` as it is); an `Err` is a protocol
    /// violation that closes the connection.
    fn decode(&self, buf: &mut BytesMut) -> Result<Option<Response>, Violation>;
}

/// One decoded response: the id of the request it answers and its payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// The correlation id, as the peer echoed it.
    pub id: RequestId,
    /// The response payload.
    pub payload: Bytes,
}

/// A request that cannot be framed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// The payload does not fit the frame's length field.
    #[error("request payload of {len} bytes is longer than the codec can frame ({max})")]
    TooLong {
        /// The payload length.
        len: u64,
        /// The longest payload the codec can frame.
        max: u64,
    },
    /// The codec panicked while framing the request (a bug in the codec; the panic hook has
    /// printed the message). The driver and every other request carry on.
    #[error("the codec panicked while framing the request")]
    Panicked,
}

/// The built-in codec: `u32` big-endian length, `u64` big-endian correlation id, payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LengthPrefixed {
    max_payload: u32,
}

impl LengthPrefixed {
    /// Bytes before the payload: the length and the correlation id.
    pub const HEADER_LEN: usize = 12;
    /// Bytes of the correlation id, counted in the length field.
    const ID_LEN: u32 = 8;

    /// A codec that refuses responses whose payload is longer than `max_payload` bytes
    /// (capped at `u32::MAX - 8`, the most the length field can announce).
    pub fn new(max_payload: u32) -> Self {
        Self {
            max_payload: max_payload.min(u32::MAX - Self::ID_LEN),
        }
    }

    /// The longest response payload accepted.
    pub fn max_payload(&self) -> u32 {
        self.max_payload
    }

    /// Frames `payload` with correlation id `id` (a server uses this for its responses too).
    pub fn frame(id: u64, payload: &[u8]) -> Result<Bytes, EncodeError> {
        let max = u64::from(u32::MAX - Self::ID_LEN);
        let len = u32::try_from(payload.len())
            .ok()
            .filter(|len| u64::from(*len) <= max)
            .ok_or(EncodeError::TooLong {
                len: payload.len() as u64,
                max,
            })?;
        let mut frame = BytesMut::with_capacity(Self::HEADER_LEN + payload.len());
        frame.put_u32(len + Self::ID_LEN);
        frame.put_u64(id);
        frame.put_slice(payload);
        Ok(frame.freeze())
    }

    /// Reads a complete frame's header: `(correlation id, payload length)`, or `None` if
    /// fewer than [`HEADER_LEN`](Self::HEADER_LEN) bytes are there.
    pub fn parse_header(&self, buf: &[u8]) -> Result<Option<(u64, usize)>, Violation> {
        let Some(header) = buf.get(..Self::HEADER_LEN) else {
            // The length alone can already be judged.
            if let Some(len) = buf.get(..4) {
                self.check_len(u32::from_be_bytes([len[0], len[1], len[2], len[3]]))?;
            }
            return Ok(None);
        };
        let mut header = header;
        let payload_len = self.check_len(header.get_u32())?;
        Ok(Some((header.get_u64(), payload_len)))
    }

    fn check_len(&self, len: u32) -> Result<usize, Violation> {
        let Some(payload_len) = len.checked_sub(Self::ID_LEN) else {
            return Err(Violation::MalformedHeader);
        };
        if payload_len > self.max_payload {
            return Err(Violation::FrameTooLong {
                len: u64::from(payload_len),
                max: u64::from(self.max_payload),
            });
        }
        Ok(payload_len as usize)
    }
}

impl Default for LengthPrefixed {
    /// At most 16 MiB per response.
    fn default() -> Self {
        Self::new(16 * 1024 * 1024)
    }
}

impl Codec for LengthPrefixed {
    fn encode(&self, id: RequestId, payload: &[u8]) -> Result<Bytes, EncodeError> {
        Self::frame(id.as_u64(), payload)
    }

    fn decode(&self, buf: &mut BytesMut) -> Result<Option<Response>, Violation> {
        let Some((id, payload_len)) = self.parse_header(buf)? else {
            return Ok(None);
        };
        if buf.len() < Self::HEADER_LEN + payload_len {
            buf.reserve(Self::HEADER_LEN + payload_len - buf.len());
            return Ok(None);
        }
        buf.advance(Self::HEADER_LEN);
        let payload = buf.split_to(payload_len).freeze();
        Ok(Some(Response {
            id: RequestId::from_u64(id),
            payload,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(
        codec: &LengthPrefixed,
        bytes: &[u8],
    ) -> (Vec<Response>, Result<(), Violation>, usize) {
        let mut buf = BytesMut::from(bytes);
        let mut out = Vec::new();
        loop {
            match codec.decode(&mut buf) {
                Ok(Some(r)) => out.push(r),
                Ok(None) => return (out, Ok(()), buf.len()),
                Err(v) => return (out, Err(v), buf.len()),
            }
        }
    }

    #[test]
    fn frames_round_trip_byte_by_byte() {
        let codec = LengthPrefixed::default();
        let id = RequestId::from_u64(0x1234_5678_9abc_def0);
        let mut wire = codec.encode(id, b"hello").unwrap().to_vec();
        wire.extend_from_slice(&codec.encode(RequestId::from_u64(7), b"").unwrap());
        assert_eq!(
            &wire[..12],
            &[0, 0, 0, 13, 0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0]
        );
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for byte in wire {
            buf.put_u8(byte);
            while let Some(r) = codec.decode(&mut buf).unwrap() {
                got.push(r);
            }
        }
        assert_eq!(
            got,
            [
                Response {
                    id,
                    payload: Bytes::from_static(b"hello")
                },
                Response {
                    id: RequestId::from_u64(7),
                    payload: Bytes::new()
                },
            ]
        );
        assert!(buf.is_empty());
    }

    #[test]
    fn an_oversize_length_is_refused_from_its_first_four_bytes() {
        let codec = LengthPrefixed::new(100);
        let (_, result, _) = decode_all(&codec, &[0, 0, 0, 109]);
        assert_eq!(result, Err(Violation::FrameTooLong { len: 101, max: 100 }));
        let (got, result, _) = decode_all(&codec, &LengthPrefixed::frame(1, &[0; 100]).unwrap());
        assert_eq!((got.len(), result), (1, Ok(())));
    }

    #[test]
    fn a_length_too_short_for_the_id_is_malformed() {
        let codec = LengthPrefixed::default();
        for len in 0..8u32 {
            let (_, result, _) = decode_all(&codec, &len.to_be_bytes());
            assert_eq!(result, Err(Violation::MalformedHeader), "length {len}");
        }
    }

    #[test]
    fn a_partial_frame_waits_for_more_bytes() {
        let codec = LengthPrefixed::default();
        let frame = LengthPrefixed::frame(3, b"abcdef").unwrap();
        let (got, result, left) = decode_all(&codec, &frame[..frame.len() - 1]);
        assert_eq!((got.len(), result, left), (0, Ok(()), frame.len() - 1));
    }
}
