//! PostgreSQL's simple query protocol on keepwire: startup and authentication in a
//! [`HandshakeHook`], queries in order.
//!
//! - [`Startup`] is the handshake hook: it sends the startup message, answers the server's
//!   authentication request (trust, or a clear-text password) and waits for ReadyForQuery. A
//!   server that refuses the credentials (SQLSTATE class 28) fails it as an *authentication*
//!   failure ([`HandshakeError::auth`]): the node enters `AuthFailed` and the requests waiting
//!   for it end with `ConnectionLost(AuthFailed)` at once.
//! - [`Postgres`] is the codec. A request payload is SQL text; it goes out as one Query
//!   message. PostgreSQL answers the queries of a connection in order, each with every message
//!   up to and including one ReadyForQuery, so the codec is [`Correlation::InOrder`]: no tag,
//!   no extra round trip, any number of queries pipelined on one connection. A response
//!   payload is those messages as the server sent them; [`Response::parse`] reads them.
//!
//! The decoder takes each complete message off the connection's buffer as it arrives, so a
//! slow query whose RowDescription came long before its rows is not taken for a peer dripping
//! bytes: the slow-drip defence ([`Config::frame_timeout`](keepwire_driver::Config)) times
//! single messages. COPY FROM STDIN (the server waits for data the client never sends) is a
//! protocol violation that closes the connection.
//!
//! ```
//! use bytes::{Bytes, BytesMut};
//! use keepwire_driver::{Codec, Correlation, Decoded};
//! use keepwire_tests::protocols::postgres::{Postgres, Response};
//!
//! let codec = Postgres::new();
//! assert_eq!(codec.correlation(), Correlation::InOrder);
//! let mut wire = BytesMut::new();
//! codec.encode(b"SELECT 1", None, &mut wire).unwrap();
//! assert_eq!(&wire[..], b"Q\0\0\0\x0dSELECT 1\0");
//!
//! // The server's answer: RowDescription, DataRow, CommandComplete, ReadyForQuery.
//! let mut inbound = BytesMut::new();
//! inbound.extend_from_slice(b"T\0\0\0\x21\0\x01?column?\0\0\0\0\0\0\0\0\0\0\x17\0\x04\xff\xff\xff\xff\0\0");
//! inbound.extend_from_slice(b"D\0\0\0\x0b\0\x01\0\0\0\x011");
//! inbound.extend_from_slice(b"C\0\0\0\x0dSELECT 1\0");
//! let mut decoder = codec.decoder();
//! assert_eq!(decoder.decode(&mut inbound).unwrap(), None); // no ReadyForQuery yet
//! inbound.extend_from_slice(b"Z\0\0\0\x05I");
//! let Some(Decoded::Next(payload)) = decoder.decode(&mut inbound).unwrap() else { panic!() };
//! let response = Response::parse(&payload).unwrap();
//! assert_eq!(response.results[0].columns, ["?column?"]);
//! assert_eq!(response.value(0, 0), Some(&b"1"[..]));
//! assert_eq!(response.results[0].tag, "SELECT 1");
//! ```

use std::fmt;
use std::sync::Arc;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use keepwire_driver::{
    BoxFuture, Codec, Correlation, Decoded, Decoder, EncodeError, HandshakeError, HandshakeHook,
    HandshakeIo, Violation,
};

/// Protocol version 3.0, as the startup message announces it.
pub const PROTOCOL_VERSION: i32 = 196_608;
/// The longest message the handshake accepts (authentication requests, parameter status,
/// errors: all small).
const MAX_STARTUP_MESSAGE: usize = 64 * 1024;

/// The simple-query codec: a request is SQL text, a response every message up to
/// ReadyForQuery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Postgres {
    max_message: usize,
    max_response: usize,
}

impl Postgres {
    /// Messages of at most 16 MiB (a row), responses of at most 64 MiB.
    pub const fn new() -> Self {
        Self {
            max_message: 16 * 1024 * 1024,
            max_response: 64 * 1024 * 1024,
        }
    }

    /// Other limits: the longest single message and the longest whole response. A message
    /// announcing more is refused from its header, before its bytes arrive.
    pub const fn with_limits(max_message: usize, max_response: usize) -> Self {
        Self {
            max_message,
            max_response,
        }
    }
}

impl Default for Postgres {
    fn default() -> Self {
        Self::new()
    }
}

impl Codec for Postgres {
    fn correlation(&self) -> Correlation {
        Correlation::InOrder
    }

