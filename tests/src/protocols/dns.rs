//! DNS over TCP (RFC 1035 §4.2.2, RFC 7766) as a keepwire codec. By id: every message is a
//! two-byte length and a DNS message whose first two bytes are its 16-bit id, and a server may
//! answer the queries of one connection in any order (a resolver answers what it has cached at
//! once and the rest when its upstream does). The codec writes the id the driver gives each
//! query over the query's own, and reads it back from the response.
//!
//! ```
//! use bytes::BytesMut;
//! use keepwire_driver::{Codec, Correlation, Decoded};
//! use keepwire_tests::protocols::dns::{self, Data, Dns, Message};
//!
//! let codec = Dns::new();
//! assert_eq!(codec.correlation(), Correlation::ById { bits: 16 });
//! let query = dns::query("db.example", dns::TXT).unwrap();
//! let mut wire = BytesMut::new();
//! codec.encode(&query, Some(7), &mut wire).unwrap();
//! assert_eq!(&wire[..4], [0, 28, 0, 7], "the length, then the id the driver chose");
//!
//! // A response may arrive in pieces, and answers the query with its id.
//! let answer = b"\x00\x07\x81\x80\x00\x01\x00\x01\x00\x00\x00\x00\x02db\x07example\x00\x00\x10\
//!     \x00\x01\xc0\x0c\x00\x10\x00\x01\x00\x00\x00\x3c\x00\x03\x02ok";
//! let mut decoder = codec.decoder();
//! let mut inbound = BytesMut::from(&[0, answer.len() as u8][..]);
//! inbound.extend_from_slice(&answer[..9]);
//! assert_eq!(decoder.decode(&mut inbound).unwrap(), None);
//! inbound.extend_from_slice(&answer[9..]);
//! let Some(Decoded::Tagged { id, payload }) = decoder.decode(&mut inbound).unwrap() else {
//!     panic!()
//! };
//! assert_eq!(id, 7);
//! let message = Message::parse(&payload).unwrap();
//! assert_eq!(message.questions[0].name, "db.example");
//! assert_eq!(message.answers[0].data, Data::Txt(vec!["ok".into()]));
//! ```
//!
//! A request is a whole DNS query ([`query`] builds one); one that is not a query (too short
//! for a header, or with the response bit set) is refused before a byte is sent, as
//! [`EncodeError::Invalid`]. A response that is not one (shorter than a header, or with the
//! response bit clear) is a malformed header and closes the connection: the stream cannot be
//! trusted after it. A server's refusal (`SERVFAIL`, `REFUSED`, ...) is an answer like any
//! other: [`Message::rcode`].

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use keepwire_driver::proto::Violation;
use keepwire_driver::{Codec, Correlation, Decoded, Decoder, EncodeError};

/// Record type A (an IPv4 address).
pub const A: u16 = 1;
/// Record type TXT (character strings).
pub const TXT: u16 = 16;
/// Record type AAAA (an IPv6 address).
pub const AAAA: u16 = 28;
/// Class IN (the Internet).
pub const IN: u16 = 1;
/// Class CH (Chaos: `id.server`, `version.bind`).
pub const CH: u16 = 3;

/// Bytes of a DNS header.
pub const HEADER_LEN: usize = 12;
/// Longest name on the wire, its length bytes and the root's included (RFC 1035 §2.3.4).
const MAX_NAME: usize = 255;
/// Longest label.
const MAX_LABEL: usize = 63;
/// The header's response bit (QR), in its third byte.
const QR: u8 = 0x80;

/// The DNS-over-TCP codec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dns {
    max_response: u16,
    heartbeat: Option<Bytes>,
}

impl Dns {
    /// Responses as long as the length field allows (65,535 bytes), and no heartbeat.
    pub const fn new() -> Self {
        Self {
            max_response: u16::MAX,
            heartbeat: None,
        }
    }

    /// Responses of at most `max_response` bytes: a longer one is refused as soon as its
    /// length arrives, before its bytes do.
    pub fn with_max_response(self, max_response: u16) -> Self {
        Self {
            max_response,
            ..self
        }
    }

    /// `query` as the heartbeat ping: a query the server answers itself, at once, such as
    /// `id.server` in class CH ([`query_in`]). DNS has no ping of its own, so by default the
    /// codec has none.
    pub fn with_heartbeat(self, query: Bytes) -> Self {
        Self {
            heartbeat: Some(query),
            ..self
        }
    }

