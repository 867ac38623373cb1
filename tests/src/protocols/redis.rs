//! Redis's protocol (RESP2) as a keepwire codec. In order: a request is one command, an array
//! of bulk strings ([`command`] builds one), and its response is one RESP value, read with
//! [`Reply::parse`].
//!
//! ```
//! use bytes::BytesMut;
//! use keepwire_driver::{Codec, Decoded};
//! use keepwire_tests::protocols::redis::{self, Redis, Reply};
//!
//! let codec = Redis::new();
//! let mut wire = BytesMut::new();
//! codec.encode(&redis::command(["GET", "k"]), None, &mut wire).unwrap();
//! assert_eq!(&wire[..], b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n");
//!
//! // A response may arrive in pieces; the decoder keeps its place between them.
//! let mut decoder = codec.decoder();
//! let mut inbound = BytesMut::from(&b"*2\r\n$1\r\na"[..]);
//! assert_eq!(decoder.decode(&mut inbound).unwrap(), None);
//! inbound.extend_from_slice(b"\r\n$-1\r\n:7\r\n");
//! let Some(Decoded::Next(first)) = decoder.decode(&mut inbound).unwrap() else { panic!() };
//! assert_eq!(
//!     Reply::parse(&first).unwrap(),
//!     Reply::Array(vec![Reply::Bulk("a".into()), Reply::Nil])
//! );
//! let Some(Decoded::Next(second)) = decoder.decode(&mut inbound).unwrap() else { panic!() };
//! assert_eq!(Reply::parse(&second).unwrap(), Reply::Integer(7));
//! ```
//!
//! Commands that would break the one-request-one-response alignment are refused before a byte
//! is sent, as [`EncodeError::Invalid`]: those that turn the connection into a stream of pushed
//! messages (`SUBSCRIBE`, `PSUBSCRIBE`, `SSUBSCRIBE`, `MONITOR`, `SYNC`, `PSYNC`), those that
//! silence replies (`CLIENT REPLY OFF` or `SKIP`), and `HELLO` with a protocol version other
//! than 2 (RESP3 sends pushes between replies, and types this decoder does not read). A
//! server error (`-ERR ...`) is an answer like any other: [`Reply::Error`].

use std::fmt;

use bytes::{BufMut, Bytes, BytesMut};
use keepwire_driver::proto::Violation;
use keepwire_driver::{Codec, Correlation, Decoded, Decoder, EncodeError};

/// Longest line (a status, an error, or a header) read before its `\r\n`.
pub const MAX_LINE: usize = 64 * 1024;
/// Deepest nesting of arrays in a response.
pub const MAX_DEPTH: usize = 32;

/// The RESP2 codec.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Redis {
    max_response: usize,
}

impl Redis {
    /// Responses of at most 64 MiB.
    pub const fn new() -> Self {
        Self::with_max_response(64 * 1024 * 1024)
    }

    /// Responses of at most `max_response` bytes: a longer one is refused as soon as a header
    /// announces it, before its bytes arrive.
    pub const fn with_max_response(max_response: usize) -> Self {
        Self { max_response }
    }

    /// The longest response accepted.
    pub const fn max_response(&self) -> usize {
        self.max_response
    }
}

impl Default for Redis {
    fn default() -> Self {
        Self::new()
    }
}

impl Codec for Redis {
    fn correlation(&self) -> Correlation {
        Correlation::InOrder
    }

    fn encode(
        &self,
        payload: &[u8],
        _id: Option<u64>,
        dst: &mut BytesMut,
    ) -> Result<(), EncodeError> {
        check_command(payload).map_err(|e| EncodeError::Invalid(e.to_string()))?;
        dst.put_slice(payload);
        Ok(())
    }

    fn decoder(&self) -> Box<dyn Decoder> {
        Box::new(RespDecoder {
            max_response: self.max_response,
            parsed: 0,
            open: Vec::new(),
        })
    }