    fn encode(&self, sql: &[u8], _id: Option<u64>, dst: &mut BytesMut) -> Result<(), EncodeError> {
        let len = query_length(sql.len())?;
        if sql.contains(&0) {
            return Err(EncodeError::Invalid(
                "SQL text cannot hold a NUL byte (the Query message ends at one)".into(),
            ));
        }
        dst.reserve(sql.len() + 6);
        dst.put_u8(b'Q');
        dst.put_i32(len);
        dst.put_slice(sql);
        dst.put_u8(0);
        Ok(())
    }

    fn decoder(&self) -> Box<dyn Decoder> {
        Box::new(PostgresDecoder::new(*self))
    }

    /// An empty simple query: the server answers EmptyQueryResponse and ReadyForQuery, runs
    /// nothing, and leaves a transaction in progress as it was.
    fn heartbeat(&self, _id: Option<u64>, dst: &mut BytesMut) -> Option<Result<(), EncodeError>> {
        Some(self.encode(b"", None, dst))
    }
}

/// The length field of a Query message holding `sql_len` bytes of SQL: the text, its NUL and
/// the field itself. Checked before the text is scanned, so that an oversized payload is refused
/// without reading it.
fn query_length(sql_len: usize) -> Result<i32, EncodeError> {
    i32::try_from(sql_len)
        .ok()
        .and_then(|len| len.checked_add(5))
        .ok_or(EncodeError::TooLong {
            len: sql_len as u64,
            max: (i32::MAX - 5) as u64,
        })
}

/// Why bytes from the server are not what this client expects. Each closes the connection
/// (as the [`Violation`] it converts to) when the decoder meets it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Malformed {
    /// A message type no PostgreSQL server sends.
    UnknownMessage(u8),
    /// A message a simple-query client cannot follow after startup: CopyInResponse and
    /// CopyBothResponse (the server would wait for data), authentication or extended-protocol
    /// messages.
    Unexpected(u8),
    /// A length field below 4 (it counts itself).
    BadLength(i32),
    /// A message longer than the limit (refused from its header).
    MessageTooLong {
        /// Its announced length.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// A response longer than the limit.
    ResponseTooLong {
        /// Its length with the message that crossed the limit.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// A ReadyForQuery whose transaction status is not `I`, `T` or `E`.
    BadStatus(u8),
    /// A message body shorter than its fields need, or a string without its NUL.
    Truncated(u8),
    /// A response that does not end with its one ReadyForQuery ([`Response::parse`]).
    Incomplete,
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownMessage(t) => write!(f, "unknown message type {:?}", char::from(*t)),
            Self::Unexpected(t) => write!(f, "unexpected message type {:?}", char::from(*t)),
            Self::BadLength(len) => write!(f, "message length {len} is below 4"),
            Self::MessageTooLong { len, max } => {
                write!(f, "a message of {len} bytes exceeds the limit of {max}")
            }
            Self::ResponseTooLong { len, max } => {
                write!(f, "a response of {len} bytes exceeds the limit of {max}")
            }
            Self::BadStatus(s) => write!(f, "unknown transaction status {:?}", char::from(*s)),
            Self::Truncated(t) => write!(f, "a truncated {:?} message", char::from(*t)),
            Self::Incomplete => write!(f, "a response without its ReadyForQuery"),
        }
    }
}

impl std::error::Error for Malformed {}

impl From<Malformed> for Violation {
    fn from(m: Malformed) -> Self {
        match m {
            Malformed::MessageTooLong { len, max } | Malformed::ResponseTooLong { len, max } => {
                Violation::FrameTooLong { len, max }
            }
            _ => Violation::MalformedHeader,
        }
    }
}

/// Message types a simple query's response may hold.
fn in_response(ty: u8) -> Result<(), Malformed> {
    match ty {
        // RowDescription, DataRow, CommandComplete, EmptyQueryResponse, ErrorResponse,
        // NoticeResponse, ParameterStatus, NotificationResponse, ReadyForQuery,
        // CopyOutResponse, CopyData, CopyDone.
        b'T' | b'D' | b'C' | b'I' | b'E' | b'N' | b'S' | b'A' | b'Z' | b'H' | b'd' | b'c' => Ok(()),
        // CopyInResponse, CopyBothResponse, Authentication, BackendKeyData,
        // NegotiateProtocolVersion, and the extended protocol's replies.
        b'G' | b'W' | b'R' | b'K' | b'v' | b'1' | b'2' | b'3' | b'n' | b't' | b's' => {
            Err(Malformed::Unexpected(ty))
        }
        other => Err(Malformed::UnknownMessage(other)),
    }
}

