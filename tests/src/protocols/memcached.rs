//! memcached's text protocol on keepwire: requests in order, untagged, pipelined.
//!
//! memcached answers the requests of a connection in the order they came, and each answer is
//! self-delimiting (a line, or `VALUE` blocks up to `END`), so the codec is
//! [`Correlation::InOrder`]: the bytes on the wire are exactly memcached's, with no tag and no
//! extra round trip, and any number of requests may be in flight on one connection.
//!
//! - A request payload is one command in memcached's wire form, as the builders here make it
//!   ([`get`], [`set`], [`incr`], ...). [`Memcached::encode`](Codec::encode) checks it before
//!   it is sent: exactly one known command whose answer can be told apart, a valid key, a data
//!   block of the announced length, and no `noreply` (a request without an answer would shift
//!   every later answer onto the wrong request).
//! - A response payload is the whole answer as memcached sent it; [`Reply::parse`] reads it
//!   (zero-copy: values are slices of the response).
//!
//! ```
//! use bytes::{Bytes, BytesMut};
//! use keepwire_driver::{Codec, Correlation, Decoded};
//! use keepwire_tests::protocols::memcached::{self, Memcached, Reply};
//!
//! let codec = Memcached::new();
//! assert_eq!(codec.correlation(), Correlation::InOrder);
//!
//! // What goes on the wire is memcached's own bytes, nothing more.
//! let mut wire = BytesMut::new();
//! codec.encode(&memcached::set("greeting", "hello"), None, &mut wire).unwrap();
//! codec.encode(&memcached::get("greeting"), None, &mut wire).unwrap();
//! assert_eq!(&wire[..], b"set greeting 0 0 5\r\nhello\r\nget greeting\r\n");
//!
//! // A request that would get no answer is refused before anything is sent.
//! let noreply = Bytes::from_static(b"delete greeting noreply\r\n");
//! assert!(codec.encode(&noreply, None, &mut BytesMut::new()).is_err());
//!
//! // One decoder per connection cuts the answers, in order, however the bytes arrive.
//! let mut decoder = codec.decoder();
//! let mut inbound = BytesMut::from(&b"STORED\r\nVALUE greeting 0 5\r\nhel"[..]);
//! let Some(Decoded::Next(first)) = decoder.decode(&mut inbound).unwrap() else { panic!() };
//! assert_eq!(Reply::parse(&first).unwrap(), Reply::Stored);
//! assert_eq!(decoder.decode(&mut inbound).unwrap(), None); // the value is not complete yet
//! inbound.extend_from_slice(b"lo\r\nEND\r\n");
//! let Some(Decoded::Next(second)) = decoder.decode(&mut inbound).unwrap() else { panic!() };
//! assert_eq!(Reply::parse(&second).unwrap().into_value(), Some(Bytes::from_static(b"hello")));
//! ```

use std::fmt;
use std::ops::Range;

use bytes::{BufMut, Bytes, BytesMut};
use keepwire_driver::{Codec, Correlation, Decoded, Decoder, EncodeError, Violation};

// Named by path: the fuzz target `decode_memcached` includes this file with `#[path]`, which
// would look for a plain `mod request;` beside it, not in `memcached/`.
#[path = "memcached/request.rs"]
mod request;

pub use request::{
    RequestError, check_request, decr, delete, get, get_many, incr, set, store, version,
};

/// memcached's limit on the length of a key.
pub const MAX_KEY_LEN: usize = 250;
/// The longest command or reply line accepted (keys are at most 250 bytes; memcached's own
/// reply lines are far shorter).
pub const MAX_LINE: usize = 2048;

/// The memcached text-protocol codec: in order, requests checked before they are sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Memcached {
    max_value: usize,
    max_response: usize,
}

impl Memcached {
    /// Values of at most 1 MiB (memcached's default item size, `-I 1m`) in requests and
    /// responses; responses of at most 16 MiB (a multi-key `get`).
    pub const fn new() -> Self {
        Self {
            max_value: 1024 * 1024,
            max_response: 16 * 1024 * 1024,
        }
    }