    /// `PING`: answered at once with `+PONG`, changes nothing.
    fn heartbeat(&self, _id: Option<u64>, dst: &mut BytesMut) -> Option<Result<(), EncodeError>> {
        dst.put_slice(b"*1\r\n$4\r\nPING\r\n");
        Some(Ok(()))
    }
}

/// A command as RESP sends it: an array of bulk strings.
pub fn command<I, A>(args: I) -> Bytes
where
    I: IntoIterator<Item = A>,
    A: AsRef<[u8]>,
{
    let args: Vec<A> = args.into_iter().collect();
    let mut out = BytesMut::new();
    out.put_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in &args {
        let arg = arg.as_ref();
        out.put_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.put_slice(arg);
        out.put_slice(b"\r\n");
    }
    out.freeze()
}

/// Why a request is not one command this codec sends.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CommandError {
    /// The request is not exactly one RESP array of bulk strings, with nothing after it.
    NotACommand,
    /// A command after which replies no longer answer one request each.
    BreaksOrder(String),
}

impl fmt::Display for CommandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotACommand => f.write_str(
                "a request is one RESP array of bulk strings (build it with `redis::command`)",
            ),
            Self::BreaksOrder(name) => write!(
                f,
                "{name} would break the one-reply-per-request order on the connection"
            ),
        }
    }
}

impl std::error::Error for CommandError {}

/// Checks that `payload` is one command keepwire can correlate: see the module docs.
pub fn check_command(payload: &[u8]) -> Result<(), CommandError> {
    let args = parse_command(payload).ok_or(CommandError::NotACommand)?;
    let name = String::from_utf8_lossy(args[0]).to_ascii_uppercase();
    let arg = |i: usize| {
        args.get(i)
            .map(|a| String::from_utf8_lossy(a).to_ascii_uppercase())
    };
    let breaks = match name.as_str() {
        "SUBSCRIBE" | "PSUBSCRIBE" | "SSUBSCRIBE" | "MONITOR" | "SYNC" | "PSYNC" => true,
        "CLIENT" => {
            arg(1).as_deref() == Some("REPLY") && matches!(arg(2).as_deref(), Some("OFF" | "SKIP"))
        }
        "HELLO" => arg(1).is_some_and(|version| version != "2"),
        _ => false,
    };
    if breaks {
        let shown = if name == "CLIENT" {
            format!("CLIENT REPLY {}", arg(2).unwrap_or_default())
        } else {
            name
        };
        return Err(CommandError::BreaksOrder(shown));
    }
    Ok(())
}

/// The arguments of a payload that is exactly one array of bulk strings.
fn parse_command(payload: &[u8]) -> Option<Vec<&[u8]>> {
    // A command has a name: an empty array is not one.
    let (Element::Array(count @ 1..), mut at) = element(payload, payload.len()).ok()?? else {
        return None;
    };
    let mut args = Vec::with_capacity(count);
    for _ in 0..count {
        let (Element::Bulk(header), len) = element(&payload[at..], payload.len()).ok()?? else {
            return None;
        };
        args.push(&payload[at + header..at + len - 2]);
        at += len;
    }
    (at == payload.len()).then_some(args)
}

/// What is wrong with a response (the decoder's [`Violation`], or [`Reply::parse`]'s error).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Malformed {
    /// A line longer than [`MAX_LINE`] without its `\r\n`.
    LineTooLong,
    /// A line that does not end in `\r\n`, or a bulk string not followed by `\r\n`.
    BadLineEnd,
    /// A type byte that RESP2 does not have.
    UnknownType(u8),
    /// A length or an integer that does not parse.
    BadNumber,
    /// Arrays nested deeper than [`MAX_DEPTH`].
    TooDeep,
    /// A response longer than the limit (refused from the header that announced it).
    TooLarge {
        /// Its length so far, or as announced.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// Bytes after the value ([`Reply::parse`] takes exactly one).
    Trailing,
    /// The value ends before its end.
    Incomplete,
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::LineTooLong => write!(f, "a line of more than {MAX_LINE} bytes"),
            Self::BadLineEnd => f.write_str("a line or a bulk string without its \\r\\n"),
            Self::UnknownType(byte) => write!(f, "unknown RESP2 type byte {byte:#04x}"),
            Self::BadNumber => f.write_str("a length or an integer that does not parse"),
            Self::TooDeep => write!(f, "arrays nested deeper than {MAX_DEPTH}"),
            Self::TooLarge { len, max } => {
                write!(f, "a response of {len} bytes, more than the {max} allowed")
            }
            Self::Trailing => f.write_str("bytes after the value"),
            Self::Incomplete => f.write_str("the value ends early"),
        }
    }
}

