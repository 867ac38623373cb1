use super::*;

/// `message` (a whole DNS message) as the server frames it.
fn framed(message: &[u8]) -> BytesMut {
    let mut wire = BytesMut::new();
    wire.put_u16(message.len() as u16);
    wire.put_slice(message);
    wire
}

/// A response to `query` with id `id`: the question echoed, and `answers` (whole records).
fn response(id: u16, query: &[u8], answers: u16, records: &[u8]) -> Vec<u8> {
    let mut message = query.to_vec();
    message[..2].copy_from_slice(&id.to_be_bytes());
    message[2] |= QR;
    message[3] = 0x80; // RA
    message[6..8].copy_from_slice(&answers.to_be_bytes());
    message.extend_from_slice(records);
    message
}

#[test]
fn a_query_is_framed_with_the_drivers_id() {
    let query = query("a.b", A).unwrap();
    assert_eq!(
        &query[..],
        b"\0\0\x01\0\0\x01\0\0\0\0\0\0\x01a\x01b\0\0\x01\0\x01"
    );
    let mut wire = BytesMut::from(&b"kept"[..]);
    Dns::new().encode(&query, Some(0xbeef), &mut wire).unwrap();
    assert_eq!(&wire[..4], b"kept");
    assert_eq!(&wire[4..8], [0, query.len() as u8, 0xbe, 0xef]);
    assert_eq!(&wire[8..], &query[2..]);
}

#[test]
fn names_are_checked_before_they_are_sent() {
    assert_eq!(&query(".", A).unwrap()[12..], b"\0\0\x01\0\x01");
    assert_eq!(query("a.b.", A), query("a.b", A));
    assert_eq!(query("a..b", A), Err(NameError::EmptyLabel));
    assert_eq!(query(".a", A), Err(NameError::EmptyLabel));
    let long = "x".repeat(64);
    assert_eq!(query(&long, A), Err(NameError::LabelTooLong(64)));
    assert!(query(&"x".repeat(63), A).is_ok());
    // 127 labels of one byte: 255 bytes with the root; 126 and one of two bytes: 256.
    let most = vec!["x"; 127].join(".");
    assert!(query(&most, A).is_ok());
    let over = format!("{}.xy", vec!["x"; 126].join("."));
    assert_eq!(query(&over, A), Err(NameError::TooLong(256)));
    assert_eq!(
        NameError::TooLong(256).to_string(),
        "a name of 256 bytes on the wire (at most 255)"
    );
}

#[test]
fn what_is_not_a_query_is_refused() {
    let codec = Dns::new();
    let mut wire = BytesMut::new();
    let short = codec.encode(&[0; 11], Some(1), &mut wire);
    assert!(
        matches!(&short, Err(EncodeError::Invalid(m)) if m.contains("11 bytes")),
        "{short:?}"
    );
    let mut answer = query("a", A).unwrap().to_vec();
    answer[2] |= QR;
    assert!(matches!(
        codec.encode(&answer, Some(1), &mut wire),
        Err(EncodeError::Invalid(_))
    ));
    let huge = [&query("a", A).unwrap()[..], &[0; 65536][..]].concat();
    assert_eq!(
        codec.encode(&huge, Some(1), &mut wire),
        Err(EncodeError::TooLong {
            len: huge.len() as u64,
            max: 65535
        })
    );
    assert!(wire.is_empty(), "nothing written for a refused query");
    assert_eq!(check_query(&[0; 12]), Ok(12));
}

