//! The simulated kernels: Linux's TCP rules that decide how long a dead or stalled connection
//! looks alive, per connection.
//!
//! - **Send and receive buffers.** The client kernel takes bytes while its send buffer has
//!   room; the server kernel takes them while its receive buffer has room (the window), and the
//!   server process reads from it.
//! - **Retransmission.** Data the path drops (or a vanished peer never acknowledges) is resent
//!   with the RTO doubling up to `rto_max`; the kernel gives up with `ETIMEDOUT` on the first
//!   expiry at which the time since the first unacknowledged send reaches Linux's
//!   `tcp_model_timeout(tcp_retries2)` (924.6 s with the defaults), or `TCP_USER_TIMEOUT`.
//! - **Zero-window persist.** A peer that acknowledges but reads nothing is probed with
//!   doubling intervals forever: only `TCP_USER_TIMEOUT` ends that (or `tcp_retries2` probes
//!   that go unanswered).
//! - **Keepalive** (idle, interval, count) probes an idle connection only, never one with data
//!   outstanding; with `TCP_USER_TIMEOUT` set, Linux ends it once that much time has passed
//!   since the peer was last heard and a probe is out.
//! - **SYN retries.** An unanswered SYN is resent after 1, 2, 4, ... s and the connect fails
//!   after `2^(tcp_syn_retries+1) − 1` s (127 s with the default 6), or at `TCP_USER_TIMEOUT`.
//! - **RST and FIN** end a connection at once.
//!
//! Links have no propagation delay except on connect (one RTT) and server latencies include
//! the network: the rules above act on seconds to minutes, where a sub-millisecond path delay
//! changes nothing but the cost of simulating it.

use std::collections::VecDeque;
use std::time::Duration;

use keepwire_proto::{ConnId, Instant, Keepalive, SocketOptions};

/// Kernel settings, shared by every simulated host.
#[derive(Clone, Debug, PartialEq)]
pub struct Kernel {
    /// The client's send buffer when the socket options leave it unset (Linux autotunes up to
    /// `tcp_wmem[2]`, 4 MiB).
    pub send_buffer: u64,
    /// The server's receive buffer per connection (Linux autotunes up to `tcp_rmem[2]`, 6 MiB).
    pub recv_buffer: u64,
    /// The connection's retransmission timeout before any backoff: `srtt + 4·rttvar`, at least
    /// `rto_min` (200 ms): 200 ms on a LAN.
    pub rto: Duration,
    /// `TCP_RTO_MAX`: 120 s.
    pub rto_max: Duration,
    /// `net.ipv4.tcp_retries2`: 15.
    pub tcp_retries2: u32,
    /// `net.ipv4.tcp_syn_retries`: 6.
    pub tcp_syn_retries: u32,
    /// Round trip of a connect (SYN, SYN-ACK).
    pub rtt: Duration,
}

impl Kernel {
    /// `TCP_RTO_MIN`, the base of Linux's give-up model.
    pub const RTO_MIN: Duration = Duration::from_millis(200);
    /// `TCP_TIMEOUT_INIT`, the first SYN retransmission timeout.
    pub const SYN_RTO: Duration = Duration::from_secs(1);

    /// Linux's defaults on a LAN.
    pub fn linux() -> Self {
        Self {
            send_buffer: 4 << 20,
            recv_buffer: 6 << 20,
            rto: Self::RTO_MIN,
            rto_max: Duration::from_secs(120),
            tcp_retries2: 15,
            tcp_syn_retries: 6,
            rtt: Duration::from_micros(500),
        }
    }

    /// When an established connection with unacknowledged data gives up without
    /// `TCP_USER_TIMEOUT`: Linux's `tcp_model_timeout(tcp_retries2, TCP_RTO_MIN)`.
    pub fn retransmission_give_up(&self) -> Duration {
        model_timeout(self.tcp_retries2, Self::RTO_MIN, self.rto_max)
    }

    /// When a SYN nobody answers gives up without `TCP_USER_TIMEOUT`: 127 s by default.
    pub fn syn_give_up(&self) -> Duration {
        model_timeout(self.tcp_syn_retries, Self::SYN_RTO, self.rto_max)
    }