    /// The longest response accepted.
    pub const fn max_response(&self) -> u16 {
        self.max_response
    }
}

impl Default for Dns {
    fn default() -> Self {
        Self::new()
    }
}

impl Codec for Dns {
    fn correlation(&self) -> Correlation {
        Correlation::ById { bits: 16 }
    }

    fn encode(
        &self,
        payload: &[u8],
        id: Option<u64>,
        dst: &mut BytesMut,
    ) -> Result<(), EncodeError> {
        let len = check_query(payload)?;
        dst.reserve(2 + payload.len());
        dst.put_u16(len);
        dst.put_u16(id.unwrap_or_default() as u16);
        dst.put_slice(&payload[2..]);
        Ok(())
    }

    fn decoder(&self) -> Box<dyn Decoder> {
        Box::new(DnsDecoder {
            max_response: self.max_response,
        })
    }

    fn heartbeat(&self, id: Option<u64>, dst: &mut BytesMut) -> Option<Result<(), EncodeError>> {
        let query = self.heartbeat.as_ref()?;
        Some(self.encode(query, id, dst))
    }
}

/// Whether `payload` can be sent as a query: a header at least, the response bit clear, and
/// short enough for the length field, which it returns.
pub fn check_query(payload: &[u8]) -> Result<u16, EncodeError> {
    let Some(flags) = payload.get(2).filter(|_| payload.len() >= HEADER_LEN) else {
        return Err(EncodeError::Invalid(format!(
            "a DNS message is at least a {HEADER_LEN}-byte header; this is {} bytes",
            payload.len()
        )));
    };
    if flags & QR != 0 {
        return Err(EncodeError::Invalid(
            "a response (its QR bit is set) is not a query".into(),
        ));
    }
    u16::try_from(payload.len()).map_err(|_| EncodeError::TooLong {
        len: payload.len() as u64,
        max: u64::from(u16::MAX),
    })
}

/// Cuts one connection's responses: a length, then that many bytes of one DNS message.
#[derive(Debug)]
struct DnsDecoder {
    max_response: u16,
}

impl Decoder for DnsDecoder {
    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Decoded>, Violation> {
        let Some(&[high, low]) = buf.get(..2) else {
            return Ok(None);
        };
        let len = u16::from_be_bytes([high, low]);
        if usize::from(len) < HEADER_LEN {
            return Err(Violation::MalformedHeader);
        }
        if len > self.max_response {
            return Err(Violation::FrameTooLong {
                len: u64::from(len),
                max: u64::from(self.max_response),
            });
        }
        let Some(message) = buf.get(2..2 + usize::from(len)) else {
            return Ok(None);
        };
        if message[2] & QR == 0 {
            return Err(Violation::MalformedHeader); // a query where a response must be
        }
        let id = u16::from_be_bytes([message[0], message[1]]);
        buf.advance(2);
        let payload = buf.split_to(usize::from(len)).freeze();
        Ok(Some(Decoded::Tagged {
            id: u64::from(id),
            payload,
        }))
    }
}

/// A query for `name`'s records of type `rtype` in class IN, recursion desired, its id 0
/// (the codec writes the real one).
pub fn query(name: &str, rtype: u16) -> Result<Bytes, NameError> {
    query_in(name, rtype, IN)
}

/// A query for `name`'s records of type `rtype` in class `class`, recursion desired.
pub fn query_in(name: &str, rtype: u16, class: u16) -> Result<Bytes, NameError> {
    let mut message = BytesMut::with_capacity(HEADER_LEN + name.len() + 6);
    // id 0, RD, one question.
    message.put_slice(&[0, 0, 0x01, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
    put_name(&mut message, name)?;
    message.put_u16(rtype);
    message.put_u16(class);
    Ok(message.freeze())
}

/// A name that cannot go on the wire.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NameError {
    /// An empty label (`a..b`, or a leading dot).
    EmptyLabel,
    /// A label longer than 63 bytes.
    LabelTooLong(usize),
    /// More than 255 bytes on the wire.
    TooLong(usize),
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::EmptyLabel => f.write_str("a name has an empty label"),
            Self::LabelTooLong(n) => write!(f, "a label of {n} bytes (at most {MAX_LABEL})"),
            Self::TooLong(n) => write!(f, "a name of {n} bytes on the wire (at most {MAX_NAME})"),
        }
    }
}

