//! Chaos runs: a seeded generator of random fault schedules over 2–50 nodes, with random
//! settings and application calls, run through the [`World`] with its invariants checked after
//! every step:
//!
//! - every submitted request ends exactly once (and has ended once every deadline passed);
//! - its outcome says truly how much of it the kernel took (`Sent`);
//! - a node's pending bytes stay within the high watermark plus one frame;
//! - a write the kernel does not take is detected (its connection closed) within the write
//!   timeout plus one tick;
//! - nothing stale is delivered: no byte goes out for a connection after it was evicted or
//!   closed, no request is executed twice (an evicted one moves once), and no byte of a request
//!   that ended unsent is ever written or executed;
//! - every adapter report about a live connection is accepted.
//!
//! A failure names its seed and the one command that replays it.

use std::time::Duration;

use keepwire_proto::{Config, Instant, Keepalive, Target};

use super::{Act, Checks, Fault, Kernel, Restart, Server, Stream, World, at, ms, secs};

/// The command that replays one seed.
pub fn replay_command(seed: u64) -> String {
    format!(
        "KEEPWIRE_CHAOS_SEED={seed} cargo test -p keepwire-tests --test sim_chaos -- one_seed --nocapture"
    )
}

/// A small seeded generator (splitmix64).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed ^ 0x6368_616f_735f_7275)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }

    fn ms(&mut self, lo: u64, hi: u64) -> Duration {
        ms(self.range(lo, hi))
    }
}

/// One generated chaos run.
#[derive(Debug)]
pub struct Plan {
    /// Its seed.
    pub seed: u64,
    /// Nodes.
    pub nodes: usize,
    /// The pool's settings.
    pub config: Config,
    /// The kernels'.
    pub kernel: Kernel,
    /// Load (all streams stop at `load_for`), each to its node or, with `None`, to the node
    /// `Pool::select` picks.
    pub streams: Vec<(Option<usize>, Stream)>,
    /// Faults: when, which node, what.
    pub faults: Vec<(Duration, usize, Fault)>,
    /// Application calls: when, what.
    pub calls: Vec<(Duration, Act)>,
    /// How long the load runs.
    pub load_for: Duration,
    /// The largest frame.
    pub max_frame: usize,
}

impl Plan {
    /// The plan for `seed`.
    pub fn new(seed: u64) -> Self {
        let mut r = Rng::new(seed);
        // Mostly small clusters (they are the interesting ones), sometimes up to 50 nodes.
        let nodes = if r.chance(0.2) {
            r.range(10, 50) as usize
        } else {
            r.range(2, 9) as usize
        };
        let mut c = Config::default();
        c.seed = Some(r.next_u64());
        c.write_timeout = if r.chance(0.1) {
            Duration::ZERO
        } else {
            r.ms(300, 5_000)
        };
        c.high_watermark = r.range(32 << 10, 1 << 20);
        c.low_watermark = r.range(0, c.high_watermark);
        c.max_in_flight = r.range(4, 256) as u32;
        c.setup_timeout = r.ms(200, 3_000);
        c.setup_timeout_max = c.setup_timeout * r.range(1, 4) as u32;
        c.reconnect_backoff = r.ms(10, 200);
        c.reconnect_backoff_max = c.reconnect_backoff * r.range(1, 10) as u32;
        c.quarantine_after_failures = r.range(1, 5) as u32;
        c.quarantine_after_timeouts = r.range(1, 8) as u32;
        c.probe_backoff = r.ms(100, 3_000);
        c.probe_retries = r.range(1, 10) as u32;
        c.panic_threshold = [0.0, 0.5, 1.0][r.range(0, 2) as usize];
        c.retry_unsent = r.chance(0.5);
        c.frame_timeout = Duration::ZERO;
        c.socket.user_timeout = r.chance(0.6).then(|| r.ms(500, 5_000));
        c.socket.keepalive = r.chance(0.5).then(|| Keepalive {
            idle: secs(r.range(1, 5)),
            interval: secs(1),
            retries: r.range(1, 3) as u32,
        });
        let kernel = Kernel {
            send_buffer: r.range(8 << 10, 256 << 10),
            recv_buffer: r.range(8 << 10, 256 << 10),
            tcp_retries2: r.range(3, 15) as u32,
            tcp_syn_retries: r.range(2, 6) as u32,
            ..Kernel::linux()
        };
        let load_for = secs(r.range(10, 30));
        // About 120 requests a second in all, whatever the node count.
        let max_frame = r.range(64, 32 << 10) as usize;
        let mut streams = Vec::new();
        let per_node = 120.0 / nodes as f64;
        for n in 0..nodes {
            let node = (!r.chance(0.3)).then_some(n);
            let size = r.range(16, max_frame as u64) as usize;
            let deadline = r.ms(200, 8_000);
            let rate = per_node * r.range(5, 20) as f64 / 10.0;
            let mut s = Stream::new(Target::Best, rate, size, deadline);
            s.poisson = true;
            s.start = r.ms(0, 1_000);
            streams.push((node, s));
        }
        let mut faults = Vec::new();
        for _ in 0..r.range(0, 2 * nodes as u64).min(40) {
            let n = r.range(0, nodes as u64 - 1) as usize;
            let when = r.ms(0, load_for.as_millis() as u64);
            let fault = match r.range(0, 5) {
                0 => Fault::Hang {
                    for_: r.ms(100, 20_000),
                },
                1 => Fault::Restart {
                    how: [Restart::Fin, Restart::Rst, Restart::Silent][r.range(0, 2) as usize],
                    down: r.ms(0, 15_000),
                },
                2 => Fault::PathDrop {
                    for_: r.ms(100, 20_000),
                },
                3 => Fault::SynBlackhole {
                    for_: r.ms(100, 20_000),
                },
                _ => Fault::Slow {
                    bytes_per_sec: r.range(1 << 10, 1 << 20),
                    latency: r.ms(0, 3_000),
                    for_: r.ms(100, 20_000),
                },
            };
            faults.push((when, n, fault));
        }
        let mut calls = Vec::new();
        for _ in 0..r.range(0, nodes as u64).min(20) {
            let n = r.range(0, nodes as u64 - 1) as usize;
            let when = r.ms(0, load_for.as_millis() as u64);
            let act = match r.range(0, 3) {
                0 => {
                    // Out and back in: the readmission evicts.
                    calls.push((when + r.ms(0, 5_000), Act::Enable(n)));
                    Act::Disable(n)
                }
                1 => Act::SetEpoch(n, r.range(1, 3)),
                _ => Act::Evict(n),
            };
            calls.push((when, act));
        }
        Self {
            seed,
            nodes,
            config: c,
            kernel,
            streams,
            faults,
            calls,
            load_for,
            max_frame,
        }
    }

