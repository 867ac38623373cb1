//! A loopback echo server for the built-in `LengthPrefixed` framing, run as its own process so
//! that a syscall count of the `load` example sees the client alone.
//!
//! ```text
//! cargo run --release -p keepwire-tokio --example echo_server -- [PORT]
//! ```
//!
//! Binds `127.0.0.1:PORT` (default 0: the kernel picks), prints the address, and serves each
//! connection on its own thread with blocking I/O: every read is followed by one write that
//! echoes all the complete frames the read finished (a response carries the request's
//! correlation id and payload, so it is the request frame itself).

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread;

const READ_CHUNK: usize = 64 * 1024;

fn main() -> io::Result<()> {
    let port: u16 = match std::env::args().nth(1) {
        Some(arg) => arg.parse().map_err(io::Error::other)?,
        None => 0,
    };
    let listener = TcpListener::bind(("127.0.0.1", port))?;
    println!("{}", listener.local_addr()?);
    for stream in listener.incoming() {
        let stream = stream?;
        thread::spawn(move || {
            if let Err(e) = serve(stream) {
                eprintln!("echo_server: connection ended: {e}");
            }
        });
    }
    Ok(())
}

/// Echoes complete frames, one write per read, until the client closes.
fn serve(mut stream: TcpStream) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let mut inbound = Vec::with_capacity(2 * READ_CHUNK);
    let mut chunk = vec![0; READ_CHUNK];
    loop {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Ok(());
        }
        inbound.extend_from_slice(&chunk[..n]);
        let complete = complete_frames(&inbound);
        if complete > 0 {
            stream.write_all(&inbound[..complete])?;
            inbound.drain(..complete);
        }
    }
}

/// How many leading bytes of `buf` are whole frames (`u32` BE length, then that many bytes).
fn complete_frames(buf: &[u8]) -> usize {
    let mut at = 0;
    while let Some(header) = buf.get(at..at + 4) {
        let len = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as usize;
        if buf.len() - at - 4 < len {
            break;
        }
        at += 4 + len;
    }
    at
}
