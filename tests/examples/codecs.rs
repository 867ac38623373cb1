//! The README's two codecs, compiled and run: one for an in-order protocol (a line protocol)
//! and one for a protocol whose answers carry the request's id and may come in any order.
//!
//! ```text
//! cargo run -p keepwire-tests --example codecs
//! ```
//!
//! Each runs against a small loopback server on its own thread: the line server answers each
//! line in upper case; the tagged server answers each pair of requests in reverse order.

use std::error::Error;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::thread;
use std::time::Duration;

use bytes::{Buf, BufMut, BytesMut};
use keepwire_tokio::{
    Codec, Config, Correlation, Decoded, Decoder, EncodeError, Target, Violation,
};

// README: in-order codec
/// A line protocol: a request is one line, its answer is one line, in order.
#[derive(Debug)]
struct Lines;

impl Codec for Lines {
    fn correlation(&self) -> Correlation {
        Correlation::InOrder // answers come in the order the requests were written
    }

    fn encode(&self, line: &[u8], _id: Option<u64>, dst: &mut BytesMut) -> Result<(), EncodeError> {
        if line.contains(&b'\n') {
            // Refused before anything is sent: a second line would get an answer of its own.
            return Err(EncodeError::Invalid("one line per request".into()));
        }
        dst.put_slice(line);
        dst.put_u8(b'\n');
        Ok(())
    }

    fn decoder(&self) -> Box<dyn Decoder> {
        Box::new(LineDecoder) // one per connection; it may keep state between calls
    }
}

#[derive(Debug)]
struct LineDecoder;

impl Decoder for LineDecoder {
    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Decoded>, Violation> {
        const MAX: usize = 64 * 1024;
        match buf.iter().position(|&b| b == b'\n') {
            Some(end) => {
                let line = buf.split_to(end + 1).freeze();
                Ok(Some(Decoded::Next(line.slice(..end)))) // the answer, without its '\n'
            }
            None if buf.len() > MAX => Err(Violation::FrameTooLong {
                len: buf.len() as u64,
                max: MAX as u64,
            }),
            None => Ok(None), // not complete yet: wait, and reserve nothing
        }
    }
}
// README: end

// README: by-id codec
/// A binary protocol whose answers may come in any order: `length: u32 | id: u32 | payload`,
/// the length counting the id and the payload; a server echoes the request's id.
#[derive(Debug)]
struct Tagged;

const MAX_PAYLOAD: usize = 1 << 20;

impl Codec for Tagged {
    fn correlation(&self) -> Correlation {
        Correlation::ById { bits: 32 } // keepwire hands out ids that fit, never two in flight
    }

    fn encode(
        &self,
        payload: &[u8],
        id: Option<u64>,
        dst: &mut BytesMut,
    ) -> Result<(), EncodeError> {
        if payload.len() > MAX_PAYLOAD {
            let (len, max) = (payload.len() as u64, MAX_PAYLOAD as u64);
            return Err(EncodeError::TooLong { len, max });
        }
        dst.put_u32(payload.len() as u32 + 4);
        dst.put_u32(id.expect("ById: keepwire gives every request an id") as u32);
        dst.put_slice(payload);
        Ok(())
    }

    fn decoder(&self) -> Box<dyn Decoder> {
        Box::new(TaggedDecoder)
    }
}

#[derive(Debug)]
struct TaggedDecoder;

impl Decoder for TaggedDecoder {
    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Decoded>, Violation> {
        let Some(mut header) = buf.get(..8) else {
            return Ok(None);
        };
        let (len, id) = (header.get_u32() as usize, header.get_u32());
        let Some(n) = len.checked_sub(4) else {
            return Err(Violation::MalformedHeader);
        };
        if n > MAX_PAYLOAD {
            let (len, max) = (n as u64, MAX_PAYLOAD as u64);
            return Err(Violation::FrameTooLong { len, max }); // judged from the header alone
        }
        if buf.len() < 8 + n {
            return Ok(None); // reserve nothing for what is only announced
        }
        buf.advance(8);
        let (id, payload) = (u64::from(id), buf.split_to(n).freeze());
        Ok(Some(Decoded::Tagged { id, payload })) // keepwire finds the request by its id
    }
}
// README: end

/// A line server: answers each line in upper case.
fn line_server() -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            thread::spawn(move || {
                let mut writer = stream.try_clone().expect("clone the stream");
                for line in BufReader::new(stream).lines() {
                    let Ok(line) = line else { return };
                    if writeln!(writer, "{}", line.to_uppercase()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    Ok(addr)
}

/// A tagged server: reads requests two at a time and answers the second first.
fn tagged_server() -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            thread::spawn(move || {
                while let (Ok(first), Ok(second)) =
                    (read_frame(&mut stream), read_frame(&mut stream))
                {
                    if stream.write_all(&[second, first].concat()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    Ok(addr)
}

/// One `length | id | payload` frame, whole.
fn read_frame(stream: &mut impl Read) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len)?;
    let mut rest = vec![0u8; u32::from_be_bytes(len) as usize];
    stream.read_exact(&mut rest)?;
    Ok([&len[..], &rest].concat())
}

/// Both codecs against their servers, through keepwire-tokio.
pub(crate) async fn demo() -> Result<(), Box<dyn Error>> {
    let timeout = Duration::from_secs(2);

    let lines = keepwire_tokio::client(Config::default())
        .node(line_server()?)
        .codec(Lines)
        .build()?;
    let (a, b) = tokio::join!(
        lines.send(Target::Best, "hello", timeout),
        lines.send(Target::Best, "keepwire", timeout),
    );
    assert_eq!((&a?[..], &b?[..]), (&b"HELLO"[..], &b"KEEPWIRE"[..]));
    let refused = lines.send(Target::Best, "two\nlines", timeout).await;
    assert!(
        refused.is_err_and(|e| !e.was_sent()),
        "refused before sending"
    );
    println!("in order: each line got its own answer");

    let tagged = keepwire_tokio::client(Config::default())
        .node(tagged_server()?)
        .codec(Tagged)
        .build()?;
    let (first, second) = tokio::join!(
        tagged.send(Target::Best, "first", timeout),
        tagged.send(Target::Best, "second", timeout),
    );
    assert_eq!((&first?[..], &second?[..]), (&b"first"[..], &b"second"[..]));
    println!("by id: answered in reverse order, each matched by its id");

    lines.shutdown().await;
    tagged.shutdown().await;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    demo().await
}