impl std::error::Error for NameError {}

/// Appends `name` (dotted, a trailing dot optional, `.` the root) in wire form.
fn put_name(dst: &mut BytesMut, name: &str) -> Result<(), NameError> {
    let name = name.strip_suffix('.').unwrap_or(name);
    let mut wire = 1; // the root's zero
    if !name.is_empty() {
        for label in name.split('.') {
            match label.len() {
                0 => return Err(NameError::EmptyLabel),
                n if n > MAX_LABEL => return Err(NameError::LabelTooLong(n)),
                n => wire += 1 + n,
            }
        }
    }
    if wire > MAX_NAME {
        return Err(NameError::TooLong(wire));
    }
    if !name.is_empty() {
        for label in name.split('.') {
            dst.put_u8(label.len() as u8);
            dst.put_slice(label.as_bytes());
        }
    }
    dst.put_u8(0);
    Ok(())
}

// ---- reading a message ----

/// A DNS message, read by [`Message::parse`]: its header, its questions, and the records of
/// its three sections.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// The id.
    pub id: u16,
    /// QR: a response.
    pub response: bool,
    /// AA: the answer is the zone's own.
    pub authoritative: bool,
    /// TC: the message was cut short.
    pub truncated: bool,
    /// The response code: 0 no error, 2 SERVFAIL, 3 NXDOMAIN, 5 REFUSED, ...
    pub rcode: u8,
    /// The question section.
    pub questions: Vec<Question>,
    /// The answer section.
    pub answers: Vec<Record>,
    /// The authority section.
    pub authority: Vec<Record>,
    /// The additional section (EDNS's OPT record among them).
    pub additional: Vec<Record>,
}

/// One question.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Question {
    /// The name asked for, dotted, without the root's dot (`.` for the root itself).
    pub name: String,
    /// The record type asked for.
    pub rtype: u16,
    /// The class asked in.
    pub class: u16,
}

/// One resource record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Its owner, as [`Question::name`].
    pub name: String,
    /// Its type.
    pub rtype: u16,
    /// Its class (for EDNS's OPT record, the sender's UDP payload size).
    pub class: u16,
    /// Its time to live, in seconds.
    pub ttl: u32,
    /// Its data.
    pub data: Data,
}

/// A record's data.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Data {
    /// An A record's address.
    A(Ipv4Addr),
    /// An AAAA record's address.
    Aaaa(Ipv6Addr),
    /// A TXT record's character strings.
    Txt(Vec<Bytes>),
    /// Any other type's data, as sent.
    Other(Bytes),
}

/// Why a message could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParseError {
    /// It ends inside its header, a name or a record.
    Truncated,
    /// A name with a reserved label type, a pointer that does not point back, or longer than
    /// 255 bytes.
    BadName,
    /// A record whose data does not fit its type (an A record of other than 4 bytes, ...).
    BadData(u16),
    /// Bytes after the last record the header counts.
    Trailing(usize),
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated => f.write_str("the message ends inside a field"),
            Self::BadName => f.write_str("a name that cannot be read"),
            Self::BadData(rtype) => write!(f, "data that does not fit record type {rtype}"),
            Self::Trailing(n) => write!(f, "{n} bytes after the last record"),
        }
    }
}

impl std::error::Error for ParseError {}

impl Message {
    /// Reads a whole message (a response's payload, as the codec hands it on).
    pub fn parse(message: &Bytes) -> Result<Self, ParseError> {
        let header = message.get(..HEADER_LEN).ok_or(ParseError::Truncated)?;
        let count = |at: usize| u16::from_be_bytes([header[at], header[at + 1]]);
        let mut reader = Reader {
            message,
            at: HEADER_LEN,
        };
        let mut questions = Vec::new();
        for _ in 0..count(4) {
            let name = reader.name()?;
            let rtype = reader.u16()?;
            let class = reader.u16()?;
            questions.push(Question { name, rtype, class });
        }
        let mut sections = [Vec::new(), Vec::new(), Vec::new()];
        for (section, at) in sections.iter_mut().zip([6, 8, 10]) {
            for _ in 0..count(at) {
                section.push(reader.record()?);
            }
        }
        if reader.at != message.len() {
            return Err(ParseError::Trailing(message.len() - reader.at));
        }
        let [answers, authority, additional] = sections;
        Ok(Self {
            id: count(0),
            response: header[2] & QR != 0,
            authoritative: header[2] & 0x04 != 0,
            truncated: header[2] & 0x02 != 0,
            rcode: header[3] & 0x0f,
            questions,
            answers,
            authority,
            additional,
        })
    }
}

