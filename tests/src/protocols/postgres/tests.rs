use super::*;
use crate::protocols::decode_in_order;

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

fn error(severity: &str, code: &str, message: &str) -> Vec<u8> {
    let mut body = Vec::new();
    for (field, value) in [
        (b'S', severity),
        (b'V', severity),
        (b'C', code),
        (b'M', message),
    ] {
        body.push(field);
        body.extend_from_slice(value.as_bytes());
        body.push(0);
    }
    body.push(0);
    msg(b'E', &body)
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
    let whole = decode_in_order(
        &mut *Postgres::new().decoder(),
        &mut BytesMut::from(&wire[..]),
    )
    .unwrap();
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
        let got = decode_in_order(
            &mut *Postgres::new().decoder(),
            &mut BytesMut::from(&input[..]),
        );
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