impl std::error::Error for Malformed {}

impl From<Malformed> for Violation {
    fn from(m: Malformed) -> Self {
        match m {
            Malformed::TooLarge { len, max } => Violation::FrameTooLong { len, max },
            _ => Violation::MalformedHeader,
        }
    }
}

/// A RESP2 value, read from a response with [`Reply::parse`]. Bulk strings share the
/// response's bytes.
#[derive(Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`: a status line.
    Status(String),
    /// `-ERR ...`: the server refused the command; the connection goes on.
    Error(String),
    /// `:42`.
    Integer(i64),
    /// `$3\r\nabc`.
    Bulk(Bytes),
    /// `$-1` or `*-1`: no value (a missing key).
    Nil,
    /// `*2\r\n...`: values, possibly nested.
    Array(Vec<Reply>),
}

impl fmt::Debug for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Status(s) => write!(f, "+{s}"),
            Self::Error(e) => write!(f, "-{e}"),
            Self::Integer(n) => write!(f, ":{n}"),
            Self::Bulk(b) if b.len() > 64 => write!(f, "${} bytes", b.len()),
            Self::Bulk(b) => write!(f, "{:?}", String::from_utf8_lossy(b)),
            Self::Nil => f.write_str("nil"),
            Self::Array(items) => f.debug_list().entries(items).finish(),
        }
    }
}

impl Reply {
    /// Reads the one value `payload` holds (a response the decoder cut).
    pub fn parse(payload: &Bytes) -> Result<Self, Malformed> {
        let (reply, len) = Self::parse_at(payload, 0, 0)?;
        if len != payload.len() {
            return Err(Malformed::Trailing);
        }
        Ok(reply)
    }

    fn parse_at(payload: &Bytes, at: usize, depth: usize) -> Result<(Self, usize), Malformed> {
        if depth > MAX_DEPTH {
            return Err(Malformed::TooDeep);
        }
        let rest = &payload[at..];
        let (element, len) = element(rest, rest.len())?.ok_or(Malformed::Incomplete)?;
        // A status or an error is one line: its text is between the type byte and `\r\n`.
        let line = || String::from_utf8_lossy(&rest[1..len - 2]).into_owned();
        let reply = match element {
            Element::Status => Self::Status(line()),
            Element::Error => Self::Error(line()),
            Element::Integer(n) => Self::Integer(n),
            Element::Nil => Self::Nil,
            Element::Bulk(header) => Self::Bulk(payload.slice(at + header..at + len - 2)),
            Element::Array(count) => {
                let mut items = Vec::with_capacity(count.min(1024));
                let mut end = at + len;
                for _ in 0..count {
                    let (item, item_len) = Self::parse_at(payload, end, depth + 1)?;
                    items.push(item);
                    end += item_len;
                }
                return Ok((Self::Array(items), end - at));
            }
        };
        Ok((reply, len))
    }

    /// A bulk string's bytes, else `None`.
    pub fn as_bulk(&self) -> Option<&Bytes> {
        match self {
            Self::Bulk(bytes) => Some(bytes),
            _ => None,
        }
    }
}