    /// The instant the retransmission timer that fires at `fired` for the `n`-th time
    /// (counting from 1) re-arms to, with the RTO doubling from `base`.
    fn backoff(&self, base: Duration, n: u32) -> Duration {
        base.saturating_mul(1u32 << n.min(20)).min(self.rto_max)
    }
}

/// Linux's `tcp_model_timeout`: the time `boundary` retransmissions take with the RTO
/// doubling from `base` up to `max`.
pub fn model_timeout(boundary: u32, base: Duration, max: Duration) -> Duration {
    let ratio = (max.as_nanos() / base.as_nanos().max(1)).max(1);
    let thresh = 127 - ratio.leading_zeros(); // ilog2
    if boundary <= thresh {
        base * ((2u32 << boundary) - 1)
    } else {
        base * ((2u32 << thresh) - 1) + max * (boundary - thresh)
    }
}

/// Options the simulated socket uses, from the pool's `Action::Open`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Opts {
    pub(crate) user_timeout: Option<Duration>,
    pub(crate) keepalive: Option<Keepalive>,
    pub(crate) send_buffer: u64,
}

impl Opts {
    pub(crate) fn new(options: &SocketOptions, kernel: &Kernel) -> Self {
        Self {
            user_timeout: options.user_timeout,
            keepalive: options.keepalive,
            send_buffer: options
                .send_buffer_size
                .map_or(kernel.send_buffer, u64::from),
        }
    }
}

/// A run of bytes of one frame in a kernel buffer; `end` when it holds the frame's last byte.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Seg {
    pub(crate) slot: u32,
    pub(crate) len: u32,
    pub(crate) end: bool,
}

/// A byte queue made of segments.
#[derive(Debug, Default)]
pub(crate) struct SegQueue {
    pub(crate) segs: VecDeque<Seg>,
    pub(crate) bytes: u64,
}

impl SegQueue {
    pub(crate) fn push(&mut self, seg: Seg) {
        self.bytes += u64::from(seg.len);
        self.segs.push_back(seg);
    }

    /// Takes up to `n` bytes off the front, calling `f` for every piece taken with whether it
    /// was cut off a segment that stays (so both hold bytes of the frame).
    pub(crate) fn take(&mut self, mut n: u64, mut f: impl FnMut(Seg, bool)) {
        while n > 0 {
            let Some(front) = self.segs.front_mut() else {
                break;
            };
            if u64::from(front.len) <= n {
                let seg = self.segs.pop_front().expect("front");
                n -= u64::from(seg.len);
                self.bytes -= u64::from(seg.len);
                f(seg, false);
            } else {
                let piece = Seg {
                    slot: front.slot,
                    len: n as u32,
                    end: false,
                };
                front.len -= n as u32;
                self.bytes -= n;
                n = 0;
                f(piece, true);
            }
        }
    }
}

/// Timers of a simulated connection (both ends).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Timer {
    /// The SYN is answered, or retransmitted, or given up.
    Syn = 0,
    /// Retransmission timeout.
    Rto = 1,
    /// Zero-window probe.
    Persist = 2,
    Keepalive = 3,
    /// The next response is ready.
    Response = 4,
    /// A slow server reads again.
    Read = 5,
}

pub(crate) const TIMERS: usize = 6;

/// How the far end of a connection is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Peer {
    /// The server's socket exists.
    Alive,
    /// The server vanished without a FIN or RST (its host was replaced): nothing answers.
    Gone,
}

