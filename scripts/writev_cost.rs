//! What a vectored write of one slice costs over a plain one on a loopback TCP socket: the
//! keepwire driver writes every hand-out with `writev` (one slice at one request in flight),
//! where the hand-written clients call `send`. A reader thread drains the socket; the writer
//! takes turns, ten rounds of 100,000 calls of each kind with a 68-byte frame, and prints the
//! median wall time per call of each. Run:
//!
//! ```text
//! rustc -O --edition 2021 scripts/writev_cost.rs -o /tmp/writev_cost && /tmp/writev_cost
//! ```

use std::io::{IoSlice, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Instant;

const CALLS: u32 = 100_000;
const ROUNDS: usize = 10;

fn main() -> std::io::Result<()> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    std::thread::spawn(move || {
        let (mut peer, _) = listener.accept().expect("the writer connects");
        let mut buf = vec![0u8; 1 << 16];
        while peer.read(&mut buf).is_ok_and(|n| n > 0) {}
    });
    let mut writer = TcpStream::connect(addr)?;
    writer.set_nodelay(true)?;
    let frame = [7u8; 68];
    let (mut send, mut writev) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let start = Instant::now();
        for _ in 0..CALLS {
            writer.write_all(&frame)?;
        }
        send.push(start.elapsed().as_nanos() as f64 / f64::from(CALLS));
        let start = Instant::now();
        for _ in 0..CALLS {
            let n = writer.write_vectored(&[IoSlice::new(&frame)])?;
            assert_eq!(n, frame.len(), "a short write on an unblocked socket");
        }
        writev.push(start.elapsed().as_nanos() as f64 / f64::from(CALLS));
    }
    for (name, mut times) in [("send", send), ("writev", writev)] {
        times.sort_by(f64::total_cmp);
        println!(
            "{name}: {:.0} ns per call (median of {ROUNDS} rounds)",
            times[ROUNDS / 2]
        );
    }
    Ok(())
}
