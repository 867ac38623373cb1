use std::collections::VecDeque;
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::pin::pin;
use std::sync::Mutex;
use std::task::{Context, Poll, Waker};

use keepwire_driver::{IoStream, SocketRef};
use keepwire_proto::{Config, Instant, Pool};

use super::*;
use crate::protocols::{decode_in_order, decode_whole};

fn msg(ty: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![ty];
    m.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
    m.extend_from_slice(body);
    m
}

fn row_description(names: &[&str]) -> Vec<u8> {
    let mut body = (names.len() as i16).to_be_bytes().to_vec();
    for name in names {
        body.extend_from_slice(name.as_bytes());
        body.push(0);
        body.extend_from_slice(&[0; 18]);
    }
    msg(b'T', &body)
}

fn data_row(values: &[Option<&str>]) -> Vec<u8> {
    let mut body = (values.len() as i16).to_be_bytes().to_vec();
    for value in values {
        match value {
            Some(v) => {
                body.extend_from_slice(&(v.len() as i32).to_be_bytes());
                body.extend_from_slice(v.as_bytes());
            }
            None => body.extend_from_slice(&(-1i32).to_be_bytes()),
        }
    }
    msg(b'D', &body)
}

/// The body of an ErrorResponse or NoticeResponse: each field's code and NUL-terminated
/// value, then a NUL.
fn notice_body(fields: &[(u8, &str)]) -> Vec<u8> {
    let mut body = Vec::new();
    for (field, value) in fields {
        body.push(*field);
        body.extend_from_slice(value.as_bytes());
        body.push(0);
    }
    body.push(0);
    body
}

fn error(severity: &str, code: &str, message: &str) -> Vec<u8> {
    let fields = [
        (b'S', severity),
        (b'V', severity),
        (b'C', code),
        (b'M', message),
    ];
    msg(b'E', &notice_body(&fields))
}

fn complete(tag: &str) -> Vec<u8> {
    msg(b'C', format!("{tag}\0").as_bytes())
}

fn ready(status: u8) -> Vec<u8> {
    msg(b'Z', &[status])
}

#[test]
fn the_heartbeat_is_an_empty_query_answered_by_one_response() {
    let codec = Postgres::new();
    let mut wire = BytesMut::new();
    assert_eq!(codec.heartbeat(None, &mut wire), Some(Ok(())));
    assert_eq!(&wire[..], b"Q\0\0\0\x05\0");
    // EmptyQueryResponse, ReadyForQuery (still in the transaction the ping found).
    let mut answer = BytesMut::from(&[msg(b'I', b""), ready(b'T')].concat()[..]);
    let Some(Decoded::Next(pong)) = codec.decoder().decode(&mut answer).unwrap() else {
        panic!("one response");
    };
    assert!(answer.is_empty());
    let response = Response::parse(&pong).unwrap();
    assert!(response.results.is_empty(), "{response:?}");
    assert_eq!(response.status, TransactionStatus::InTransaction);
}

/// Three responses: two statements in one query, an error, a notice and a NULL.
fn stream() -> Vec<u8> {
    [
        row_description(&["k", "v"]),
        data_row(&[Some("a"), None]),
        data_row(&[Some("b"), Some("2")]),
        complete("SELECT 2"),
        complete("CREATE ROLE"),
        ready(b'I'),
        msg(b'N', b"SNOTICE\0C00000\0Mhello\0\0"),
        error("ERROR", "42601", "syntax error"),
        ready(b'E'),
        msg(b'S', b"application_name\0x\0"),
        msg(b'I', b""),
        ready(b'T'),
    ]
    .concat()
}

#[test]
fn responses_are_cut_alike_whole_and_byte_by_byte() {
    let wire = stream();
    let whole = decode_whole(&Postgres::new(), &wire).unwrap();
    assert_eq!(whole.len(), 3);
    let mut decoder = Postgres::new().decoder();
    let mut buf = BytesMut::new();
    let mut bytewise = Vec::new();
    for &b in &wire {
        buf.put_u8(b);
        bytewise.extend(decode_in_order(&mut *decoder, &mut buf).unwrap());
    }
    assert_eq!(bytewise, whole);
    assert!(buf.is_empty());

    let first = Response::parse(&whole[0]).unwrap();
    assert_eq!(first.results.len(), 2);
    assert_eq!(first.results[0].columns, ["k", "v"]);
    assert_eq!(first.value(0, 0), Some(&b"a"[..]));
    assert_eq!(first.value(0, 1), None, "NULL");
    assert_eq!(first.value(1, 1), Some(&b"2"[..]));
    assert_eq!(first.results[0].tag, "SELECT 2");
    assert_eq!(first.results[1].tag, "CREATE ROLE");
    assert_eq!(first.status, TransactionStatus::Idle);

    let second = Response::parse(&whole[1]).unwrap();
    assert_eq!(second.notices[0].message, "hello");
    let err = second.into_result().unwrap_err();
    assert_eq!(err.code, "42601");
    assert_eq!(err.to_string(), "ERROR 42601: syntax error");

    let third = Response::parse(&whole[2]).unwrap();
    assert!(third.results.is_empty());
    assert_eq!(third.status, TransactionStatus::InTransaction);
}

