use super::*;
use crate::protocols::decode_in_order;

#[test]
fn the_heartbeat_is_version_and_its_answer_one_line() {
    let codec = Memcached::new();
    let mut wire = BytesMut::new();
    assert_eq!(codec.heartbeat(None, &mut wire), Some(Ok(())));
    assert_eq!(&wire[..], b"version\r\n");
    let mut decoder = codec.decoder();
    let mut answer = BytesMut::from(&b"VERSION 1.6.18\r\nSTORED\r\n"[..]);
    let pong = decode_in_order(&mut *decoder, &mut answer).unwrap();
    assert_eq!(pong.len(), 2, "the ping's answer, then the next request's");
    assert_eq!(
        Reply::parse(&pong[0]).unwrap(),
        Reply::Version(Bytes::from_static(b"1.6.18"))
    );
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
    let whole = decode_in_order(
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
        bytewise.extend(decode_in_order(&mut *decoder, &mut buf).unwrap());
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
        let got = decode_in_order(&mut *decoder, &mut BytesMut::from(*input));
        assert_eq!(got, Err(*violation), "{:?}", String::from_utf8_lossy(input));
    }
    let endless = vec![b'1'; MAX_LINE + 2];
    let got = decode_in_order(
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
    let got = decode_in_order(&mut *codec.decoder(), &mut buf);
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
    let got = decode_in_order(&mut *codec.decoder(), &mut buf);
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