    /// Other limits: the longest value (a request's data block, a response's `VALUE` block)
    /// and the longest whole response. Longer ones are refused before their bytes arrive.
    pub const fn with_limits(max_value: usize, max_response: usize) -> Self {
        Self {
            max_value,
            max_response,
        }
    }

    /// The longest value accepted.
    pub const fn max_value(&self) -> usize {
        self.max_value
    }

    /// The longest response accepted.
    pub const fn max_response(&self) -> usize {
        self.max_response
    }
}

impl Default for Memcached {
    fn default() -> Self {
        Self::new()
    }
}

impl Codec for Memcached {
    fn correlation(&self) -> Correlation {
        Correlation::InOrder
    }

    fn encode(
        &self,
        payload: &[u8],
        _id: Option<u64>,
        dst: &mut BytesMut,
    ) -> Result<(), EncodeError> {
        check_request(payload, self.max_value).map_err(|e| match e {
            RequestError::ValueTooLarge { len, max } => EncodeError::TooLong {
                len: len as u64,
                max: max as u64,
            },
            other => EncodeError::Invalid(other.to_string()),
        })?;
        dst.put_slice(payload);
        Ok(())
    }

    fn decoder(&self) -> Box<dyn Decoder> {
        Box::new(MemcachedDecoder::new(*self))
    }

    /// `version\r\n`: answered at once with one line, changes nothing.
    fn heartbeat(&self, _id: Option<u64>, dst: &mut BytesMut) -> Option<Result<(), EncodeError>> {
        dst.put_slice(&version());
        Some(Ok(()))
    }
}

// ---------------------------------------------------------------------------------------------
// Responses

/// Why bytes from the server are not a memcached answer. Each closes the connection (as the
/// [`Violation`] it converts to) when the decoder meets it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Malformed {
    /// A line longer than [`MAX_LINE`] without its `\r\n`.
    LineTooLong,
    /// A `\n` without the `\r` before it.
    BareLineFeed,
    /// A line that is no answer memcached gives.
    UnknownReply,
    /// A `VALUE` or `STAT` line whose fields do not parse.
    BadHeader,
    /// A `VALUE` data block not followed by `\r\n`.
    BadDataEnd,
    /// A line inside a `VALUE` (or `STAT`) sequence that is neither another one nor `END`.
    UnexpectedLine,
    /// A value longer than the limit (refused from its header, before its bytes arrive).
    ValueTooLarge {
        /// The length its header announced.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// A response longer than the limit.
    ResponseTooLarge {
        /// Its length so far (or as announced).
        len: u64,
        /// The limit.
        max: u64,
    },
    /// Bytes after the end of the answer ([`Reply::parse`] takes exactly one).
    Trailing,
    /// The answer ends before its end (`END` or its one line).
    Incomplete,
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::LineTooLong => write!(f, "a line longer than {MAX_LINE} bytes"),
            Self::BareLineFeed => write!(f, "a line ending in \\n without \\r"),
            Self::UnknownReply => write!(f, "a line that is no memcached answer"),
            Self::BadHeader => write!(f, "a VALUE or STAT line that does not parse"),
            Self::BadDataEnd => write!(f, "a data block not followed by \\r\\n"),
            Self::UnexpectedLine => write!(f, "a line inside a VALUE sequence other than END"),
            Self::ValueTooLarge { len, max } => {
                write!(f, "a value of {len} bytes exceeds the limit of {max}")
            }
            Self::ResponseTooLarge { len, max } => {
                write!(f, "a response of {len} bytes exceeds the limit of {max}")
            }
            Self::Trailing => write!(f, "bytes after the answer"),
            Self::Incomplete => write!(f, "the answer is incomplete"),
        }
    }
}

impl std::error::Error for Malformed {}

impl From<Malformed> for Violation {
    fn from(m: Malformed) -> Self {
        match m {
            Malformed::ValueTooLarge { len, max } | Malformed::ResponseTooLarge { len, max } => {
                Violation::FrameTooLong { len, max }
            }
            _ => Violation::MalformedHeader,
        }
    }
}