#[test]
fn a_slow_query_leaves_no_partial_bytes_between_messages() {
    // RowDescription now, the rest later: the buffer is empty in between, so the
    // slow-drip timer (which watches partial bytes) does not run during the query.
    let mut decoder = Postgres::new().decoder();
    let mut buf = BytesMut::from(&row_description(&["pg_sleep"])[..]);
    assert_eq!(decoder.decode(&mut buf), Ok(None));
    assert!(buf.is_empty());
    buf.extend_from_slice(&[data_row(&[Some("")]), complete("SELECT 1"), ready(b'I')].concat());
    let got = decode_in_order(&mut *decoder, &mut buf).unwrap();
    assert_eq!(Response::parse(&got[0]).unwrap().results[0].tag, "SELECT 1");
}

#[test]
fn garbage_is_a_typed_violation() {
    let cases: Vec<(Vec<u8>, Violation)> = vec![
        (b"<html>".to_vec(), Violation::MalformedHeader),
        (b"Q\0\0\0\x05x".to_vec(), Violation::MalformedHeader),
        (b"T\0\0\0\x03".to_vec(), Violation::MalformedHeader),
        (b"D\xff\xff\xff\xff".to_vec(), Violation::MalformedHeader),
        (msg(b'Z', b"X"), Violation::MalformedHeader),
        (msg(b'Z', b"II"), Violation::MalformedHeader),
        // COPY FROM STDIN: the server would wait for data this client never sends.
        (msg(b'G', b"\0\0\0"), Violation::MalformedHeader),
        (msg(b'R', b"\0\0\0\0"), Violation::MalformedHeader),
        (
            b"D\x7f\xff\xff\xff".to_vec(),
            Violation::FrameTooLong {
                len: 0x7fff_fffb,
                max: 16 * 1024 * 1024,
            },
        ),
    ];
    for (input, violation) in cases {
        let got = decode_whole(&Postgres::new(), &input);
        assert_eq!(got, Err(violation), "{input:?}");
    }
    // A response past the limit, over several messages.
    let mut buf = BytesMut::new();
    for _ in 0..4 {
        buf.extend_from_slice(&data_row(&[Some(&"x".repeat(40))]));
    }
    let got = decode_in_order(&mut *Postgres::with_limits(100, 150).decoder(), &mut buf);
    assert!(
        matches!(got, Err(Violation::FrameTooLong { max: 150, .. })),
        "{got:?}"
    );
}

#[test]
fn an_announced_message_reserves_nothing() {
    let mut buf = BytesMut::from(&b"D\0\xff\0\0\0\x01"[..]);
    let capacity = buf.capacity();
    assert_eq!(Postgres::new().decoder().decode(&mut buf), Ok(None));
    assert_eq!((buf.capacity(), buf.len()), (capacity, 7));
}

#[test]
fn parse_refuses_what_does_not_hold_together() {
    let truncated_row = [msg(b'D', b"\0\x01\0\0\0\x09ab"), ready(b'I')].concat();
    assert_eq!(
        Response::parse(&Bytes::from(truncated_row)),
        Err(Malformed::Truncated(b'D'))
    );
    assert_eq!(
        Response::parse(&Bytes::from(complete("SELECT 1"))),
        Err(Malformed::Incomplete)
    );
    let trailing = [ready(b'I'), ready(b'I')].concat();
    assert_eq!(
        Response::parse(&Bytes::from(trailing)),
        Err(Malformed::Incomplete)
    );
}

#[test]
fn queries_are_framed_and_nul_is_refused() {
    let mut wire = BytesMut::new();
    Postgres::new()
        .encode(b"SELECT 'a'", None, &mut wire)
        .unwrap();
    assert_eq!(&wire[..], b"Q\0\0\0\x0fSELECT 'a'\0");
    assert!(matches!(
        Postgres::new().encode(b"SELECT '\0'", None, &mut BytesMut::new()),
        Err(EncodeError::Invalid(_))
    ));
}