/// The header of the message at the front of `buf`: `(type, body length)`, once its five
/// bytes are in. The type is judged from the first byte.
fn header(
    buf: &[u8],
    max_body: usize,
    allowed: fn(u8) -> Result<(), Malformed>,
) -> Result<Option<(u8, usize)>, Malformed> {
    let Some(&ty) = buf.first() else {
        return Ok(None);
    };
    allowed(ty)?;
    let Some(len) = buf.get(1..5) else {
        return Ok(None);
    };
    let len = i32::from_be_bytes([len[0], len[1], len[2], len[3]]);
    if len < 4 {
        return Err(Malformed::BadLength(len));
    }
    let body = (len - 4) as usize;
    if body > max_body {
        return Err(Malformed::MessageTooLong {
            len: body as u64,
            max: max_body as u64,
        });
    }
    if ty == b'Z' && body != 1 {
        return Err(Malformed::Truncated(ty));
    }
    Ok(Some((ty, body)))
}

/// The per-connection decoder of [`Postgres`]: moves each complete message of the current
/// response off the connection's buffer (without copying: the pieces are rejoined in place)
/// and hands the response over at its ReadyForQuery. It never reserves room for bytes it has
/// not received.
#[derive(Debug)]
pub struct PostgresDecoder {
    limits: Postgres,
    /// The complete messages of the response under way.
    response: BytesMut,
}

impl PostgresDecoder {
    /// A decoder with `limits`' message and response limits.
    pub fn new(limits: Postgres) -> Self {
        Self {
            limits,
            response: BytesMut::new(),
        }
    }

    fn step(&mut self, buf: &mut BytesMut) -> Result<Option<Decoded>, Malformed> {
        loop {
            let Some((ty, body)) = header(buf, self.limits.max_message, in_response)? else {
                return Ok(None);
            };
            let total = self.response.len() + 5 + body;
            if total > self.limits.max_response {
                return Err(Malformed::ResponseTooLong {
                    len: total as u64,
                    max: self.limits.max_response as u64,
                });
            }
            if buf.len() < 5 + body {
                return Ok(None);
            }
            if ty == b'Z' && !matches!(buf[5], b'I' | b'T' | b'E') {
                return Err(Malformed::BadStatus(buf[5]));
            }
            // Split off the front and join it to the response: both are views of one
            // allocation, so this copies nothing unless the buffer was reallocated between.
            self.response.unsplit(buf.split_to(5 + body));
            if ty == b'Z' {
                return Ok(Some(Decoded::Next(self.response.split().freeze())));
            }
        }
    }
}

impl Decoder for PostgresDecoder {
    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Decoded>, Violation> {
        self.step(buf).map_err(Violation::from)
    }
}

// ---------------------------------------------------------------------------------------------
// Responses

/// A simple query's response: one result per statement that completed, the error that ended
/// it if any, and the transaction status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// One per statement that completed (CommandComplete), in order.
    pub results: Vec<QueryResult>,
    /// The error that ended the query (the statements after it did not run).
    pub error: Option<Notice>,
    /// Notices the server sent along.
    pub notices: Vec<Notice>,
    /// The transaction status at ReadyForQuery.
    pub status: TransactionStatus,
}

/// The result of one statement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueryResult {
    /// Column names (none for a statement that returns no rows).
    pub columns: Vec<String>,
    /// Rows of text-format values; `None` is SQL NULL. COPY TO STDOUT rows are one value
    /// each.
    pub rows: Vec<Vec<Option<Bytes>>>,
    /// The command tag: `SELECT 1`, `INSERT 0 1`, `CREATE ROLE`, ...
    pub tag: String,
}

/// The transaction status at ReadyForQuery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransactionStatus {
    /// Not in a transaction block.
    Idle,
    /// In a transaction block.
    InTransaction,
    /// In a failed transaction block (queries are refused until it ends).
    Failed,
}

/// An ErrorResponse or NoticeResponse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    /// `ERROR`, `FATAL`, `PANIC`, `WARNING`, `NOTICE`, ... (not localized).
    pub severity: String,
    /// The SQLSTATE code: `28P01` (invalid password), `57014` (query cancelled), ...
    pub code: String,
    /// The primary message.
    pub message: String,
    /// The detail, if any.
    pub detail: Option<String>,
}