/// One simulated connection: the client's socket and, once established, the server's.
#[derive(Debug)]
pub(crate) struct Conn {
    pub(crate) id: ConnId,
    pub(crate) opts: Opts,
    pub(crate) established: bool,
    pub(crate) peer: Peer,
    /// When the first SYN went out, and retransmissions since.
    pub(crate) syn_sent: Instant,
    pub(crate) syn_retries: u32,
    /// The pool reported the connection `Ready` (for the write-timeout check).
    pub(crate) ready_at: Option<Instant>,
    /// The client's send buffer: bytes not yet in the server's receive buffer.
    pub(crate) snd: SegQueue,
    /// The pool's last write was cut short: it waits for `handle_writable`.
    pub(crate) blocked: bool,
    /// The frame a short write cut: its slot and the bytes the kernel took of it.
    pub(crate) partial: Option<(u32, u32)>,
    /// Frames of the last hand-out: slot and whether the kernel took all of it.
    pub(crate) handed: Vec<(u32, bool)>,
    /// The first send of the unacknowledged data (Linux's `retrans_stamp`), and retransmission
    /// expiries since.
    pub(crate) retrans_stamp: Option<Instant>,
    pub(crate) retransmits: u32,
    /// Zero window: when it began, and the first probe (Linux's `icsk_probes_tstamp`).
    pub(crate) zero_window: Option<Instant>,
    pub(crate) probes_stamp: Option<Instant>,
    pub(crate) probes_out: u32,
    pub(crate) persist_backoff: u32,
    /// When the peer was last heard from (for keepalive).
    pub(crate) last_heard: Instant,
    pub(crate) keepalive_probes: u32,
    /// The server's receive buffer.
    pub(crate) rcv: SegQueue,
    /// Responses the server will send: when, and for which frame.
    pub(crate) responses: VecDeque<(Instant, u32)>,
    /// A slow server's last read.
    pub(crate) read_at: Instant,
    pub(crate) timers: [Option<Instant>; TIMERS],
}

impl Conn {
    pub(crate) fn new(id: ConnId, opts: Opts, now: Instant) -> Self {
        Self {
            id,
            opts,
            established: false,
            peer: Peer::Alive,
            syn_sent: now,
            syn_retries: 0,
            ready_at: None,
            snd: SegQueue::default(),
            blocked: false,
            partial: None,
            handed: Vec::new(),
            retrans_stamp: None,
            retransmits: 0,
            zero_window: None,
            probes_stamp: None,
            probes_out: 0,
            persist_backoff: 0,
            last_heard: now,
            keepalive_probes: 0,
            rcv: SegQueue::default(),
            responses: VecDeque::new(),
            read_at: now,
            timers: [None; TIMERS],
        }
    }

    pub(crate) fn send_room(&self) -> u64 {
        self.opts.send_buffer.saturating_sub(self.snd.bytes)
    }

    /// Whether a blocked writer would be woken: a third of the send buffer is free (Linux's
    /// `sk_stream_is_writeable`: free space at least half of what is queued).
    pub(crate) fn writable(&self) -> bool {
        self.send_room() >= self.opts.send_buffer / 3
    }

    /// When the retransmission timer next fires after its `n`-th expiry at `now`.
    pub(crate) fn next_rto(&self, kernel: &Kernel, now: Instant) -> Instant {
        let next = now + kernel.backoff(kernel.rto, self.retransmits);
        self.clamp(next, self.retrans_stamp)
    }

    /// When the persist timer next fires.
    pub(crate) fn next_probe(&self, kernel: &Kernel, now: Instant) -> Instant {
        let next = now + kernel.backoff(kernel.rto, self.persist_backoff);
        self.clamp(next, self.probes_stamp)
    }

    /// When the SYN timer next fires.
    pub(crate) fn next_syn(&self, kernel: &Kernel) -> Instant {
        let elapsed = (0..=self.syn_retries)
            .map(|n| kernel.backoff(Kernel::SYN_RTO, n))
            .sum::<Duration>();
        self.clamp(self.syn_sent + elapsed, Some(self.syn_sent))
    }

    /// Linux clamps a retransmission timer to the user timeout's expiry.
    fn clamp(&self, next: Instant, stamp: Option<Instant>) -> Instant {
        match (self.opts.user_timeout, stamp) {
            (Some(ut), Some(stamp)) => next.min(stamp + ut),
            _ => next,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linux_give_up_times() {
        let k = Kernel::linux();
        assert_eq!(k.syn_give_up(), Duration::from_secs(127));
        assert_eq!(k.retransmission_give_up(), Duration::from_millis(924_600));
        let k10 = Kernel {
            tcp_retries2: 10,
            ..Kernel::linux()
        };
        assert_eq!(k10.retransmission_give_up(), Duration::from_millis(324_600));
    }
}