/// One part of an answer: a `VALUE` block, a `STAT` line, `END`, or a one-line answer.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Value {
        key: Range<usize>,
        flags: u32,
        data: Range<usize>,
        cas: Option<u64>,
    },
    Stat {
        name: Range<usize>,
        value: Range<usize>,
    },
    End,
    Line(Line),
}

/// A one-line answer; the ranges are relative to the start of the part.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Line {
    Stored,
    NotStored,
    Exists,
    NotFound,
    Deleted,
    Touched,
    Ok,
    Reset,
    Error,
    Number(u64),
    ClientError(Range<usize>),
    ServerError(Range<usize>),
    Version(Range<usize>),
}

/// The index of the `\r` of the first `\r\n` in `input`; `None` if there is none yet.
fn find_line(input: &[u8]) -> Result<Option<usize>, Malformed> {
    let window = &input[..input.len().min(MAX_LINE + 2)];
    match window.iter().position(|&b| b == b'\n') {
        Some(0) => Err(Malformed::BareLineFeed),
        Some(lf) if input[lf - 1] != b'\r' => Err(Malformed::BareLineFeed),
        Some(lf) => Ok(Some(lf - 1)),
        None if input.len() > MAX_LINE + 1 => Err(Malformed::LineTooLong),
        None => Ok(None),
    }
}

/// Parses the part at the start of `input`: `(part, its length)`, or `None` until its bytes
/// are all there. A `VALUE` header is judged as soon as its line is in: against `max_value`,
/// and against `max_len`, the most this part may span (`ResponseTooLarge` then gives the
/// part's announced length and `max_len`).
fn parse_part(
    input: &[u8],
    max_value: usize,
    max_len: usize,
) -> Result<Option<(Part, usize)>, Malformed> {
    if let Some(&first) = input.first() {
        // Refuse garbage from its first byte rather than after a line's worth of it.
        if !b"VSENDTOR0123456789C".contains(&first) {
            return Err(Malformed::UnknownReply);
        }
    }
    let Some(eol) = find_line(input)? else {
        return Ok(None);
    };
    let line = &input[..eol];
    let next = eol + 2;
    if line.starts_with(b"VALUE ") {
        let mut words = words(line, 6);
        let number = |words: &mut dyn Iterator<Item = Range<usize>>| {
            words
                .next()
                .and_then(|r| parse_number::<u64>(&line[r]))
                .ok_or(Malformed::BadHeader)
        };
        let key = words
            .next()
            .filter(|r| !r.is_empty())
            .ok_or(Malformed::BadHeader)?;
        let flags = u32::try_from(number(&mut words)?).map_err(|_| Malformed::BadHeader)?;
        let len = number(&mut words)?;
        let mut rest = words.peekable();
        let cas = match rest.peek() {
            Some(_) => Some(number(&mut rest)?),
            None => None,
        };
        if rest.next().is_some() {
            return Err(Malformed::BadHeader);
        }
        if len > max_value as u64 {
            return Err(Malformed::ValueTooLarge {
                len,
                max: max_value as u64,
            });
        }
        let too_large = Malformed::ValueTooLarge {
            len,
            max: max_value as u64,
        };
        let len = usize::try_from(len).map_err(|_| too_large.clone())?;
        let end = next
            .checked_add(len)
            .and_then(|end| end.checked_add(2))
            .ok_or(too_large)?;
        if end > max_len {
            return Err(Malformed::ResponseTooLarge {
                len: end as u64,
                max: max_len as u64,
            });
        }
        if input.len() < end {
            return Ok(None); // nothing reserved: the bytes are taken as they come
        }
        if input[next + len..end] != *b"\r\n" {
            return Err(Malformed::BadDataEnd);
        }
        let part = Part::Value {
            key,
            flags,
            data: next..next + len,
            cas,
        };
        return Ok(Some((part, end)));
    }
    if let Some(fields) = line.strip_prefix(b"STAT ") {
        let space = fields
            .iter()
            .position(|&b| b == b' ')
            .ok_or(Malformed::BadHeader)?;
        let part = Part::Stat {
            name: 5..5 + space,
            value: 5 + space + 1..eol,
        };
        return Ok(Some((part, next)));
    }
    let part = match line {
        b"END" => Part::End,
        b"STORED" => Part::Line(Line::Stored),
        b"NOT_STORED" => Part::Line(Line::NotStored),
        b"EXISTS" => Part::Line(Line::Exists),
        b"NOT_FOUND" => Part::Line(Line::NotFound),
        b"DELETED" => Part::Line(Line::Deleted),
        b"TOUCHED" => Part::Line(Line::Touched),
        b"OK" => Part::Line(Line::Ok),
        b"RESET" => Part::Line(Line::Reset),
        b"ERROR" => Part::Line(Line::Error),
        _ if line.starts_with(b"CLIENT_ERROR ") => Part::Line(Line::ClientError(13..eol)),
        _ if line.starts_with(b"SERVER_ERROR ") => Part::Line(Line::ServerError(13..eol)),
        _ if line.starts_with(b"VERSION ") => Part::Line(Line::Version(8..eol)),
        _ => match parse_number::<u64>(line) {
            Some(n) => Part::Line(Line::Number(n)),
            None => return Err(Malformed::UnknownReply),
        },
    };
    Ok(Some((part, next)))
}