impl fmt::Display for Notice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.severity, self.code, self.message)?;
        if let Some(detail) = &self.detail {
            write!(f, " ({detail})")?;
        }
        Ok(())
    }
}

impl std::error::Error for Notice {}

impl Notice {
    /// Reads the fields of an ErrorResponse or NoticeResponse body.
    pub fn parse(mut body: &[u8]) -> Result<Self, Malformed> {
        let mut notice = Self {
            severity: String::new(),
            code: String::new(),
            message: String::new(),
            detail: None,
        };
        let mut localized = String::new();
        loop {
            let Some((&field, rest)) = body.split_first() else {
                return Err(Malformed::Truncated(b'E'));
            };
            if field == 0 {
                break;
            }
            let (value, rest) = cstr(rest).ok_or(Malformed::Truncated(b'E'))?;
            let value = String::from_utf8_lossy(value).into_owned();
            match field {
                b'V' => notice.severity = value,
                b'S' => localized = value,
                b'C' => notice.code = value,
                b'M' => notice.message = value,
                b'D' => notice.detail = Some(value),
                _ => {}
            }
            body = rest;
        }
        if notice.severity.is_empty() {
            notice.severity = localized;
        }
        Ok(notice)
    }

    /// Whether the server refused the credentials (SQLSTATE class 28: invalid password,
    /// no pg_hba.conf entry, role not permitted to log in, ...).
    pub fn is_auth_failure(&self) -> bool {
        self.code.starts_with("28")
    }
}

/// A NUL-terminated string at the front of `input`, and what follows it.
fn cstr(input: &[u8]) -> Option<(&[u8], &[u8])> {
    let nul = input.iter().position(|&b| b == 0)?;
    Some((&input[..nul], &input[nul + 1..]))
}

impl Response {
    /// Reads a response payload: every message up to and including its ReadyForQuery, without
    /// copying values.
    pub fn parse(payload: &Bytes) -> Result<Self, Malformed> {
        let mut response = Self {
            results: Vec::new(),
            error: None,
            notices: Vec::new(),
            status: TransactionStatus::Idle,
        };
        let mut current = QueryResult {
            columns: Vec::new(),
            rows: Vec::new(),
            tag: String::new(),
        };
        let mut at = 0;
        loop {
            let (ty, len) = header(&payload[at..], usize::MAX, in_response)?
                .filter(|(_, len)| payload.len() >= at + 5 + len)
                .ok_or(Malformed::Incomplete)?;
            let start = at + 5;
            let body = &payload[start..start + len];
            at = start + len;
            match ty {
                b'T' => current.columns = parse_row_description(body)?,
                b'D' => current.rows.push(parse_data_row(payload, start, len)?),
                b'd' => current
                    .rows
                    .push(vec![Some(payload.slice(start..start + len))]),
                b'C' => {
                    let (tag, _) = cstr(body).ok_or(Malformed::Truncated(ty))?;
                    current.tag = String::from_utf8_lossy(tag).into_owned();
                    response.results.push(std::mem::replace(
                        &mut current,
                        QueryResult {
                            columns: Vec::new(),
                            rows: Vec::new(),
                            tag: String::new(),
                        },
                    ));
                }
                b'E' => response.error = Some(Notice::parse(body)?),
                b'N' => response.notices.push(Notice::parse(body)?),
                b'Z' => {
                    response.status = match body[0] {
                        b'I' => TransactionStatus::Idle,
                        b'T' => TransactionStatus::InTransaction,
                        b'E' => TransactionStatus::Failed,
                        other => return Err(Malformed::BadStatus(other)),
                    };
                    if at != payload.len() {
                        return Err(Malformed::Incomplete);
                    }
                    return Ok(response);
                }
                // EmptyQueryResponse, ParameterStatus, NotificationResponse, CopyOutResponse,
                // CopyDone: nothing to keep.
                _ => {}
            }
        }
    }

    /// The value at `row`, `column` of the first result; `None` for SQL NULL or if there is
    /// no such value.
    pub fn value(&self, row: usize, column: usize) -> Option<&[u8]> {
        self.results.first()?.rows.get(row)?.get(column)?.as_deref()
    }

    /// The response, or the error that ended it.
    pub fn into_result(self) -> Result<Self, Notice> {
        match self.error {
            Some(error) => Err(error),
            None => Ok(self),
        }
    }
}

