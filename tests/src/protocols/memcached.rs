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
// Requests

/// `get KEY`: [`Reply::Values`] with the value, or none on a miss.
pub fn get(key: impl AsRef<[u8]>) -> Bytes {
    command(&[b"get", key.as_ref()], None)
}

/// `get KEY KEY ...`: [`Reply::Values`] with the values found, in the order asked.
pub fn get_many<K: AsRef<[u8]>>(keys: impl IntoIterator<Item = K>) -> Bytes {
    let mut line = BytesMut::from(&b"get"[..]);
    for key in keys {
        line.put_u8(b' ');
        line.put_slice(key.as_ref());
    }
    line.put_slice(b"\r\n");
    line.freeze()
}

/// `set KEY 0 0 LEN` and the value: [`Reply::Stored`].
pub fn set(key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Bytes {
    store("set", key, 0, 0, value)
}

/// A storage command (`set`, `add`, `replace`, `append`, `prepend`) with flags and an
/// expiry time (seconds, 0 for never).
pub fn store(
    verb: &str,
    key: impl AsRef<[u8]>,
    flags: u32,
    exptime: u32,
    value: impl AsRef<[u8]>,
) -> Bytes {
    let value = value.as_ref();
    let numbers = format!("{flags} {exptime} {}", value.len());
    command(
        &[verb.as_bytes(), key.as_ref(), numbers.as_bytes()],
        Some(value),
    )
}

/// `incr KEY DELTA`: [`Reply::Number`] with the new value, or [`Reply::NotFound`].
pub fn incr(key: impl AsRef<[u8]>, delta: u64) -> Bytes {
    command(&[b"incr", key.as_ref(), delta.to_string().as_bytes()], None)
}

/// `decr KEY DELTA`: [`Reply::Number`] with the new value (memcached stops at 0), or
/// [`Reply::NotFound`].
pub fn decr(key: impl AsRef<[u8]>, delta: u64) -> Bytes {
    command(&[b"decr", key.as_ref(), delta.to_string().as_bytes()], None)
}

/// `delete KEY`: [`Reply::Deleted`] or [`Reply::NotFound`].
pub fn delete(key: impl AsRef<[u8]>) -> Bytes {
    command(&[b"delete", key.as_ref()], None)
}

/// `version`: [`Reply::Version`].
pub fn version() -> Bytes {
    Bytes::from_static(b"version\r\n")
}

fn command(words: &[&[u8]], data: Option<&[u8]>) -> Bytes {
    let len =
        words.iter().map(|w| w.len() + 1).sum::<usize>() + 1 + data.map_or(0, |d| d.len() + 2);
    let mut out = BytesMut::with_capacity(len);
    for (i, word) in words.iter().enumerate() {
        if i > 0 {
            out.put_u8(b' ');
        }
        out.put_slice(word);
    }
    out.put_slice(b"\r\n");
    if let Some(data) = data {
        out.put_slice(data);
        out.put_slice(b"\r\n");
    }
    out.freeze()
}

/// Why a request payload is not one command whose answer can be told apart.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RequestError {
    /// No `\r\n` ends the command line (within [`MAX_LINE`] bytes).
    Unterminated,
    /// A command this codec does not know (so it cannot tell where its answer ends).
    UnknownCommand(String),
    /// The command's words are not what the command takes.
    Syntax(&'static str),
    /// A key that is empty, longer than [`MAX_KEY_LEN`], or holds whitespace or control bytes.
    BadKey,
    /// `noreply`: memcached would send no answer, and in order, the next answer would be
    /// taken for this request's.
    NoReply,
    /// The data block is not the announced length followed by `\r\n`.
    DataLength {
        /// The length the command announced.
        declared: usize,
        /// The bytes that follow the command line.
        actual: usize,
    },
    /// The value is longer than the codec's limit.
    ValueTooLarge {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Bytes after the command (a second command in one payload).
    Trailing,
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unterminated => write!(f, "no \\r\\n ends the command line"),
            Self::UnknownCommand(verb) => write!(f, "unknown memcached command {verb:?}"),
            Self::Syntax(what) => write!(f, "malformed command: {what}"),
            Self::BadKey => write!(
                f,
                "a key is 1 to {MAX_KEY_LEN} bytes without whitespace or control bytes"
            ),
            Self::NoReply => write!(
                f,
                "noreply is refused: in order, a request without an answer would take the next one's"
            ),
            Self::DataLength { declared, actual } => write!(
                f,
                "the data block is {actual} bytes, the command announced {declared} + 2"
            ),
            Self::ValueTooLarge { len, max } => {
                write!(
                    f,
                    "a value of {len} bytes is longer than the limit of {max}"
                )
            }
            Self::Trailing => write!(f, "bytes after the command: one command per request"),
        }
    }
}

