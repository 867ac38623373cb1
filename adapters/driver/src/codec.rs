//! Framing: how a request goes on the wire and how the responses a connection receives find
//! their requests.
//!
//! A [`Codec`] says how its protocol correlates responses ([`Correlation`]), frames each
//! request, and makes one [`Decoder`] per connection, which may keep state between messages
//! (a PostgreSQL response is several messages up to ReadyForQuery). keepwire, not the codec,
//! knows which requests were written on which connection and in what order:
//!
//! - **In order** (PostgreSQL, memcached, Redis, HTTP/1.1): a decoded response
//!   ([`Decoded::Next`]) answers the oldest request written on its connection and not yet
//!   answered. Requests carry no id. A request that ended early after a byte of it was
//!   written keeps its place, so its late answer is consumed and never given to the request
//!   behind it.
//! - **By id** (Kafka, the built-in [`LengthPrefixed`]): the driver gives each request a
//!   protocol id of the protocol's own width ([`Correlation::ById`]), wrapping around and never
//!   two in flight at once, and hands it to [`Codec::encode`]; the decoder reads it back from
//!   the response ([`Decoded::Tagged`]). An id that matches nothing closes that connection only.

use std::fmt;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use keepwire_proto::Violation;

/// Frames requests for one protocol and makes the per-connection decoders of its responses.
///
/// One codec serves every connection of a client; the state of a connection's byte stream
/// lives in its [`Decoder`].
///
/// # Example: a codec for an in-order protocol
///
/// A line protocol where every request is one line and every response one line:
///
/// ```
/// use bytes::{Bytes, BytesMut, BufMut};
/// use keepwire_driver::{Codec, Correlation, Decoded, Decoder, EncodeError};
/// use keepwire_driver::proto::Violation;
///
/// #[derive(Debug)]
/// struct Lines;
///
/// impl Codec for Lines {
///     fn correlation(&self) -> Correlation {
///         Correlation::InOrder
///     }
///     fn encode(&self, payload: &[u8], _id: Option<u64>, dst: &mut BytesMut) -> Result<(), EncodeError> {
///         if payload.contains(&b'\n') {
///             return Err(EncodeError::Invalid("a request is one line".into()));
///         }
///         dst.put_slice(payload);
///         dst.put_u8(b'\n');
///         Ok(())
///     }
///     fn decoder(&self) -> Box<dyn Decoder> {
///         Box::new(LineDecoder)
///     }
/// }
///
/// #[derive(Debug)]
/// struct LineDecoder;
///
/// impl Decoder for LineDecoder {
///     fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Decoded>, Violation> {
///         let Some(end) = buf.iter().position(|&b| b == b'\n') else {
///             return if buf.len() > 4096 { Err(Violation::MalformedHeader) } else { Ok(None) };
///         };
///         let line = buf.split_to(end + 1).freeze();
///         Ok(Some(Decoded::Next(line.slice(..end))))
///     }
/// }
/// # let mut dst = BytesMut::new();
/// # Lines.encode(b"get k", None, &mut dst).unwrap();
/// # assert_eq!(&dst[..], b"get k\n");
/// # let mut buf = BytesMut::from(&b"VALUE\nEND"[..]);
/// # let mut d = Lines.decoder();
/// # assert_eq!(d.decode(&mut buf).unwrap(), Some(Decoded::Next(Bytes::from_static(b"VALUE"))));
/// # assert_eq!(d.decode(&mut buf).unwrap(), None);
/// ```
///
/// For a protocol with ids, return [`Correlation::ById`] with the id's width, write the `id`
/// that [`Codec::encode`] receives where the protocol puts it, and decode responses to
/// [`Decoded::Tagged`] with the id read back; [`LengthPrefixed`] is a complete example.
pub trait Codec: Send + Sync + fmt::Debug + 'static {
    /// How this protocol's responses find their requests.
    fn correlation(&self) -> Correlation;

    /// Appends the frame of one request to `dst`. `id` is the protocol id to write with
    /// [`Correlation::ById`] (it fits the width given there), and `None` in order.
    ///
    /// An error refuses this request only (whatever was appended is discarded): it ends with
    /// `SendError::Encode` and nothing is sent.
    fn encode(
        &self,
        payload: &[u8],
        id: Option<u64>,
        dst: &mut BytesMut,
    ) -> Result<(), EncodeError>;

    /// A decoder for a new connection.
    fn decoder(&self) -> Box<dyn Decoder>;

    /// Appends the frame of a heartbeat ping to `dst`: a request the server answers at once
    /// and that changes nothing (Redis `PING`, memcached `version`, an empty PostgreSQL
    /// query). `id` is the protocol id to write with [`Correlation::ById`], `None` in order,
    /// as for [`encode`](Self::encode).
    ///
    /// `None`, the default, means the protocol has no ping: a client with heartbeats on
    /// ([`ClientBuilder::heartbeat`](crate::ClientBuilder::heartbeat)) cannot be built on
    /// this codec. The driver sends the ping on a connection idle longer than the heartbeat
    /// interval; the connection's decoder cuts its answer like any response (with the id, or
    /// in its place in order), and the driver consumes it: no caller ever sees it. A ping
    /// that cannot be framed (`Some(Err(_))`) is not sent, and its deadline then closes the
    /// connection as a heartbeat timeout.
    fn heartbeat(&self, id: Option<u64>, dst: &mut BytesMut) -> Option<Result<(), EncodeError>> {
        let _ = (id, dst);
        None
    }
}