fn auth_request(code: i32) -> Vec<u8> {
    msg(b'R', &code.to_be_bytes())
}

fn run(startup: &Startup, server: &[u8]) -> Result<Vec<Step>, HandshakeError> {
    let mut buf = BytesMut::new();
    let mut steps = Vec::new();
    for &b in server {
        buf.put_u8(b);
        loop {
            match startup.step(&mut buf)? {
                Step::Read => break,
                step => steps.push(step),
            }
        }
    }
    Ok(steps)
}

#[test]
fn startup_with_trust_and_with_a_clear_text_password() {
    let trust = Startup::new("postgres", "postgres");
    let message = trust.message();
    assert_eq!(&message[4..8], &PROTOCOL_VERSION.to_be_bytes());
    assert_eq!(
        i32::from_be_bytes(message[..4].try_into().unwrap()) as usize,
        message.len()
    );
    assert!(message.ends_with(b"client_encoding\0UTF8\0\0"));
    let ok = [
        auth_request(0),
        msg(b'S', b"server_version\x0015.18\x00"),
        msg(b'K', &[0; 8]),
        ready(b'I'),
    ]
    .concat();
    assert_eq!(run(&trust, &ok).unwrap(), [Step::Ready]);

    let password = Startup::new("app", "db").password("secret");
    let asked = [auth_request(3), auth_request(0), ready(b'I')].concat();
    assert_eq!(
        run(&password, &asked).unwrap(),
        [
            Step::Send(Bytes::from_static(b"p\0\0\0\x0bsecret\0")),
            Step::Ready
        ]
    );
    let no_password = run(&trust, &auth_request(3)).unwrap_err();
    assert!(no_password.is_auth(), "{no_password}");
}

#[test]
fn startup_failures_say_whether_the_credentials_were_refused() {
    let startup = Startup::new("app", "db").password("wrong");
    let refused = [
        auth_request(3),
        error(
            "FATAL",
            "28P01",
            "password authentication failed for user \"app\"",
        ),
    ]
    .concat();
    let e = run(&startup, &refused).unwrap_err();
    assert!(e.is_auth());
    assert_eq!(
        e.to_string(),
        "authentication failed: FATAL 28P01: password authentication failed for user \"app\""
    );
    let starting = error("FATAL", "57P03", "the database system is starting up");
    let e = run(&startup, &starting).unwrap_err();
    assert!(!e.is_auth(), "{e}");
    let sasl = auth_request(10);
    let e = run(&startup, &sasl).unwrap_err();
    assert!(!e.is_auth() && e.to_string().contains("method 10"), "{e}");
    let garbage = run(&startup, b"HTTP/1.1").unwrap_err();
    assert!(!garbage.is_auth());
    let huge = [b'R', 0x7f, 0, 0, 0];
    assert!(run(&startup, &huge).is_err());
}

#[test]
fn a_query_is_one_allocation_and_its_length_is_checked_before_its_text() {
    let mut wire = BytesMut::new();
    Postgres::new()
        .encode(b"SELECT 1", None, &mut wire)
        .unwrap();
    assert_eq!(wire.capacity(), wire.len(), "reserved exactly: {wire:?}");
    // The length field counts itself and the NUL: the longest text leaves it at i32::MAX.
    let longest = i32::MAX as usize - 5;
    assert_eq!(query_length(longest), Ok(i32::MAX));
    assert_eq!(query_length(0), Ok(5));
    for len in [longest + 1, i32::MAX as usize, usize::MAX] {
        assert_eq!(
            query_length(len),
            Err(EncodeError::TooLong {
                len: len as u64,
                max: longest as u64
            })
        );
    }
}

#[test]
fn messages_and_responses_of_exactly_the_limit_are_taken() {
    // One DataRow whose body is exactly `max_message`, in a response of exactly
    // `max_response` bytes.
    let row = data_row(&[Some("abcd")]); // body: 2 + 4 + 4 = 10 bytes
    let response = [row, complete("SELECT 1"), ready(b'I')].concat();
    let exact = Postgres::with_limits(10, response.len());
    let got = decode_whole(&exact, &response);
    assert_eq!(got, Ok(vec![Bytes::from(response.clone())]));

    let got = decode_whole(&Postgres::with_limits(9, response.len()), &response);
    assert_eq!(got, Err(Violation::FrameTooLong { len: 10, max: 9 }));
    let got = decode_whole(&Postgres::with_limits(10, response.len() - 1), &response);
    assert_eq!(
        got,
        Err(Violation::FrameTooLong {
            len: response.len() as u64,
            max: response.len() as u64 - 1
        })
    );
}