fn parse_row_description(mut body: &[u8]) -> Result<Vec<String>, Malformed> {
    let truncated = Malformed::Truncated(b'T');
    if body.len() < 2 {
        return Err(truncated);
    }
    let count = body.get_i16();
    let mut columns = Vec::with_capacity(usize::try_from(count).unwrap_or(0).min(body.len()));
    for _ in 0..count {
        let (name, rest) = cstr(body).ok_or(truncated.clone())?;
        if rest.len() < 18 {
            return Err(truncated);
        }
        columns.push(String::from_utf8_lossy(name).into_owned());
        body = &rest[18..];
    }
    Ok(columns)
}

fn parse_data_row(
    payload: &Bytes,
    start: usize,
    len: usize,
) -> Result<Vec<Option<Bytes>>, Malformed> {
    let truncated = Malformed::Truncated(b'D');
    let end = start + len;
    let mut at = start;
    let count = payload
        .get(at..at + 2)
        .map(|b| i16::from_be_bytes([b[0], b[1]]))
        .ok_or(truncated.clone())?;
    at += 2;
    let mut row = Vec::with_capacity(usize::try_from(count).unwrap_or(0).min(len));
    for _ in 0..count {
        let n = payload
            .get(at..at + 4)
            .filter(|_| at + 4 <= end)
            .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
            .ok_or(truncated.clone())?;
        at += 4;
        if n < 0 {
            row.push(None);
            continue;
        }
        let n = n as usize;
        if at + n > end {
            return Err(truncated);
        }
        row.push(Some(payload.slice(at..at + n)));
        at += n;
    }
    Ok(row)
}

// ---------------------------------------------------------------------------------------------
// Startup

/// The startup handshake as a [`HandshakeHook`]: protocol 3.0, then trust or a clear-text
/// password, up to ReadyForQuery.
///
/// Cheap to clone (the settings are shared). [`Startup::step`] is the exchange without I/O,
/// for callers that own a blocking socket.
///
/// ```no_run
/// # async fn run(runtime: std::sync::Arc<dyn keepwire_driver::Runtime>) -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use keepwire_driver::{ClientBuilder, Config, Target};
/// use keepwire_tests::protocols::postgres::{Postgres, Response, Startup};
///
/// let client = ClientBuilder::new(Config::default())
///     .node("127.0.0.1:5432".parse::<std::net::SocketAddr>()?)
///     .codec(Postgres::new())
///     .handshake(Startup::new("app", "appdb").password("secret"))
///     .build(runtime)?;
/// let payload = client.send(Target::Best, "SELECT now()", Duration::from_secs(2)).await?;
/// let response = Response::parse(&payload)?.into_result()?;
/// println!("{:?}", response.value(0, 0));
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Startup {
    settings: Arc<Settings>,
}

#[derive(Clone, Debug)]
struct Settings {
    user: String,
    database: String,
    password: Option<String>,
    application_name: String,
}

/// What to do next in the startup exchange ([`Startup::step`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Read more bytes from the server into the buffer.
    Read,
    /// Send these bytes (a password), then call [`Startup::step`] again.
    Send(Bytes),
    /// The server is ready for queries: the connection is set up.
    Ready,
}

impl Startup {
    /// Connects as `user` to `database`, with no password (trust).
    pub fn new(user: impl Into<String>, database: impl Into<String>) -> Self {
        Self {
            settings: Arc::new(Settings {
                user: user.into(),
                database: database.into(),
                password: None,
                application_name: "keepwire".to_owned(),
            }),
        }
    }

    /// Sends `password` when the server asks for a clear-text one.
    pub fn password(mut self, password: impl Into<String>) -> Self {
        Arc::make_mut(&mut self.settings).password = Some(password.into());
        self
    }

    /// The `application_name` the server shows for the session (default `keepwire`).
    pub fn application_name(mut self, name: impl Into<String>) -> Self {
        Arc::make_mut(&mut self.settings).application_name = name.into();
        self
    }

    /// The startup message, the first thing sent.
    pub fn message(&self) -> Bytes {
        let s = &self.settings;
        let params = [
            ("user", s.user.as_str()),
            ("database", s.database.as_str()),
            ("application_name", s.application_name.as_str()),
            ("client_encoding", "UTF8"),
        ];
        let len = 9 + params
            .iter()
            .map(|(k, v)| k.len() + v.len() + 2)
            .sum::<usize>();
        let mut message = BytesMut::with_capacity(len);
        message.put_i32(len as i32);
        message.put_i32(PROTOCOL_VERSION);
        for (key, value) in params {
            message.put_slice(key.as_bytes());
            message.put_u8(0);
            message.put_slice(value.as_bytes());
            message.put_u8(0);
        }
        message.put_u8(0);
        message.freeze()
    }