/// Cuts the responses out of one connection's bytes; may keep state between calls.
///
/// # Example
///
/// A response made of several lines up to an `END` line (as memcached's `get` answers): the
/// decoder remembers how far it has already scanned, so a response arriving byte by byte is
/// not scanned from its start again each time.
///
/// ```
/// use bytes::BytesMut;
/// use keepwire_driver::{Decoded, Decoder};
/// use keepwire_driver::proto::Violation;
///
/// #[derive(Debug, Default)]
/// struct UntilEnd {
///     /// Bytes of the buffered response already scanned for its end.
///     scanned: usize,
/// }
///
/// impl Decoder for UntilEnd {
///     fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Decoded>, Violation> {
///         const END: &[u8] = b"END\r\n";
///         let from = self.scanned.saturating_sub(END.len() - 1);
///         match buf[from..].windows(END.len()).position(|w| w == END) {
///             Some(at) => {
///                 self.scanned = 0;
///                 let response = buf.split_to(from + at + END.len()).freeze();
///                 Ok(Some(Decoded::Next(response)))
///             }
///             None if buf.len() > 1 << 20 => Err(Violation::FrameTooLong {
///                 len: buf.len() as u64,
///                 max: 1 << 20,
///             }),
///             None => {
///                 self.scanned = buf.len();
///                 Ok(None)
///             }
///         }
///     }
/// }
///
/// let mut decoder = UntilEnd::default();
/// let mut buf = BytesMut::new();
/// for chunk in [&b"VALUE k 0 1\r\nx\r\nE"[..], b"ND\r\nVALUE"] {
///     buf.extend_from_slice(chunk);
///     if let Some(Decoded::Next(response)) = decoder.decode(&mut buf).unwrap() {
///         assert_eq!(&response[..], b"VALUE k 0 1\r\nx\r\nEND\r\n");
///     }
/// }
/// assert_eq!(&buf[..], b"VALUE", "the next response stays buffered");
/// ```
pub trait Decoder: Send + fmt::Debug {
    /// Cuts the first complete response off the front of `buf`.
    ///
    /// `Ok(None)` means more bytes are needed (leave what is not consumed in `buf`); an `Err`
    /// is a protocol violation that closes the connection. A decoder should not reserve room
    /// in `buf` for bytes it has not received: a length a hostile peer announces costs nothing
    /// until the peer sends it.
    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Decoded>, Violation>;
}

/// How a protocol's responses find their requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Correlation {
    /// A response answers the oldest request written on its connection and not yet answered.
    InOrder,
    /// Requests carry a protocol id `bits` wide (1 to 64) that their responses echo. The
    /// driver assigns ids from 0 upwards, wrapping around at `2^bits`, and never gives an id
    /// to a new request while an earlier request with it may still be answered.
    ById {
        /// The id's width in bits: 31 for a non-negative `i32` (Kafka), 32, 64, ...
        bits: u32,
    },
}