#[test]
fn responses_are_cut_by_their_length_whatever_the_pieces() {
    let q = query("k.example", TXT).unwrap();
    let txt = b"\xc0\x0c\x00\x10\x00\x01\x00\x00\x00\x05\x00\x06\x02hi\x02yo";
    let first = response(3, &q, 1, txt);
    let second = response(9, &q, 0, b"");
    let mut stream = framed(&first).to_vec();
    stream.extend_from_slice(&framed(&second));
    for piece in 1..stream.len() {
        let mut decoder = Dns::new().decoder();
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for chunk in stream.chunks(piece) {
            buf.extend_from_slice(chunk);
            while let Some(decoded) = decoder.decode(&mut buf).unwrap() {
                got.push(decoded);
            }
        }
        assert!(buf.is_empty());
        assert_eq!(
            got,
            [
                Decoded::Tagged {
                    id: 3,
                    payload: Bytes::from(first.clone())
                },
                Decoded::Tagged {
                    id: 9,
                    payload: Bytes::from(second.clone())
                }
            ],
            "pieces of {piece}"
        );
    }
    let parsed = Message::parse(&Bytes::from(first)).unwrap();
    assert_eq!(parsed.id, 3);
    assert!(parsed.response && !parsed.authoritative && !parsed.truncated);
    assert_eq!(parsed.rcode, 0);
    assert_eq!(
        parsed.questions,
        [Question {
            name: "k.example".into(),
            rtype: TXT,
            class: IN
        }]
    );
    assert_eq!(
        parsed.answers,
        [Record {
            name: "k.example".into(),
            rtype: TXT,
            class: IN,
            ttl: 5,
            data: Data::Txt(vec!["hi".into(), "yo".into()])
        }]
    );
}

#[test]
fn a_bad_length_or_a_query_closes_the_stream() {
    let mut decoder = Dns::new().with_max_response(100).decoder();
    assert_eq!(
        decoder.decode(&mut BytesMut::from(&[0, 11][..])),
        Err(Violation::MalformedHeader)
    );
    assert_eq!(
        decoder.decode(&mut BytesMut::from(&[0, 101][..])),
        Err(Violation::FrameTooLong { len: 101, max: 100 })
    );
    let mut at_most = BytesMut::from(&[0, 100][..]);
    assert_eq!(decoder.decode(&mut at_most), Ok(None), "100 is allowed");
    assert_eq!(
        at_most.capacity(),
        2,
        "nothing reserved for what is announced"
    );
    let q = query("a", A).unwrap();
    assert_eq!(
        decoder.decode(&mut framed(&q)),
        Err(Violation::MalformedHeader),
        "a query where a response must be"
    );
    assert_eq!(decoder.decode(&mut BytesMut::from(&[0][..])), Ok(None));
    assert_eq!(Dns::default().max_response(), 65535);
    // A header and nothing else is the shortest response.
    let mut header = BytesMut::from(&[0, 12, 0, 4, QR, 0, 0, 0, 0, 0, 0, 0, 0, 0][..]);
    let Ok(Some(Decoded::Tagged { id: 4, payload })) = decoder.decode(&mut header) else {
        panic!("a 12-byte response")
    };
    assert_eq!(payload.len(), 12);
}