#[test]
fn rows_hold_values_nulls_and_empty_strings() {
    let response = [
        row_description(&["a", "b", "c"]),
        data_row(&[Some("12"), None, Some("")]),
        data_row(&[Some("x"), Some("yz"), None]),
        complete("SELECT 2"),
        ready(b'T'),
    ]
    .concat();
    let parsed = Response::parse(&Bytes::from(response)).unwrap();
    let result = &parsed.results[0];
    assert_eq!(result.columns, ["a", "b", "c"]);
    let b = |s: &'static str| Some(Bytes::from_static(s.as_bytes()));
    assert_eq!(
        result.rows,
        [vec![b("12"), None, b("")], vec![b("x"), b("yz"), None]]
    );
    assert_eq!(parsed.status, TransactionStatus::InTransaction);
    // A row that announces more values than its body holds is truncated, even where the
    // next message's bytes would read as a NULL.
    let short = msg(b'D', b"\0\x02\0\0\0\x01a");
    let next = b"\xff\xff\xff\xff".to_vec();
    assert_eq!(
        Response::parse(&Bytes::from([short, next].concat())),
        Err(Malformed::Truncated(b'D'))
    );
}

#[test]
fn row_descriptions_may_have_no_column_but_not_less_than_a_count() {
    let none = [row_description(&[]), complete("SELECT 1"), ready(b'I')].concat();
    let parsed = Response::parse(&Bytes::from(none)).unwrap();
    assert!(parsed.results[0].columns.is_empty());
    let one_byte = [msg(b'T', b"\0"), ready(b'I')].concat();
    assert_eq!(
        Response::parse(&Bytes::from(one_byte)),
        Err(Malformed::Truncated(b'T'))
    );
}

#[test]
fn copy_out_rows_are_kept_one_value_each() {
    let response = [
        msg(b'H', b"\0\0\x01\0\0"),
        msg(b'd', b"1\t2\n"),
        msg(b'd', b"3\t4\n"),
        msg(b'c', b""),
        complete("COPY 2"),
        ready(b'I'),
    ]
    .concat();
    let parsed = Response::parse(&Bytes::from(response)).unwrap();
    let rows = &parsed.results[0].rows;
    assert_eq!(
        rows,
        &[
            vec![Some(Bytes::from_static(b"1\t2\n"))],
            vec![Some(Bytes::from_static(b"3\t4\n"))]
        ]
    );
    assert_eq!(parsed.results[0].tag, "COPY 2");
}

#[test]
fn notices_take_the_unlocalized_severity_and_the_detail() {
    let german = notice_body(&[
        (b'S', "FEHLER"),
        (b'V', "ERROR"),
        (b'C', "42P01"),
        (b'M', "relation \"t\" does not exist"),
        (b'D', "it never did"),
        (b'P', "15"),
    ]);
    let notice = Notice::parse(&german).unwrap();
    assert_eq!(notice.severity, "ERROR");
    assert_eq!(notice.detail.as_deref(), Some("it never did"));
    assert_eq!(
        notice.to_string(),
        "ERROR 42P01: relation \"t\" does not exist (it never did)"
    );
    // A server before 9.6 sends the localized severity alone.
    let old = notice_body(&[(b'S', "WARNING"), (b'C', "01000"), (b'M', "careful")]);
    let notice = Notice::parse(&old).unwrap();
    assert_eq!((notice.severity.as_str(), notice.detail), ("WARNING", None));
    assert_eq!(Notice::parse(b"S"), Err(Malformed::Truncated(b'E')));
}

#[test]
fn malformed_says_what_it_is() {
    let cases = [
        (Malformed::UnknownMessage(b'x'), "unknown message type 'x'"),
        (Malformed::Unexpected(b'G'), "unexpected message type 'G'"),
        (Malformed::BadLength(3), "message length 3 is below 4"),
        (
            Malformed::MessageTooLong { len: 9, max: 8 },
            "a message of 9 bytes exceeds the limit of 8",
        ),
        (
            Malformed::ResponseTooLong { len: 9, max: 8 },
            "a response of 9 bytes exceeds the limit of 8",
        ),
        (Malformed::BadStatus(b'Q'), "unknown transaction status 'Q'"),
        (Malformed::Truncated(b'D'), "a truncated 'D' message"),
        (
            Malformed::Incomplete,
            "a response without its ReadyForQuery",
        ),
    ];
    for (malformed, text) in cases {
        assert_eq!(malformed.to_string(), text);
    }
}