/// One decoded response.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Decoded {
    /// Answers the oldest request in flight on this connection ([`Correlation::InOrder`]).
    Next(Bytes),
    /// Answers the request given protocol id `id` ([`Correlation::ById`]).
    Tagged {
        /// The protocol id, as the peer echoed it.
        id: u64,
        /// The response payload.
        payload: Bytes,
    },
}

/// A request that cannot be framed. It ends that request only.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
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
    /// The request is not valid for this protocol (the codec says why).
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The codec panicked while framing the request (a bug in the codec; the panic hook has
    /// printed the message). The driver and every other request carry on.
    #[error("the codec panicked while framing the request")]
    Panicked,
}

/// The built-in codec: `u32` big-endian length, `u64` big-endian correlation id, payload.
///
/// ```text
/// +----------------+------------------------+-------------------+
/// | length: u32 BE | correlation id: u64 BE | payload           |
/// +----------------+------------------------+-------------------+
///                  |<------------------ length ---------------->|
/// ```
///
/// `length` counts the correlation id and the payload, so a length below 8 is a malformed
/// header. A server echoes the id in its response. Its heartbeat ping ([`Codec::heartbeat`])
/// is a frame with an empty payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LengthPrefixed {
    max_payload: u32,
}

impl LengthPrefixed {
    /// Bytes before the payload: the length and the correlation id.
    pub const HEADER_LEN: usize = 12;
    /// Bytes of the correlation id, counted in the length field.
    const ID_LEN: u32 = 8;
    /// The longest payload the length field can announce (it counts the id too).
    const MAX_PAYLOAD: u32 = u32::MAX - Self::ID_LEN;

    /// A codec that refuses responses whose payload is longer than `max_payload` bytes
    /// (capped at `u32::MAX - 8`, the most the length field can announce).
    pub fn new(max_payload: u32) -> Self {
        Self {
            max_payload: max_payload.min(Self::MAX_PAYLOAD),
        }
    }

    /// The longest response payload accepted.
    pub fn max_payload(&self) -> u32 {
        self.max_payload
    }

    /// Appends `payload` framed with correlation id `id` to `dst` (a server uses this for its
    /// responses too).
    pub fn frame_into(id: u64, payload: &[u8], dst: &mut BytesMut) -> Result<(), EncodeError> {
        Self::frame_inline(id, payload, dst)
    }

    /// [`frame_into`](Self::frame_into), inlined into the codec's [`encode`](Codec::encode),
    /// which otherwise only forwarded to it through a second call.
    #[inline(always)]
    fn frame_inline(id: u64, payload: &[u8], dst: &mut BytesMut) -> Result<(), EncodeError> {
        let max = u64::from(Self::MAX_PAYLOAD);
        let len = u32::try_from(payload.len())
            .ok()
            .filter(|len| u64::from(*len) <= max)
            .ok_or(EncodeError::TooLong {
                len: payload.len() as u64,
                max,
            })?;
        // The header is put in one piece: every put checks the room and moves the length.
        let mut header = [0; Self::HEADER_LEN];
        header[..4].copy_from_slice(&(len + Self::ID_LEN).to_be_bytes());
        header[4..].copy_from_slice(&id.to_be_bytes());
        dst.reserve(Self::HEADER_LEN + payload.len());
        dst.put_slice(&header);
        dst.put_slice(payload);
        Ok(())
    }