/// A cursor over a message.
struct Reader<'a> {
    message: &'a Bytes,
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], ParseError> {
        let message: &'a Bytes = self.message;
        let bytes = message
            .get(self.at..self.at + n)
            .ok_or(ParseError::Truncated)?;
        self.at += n;
        Ok(bytes)
    }

    fn u16(&mut self) -> Result<u16, ParseError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32, ParseError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A name at the cursor, following compression pointers; each must point before the
    /// label it replaces, so a chain of them always ends.
    fn name(&mut self) -> Result<String, ParseError> {
        let mut name = String::new();
        let mut wire = 1;
        let mut at = self.at;
        let mut resume = None; // where the cursor goes once the name ends: after the first pointer
        loop {
            let &len = self.message.get(at).ok_or(ParseError::Truncated)?;
            match len & 0xc0 {
                0x00 if len == 0 => break,
                0x00 => {
                    let label = self
                        .message
                        .get(at + 1..at + 1 + usize::from(len))
                        .ok_or(ParseError::Truncated)?;
                    wire += 1 + label.len();
                    if wire > MAX_NAME {
                        return Err(ParseError::BadName);
                    }
                    if !name.is_empty() {
                        name.push('.');
                    }
                    push_label(&mut name, label);
                    at += 1 + label.len();
                }
                0xc0 => {
                    let &low = self.message.get(at + 1).ok_or(ParseError::Truncated)?;
                    let target = usize::from(u16::from_be_bytes([len & 0x3f, low]));
                    if target >= at {
                        return Err(ParseError::BadName);
                    }
                    resume.get_or_insert(at + 2);
                    at = target;
                }
                _ => return Err(ParseError::BadName), // 0x40 and 0x80 are reserved
            }
        }
        self.at = resume.unwrap_or(at + 1);
        if name.is_empty() {
            name.push('.');
        }
        Ok(name)
    }

    fn record(&mut self) -> Result<Record, ParseError> {
        let name = self.name()?;
        let rtype = self.u16()?;
        let class = self.u16()?;
        let ttl = self.u32()?;
        let len = usize::from(self.u16()?);
        let start = self.at;
        let raw = self.take(len)?;
        let data = match (rtype, raw.len()) {
            (A, 4) => Data::A(Ipv4Addr::new(raw[0], raw[1], raw[2], raw[3])),
            (AAAA, 16) => {
                let mut octets = [0; 16];
                octets.copy_from_slice(raw);
                Data::Aaaa(Ipv6Addr::from(octets))
            }
            (A | AAAA, _) => return Err(ParseError::BadData(rtype)),
            (TXT, _) => {
                let mut strings = Vec::new();
                let mut at = 0;
                while at < len {
                    let n = usize::from(raw[at]);
                    if at + 1 + n > len {
                        return Err(ParseError::BadData(rtype));
                    }
                    strings.push(self.message.slice(start + at + 1..start + at + 1 + n));
                    at += 1 + n;
                }
                Data::Txt(strings)
            }
            _ => Data::Other(self.message.slice(start..start + len)),
        };
        Ok(Record {
            name,
            rtype,
            class,
            ttl,
            data,
        })
    }
}

/// Appends `label` as text: printable ASCII as is, but for `.` and `\`, and every other byte
/// as `\DDD` (the zone-file form), so that two different names never read the same.
fn push_label(name: &mut String, label: &[u8]) {
    for &b in label {
        match b {
            b'.' | b'\\' => {
                name.push('\\');
                name.push(char::from(b));
            }
            0x21..=0x7e => name.push(char::from(b)),
            _ => name.push_str(&format!("\\{b:03}")),
        }
    }
}

#[cfg(test)]
mod tests;
