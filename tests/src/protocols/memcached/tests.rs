use super::*;
use crate::protocols::{decode_in_order, decode_whole};

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
    let whole = decode_whole(&Memcached::new(), ANSWERS).unwrap();
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
    let got = decode_whole(&Memcached::new(), &endless);
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

/// Each of `answers`, parsed as a whole answer, is refused with `error`.
fn refused_as(error: &Malformed, answers: &[&[u8]]) {
    for answer in answers {
        let got = Reply::parse(&Bytes::copy_from_slice(answer));
        assert_eq!(
            got.as_ref(),
            Err(error),
            "{:?}",
            String::from_utf8_lossy(answer)
        );
    }
}

#[test]
fn every_one_line_answer_parses_to_its_reply() {
    let lines: &[(&[u8], Reply)] = &[
        (b"STORED\r\n", Reply::Stored),
        (b"NOT_STORED\r\n", Reply::NotStored),
        (b"EXISTS\r\n", Reply::Exists),
        (b"NOT_FOUND\r\n", Reply::NotFound),
        (b"DELETED\r\n", Reply::Deleted),
        (b"TOUCHED\r\n", Reply::Touched),
        (b"OK\r\n", Reply::Ok),
        (b"RESET\r\n", Reply::Reset),
        (b"ERROR\r\n", Reply::Error),
        (b"18446744073709551615\r\n", Reply::Number(u64::MAX)),
    ];
    let mut stream = BytesMut::new();
    for (line, reply) in lines {
        assert_eq!(
            Reply::parse(&Bytes::from_static(line)).as_ref(),
            Ok(reply),
            "{:?}",
            String::from_utf8_lossy(line)
        );
        stream.extend_from_slice(line);
    }
    let cut = decode_in_order(&mut *Memcached::new().decoder(), &mut stream).unwrap();
    assert_eq!(cut.len(), lines.len(), "one answer per line");
}

#[test]
fn numbers_are_plain_digits_at_most_twenty() {
    // Rust's own parse takes a `+` and any number of leading zeros; memcached sends neither.
    refused_as(
        &Malformed::UnknownReply,
        &[b"+5\r\n", b"000000000000000000042\r\n"],
    );
    assert_eq!(
        Reply::parse(&Bytes::from_static(b"00000000000000000042\r\n")),
        Ok(Reply::Number(42)),
        "twenty digits"
    );
    refused_as(
        &Malformed::BadHeader,
        &[
            b"VALUE k +5 1\r\nx\r\nEND\r\n",
            b"VALUE k 0 +1\r\nx\r\nEND\r\n",
        ],
    );
}

#[test]
fn a_bare_line_feed_is_told_from_an_unknown_line() {
    refused_as(&Malformed::BareLineFeed, &[b"STORED\n", b"VALUE k 0 1\n"]);
}

#[test]
fn a_line_of_exactly_max_line_bytes_is_an_answer_and_one_more_is_not() {
    let line = |len: usize| {
        let mut line = b"VERSION ".to_vec();
        line.resize(len, b'v');
        line
    };
    let longest = line(MAX_LINE);
    // Its `\r` alone is not yet a line's end, nor too long.
    let mut waiting = BytesMut::from(&longest[..]);
    waiting.put_u8(b'\r');
    let mut decoder = Memcached::new().decoder();
    assert_eq!(decoder.decode(&mut waiting), Ok(None));
    waiting.put_u8(b'\n');
    let cut = decode_in_order(&mut *decoder, &mut waiting).unwrap();
    let version = Bytes::copy_from_slice(&longest[8..]);
    assert_eq!(Reply::parse(&cut[0]), Ok(Reply::Version(version)));

    let mut longer = line(MAX_LINE + 1);
    longer.extend_from_slice(b"\r\n");
    assert_eq!(
        Reply::parse(&Bytes::from(longer.clone())),
        Err(Malformed::LineTooLong)
    );
    // Refused as soon as the line is longer than any answer, before its end arrives.
    longer.truncate(MAX_LINE + 2);
    assert_eq!(
        Reply::parse(&Bytes::from(longer)),
        Err(Malformed::LineTooLong)
    );
}

#[test]
fn values_and_responses_of_exactly_the_limit_are_taken() {
    // A value of exactly `max_value` bytes, in a response of exactly `max_response` bytes.
    let answer = b"VALUE k 0 3\r\nabc\r\nEND\r\n";
    let exact = Memcached::with_limits(3, answer.len());
    let cut = decode_whole(&exact, answer).unwrap();
    assert_eq!(cut, [Bytes::from_static(answer)]);
    let got = decode_whole(&Memcached::with_limits(2, answer.len()), answer);
    assert_eq!(got, Err(Violation::FrameTooLong { len: 3, max: 2 }));
    let got = decode_whole(&Memcached::with_limits(3, answer.len() - 1), answer);
    assert_eq!(
        got,
        Err(Violation::FrameTooLong {
            len: answer.len() as u64,
            max: answer.len() as u64 - 1
        })
    );
    // A value that ends exactly at the limit passes its header's check; the `END` after it
    // does not, and the error gives the whole response's length.
    let value_end = answer.len() - b"END\r\n".len();
    let got = decode_whole(&Memcached::with_limits(3, value_end), answer);
    assert_eq!(
        got,
        Err(Violation::FrameTooLong {
            len: answer.len() as u64,
            max: value_end as u64
        })
    );
}