    /// `payload` framed with correlation id `id`.
    pub fn frame(id: u64, payload: &[u8]) -> Result<Bytes, EncodeError> {
        let mut frame = BytesMut::new();
        Self::frame_into(id, payload, &mut frame)?;
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

    /// Cuts the first complete frame off `buf`: `(correlation id, payload)`.
    pub fn cut(&self, buf: &mut BytesMut) -> Result<Option<(u64, Bytes)>, Violation> {
        self.cut_inline(buf)
    }

    /// [`cut`](Self::cut), inlined into the decoder, which then builds its result in place
    /// instead of calling `cut` and moving its result into another
    /// (always: a plain hint left it out of line).
    #[inline(always)]
    fn cut_inline(&self, buf: &mut BytesMut) -> Result<Option<(u64, Bytes)>, Violation> {
        let Some((id, payload_len)) = self.parse_header(buf)? else {
            return Ok(None);
        };
        if buf.len() < Self::HEADER_LEN + payload_len {
            // No reserve for the announced length: the bytes are allocated as they arrive.
            return Ok(None);
        }
        // One split of the whole frame, then the header skipped on the shared handle: a
        // pointer bump, where advancing the buffer first costs a second pass through
        // `BytesMut`'s bookkeeping.
        let mut frame = buf.split_to(Self::HEADER_LEN + payload_len).freeze();
        frame.advance(Self::HEADER_LEN);
        Ok(Some((id, frame)))
    }
}

impl Default for LengthPrefixed {
    /// At most 16 MiB per response.
    fn default() -> Self {
        Self::new(16 * 1024 * 1024)
    }
}

impl Codec for LengthPrefixed {
    fn correlation(&self) -> Correlation {
        Correlation::ById { bits: 64 }
    }

    fn encode(
        &self,
        payload: &[u8],
        id: Option<u64>,
        dst: &mut BytesMut,
    ) -> Result<(), EncodeError> {
        Self::frame_inline(id.unwrap_or(0), payload, dst)
    }

    fn decoder(&self) -> Box<dyn Decoder> {
        Box::new(*self)
    }