impl std::error::Error for RequestError {}

/// Checks that `payload` is exactly one command with a self-delimiting answer.
pub fn check_request(payload: &[u8], max_value: usize) -> Result<(), RequestError> {
    let eol = match find_line(payload) {
        Ok(Some(eol)) => eol,
        _ => return Err(RequestError::Unterminated),
    };
    let (line, rest) = (&payload[..eol], &payload[eol + 2..]);
    let mut words = line.split(|&b| b == b' ');
    let verb = words.next().unwrap_or_default();
    let mut args = Args(words);
    let data_len = match verb {
        b"get" | b"gets" | b"gat" | b"gats" => {
            if verb.starts_with(b"gat") {
                args.number::<u32>("an expiry time")?;
            }
            let mut keys = 0;
            for key in args.0.by_ref() {
                check_key(key)?;
                keys += 1;
            }
            if keys == 0 {
                return Err(RequestError::Syntax("a key is missing"));
            }
            None
        }
        b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" => {
            check_key(args.word("a key")?)?;
            args.number::<u32>("flags")?;
            args.number::<i64>("an expiry time")?;
            let len = args.number::<usize>("a length")?;
            if verb == b"cas" {
                args.number::<u64>("a cas unique")?;
            }
            args.end()?;
            Some(len)
        }
        b"incr" | b"decr" => {
            check_key(args.word("a key")?)?;
            args.number::<u64>("a delta")?;
            args.end()?;
            None
        }
        b"delete" => {
            check_key(args.word("a key")?)?;
            args.end()?;
            None
        }
        b"touch" => {
            check_key(args.word("a key")?)?;
            args.number::<i64>("an expiry time")?;
            args.end()?;
            None
        }
        b"flush_all" => {
            if args.0.clone().next().is_some() {
                args.number::<u32>("a delay")?;
            }
            args.end()?;
            None
        }
        b"version" | b"stats" => {
            args.end()?;
            None
        }
        other => {
            return Err(RequestError::UnknownCommand(
                String::from_utf8_lossy(other).into_owned(),
            ));
        }
    };
    match data_len {
        None if rest.is_empty() => Ok(()),
        None => Err(RequestError::Trailing),
        Some(len) if len > max_value => Err(RequestError::ValueTooLarge {
            len,
            max: max_value,
        }),
        Some(len) if rest.len() > len.saturating_add(2) && rest[len..len + 2] == *b"\r\n" => {
            Err(RequestError::Trailing)
        }
        Some(len) if rest.len() != len.saturating_add(2) || rest[len..] != *b"\r\n" => {
            Err(RequestError::DataLength {
                declared: len,
                actual: rest.len(),
            })
        }
        Some(_) => Ok(()),
    }
}

struct Args<'a, I: Iterator<Item = &'a [u8]>>(I);

impl<'a, I: Iterator<Item = &'a [u8]> + Clone> Args<'a, I> {
    fn word(&mut self, what: &'static str) -> Result<&'a [u8], RequestError> {
        match self.0.next() {
            Some(b"noreply") => Err(RequestError::NoReply),
            Some(word) if !word.is_empty() => Ok(word),
            _ => Err(RequestError::Syntax(what)),
        }
    }

    fn number<T: std::str::FromStr>(&mut self, what: &'static str) -> Result<T, RequestError> {
        let word = self.word(what)?;
        std::str::from_utf8(word)
            .ok()
            .filter(|s| s.bytes().all(|b| b.is_ascii_digit() || b == b'-'))
            .and_then(|s| s.parse().ok())
            .ok_or(RequestError::Syntax(what))
    }

    fn end(&mut self) -> Result<(), RequestError> {
        match self.0.next() {
            None => Ok(()),
            Some(b"noreply") => Err(RequestError::NoReply),
            Some(_) => Err(RequestError::Syntax("too many arguments")),
        }
    }
}