/// A response's decoder: it keeps the whole elements and array headers it parsed between
/// reads, so a read looks again only at the element it cut (a line up to [`MAX_LINE`], or a
/// bulk string's header), not at the response from its start.
#[derive(Debug)]
struct RespDecoder {
    max_response: usize,
    /// Bytes of the response being read that are whole elements or array headers.
    parsed: usize,
    /// Elements still to come in each open array, outermost first.
    open: Vec<usize>,
}

impl Decoder for RespDecoder {
    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Decoded>, Violation> {
        if self.parsed > buf.len() {
            // Not the buffer it was reading (only a misused decoder sees this): start over.
            self.parsed = 0;
            self.open.clear();
        }
        loop {
            let room = self.max_response - self.parsed.min(self.max_response);
            let found = element(&buf[self.parsed..], room).map_err(|e| match e {
                // `element` measured against what was left: report the whole response.
                Malformed::TooLarge { len, .. } => Malformed::TooLarge {
                    len: len + self.parsed as u64,
                    max: self.max_response as u64,
                },
                other => other,
            })?;
            let Some((element, len)) = found else {
                return Ok(None);
            };
            self.parsed += len;
            // An empty array is complete with its header.
            if let Element::Array(count @ 1..) = element {
                if self.open.len() == MAX_DEPTH {
                    return Err(Malformed::TooDeep.into());
                }
                self.open.push(count);
                continue;
            }
            // An element ended: so does every array it was the last element of.
            loop {
                let Some(left) = self.open.last_mut() else {
                    let len = std::mem::take(&mut self.parsed);
                    return Ok(Some(Decoded::Next(buf.split_to(len).freeze())));
                };
                *left -= 1;
                if *left > 0 {
                    break;
                }
                self.open.pop();
            }
        }
    }
}

/// One RESP2 element at the start of a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Element {
    Status,
    Error,
    Integer(i64),
    /// A bulk string, whole; its bytes start after a header of this length.
    Bulk(usize),
    /// `$-1` or `*-1`.
    Nil,
    /// The header of an array of this many elements (`*0` is an empty array, not nil).
    Array(usize),
}

/// The element `buf` starts with and its length (an array's header only), or `None` if it has
/// not all arrived. `room` is how long it may be.
fn element(buf: &[u8], room: usize) -> Result<Option<(Element, usize)>, Malformed> {
    let window = &buf[..buf.len().min(MAX_LINE)];
    let Some(newline) = window.iter().position(|&b| b == b'\n') else {
        if window.len() == MAX_LINE {
            return Err(Malformed::LineTooLong);
        }
        return Ok(None);
    };
    if newline < 2 || buf[newline - 1] != b'\r' {
        return Err(Malformed::BadLineEnd);
    }
    let line = newline + 1;
    let too_large = |len: usize| Malformed::TooLarge {
        len: len as u64,
        max: room as u64,
    };
    if line > room {
        return Err(too_large(line));
    }
    let text = &buf[1..newline - 1];
    let element = match buf[0] {
        b'+' => Element::Status,
        b'-' => Element::Error,
        b':' => Element::Integer(number(text)?),
        b'$' => match number(text)? {
            -1 => Element::Nil,
            len => {
                let len = usize::try_from(len).map_err(|_| Malformed::BadNumber)?;
                let whole = line.saturating_add(len).saturating_add(2);
                if whole > room {
                    return Err(too_large(whole));
                }
                if buf.len() < whole {
                    return Ok(None);
                }
                if &buf[whole - 2..whole] != b"\r\n" {
                    return Err(Malformed::BadLineEnd);
                }
                return Ok(Some((Element::Bulk(line), whole)));
            }
        },
        b'*' => match number(text)? {
            -1 => Element::Nil,
            count => Element::Array(usize::try_from(count).map_err(|_| Malformed::BadNumber)?),
        },
        other => return Err(Malformed::UnknownType(other)),
    };
    Ok(Some((element, line)))
}