fn parse_number<T: std::str::FromStr>(digits: &[u8]) -> Option<T> {
    if digits.is_empty() || digits.len() > 20 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// The space-separated words of `line` from `from` on, as ranges of `line`.
fn words(line: &[u8], from: usize) -> impl Iterator<Item = Range<usize>> + '_ {
    let mut at = from;
    line[from..].split(|&b| b == b' ').map(move |word| {
        let range = at..at + word.len();
        at = range.end + 1;
        range
    })
}

/// The per-connection decoder of [`Memcached`]: cuts each complete answer off the front of
/// the buffer, remembering how far it has checked a long one so that no byte is read twice.
/// It never reserves room for bytes it has not received.
#[derive(Debug)]
pub struct MemcachedDecoder {
    limits: Memcached,
    /// Bytes at the front of the buffer checked to be complete parts of the current answer.
    checked: usize,
    /// Inside a `VALUE` (or `STAT`) sequence: only more of them or `END` may follow.
    sequence: Option<Sequence>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sequence {
    Values,
    Stats,
}

impl MemcachedDecoder {
    /// A decoder with `limits`' value and response limits.
    pub fn new(limits: Memcached) -> Self {
        Self {
            limits,
            checked: 0,
            sequence: None,
        }
    }

    fn too_large(&self, len: usize) -> Result<(), Malformed> {
        if len > self.limits.max_response {
            return Err(Malformed::ResponseTooLarge {
                len: len as u64,
                max: self.limits.max_response as u64,
            });
        }
        Ok(())
    }
}

impl Decoder for MemcachedDecoder {
    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Decoded>, Violation> {
        if self.checked > buf.len() {
            // Not the buffer it was reading (only a misused decoder sees this): start over.
            self.checked = 0;
            self.sequence = None;
        }
        loop {
            let room = self.limits.max_response.saturating_sub(self.checked);
            let parsed = parse_part(&buf[self.checked..], self.limits.max_value, room);
            let parsed = parsed.map_err(|e| match e {
                // Refused from the header: the value would take the response past its limit.
                Malformed::ResponseTooLarge { len, .. } => Malformed::ResponseTooLarge {
                    len: len + self.checked as u64,
                    max: self.limits.max_response as u64,
                },
                other => other,
            })?;
            let Some((part, len)) = parsed else {
                return Ok(None);
            };
            let end = self.checked + len;
            self.too_large(end)?;
            let sequence = match part {
                Part::Value { .. } => Sequence::Values,
                Part::Stat { .. } => Sequence::Stats,
                Part::End => return Ok(Some(self.finish(buf, end))),
                Part::Line(_) if self.sequence.is_some() => {
                    return Err(Malformed::UnexpectedLine.into());
                }
                Part::Line(_) => return Ok(Some(self.finish(buf, end))),
            };
            if self.sequence.is_some_and(|s| s != sequence) {
                return Err(Malformed::UnexpectedLine.into());
            }
            self.sequence = Some(sequence);
            self.checked = end;
        }
    }
}

impl MemcachedDecoder {
    fn finish(&mut self, buf: &mut BytesMut, end: usize) -> Decoded {
        self.checked = 0;
        self.sequence = None;
        Decoded::Next(buf.split_to(end).freeze())
    }
}

/// A memcached answer, read from a response payload with [`Reply::parse`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reply {
    /// `STORED`
    Stored,
    /// `NOT_STORED` (an `add` of a key that exists, a `replace` of one that does not)
    NotStored,
    /// `EXISTS` (a `cas` that lost)
    Exists,
    /// `NOT_FOUND`
    NotFound,
    /// `DELETED`
    Deleted,
    /// `TOUCHED`
    Touched,
    /// `OK`
    Ok,
    /// `RESET`
    Reset,
    /// The new value after `incr` or `decr`.
    Number(u64),
    /// The values a `get` found, in the order asked; empty on a miss.
    Values(Vec<Value>),
    /// `STAT` lines: name and value.
    Stats(Vec<(Bytes, Bytes)>),
    /// `VERSION ...`
    Version(Bytes),
    /// `ERROR`: memcached did not know the command.
    Error,
    /// `CLIENT_ERROR ...`: the request was malformed.
    ClientError(Bytes),
    /// `SERVER_ERROR ...`: the server failed (out of memory, object too large).
    ServerError(Bytes),
}