    /// An empty payload with the heartbeat's id: an echoing server answers it with an empty
    /// payload and the same id.
    fn heartbeat(&self, id: Option<u64>, dst: &mut BytesMut) -> Option<Result<(), EncodeError>> {
        Some(Self::frame_into(id.unwrap_or(0), &[], dst))
    }
}

impl Decoder for LengthPrefixed {
    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Decoded>, Violation> {
        Ok(self
            .cut_inline(buf)?
            .map(|(id, payload)| Decoded::Tagged { id, payload }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(bytes: &[u8], max: u32) -> (Vec<Decoded>, Result<(), Violation>, usize) {
        let mut decoder = LengthPrefixed::new(max).decoder();
        let mut buf = BytesMut::from(bytes);
        let mut out = Vec::new();
        loop {
            match decoder.decode(&mut buf) {
                Ok(Some(r)) => out.push(r),
                Ok(None) => return (out, Ok(()), buf.len()),
                Err(v) => return (out, Err(v), buf.len()),
            }
        }
    }

    #[test]
    fn frames_round_trip_byte_by_byte() {
        let codec = LengthPrefixed::default();
        let mut wire = BytesMut::new();
        codec
            .encode(b"hello", Some(0x1234_5678_9abc_def0), &mut wire)
            .unwrap();
        codec.encode(b"", Some(7), &mut wire).unwrap();
        assert_eq!(
            &wire[..12],
            &[0, 0, 0, 13, 0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0]
        );
        let mut decoder = codec.decoder();
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for &byte in wire.iter() {
            buf.put_u8(byte);
            while let Some(r) = decoder.decode(&mut buf).unwrap() {
                got.push(r);
            }
        }
        assert_eq!(
            got,
            [
                Decoded::Tagged {
                    id: 0x1234_5678_9abc_def0,
                    payload: Bytes::from_static(b"hello")
                },
                Decoded::Tagged {
                    id: 7,
                    payload: Bytes::new()
                },
            ]
        );
        assert!(buf.is_empty());
    }

    #[test]
    fn the_heartbeat_is_an_empty_frame_with_its_id() {
        let codec = LengthPrefixed::default();
        let mut wire = BytesMut::new();
        assert_eq!(codec.heartbeat(Some(9), &mut wire), Some(Ok(())));
        assert_eq!(&wire[..], &[0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 9]);
        let echoed = codec.decoder().decode(&mut wire).unwrap();
        assert_eq!(
            echoed,
            Some(Decoded::Tagged {
                id: 9,
                payload: Bytes::new()
            })
        );
    }

    #[test]
    fn a_codec_has_no_heartbeat_unless_it_says_so() {
        #[derive(Debug)]
        struct NoPing;
        impl Codec for NoPing {
            fn correlation(&self) -> Correlation {
                Correlation::InOrder
            }
            fn encode(
                &self,
                _: &[u8],
                _: Option<u64>,
                _: &mut BytesMut,
            ) -> Result<(), EncodeError> {
                Ok(())
            }
            fn decoder(&self) -> Box<dyn Decoder> {
                Box::new(LengthPrefixed::default())
            }
        }
        let mut wire = BytesMut::new();
        assert_eq!(NoPing.heartbeat(None, &mut wire), None);
        assert!(wire.is_empty());
    }

    #[test]
    fn the_longest_payload_is_capped_by_the_length_field() {
        assert_eq!(LengthPrefixed::new(1000).max_payload(), 1000);
        assert_eq!(LengthPrefixed::new(u32::MAX).max_payload(), u32::MAX - 8);
        assert_eq!(
            LengthPrefixed::new(u32::MAX - 8).max_payload(),
            u32::MAX - 8
        );
    }

    #[test]
    fn an_oversize_length_is_refused_from_its_first_four_bytes() {
        let (_, result, _) = decode_all(&[0, 0, 0, 109], 100);
        assert_eq!(result, Err(Violation::FrameTooLong { len: 101, max: 100 }));
        let (got, result, _) = decode_all(&LengthPrefixed::frame(1, &[0; 100]).unwrap(), 100);
        assert_eq!((got.len(), result), (1, Ok(())));
    }

    #[test]
    fn a_length_too_short_for_the_id_is_malformed() {
        for len in 0..8u32 {
            let (_, result, _) = decode_all(&len.to_be_bytes(), 100);
            assert_eq!(result, Err(Violation::MalformedHeader), "length {len}");
        }
    }

    #[test]
    fn a_partial_frame_waits_for_more_bytes() {
        let frame = LengthPrefixed::frame(3, b"abcdef").unwrap();
        let (got, result, left) = decode_all(&frame[..frame.len() - 1], 100);
        assert_eq!((got.len(), result, left), (0, Ok(()), frame.len() - 1));
    }

    /// `cut`, the helper a server (or a hand-written client) reads frames with, takes whole
    /// frames off the front, in order, and leaves a partial one.
    #[test]
    fn cut_takes_whole_frames_off_the_front() {
        let codec = LengthPrefixed::default();
        let mut buf = BytesMut::new();
        LengthPrefixed::frame_into(9, b"first", &mut buf).unwrap();
        LengthPrefixed::frame_into(0, b"", &mut buf).unwrap();
        let partial = LengthPrefixed::frame(10, b"third").unwrap();
        buf.extend_from_slice(&partial[..partial.len() - 1]);
        assert_eq!(
            codec.cut(&mut buf),
            Ok(Some((9, Bytes::from_static(b"first"))))
        );
        assert_eq!(codec.cut(&mut buf), Ok(Some((0, Bytes::new()))));
        assert_eq!(codec.cut(&mut buf), Ok(None));
        assert_eq!(buf.len(), partial.len() - 1, "the partial frame stays");
        let mut short = BytesMut::from(&[0, 0, 0, 7][..]);
        assert_eq!(codec.cut(&mut short), Err(Violation::MalformedHeader));
    }

    /// Framing reserves room for the frame, not a multiple of it.
    #[test]
    fn a_frame_reserves_its_own_length() {
        let payload = [7u8; 1000];
        let mut dst = BytesMut::new();
        LengthPrefixed::frame_into(1, &payload, &mut dst).unwrap();
        assert_eq!(dst.len(), LengthPrefixed::HEADER_LEN + 1000);
        assert!(dst.capacity() < 2 * dst.len(), "{}", dst.capacity());
    }

    #[test]
    fn a_hostile_length_reserves_nothing_ahead_of_the_bytes() {
        // 12 bytes announcing 16 MiB: the buffer stays as small as what arrived.
        let mut header = BytesMut::new();
        header.put_u32(16 * 1024 * 1024);
        header.put_u64(1);
        let before = header.capacity();
        let mut decoder = LengthPrefixed::default().decoder();
        assert_eq!(decoder.decode(&mut header), Ok(None));
        assert_eq!(header.capacity(), before);
        assert!(header.capacity() < 4096);
    }
}