#[test]
fn the_startup_refuses_what_it_cannot_follow() {
    let startup = Startup::new("app", "db");
    // Bytes after ReadyForQuery, arriving with it: the server is not speaking this protocol.
    let mut trailing = BytesMut::from(&[auth_request(0), ready(b'I'), ready(b'I')].concat()[..]);
    let e = startup.step(&mut trailing).unwrap_err();
    assert!(e.to_string().contains("after ReadyForQuery"), "{e}");
    // A message a startup never receives (a query's RowDescription).
    let mut early = BytesMut::from(&row_description(&["a"])[..]);
    let e = startup.step(&mut early).unwrap_err();
    assert!(e.to_string().contains("unexpected message type 'T'"), "{e}");
    // An authentication request too short for its code.
    let mut short = BytesMut::from(&msg(b'R', b"\0\0")[..]);
    let e = startup.step(&mut short).unwrap_err();
    assert!(e.to_string().contains("truncated authentication"), "{e}");
}

#[test]
fn startup_messages_up_to_64_kib_are_taken() {
    let startup = Startup::new("app", "db");
    let status = |len: usize| {
        let mut body = b"long_setting\0".to_vec();
        body.resize(len - 1, b'v');
        body.push(0);
        msg(b'S', &body)
    };
    let ok = [auth_request(0), status(MAX_STARTUP_MESSAGE), ready(b'I')].concat();
    assert_eq!(run(&startup, &ok).unwrap(), [Step::Ready]);
    let too_long = [auth_request(0), status(MAX_STARTUP_MESSAGE + 1)].concat();
    let e = run(&startup, &too_long).unwrap_err();
    assert!(e.to_string().contains("exceeds the limit of 65536"), "{e}");
}

/// A stream that never blocks, for [`Startup::run`]: reads hand out `incoming` a few bytes
/// at a time, then end of stream; writes land in `written`. The socket is a real loopback
/// one, for [`IoStream::socket`] only.
#[derive(Debug)]
struct Scripted {
    socket: TcpStream,
    _peer: TcpStream,
    incoming: VecDeque<u8>,
    written: Arc<Mutex<Vec<u8>>>,
}

impl IoStream for Scripted {
    fn poll_read(&mut self, _: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        let n = buf.len().min(7).min(self.incoming.len());
        for (slot, byte) in buf.iter_mut().zip(self.incoming.drain(..n)) {
            *slot = byte;
        }
        Poll::Ready(Ok(n))
    }

    fn poll_write(&mut self, _: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.written.lock().unwrap().extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn socket(&self) -> SocketRef<'_> {
        SocketRef::new(&self.socket)
    }
}

/// Runs the startup hook over [`Scripted`] with `server`'s bytes: its outcome and what it
/// wrote.
fn hook(startup: &Startup, server: &[u8]) -> (Result<(), HandshakeError>, Vec<u8>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let socket = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (peer, _) = listener.accept().unwrap();
    let written = Arc::default();
    let stream = Scripted {
        socket,
        _peer: peer,
        incoming: server.iter().copied().collect(),
        written: Arc::clone(&written),
    };
    let now = Instant::from_secs(1);
    let mut pool = Pool::new(Config::default(), now).unwrap();
    let node = pool.add_node(now, SocketAddr::from(([127, 0, 0, 1], 1)));
    pool.connect(now, node).unwrap();
    let io = HandshakeIo::new(pool.current_conn(node).unwrap(), Box::new(stream));
    let future = pin!(startup.handshake(io));
    let waker = Waker::noop();
    let Poll::Ready(outcome) = future.poll(&mut Context::from_waker(waker)) else {
        panic!("the startup waited on a stream that never blocks");
    };
    let written = written.lock().unwrap().clone();
    (outcome.map(drop), written)
}

#[test]
fn the_hook_runs_the_startup_over_the_connection() {
    let startup = Startup::new("app", "db").password("secret");
    let server = [auth_request(3), auth_request(0), ready(b'I')].concat();
    let (outcome, written) = hook(&startup, &server);
    assert_eq!(outcome, Ok(()));
    let password = b"p\0\0\0\x0bsecret\0";
    assert_eq!(written, [&startup.message()[..], password].concat());
    // The server closes before ReadyForQuery.
    let (outcome, _) = hook(&startup, &auth_request(0));
    let e = outcome.unwrap_err();
    assert!(
        e.to_string()
            .contains("closed the connection during startup"),
        "{e}"
    );
}