fn check_key(key: &[u8]) -> Result<(), RequestError> {
    if key.is_empty() || key.len() > MAX_KEY_LEN || key.iter().any(|&b| b <= b' ' || b == 0x7f) {
        return Err(RequestError::BadKey);
    }
    Ok(())
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
mod tests {
    use super::*;

    #[test]
    fn the_heartbeat_is_version_and_its_answer_one_line() {
        let codec = Memcached::new();
        let mut wire = BytesMut::new();
        assert_eq!(codec.heartbeat(None, &mut wire), Some(Ok(())));
        assert_eq!(&wire[..], b"version\r\n");
        let mut decoder = codec.decoder();
        let mut answer = BytesMut::from(&b"VERSION 1.6.18\r\nSTORED\r\n"[..]);
        let pong = decode_all(&mut *decoder, &mut answer).unwrap();
        assert_eq!(pong.len(), 2, "the ping's answer, then the next request's");
        assert_eq!(
            Reply::parse(&pong[0]).unwrap(),
            Reply::Version(Bytes::from_static(b"1.6.18"))
        );
    }

    fn decode_all(decoder: &mut dyn Decoder, buf: &mut BytesMut) -> Result<Vec<Bytes>, Violation> {
        let mut out = Vec::new();
        while let Some(decoded) = decoder.decode(buf)? {
            match decoded {
                Decoded::Next(payload) => out.push(payload),
                other => panic!("in order only: {other:?}"),
            }
        }
        Ok(out)
    }

    const ANSWERS: &[u8] = b"STORED\r\nVALUE k 5 3 77\r\nabc\r\nVALUE k2 0 0\r\n\r\nEND\r\n\
        END\r\n42\r\nNOT_FOUND\r\nSERVER_ERROR object too large for cache\r\nERROR\r\n\
        STAT pid 1\r\nSTAT uptime 2\r\nEND\r\nVERSION 1.6.18\r\nCLIENT_ERROR bad data chunk\r\n";

    fn expected() -> Vec<Reply> {
        vec![
            Reply::Stored,
            Reply::Values(vec![
                Value {
                    key: Bytes::from_static(b"k"),
                    flags: 5,
                    data: Bytes::from_static(b"abc"),
                    cas: Some(77),
                },
                Value {
                    key: Bytes::from_static(b"k2"),
                    flags: 0,
                    data: Bytes::new(),
                    cas: None,
                },
            ]),
            Reply::Values(vec![]),
            Reply::Number(42),
            Reply::NotFound,
            Reply::ServerError(Bytes::from_static(b"object too large for cache")),
            Reply::Error,
            Reply::Stats(vec![
                (Bytes::from_static(b"pid"), Bytes::from_static(b"1")),
                (Bytes::from_static(b"uptime"), Bytes::from_static(b"2")),
            ]),
            Reply::Version(Bytes::from_static(b"1.6.18")),
            Reply::ClientError(Bytes::from_static(b"bad data chunk")),
        ]
    }

    #[test]
    fn answers_are_cut_alike_whole_and_byte_by_byte() {
        let whole = decode_all(
            &mut *Memcached::new().decoder(),
            &mut BytesMut::from(ANSWERS),
        )
        .unwrap();
        let parsed: Vec<Reply> = whole.iter().map(|r| Reply::parse(r).unwrap()).collect();
        assert_eq!(parsed, expected());

        let mut decoder = Memcached::new().decoder();
        let mut buf = BytesMut::new();
        let mut bytewise = Vec::new();
        for &b in ANSWERS {
            buf.put_u8(b);
            bytewise.extend(decode_all(&mut *decoder, &mut buf).unwrap());
        }
        assert_eq!(bytewise, whole);
        assert!(buf.is_empty());
    }

    #[test]
    fn garbage_is_a_typed_violation() {
        let cases: &[(&[u8], Violation)] = &[
            (b"HTTP/1.1 200 OK\r\n", Violation::MalformedHeader),
            (b"STOREDX\r\n", Violation::MalformedHeader),
            (b"STORED\n", Violation::MalformedHeader),
            (b"VALUE k x 3\r\n", Violation::MalformedHeader),
            (b"VALUE k 0 3\r\nabcd\r\n", Violation::MalformedHeader),
            (
                b"VALUE k 0 3\r\nabc\r\nSTORED\r\n",
                Violation::MalformedHeader,
            ),
            (
                b"VALUE k 0 3\r\nabc\r\nSTAT a b\r\n",
                Violation::MalformedHeader,
            ),
            (
                b"VALUE k 0 99999999999\r\n",
                Violation::FrameTooLong {
                    len: 99_999_999_999,
                    max: 1024 * 1024,
                },
            ),
        ];
        for (input, violation) in cases {
            let mut decoder = Memcached::new().decoder();
            let got = decode_all(&mut *decoder, &mut BytesMut::from(*input));
            assert_eq!(got, Err(*violation), "{:?}", String::from_utf8_lossy(input));
        }
        let endless = vec![b'1'; MAX_LINE + 2];
        let got = decode_all(
            &mut *Memcached::new().decoder(),
            &mut BytesMut::from(&endless[..]),
        );
        assert_eq!(got, Err(Violation::MalformedHeader));
    }

    #[test]
    fn a_response_past_the_limit_is_refused() {
        let codec = Memcached::with_limits(100, 150);
        let mut buf = BytesMut::new();
        for i in 0..3 {
            buf.extend_from_slice(format!("VALUE k{i} 0 60\r\n").as_bytes());
            buf.extend_from_slice(&[b'x'; 60]);
            buf.extend_from_slice(b"\r\n");
        }
        let got = decode_all(&mut *codec.decoder(), &mut buf);
        assert!(
            matches!(got, Err(Violation::FrameTooLong { max: 150, .. })),
            "{got:?}"
        );
    }

    #[test]
    fn huge_announced_lengths_do_not_overflow() {
        let huge = Bytes::from_static(b"VALUE k 0 18446744073709551615\r\n");
        assert!(matches!(
            Reply::parse(&huge),
            Err(Malformed::ValueTooLarge { .. } | Malformed::Incomplete)
        ));
        let codec = Memcached::with_limits(usize::MAX, usize::MAX);
        let mut buf = BytesMut::from(&huge[..]);
        assert!(codec.decoder().decode(&mut buf).is_err() || buf.len() == huge.len());
        let request = b"set k 0 0 18446744073709551615\r\nx\r\n";
        assert!(check_request(request, usize::MAX).is_err());
    }

    #[test]
    fn a_value_past_the_response_limit_is_refused_from_its_header() {
        let codec = Memcached::with_limits(100, 150);
        let mut buf = BytesMut::from(&b"VALUE a 0 90\r\n"[..]);
        buf.extend_from_slice(&[b'x'; 90]);
        buf.extend_from_slice(b"\r\nVALUE b 0 90\r\n"); // header only: 90 bytes announced
        let got = decode_all(&mut *codec.decoder(), &mut buf);
        assert_eq!(got, Err(Violation::FrameTooLong { len: 212, max: 150 }));
    }

    #[test]
    fn an_announced_value_reserves_nothing() {
        let mut buf = BytesMut::from(&b"VALUE k 0 1000000\r\nab"[..]);
        let capacity = buf.capacity();
        let mut decoder = Memcached::new().decoder();
        assert_eq!(decoder.decode(&mut buf), Ok(None));
        assert_eq!(buf.capacity(), capacity);
        assert_eq!(buf.len(), 21, "nothing consumed");
    }

    #[test]
    fn requests_are_checked_before_they_are_sent() {
        let ok: Vec<Bytes> = vec![
            get("k"),
            get_many(["a", "b"]),
            set("k", "v"),
            store("add", "k", 3, 60, b"vv"),
            incr("n", 5),
            decr("n", 1),
            delete("k"),
            version(),
            Bytes::from_static(b"cas k 0 0 1 99\r\nx\r\n"),
            Bytes::from_static(b"touch k 10\r\n"),
            Bytes::from_static(b"gat 10 k\r\n"),
            Bytes::from_static(b"flush_all\r\n"),
        ];
        for request in ok {
            assert_eq!(check_request(&request, 100), Ok(()), "{request:?}");
        }
        let bad: &[(&[u8], RequestError)] = &[
            (b"get k", RequestError::Unterminated),
            (b"get\r\n", RequestError::Syntax("a key is missing")),
            (b"get a\x01b\r\n", RequestError::BadKey),
            (b"set k 0 0 1 noreply\r\nx\r\n", RequestError::NoReply),
            (b"incr n 1 noreply\r\n", RequestError::NoReply),
            (b"delete k noreply\r\n", RequestError::NoReply),
            (
                b"set k 0 0 3\r\nx\r\n",
                RequestError::DataLength {
                    declared: 3,
                    actual: 3,
                },
            ),
            (b"set k 0 0 1\r\nx\r\nget k\r\n", RequestError::Trailing),
            (b"get k\r\nget k\r\n", RequestError::Trailing),
            (b"quit\r\n", RequestError::UnknownCommand("quit".to_owned())),
            (
                b"set k 0 0 101\r\n",
                RequestError::ValueTooLarge { len: 101, max: 100 },
            ),
            (b"incr n x\r\n", RequestError::Syntax("a delta")),
        ];
        for (request, error) in bad {
            assert_eq!(
                check_request(request, 100).as_ref(),
                Err(error),
                "{:?}",
                String::from_utf8_lossy(request)
            );
        }
        let long_key = vec![b'k'; MAX_KEY_LEN + 1];
        assert_eq!(
            check_request(&get(&long_key), 100),
            Err(RequestError::BadKey)
        );
        assert_eq!(
            Memcached::with_limits(4, 100).encode(&set("k", "12345"), None, &mut BytesMut::new()),
            Err(EncodeError::TooLong { len: 5, max: 4 })
        );
    }
}