#[test]
fn lines_count_against_the_response_limit_too() {
    // No VALUE here: the limit is met by STAT lines and their END alone.
    let stats = b"STAT a 1\r\nSTAT b 2\r\nEND\r\n";
    let cut = decode_whole(&Memcached::with_limits(10, stats.len()), stats).unwrap();
    assert_eq!(cut, [Bytes::from_static(stats)]);
    for max in [stats.len() - 1, 15] {
        let got = decode_whole(&Memcached::with_limits(10, max), stats);
        assert!(
            matches!(got, Err(Violation::FrameTooLong { max: m, .. }) if m == max as u64),
            "{max}: {got:?}"
        );
    }
}

#[test]
fn a_line_after_values_or_stats_is_unexpected() {
    refused_as(
        &Malformed::UnexpectedLine,
        &[b"VALUE k 0 1\r\nx\r\nSTORED\r\n", b"STAT a 1\r\nSTORED\r\n"],
    );
}

#[test]
fn a_decoder_handed_a_shorter_buffer_starts_over() {
    let mut decoder = Memcached::new().decoder();
    let mut first = BytesMut::from(&b"VALUE k 0 1\r\nx\r\n"[..]);
    assert_eq!(decoder.decode(&mut first), Ok(None), "no END yet");
    let mut other = BytesMut::from(&b"STORED\r\n"[..]);
    let cut = decode_in_order(&mut *decoder, &mut other).unwrap();
    assert_eq!(Reply::parse(&cut[0]), Ok(Reply::Stored));
}

#[test]
fn into_value_is_the_first_value_of_a_get() {
    let two = Bytes::from_static(b"VALUE a 0 1\r\nx\r\nVALUE b 0 1\r\ny\r\nEND\r\n");
    let value = Reply::parse(&two).unwrap().into_value();
    assert_eq!(value, Some(Bytes::from_static(b"x")));
    let miss = Reply::parse(&Bytes::from_static(b"END\r\n")).unwrap();
    assert_eq!(miss.into_value(), None);
    assert_eq!(Reply::Stored.into_value(), None);
}

#[test]
fn limits_and_errors_say_what_they_are() {
    let codec = Memcached::new();
    assert_eq!(codec.max_value(), 1024 * 1024);
    assert_eq!(codec.max_response(), 16 * 1024 * 1024);
    assert_eq!(Memcached::default(), codec);
    let custom = Memcached::with_limits(7, 9);
    assert_eq!((custom.max_value(), custom.max_response()), (7, 9));

    assert_eq!(
        Malformed::LineTooLong.to_string(),
        "a line longer than 2048 bytes"
    );
    assert_eq!(
        Malformed::ResponseTooLarge { len: 26, max: 20 }.to_string(),
        "a response of 26 bytes exceeds the limit of 20"
    );
    assert_eq!(
        RequestError::NoReply.to_string(),
        "noreply is refused: in order, a request without an answer would take the next one's"
    );
    assert_eq!(
        RequestError::DataLength {
            declared: 3,
            actual: 1
        }
        .to_string(),
        "the data block is 1 bytes, the command announced 3 + 2"
    );
    // The encoder's refusal carries the same text.
    assert_eq!(
        codec.encode(b"delete k noreply\r\n", None, &mut BytesMut::new()),
        Err(EncodeError::Invalid(RequestError::NoReply.to_string()))
    );
}

#[test]
fn arguments_are_checked_word_by_word() {
    let cases: &[(&[u8], Result<(), RequestError>)] = &[
        // `noreply` in place of an argument: memcached takes the last word as the flag and
        // answers nothing, so it is refused wherever it stands.
        (b"set k 0 0 noreply\r\n", Err(RequestError::NoReply)),
        (b"incr n noreply\r\n", Err(RequestError::NoReply)),
        // An empty word (two spaces) is a missing argument, not an empty key.
        (b"delete  k\r\n", Err(RequestError::Syntax("a key"))),
        // Expiry times may be negative (expired at once); nothing else takes a sign.
        (b"set k 0 -1 1\r\nx\r\n", Ok(())),
        (b"incr n +5\r\n", Err(RequestError::Syntax("a delta"))),
        (b"set k +1 0 1\r\nx\r\n", Err(RequestError::Syntax("flags"))),
    ];
    for (request, expected) in cases {
        assert_eq!(
            check_request(request, 100),
            *expected,
            "{:?}",
            String::from_utf8_lossy(request)
        );
    }
}

#[test]
fn keys_and_values_of_exactly_the_limit_are_taken() {
    let key = vec![b'k'; MAX_KEY_LEN];
    assert_eq!(check_request(&get(&key), 100), Ok(()));
    assert_eq!(check_request(&set(&key, [b'v'; 100]), 100), Ok(()));
    assert_eq!(
        check_request(&set("k", [b'v'; 101]), 100),
        Err(RequestError::ValueTooLarge { len: 101, max: 100 })
    );
}

#[test]
fn a_built_command_is_one_allocation_of_its_exact_size() {
    for command in [
        get("k"),
        set("key", "value"),
        set("k", ""),
        store("add", "k", 3, 60, b"vv"),
        incr("n", 5),
        delete("k"),
    ] {
        let len = command.len();
        let buffer = command
            .try_into_mut()
            .expect("the builder's buffer, unshared");
        assert_eq!(buffer.capacity(), len, "{buffer:?}");
    }
}