    /// Runs it with every check; `Err` says what broke, when.
    pub fn run(self) -> Result<Summary, String> {
        let (mut w, end) = self.build();
        w.run_until(end);
        w.finish();
        w.check_all_ended();
        match w.violation {
            Some(v) => Err(v),
            None => Ok(Summary {
                accepted: w.tally.accepted,
                ended: w.tally.ended(),
                end: w.now,
            }),
        }
    }

    /// The world it runs in, checks on, and when to stop.
    pub fn build(self) -> (World, Instant) {
        let checks = Checks {
            write_timeout: self.config.write_timeout,
            tick: ms(1),
            max_pending: self.config.high_watermark
                + self.max_frame as u64
                + self.config.per_frame_overhead,
        };
        let servers = (0..self.nodes)
            .map(|n| Server::new(ms(1 + (n as u64 * 7) % 20)))
            .collect();
        let mut w = World::new(self.config, self.kernel, servers);
        w.checks = Some(checks);
        let nodes = w.nodes.clone();
        let mut longest = Duration::ZERO;
        for (node, mut s) in self.streams {
            if let Some(n) = node {
                s.target = Target::Node(nodes[n]);
            }
            longest = longest.max(s.deadline);
            let i = w.add_stream(s);
            w.at(at(self.load_for), Act::Pause(i));
        }
        for (when, n, fault) in self.faults {
            w.at(at(when), Act::Fault(n, fault));
        }
        for (when, act) in self.calls {
            w.at(at(when), act);
        }
        // Past the load, every deadline, and every fault.
        (w, at(self.load_for + longest + secs(30)))
    }
}

/// What a passing run did.
#[derive(Clone, Copy, Debug)]
pub struct Summary {
    /// Requests accepted.
    pub accepted: u64,
    /// Requests classed (all that ended).
    pub ended: u64,
    /// When it ended.
    pub end: Instant,
}

/// Runs `seed`, turning a panic into an error too.
pub fn run_seed(seed: u64) -> Result<Summary, String> {
    std::panic::catch_unwind(|| Plan::new(seed).run())
        .unwrap_or_else(|p| {
            let what = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_string()))
                .unwrap_or_default();
            Err(format!("panicked: {what}"))
        })
        .map_err(|e| {
            format!(
                "chaos seed {seed} failed: {e}\nreplay it: {}",
                replay_command(seed)
            )
        })
}