/// A RESP integer: an optional `-` and decimal digits.
fn number(text: &[u8]) -> Result<i64, Malformed> {
    let (negative, digits) = match text {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, text),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(Malformed::BadNumber);
    }
    let mut value: i64 = 0;
    for &d in digits {
        let d = i64::from(d - b'0');
        value = value
            .checked_mul(10)
            .and_then(|v| {
                if negative {
                    v.checked_sub(d)
                } else {
                    v.checked_add(d)
                }
            })
            .ok_or(Malformed::BadNumber)?;
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every reply the decoder cuts, parsed.
    fn decode_all(decoder: &mut dyn Decoder, buf: &mut BytesMut) -> Result<Vec<Reply>, Violation> {
        let payloads = crate::protocols::decode_in_order(decoder, buf)?;
        Ok(payloads
            .iter()
            .map(|payload| Reply::parse(payload).expect("the decoder cuts whole values"))
            .collect())
    }

    const STREAM: &[u8] = b"+OK\r\n-ERR wrong type\r\n:-12\r\n$5\r\nhe\r\no\r\n$0\r\n\r\n$-1\r\n\
        *-1\r\n*0\r\n*3\r\n:1\r\n*2\r\n$1\r\na\r\n*1\r\n+x\r\n$-1\r\n";

    fn expected() -> Vec<Reply> {
        vec![
            Reply::Status("OK".into()),
            Reply::Error("ERR wrong type".into()),
            Reply::Integer(-12),
            Reply::Bulk(Bytes::from_static(b"he\r\no")),
            Reply::Bulk(Bytes::new()),
            Reply::Nil,
            Reply::Nil,
            Reply::Array(vec![]),
            Reply::Array(vec![
                Reply::Integer(1),
                Reply::Array(vec![
                    Reply::Bulk(Bytes::from_static(b"a")),
                    Reply::Array(vec![Reply::Status("x".into())]),
                ]),
                Reply::Nil,
            ]),
        ]
    }

    #[test]
    fn every_type_decodes_whole_and_byte_by_byte() {
        let codec = Redis::new();
        let mut whole = BytesMut::from(STREAM);
        assert_eq!(
            decode_all(&mut *codec.decoder(), &mut whole).unwrap(),
            expected()
        );
        assert!(whole.is_empty());

        let mut decoder = codec.decoder();
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for &byte in STREAM {
            buf.put_u8(byte);
            got.extend(decode_all(&mut *decoder, &mut buf).unwrap());
        }
        assert_eq!(got, expected());
        assert!(buf.is_empty());
    }

    #[test]
    fn malformed_responses_are_violations() {
        let cases: &[(&[u8], Violation)] = &[
            (b"?what\r\n", Violation::MalformedHeader),
            (b"+OK\n", Violation::MalformedHeader),
            (b":12x\r\n", Violation::MalformedHeader),
            (b":\r\n", Violation::MalformedHeader),
            (b"$3\r\nabcd\r\n", Violation::MalformedHeader),
            (b"$-2\r\n", Violation::MalformedHeader),
            (b"*-2\r\n", Violation::MalformedHeader),
            (b":99999999999999999999\r\n", Violation::MalformedHeader),
            (b"%1\r\n", Violation::MalformedHeader), // a RESP3 map
        ];
        for (input, violation) in cases {
            let mut buf = BytesMut::from(*input);
            let got = decode_all(&mut *Redis::new().decoder(), &mut buf);
            assert_eq!(got, Err(*violation), "{:?}", String::from_utf8_lossy(input));
        }
    }

    #[test]
    fn limits_refuse_before_the_bytes_arrive() {
        // A bulk string announced past the limit, with none of its bytes there yet.
        let mut buf = BytesMut::from(&b"*2\r\n$3\r\nabc\r\n$100\r\n"[..]);
        let got = decode_all(&mut *Redis::with_max_response(64).decoder(), &mut buf);
        assert_eq!(got, Err(Violation::FrameTooLong { len: 121, max: 64 }));

        let mut nested = BytesMut::new();
        for _ in 0..=MAX_DEPTH {
            nested.put_slice(b"*1\r\n");
        }
        let got = decode_all(&mut *Redis::new().decoder(), &mut nested);
        assert_eq!(got, Err(Violation::MalformedHeader));

        let mut line = BytesMut::from(&b"+"[..]);
        line.put_bytes(b'a', MAX_LINE);
        let got = decode_all(&mut *Redis::new().decoder(), &mut line);
        assert_eq!(got, Err(Violation::MalformedHeader));
        // Just under the limit, a long line waits for the rest.
        let mut line = BytesMut::from(&b"+"[..]);
        line.put_bytes(b'a', MAX_LINE - 2);
        assert_eq!(
            decode_all(&mut *Redis::new().decoder(), &mut line),
            Ok(vec![])
        );
        // An error message of 60,000 bytes is a reply (the limit is 64 KiB).
        let mut error = BytesMut::from(&b"-"[..]);
        error.put_bytes(b'e', 60_000);
        error.put_slice(b"\r\n");
        let got = decode_all(&mut *Redis::new().decoder(), &mut error);
        assert!(matches!(&got.unwrap()[..], [Reply::Error(e)] if e.len() == 60_000));
    }

    #[test]
    fn a_response_is_limited_as_a_whole_not_per_element() {
        assert_eq!(Redis::new().max_response(), 64 << 20);
        // Each bulk string fits in 20 bytes; the array holding both does not.
        let mut buf = BytesMut::from(&b"*2\r\n$5\r\nhello\r\n$5\r\nworld\r\n"[..]);
        let got = decode_all(&mut *Redis::with_max_response(20).decoder(), &mut buf);
        assert_eq!(got, Err(Violation::FrameTooLong { len: 26, max: 20 }));
        let mut buf = BytesMut::from(&b"*2\r\n$5\r\nhello\r\n$5\r\nworld\r\n"[..]);
        let got = decode_all(&mut *Redis::with_max_response(26).decoder(), &mut buf);
        assert_eq!(got.unwrap().len(), 1);
    }

    #[test]
    fn arrays_nest_as_deep_as_the_limit_and_no_deeper() {
        let nested = |depth: usize| {
            let mut value = BytesMut::new();
            for _ in 0..depth {
                value.put_slice(b"*1\r\n");
            }
            value.put_slice(b":7\r\n");
            value
        };
        let mut deepest = nested(MAX_DEPTH);
        let mut expected = Reply::Integer(7);
        for _ in 0..MAX_DEPTH {
            expected = Reply::Array(vec![expected]);
        }
        let decoded = decode_all(&mut *Redis::new().decoder(), &mut deepest);
        assert_eq!(decoded, Ok(vec![expected]));
        // Parsed on its own (not cut by the decoder), a deeper one is refused too.
        let too_deep = nested(MAX_DEPTH + 1).freeze();
        assert_eq!(Reply::parse(&too_deep), Err(Malformed::TooDeep));
    }

    #[test]
    fn a_decoder_handed_another_buffer_starts_over() {
        let mut decoder = Redis::new().decoder();
        let mut first = BytesMut::from(&b"*2\r\n:1\r\n"[..]);
        assert_eq!(decode_all(&mut *decoder, &mut first), Ok(vec![]));
        // Shorter than what it had parsed: not the buffer it was reading.
        let mut other = BytesMut::from(&b":5\r\n"[..]);
        assert_eq!(
            decode_all(&mut *decoder, &mut other),
            Ok(vec![Reply::Integer(5)])
        );
    }

    #[test]
    fn errors_and_replies_say_what_they_are() {
        let refused = CommandError::BreaksOrder("MONITOR".into()).to_string();
        assert!(refused.starts_with("MONITOR would break"), "{refused}");
        assert!(
            CommandError::NotACommand
                .to_string()
                .contains("redis::command")
        );
        let too_large = Malformed::TooLarge { len: 26, max: 20 }.to_string();
        assert_eq!(
            too_large,
            "a response of 26 bytes, more than the 20 allowed"
        );
        assert_eq!(
            Malformed::UnknownType(b'%').to_string(),
            "unknown RESP2 type byte 0x25"
        );
        let reply = Reply::Array(vec![
            Reply::Status("OK".into()),
            Reply::Error("ERR no".into()),
            Reply::Integer(-1),
            Reply::Nil,
            Reply::Bulk(Bytes::from_static(b"short")),
            Reply::Bulk(Bytes::from(vec![b'x'; 65])),
        ]);
        let shown = format!("{reply:?}");
        assert_eq!(shown, r#"[+OK, -ERR no, :-1, nil, "short", $65 bytes]"#);
        let sixty_four = format!("{:?}", Reply::Bulk(Bytes::from(vec![b'y'; 64])));
        assert_eq!(sixty_four, format!("{:?}", "y".repeat(64)));
    }

    #[test]
    fn commands_encode_as_arrays_of_bulk_strings() {
        let codec = Redis::new();
        let mut wire = BytesMut::new();
        let set = command([&b"SET"[..], b"k", b"a\r\nb"]);
        codec.encode(&set, None, &mut wire).unwrap();
        assert_eq!(&wire[..], b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$4\r\na\r\nb\r\n");
        let mut ping = BytesMut::new();
        codec.heartbeat(None, &mut ping).unwrap().unwrap();
        assert_eq!(&ping[..], b"*1\r\n$4\r\nPING\r\n");
        assert_eq!(check_command(&command(["hello", "2"])), Ok(()));
        assert_eq!(check_command(&command(["client", "reply", "on"])), Ok(()));
        assert_eq!(check_command(&command(["HELLO"])), Ok(()));
    }

    #[test]
    fn requests_that_would_break_the_order_are_refused() {
        let codec = Redis::new();
        let refused: &[(&[u8], CommandError)] = &[
            (b"PING\r\n", CommandError::NotACommand), // the inline form
            (
                b"*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nPING\r\n",
                CommandError::NotACommand,
            ),
            (b"*1\r\n:4\r\n", CommandError::NotACommand),
            (b"*2\r\n$4\r\nPING\r\n", CommandError::NotACommand),
            (b"*0\r\n", CommandError::NotACommand),
            (
                &command(["subscribe", "news"]),
                CommandError::BreaksOrder("SUBSCRIBE".into()),
            ),
            (
                &command(["MONITOR"]),
                CommandError::BreaksOrder("MONITOR".into()),
            ),
            (
                &command(["client", "reply", "skip"]),
                CommandError::BreaksOrder("CLIENT REPLY SKIP".into()),
            ),
            (
                &command(["HELLO", "3"]),
                CommandError::BreaksOrder("HELLO".into()),
            ),
        ];
        for (payload, error) in refused {
            assert_eq!(check_command(payload).as_ref(), Err(error));
            let mut wire = BytesMut::new();
            let encoded = codec.encode(payload, None, &mut wire);
            assert_eq!(encoded, Err(EncodeError::Invalid(error.to_string())));
            assert!(wire.is_empty(), "nothing framed for a refused request");
        }
    }

    #[test]
    fn a_parsed_reply_is_exactly_one_value() {
        let two = Bytes::from_static(b":1\r\n:2\r\n");
        assert_eq!(Reply::parse(&two), Err(Malformed::Trailing));
        let short = Bytes::from_static(b"*2\r\n:1\r\n");
        assert_eq!(Reply::parse(&short), Err(Malformed::Incomplete));
        // An empty status is a status.
        let empty = Bytes::from_static(b"+\r\n");
        assert_eq!(Reply::parse(&empty), Ok(Reply::Status(String::new())));
        let bulk = Bytes::from_static(b"$3\r\nabc\r\n");
        assert_eq!(
            Reply::parse(&bulk).unwrap().as_bulk(),
            Some(&Bytes::from_static(b"abc"))
        );
    }
}