    /// The exchange after the startup message, without I/O: takes the complete messages the
    /// server sent off the front of `received` and says what to do next. A server that
    /// refuses the credentials (SQLSTATE class 28), or asks for a password when none is set,
    /// is an authentication failure ([`HandshakeError::is_auth`]); anything else that stops
    /// the startup (an unsupported method, "the database system is starting up", garbage) is
    /// a plain handshake failure.
    pub fn step(&self, received: &mut BytesMut) -> Result<Step, HandshakeError> {
        loop {
            let Some((ty, body)) = header(received, MAX_STARTUP_MESSAGE, in_startup)
                .map_err(|e| HandshakeError::failed(format!("during startup: {e}")))?
                .filter(|(_, len)| received.len() >= 5 + len)
            else {
                return Ok(Step::Read);
            };
            received.advance(5);
            let body = received.split_to(body);
            match ty {
                b'R' => {
                    if let Some(reply) = self.authenticate(&body)? {
                        return Ok(Step::Send(reply));
                    }
                }
                b'E' => {
                    let notice = Notice::parse(&body)
                        .map_err(|e| HandshakeError::failed(format!("during startup: {e}")))?;
                    return Err(if notice.is_auth_failure() {
                        HandshakeError::auth(notice.to_string())
                    } else {
                        HandshakeError::failed(notice.to_string())
                    });
                }
                b'Z' if received.is_empty() => return Ok(Step::Ready),
                b'Z' => {
                    return Err(HandshakeError::failed(
                        "the server sent bytes after ReadyForQuery",
                    ));
                }
                // ParameterStatus, BackendKeyData, NoticeResponse, NegotiateProtocolVersion:
                // nothing to answer.
                _ => {}
            }
        }
    }

    /// The answer to an authentication request, if it needs one.
    fn authenticate(&self, mut body: &[u8]) -> Result<Option<Bytes>, HandshakeError> {
        if body.len() < 4 {
            return Err(HandshakeError::failed("a truncated authentication request"));
        }
        match body.get_i32() {
            0 => Ok(None), // AuthenticationOk
            3 => match &self.settings.password {
                Some(password) => {
                    let mut message = BytesMut::with_capacity(password.len() + 6);
                    message.put_u8(b'p');
                    message.put_i32((password.len() + 5) as i32);
                    message.put_slice(password.as_bytes());
                    message.put_u8(0);
                    Ok(Some(message.freeze()))
                }
                None => Err(HandshakeError::auth(format!(
                    "the server asks user {:?} for a password and none is set",
                    self.settings.user
                ))),
            },
            other => Err(HandshakeError::failed(format!(
                "authentication method {other} is not supported (this client speaks trust and \
                 clear-text password)"
            ))),
        }
    }

    /// Runs the startup on a connection being set up (what the hook does).
    pub async fn run(&self, mut io: HandshakeIo) -> Result<HandshakeIo, HandshakeError> {
        io.write_all(&self.message()).await?;
        let mut received = BytesMut::new();
        let mut chunk = [0u8; 4096];
        loop {
            match self.step(&mut received)? {
                Step::Ready => return Ok(io),
                Step::Send(reply) => io.write_all(&reply).await?,
                Step::Read => {
                    let n = io.read(&mut chunk).await?;
                    if n == 0 {
                        return Err(HandshakeError::failed(
                            "the server closed the connection during startup",
                        ));
                    }
                    received.extend_from_slice(&chunk[..n]);
                }
            }
        }
    }
}

impl HandshakeHook for Startup {
    fn handshake(
        &self,
        io: HandshakeIo,
    ) -> BoxFuture<'static, Result<HandshakeIo, HandshakeError>> {
        let startup = self.clone();
        Box::pin(async move { startup.run(io).await })
    }
}

/// Message types the startup may receive.
fn in_startup(ty: u8) -> Result<(), Malformed> {
    match ty {
        b'R' | b'E' | b'S' | b'K' | b'N' | b'v' | b'Z' => Ok(()),
        other => Err(Malformed::Unexpected(other)),
    }
}

#[cfg(test)]
mod tests;