#[test]
fn records_of_every_kind_and_compressed_names() {
    let q = query("x.y", A).unwrap();
    let mut records = Vec::new();
    // A at the question's name; AAAA at "z." + a pointer to "y"; an MX kept raw; an OPT.
    records.extend_from_slice(b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x01\x00\x00\x04\x7f\0\0\x01");
    records.extend_from_slice(b"\x01z\xc0\x0e\x00\x1c\x00\x01\x00\x00\x00\x00\x00\x10");
    records.extend_from_slice(&[0; 15]);
    records.push(1);
    records.extend_from_slice(b"\0\x00\x0f\x00\x01\x00\x00\x00\x00\x00\x02\x00\x0a");
    records.extend_from_slice(b"\0\x00\x29\x04\xd0\x00\x00\x00\x00\x00\x00");
    let mut message = response(1, &q, 2, &records);
    message[9] = 1; // one in authority
    message[11] = 1; // one in additional
    message[2] |= 0x04; // AA
    message[3] |= 3; // NXDOMAIN
    let parsed = Message::parse(&Bytes::from(message)).unwrap();
    assert!(parsed.authoritative);
    assert_eq!(parsed.rcode, 3);
    assert_eq!(parsed.answers[0].data, Data::A(Ipv4Addr::LOCALHOST));
    assert_eq!(parsed.answers[0].ttl, 256);
    assert_eq!(parsed.answers[1].name, "z.y");
    assert_eq!(parsed.answers[1].data, Data::Aaaa(Ipv6Addr::LOCALHOST));
    assert_eq!(parsed.authority[0].name, ".");
    assert_eq!(
        parsed.authority[0].data,
        Data::Other(Bytes::from_static(b"\0\x0a"))
    );
    assert_eq!(parsed.additional[0].rtype, 41);
    assert_eq!(parsed.additional[0].class, 1232);
}

#[test]
fn bad_messages_are_errors() {
    let q = query("x.y", A).unwrap();
    let parse = |m: Vec<u8>| Message::parse(&Bytes::from(m));
    assert_eq!(parse(q[..11].to_vec()), Err(ParseError::Truncated));
    assert_eq!(parse(q[..q.len() - 1].to_vec()), Err(ParseError::Truncated));
    assert_eq!(
        parse([&q[..], b"!!!"].concat()),
        Err(ParseError::Trailing(3))
    );
    // A pointer to itself, one forward, and a reserved label type.
    for name in [&b"\xc0\x0c"[..], b"\xc0\x20", b"\x40", b"\x81"] {
        let mut m = q[..12].to_vec();
        m.extend_from_slice(name);
        m.extend_from_slice(&[0, 1, 0, 1]);
        assert_eq!(parse(m), Err(ParseError::BadName), "{name:?}");
    }
    // A pointer cut after its first byte, and a label running past the end.
    for name in [&b"\xc0"[..], b"\x05ab"] {
        let mut m = q[..12].to_vec();
        m.extend_from_slice(name);
        assert_eq!(parse(m), Err(ParseError::Truncated), "{name:?}");
    }
    // A name of 256 bytes by pointers: 127 one-byte labels, then "y" pointing at them.
    let mut m = q[..12].to_vec();
    m.extend_from_slice(&[1, b'x'].repeat(127));
    m.extend_from_slice(&[0, 0, 1, 0, 1, 1, b'y', 0xc0, 12, 0, 1, 0, 1]);
    m[5] = 2;
    assert_eq!(parse(m), Err(ParseError::BadName));
    // Data that does not fit its type.
    let a5 = b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x00\x00\x05\x01\x02\x03\x04\x05";
    assert_eq!(parse(response(1, &q, 1, a5)), Err(ParseError::BadData(A)));
    let txt = b"\xc0\x0c\x00\x10\x00\x01\x00\x00\x00\x00\x00\x02\x05a";
    assert_eq!(
        parse(response(1, &q, 1, txt)),
        Err(ParseError::BadData(TXT))
    );
    assert_eq!(
        ParseError::Trailing(2).to_string(),
        "2 bytes after the last record"
    );
}

#[test]
fn a_query_parses_as_one_and_the_longest_name_is_read_whole() {
    // 127 one-byte labels: 255 bytes on the wire, the most a name may take.
    let longest = vec!["x"; 127].join(".");
    let query = query(&longest, TXT).unwrap();
    let parsed = Message::parse(&query).unwrap();
    assert!(!parsed.response && !parsed.authoritative && !parsed.truncated);
    assert_eq!(parsed.questions[0].name, longest);
    assert_eq!(
        (parsed.questions[0].rtype, parsed.questions[0].class),
        (TXT, IN)
    );
}

#[test]
fn names_read_back_unambiguously() {
    let mut name = String::new();
    push_label(&mut name, b"a.b\\c d\x7f~!");
    assert_eq!(name, "a\\.b\\\\c\\032d\\127~!");
}

#[test]
fn the_heartbeat_is_the_query_given() {
    let mut wire = BytesMut::new();
    assert!(Dns::new().heartbeat(Some(1), &mut wire).is_none());
    let ping = query_in("id.server", TXT, CH).unwrap();
    let codec = Dns::new().with_heartbeat(ping.clone());
    assert_eq!(codec.heartbeat(Some(5), &mut wire), Some(Ok(())));
    let mut expected = BytesMut::new();
    codec.encode(&ping, Some(5), &mut expected).unwrap();
    assert_eq!(wire, expected);
    assert_eq!(
        u16::from_be_bytes([ping[ping.len() - 2], ping[ping.len() - 1]]),
        CH
    );
}