/// One value of a `get`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Value {
    /// Its key.
    pub key: Bytes,
    /// The client flags stored with it.
    pub flags: u32,
    /// The value.
    pub data: Bytes,
    /// Its cas unique (`gets`).
    pub cas: Option<u64>,
}

impl Reply {
    /// Reads one complete answer (a response payload), without copying values.
    pub fn parse(response: &Bytes) -> Result<Self, Malformed> {
        let mut at = 0;
        let mut values = Vec::new();
        let mut stats = Vec::new();
        loop {
            let (part, len) = parse_part(&response[at..], usize::MAX, usize::MAX)?
                .ok_or(Malformed::Incomplete)?;
            let slice = |r: &Range<usize>| response.slice(at + r.start..at + r.end);
            let end = at + len;
            let reply = match part {
                Part::Value {
                    key,
                    flags,
                    data,
                    cas,
                } => {
                    values.push(Value {
                        key: slice(&key),
                        flags,
                        data: slice(&data),
                        cas,
                    });
                    at = end;
                    continue;
                }
                Part::Stat { name, value } => {
                    stats.push((slice(&name), slice(&value)));
                    at = end;
                    continue;
                }
                Part::End if !stats.is_empty() => Self::Stats(stats),
                Part::End => Self::Values(values),
                Part::Line(_) if !values.is_empty() || !stats.is_empty() => {
                    return Err(Malformed::UnexpectedLine);
                }
                Part::Line(line) => match line {
                    Line::Stored => Self::Stored,
                    Line::NotStored => Self::NotStored,
                    Line::Exists => Self::Exists,
                    Line::NotFound => Self::NotFound,
                    Line::Deleted => Self::Deleted,
                    Line::Touched => Self::Touched,
                    Line::Ok => Self::Ok,
                    Line::Reset => Self::Reset,
                    Line::Error => Self::Error,
                    Line::Number(n) => Self::Number(n),
                    Line::ClientError(r) => Self::ClientError(slice(&r)),
                    Line::ServerError(r) => Self::ServerError(slice(&r)),
                    Line::Version(r) => Self::Version(slice(&r)),
                },
            };
            if end != response.len() {
                return Err(Malformed::Trailing);
            }
            return Ok(reply);
        }
    }

    /// The data of the first value of a `get`; `None` on a miss or any other answer.
    pub fn into_value(self) -> Option<Bytes> {
        match self {
            Self::Values(values) => values.into_iter().next().map(|v| v.data),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests;
