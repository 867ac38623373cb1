//! The echo server all clients talk to.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::thread;

/// Most bytes a connection's server thread buffers: a partial frame plus what one read takes.
const SERVER_BUFFER: usize = 256 * 1024;

/// An echo server for `LengthPrefixed` frames on plain threads, one per connection, each
/// with one fixed buffer: every read is followed by one write of the complete frames it
/// finished (a response is its request frame: same id, same payload). It allocates nothing
/// per request.
pub(super) fn start_echo_server() -> io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            // Named, so that a trace tells its writes from the client's
            // (`scripts/colocation.sh`). Out of threads, the stream is dropped: the connection
            // closes, and the client's run fails loudly.
            let _ = thread::Builder::new()
                .name("echo".to_owned())
                .spawn(move || {
                    let _ = serve(stream);
                });
        }
    });
    Ok(addr)
}

fn serve(mut stream: TcpStream) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let mut buffer = vec![0u8; SERVER_BUFFER];
    let mut filled = 0;
    loop {
        let n = stream.read(&mut buffer[filled..])?;
        if n == 0 {
            return Ok(());
        }
        filled += n;
        let complete = complete_frames(&buffer[..filled]);
        if complete > 0 {
            answer(&mut stream, &buffer[..complete])?;
            buffer.copy_within(complete..filled, 0);
            filled -= complete;
        }
        if filled == buffer.len() {
            return Err(io::Error::other("a frame longer than the server's buffer"));
        }
    }
}

/// Writes the complete frames back. Out of line, so that a trace of the whole process can
/// tell one round trip from the next by this function's entry (`scripts/working-set.sh`).
#[inline(never)]
fn answer(stream: &mut TcpStream, frames: &[u8]) -> io::Result<()> {
    stream.write_all(frames)
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
