//! keepwire's three incident stories, replayed before (keepwire with its fixes switched off)
//! and after (keepwire's defaults), with the same seed.
//!
//! Each story's inputs come from its figures; where a figure depends on a setting the story
//! does not give, the setting that reproduces it is named (and for story 1 the figure with
//! Linux's defaults is shown too).

use std::time::Duration;

use keepwire_proto::{Config, Counters, Instant, MAX_DURATION, NodeState, Selection, Target};

use super::{Act, Fault, Kernel, Restart, Server, Stream, Tally, Timeline, World, at, ms, secs};

mod table;

pub use table::{Table, bytes, duration, thousands};
use table::{common_rows, count, head, row, set, set_peak, story_cell};

/// The seed of every replay.
pub const SEED: u64 = 12;

/// Bytes counted per pending frame on top of its length (Netty's entry overhead; keepwire's
/// default `per_frame_overhead`).
const OVERHEAD: f64 = 96.0;

/// A far deadline: the "before" application never lets the pool drop a queued frame.
const FAR: Duration = Duration::from_secs(24 * 3600);

/// How a run is configured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// keepwire with its fixes switched off (see [`before_config`]); the application times its
    /// queries out itself and gives the pool a far deadline, so no queued frame is dropped; it
    /// never tells the pool about a readmission, so nothing is evicted.
    Before,
    /// keepwire's defaults.
    After,
}

/// keepwire with the fixes switched off: no write timeout, no `TCP_USER_TIMEOUT`, no
/// keepalive (Linux's default: off), watermarks and an in-flight cap that never reject,
/// request timeouts not reported to the failure detector.
pub fn before_config() -> Config {
    let mut c = Config::default();
    c.seed = Some(SEED);
    c.write_timeout = Duration::ZERO;
    c.socket.user_timeout = None;
    c.socket.keepalive = None;
    c.high_watermark = 1 << 60;
    c.low_watermark = 1 << 59;
    c.max_in_flight = u32::MAX;
    c.quarantine_after_timeouts = u32::MAX;
    c
}

/// keepwire's defaults (with the replay's seed).
pub fn after_config() -> Config {
    let mut c = Config::default();
    c.seed = Some(SEED);
    c
}

/// One replayed run: its figures and samples.
#[derive(Debug)]
pub struct Run {
    /// Column name.
    pub name: String,
    /// Figures.
    pub tally: Tally,
    /// The pool's counters.
    pub counters: Counters,
    /// Samples for the picture.
    pub timeline: Timeline,
    /// Story-specific figures by name (seconds, bytes or counts).
    pub figures: Vec<(&'static str, Option<f64>)>,
}

impl Run {
    /// A story-specific figure.
    ///
    /// # Panics
    /// If the run has no figure of that name.
    pub fn figure(&self, name: &str) -> Option<f64> {
        self.figures
            .iter()
            .find(|f| f.0 == name)
            .unwrap_or_else(|| panic!("no figure {name}"))
            .1
    }

    fn finish(name: &str, mut w: World, figures: Vec<(&'static str, Option<f64>)>) -> Self {
        if let Some(v) = &w.violation {
            panic!("{name}: {v}");
        }
        Self {
            name: name.to_string(),
            tally: w.tally.clone(),
            counters: w.pool.counters(),
            timeline: w
                .timeline
                .take()
                .unwrap_or_else(|| Timeline::new(secs(1), 0)),
            figures,
        }
    }
}

/// A replayed story: its runs, table and picture inputs.
#[derive(Debug)]
pub struct Replay {
    /// File name stem of its picture.
    pub key: &'static str,
    /// Title.
    pub title: &'static str,
    /// The model's inputs, in words.
    pub inputs: String,
    /// Before/after figures.
    pub table: Table,
    /// The runs, one per column.
    pub runs: Vec<Run>,
    /// A second table, if any.
    pub extra: Option<Table>,
}

impl Replay {
    /// Its timeline picture: every run on one page, on one time axis.
    pub fn svg(&self) -> String {
        let span = self
            .runs
            .iter()
            .map(|r| seconds(r.timeline.end - Instant::ZERO))
            .fold(0.0, f64::max);
        let panels: Vec<super::svg::Panel<'_>> = self
            .runs
            .iter()
            .map(|r| super::svg::Panel {
                name: &r.name,
                timeline: &r.timeline,
                peak: r.tally.peak_total,
            })
            .collect();
        let watermark = Some(Config::default().high_watermark);
        super::svg::render(self.title, &panels, span, watermark)
    }
}

pub(super) fn seconds(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// Open-loop streams, one per node, phases spread over the gap.
fn streams(w: &mut World, rate: f64, size: usize, deadline: Duration, mode: Mode) {
    let n = w.nodes.len();
    for i in 0..n {
        let mut s = Stream::new(Target::Node(w.nodes[i]), rate, size, deadline);
        s.start = Duration::from_secs_f64(i as f64 / (rate * n as f64));
        if mode == Mode::Before {
            s.pool_deadline = Some(FAR);
        }
        w.add_stream(s);
    }
}

// -----------------------------------------------------------------------------------------
// Story 1: a node flap, readmitted onto a dead connection.

/// Story 1's inputs.
#[derive(Clone, Debug)]
pub struct Flap {
    /// Servers (the restarted one is server 0).
    pub nodes: usize,
    /// Queries per second per server: the story's 2,964 lost over 6 min 33 s.
    pub rate: f64,
    /// Query frame length (story 2's router, as this story gives none).
    pub size: usize,
    /// The query timeout (story 2's 3 s, as this story gives none).
    pub deadline: Duration,
    /// When server 0's host is replaced (no FIN, no RST).
    pub crash: Duration,
    /// Until the new process is up and the routing layer readmits it.
    pub down: Duration,
    /// Until the health check marks it healthy (the story: 84 s after readmission).
    pub healthy_after: Duration,
    /// Time simulated.
    pub end: Duration,
}

impl Flap {
    /// The story's figures.
    pub fn story() -> Self {
        Self {
            nodes: 4,
            rate: 2964.0 / 393.0,
            size: Stall::story().size,
            deadline: secs(3),
            crash: secs(60),
            down: secs(120),
            healthy_after: secs(84),
            end: secs(1200),
        }
    }

    /// When the new process is up (and, with the signal, readmitted).
    pub fn back(&self) -> Instant {
        at(self.crash + self.down)
    }

    /// Replays it. With `signal`, the routing layer excludes server 0 at the crash and
    /// readmits it when the new process is up, and after keepwire's fix tells the pool
    /// (`disable_node`, `enable_node`); without it, nobody notices the restart: the traffic
    /// never stops and the pool is told nothing.
    pub fn run(&self, name: &str, mode: Mode, kernel: Kernel, signal: bool) -> Run {
        let config = match mode {
            Mode::Before => before_config(),
            Mode::After => after_config(),
        };
        let servers = (0..self.nodes).map(|_| Server::new(ms(5))).collect();
        let mut w = World::new(config, kernel, servers).sampling(secs(1));
        streams(&mut w, self.rate, self.size, self.deadline, mode);
        let crash = at(self.crash);
        let back = self.back();
        let restart = Fault::Restart {
            how: Restart::Silent,
            down: self.down,
        };
        w.at(crash, Act::Mark("server 0 replaced".into()));
        w.at(crash, Act::Fault(0, restart));
        if signal {
            w.at(crash, Act::Pause(0));
            w.at(back, Act::Resume(0));
            w.at(back, Act::Mark("readmitted".into()));
            if mode == Mode::After {
                w.at(crash, Act::Disable(0));
                w.at(back, Act::Enable(0));
            }
        } else {
            w.at(back, Act::Mark("new process up".into()));
        }
        w.at(back + self.healthy_after, Act::Mark("healthy".into()));
        w.run_until(at(self.end));
        w.finish();
        let t = &w.tally;
        let dead = t.into_dead.len() as f64;
        let window = match (t.into_dead.first(), t.into_dead.last()) {
            (Some(&a), Some(&b)) => Some(seconds(b - a)),
            _ => None,
        };
        let after_signal = t.into_dead.iter().filter(|&&x| x >= back).count() as f64;
        let detect = t.first_close(0, crash, true).map(|x| seconds(x - crash));
        let recover = t.resumed_after(0, back).map(|x| seconds(x - back));
        let peak = t.peak_pending[0] as f64;
        Run::finish(
            name,
            w,
            vec![
                ("dead", Some(dead)),
                ("window", window),
                ("dead after readmission", Some(after_signal)),
                ("detect", detect),
                ("recover", recover),
                ("peak", Some(peak)),
            ],
        )
    }
}

/// The kernel setting that reproduces story 1's 6 min 33 s: `tcp_retries2 = 10` on a
/// connection whose RTO is 300 ms (a path with an RTT around 100 ms, or a route with
/// `rto_min 300ms`). Linux gives up at the first expiry past `tcp_model_timeout(10)` =
/// 324.6 s, which with the RTO doubling from 300 ms to the 120 s cap is the one at 393.3 s.
pub fn flap_kernel() -> Kernel {
    Kernel {
        tcp_retries2: 10,
        rto: ms(300),
        ..Kernel::linux()
    }
}

/// Story 1, before and after.
pub fn story1() -> Replay {
    let f = Flap::story();
    let runs = vec![
        f.run("before", Mode::Before, flap_kernel(), true),
        f.run(
            "before, Linux defaults",
            Mode::Before,
            Kernel::linux(),
            true,
        ),
        f.run("after", Mode::After, Kernel::linux(), true),
        f.run("after, no signal", Mode::After, Kernel::linux(), false),
    ];
    let mut rows = common_rows(&runs, true, false);
    set(&mut rows, "time to detect", &runs, |r| r.figure("detect"));
    set(&mut rows, "time to recover", &runs, |r| r.figure("recover"));
    set_peak(&mut rows, &runs, |r| r.figure("peak"));
    let specific = vec![
        row("lost to the dead connection", "2,964", &runs, |r| {
            count(r.figure("dead"))
        }),
        row("  of them after the readmission", "", &runs, |r| {
            count(r.figure("dead after readmission"))
        }),
        row("loss window (first to last)", "6 min 33 s", &runs, |r| {
            r.figure("window").map_or("—".into(), duration)
        }),
    ];
    rows.splice(4..4, specific);
    Replay {
        key: "story1",
        title: "Story 1 — a node flap, readmitted onto a dead connection",
        inputs: format!(
            "{} servers, {:.2} queries/s each (2,964 lost over 393 s), {} B frames, {} s query \
             timeout. Server 0's host is replaced at {} s: no FIN, no RST, its old connection \
             is a black hole. The new process is up and readmitted {} s later; the health \
             check passes {} s after that. \"before\": tcp_retries2 = 10 with a 300 ms RTO \
             (gives up at 393.3 s = 6 min 33 s); \"before, Linux defaults\": tcp_retries2 = 15, \
             200 ms RTO (gives up at 924.6 s). \"after, no signal\": the routing layer never \
             notices, the traffic never stops, the pool is told nothing.",
            f.nodes,
            f.rate,
            f.size,
            f.deadline.as_secs(),
            f.crash.as_secs(),
            f.down.as_secs(),
            f.healthy_after.as_secs()
        ),
        table: Table {
            head: head("story", &runs),
            rows,
        },
        runs,
        extra: None,
    }
}

// -----------------------------------------------------------------------------------------
// Story 2: the 37-minute stall.

/// Story 2's inputs.
#[derive(Clone, Debug)]
pub struct Stall {
    /// Stalled servers (the story: three connections).
    pub stalled: usize,
    /// Healthy servers beside them.
    pub healthy: usize,
    /// Queries per second per server.
    pub rate: f64,
    /// Query frame length.
    pub size: usize,
    /// The query timeout (3 s).
    pub deadline: Duration,
    /// When the stall begins.
    pub start: Duration,
    /// How long it lasts (37 min).
    pub length: Duration,
    /// Time simulated after it.
    pub tail: Duration,
    /// The "before" broker's direct-memory limit (8.7 GB).
    pub oom: u64,
}

impl Stall {
    /// The story's figures: 1.07 million queries timed out over 37 minutes on three
    /// connections gives the rate; the queue's 9 MB/s growth over that rate gives the frame
    /// length (less the 96 bytes counted per frame).
    pub fn story() -> Self {
        let length = secs(37 * 60);
        let stalled = 3;
        let rate = 1.07e6 / (stalled as f64 * seconds(length));
        let size = (9.0e6 / (stalled as f64 * rate) - OVERHEAD).round() as usize;
        Self {
            stalled,
            healthy: 2,
            rate,
            size,
            deadline: secs(3),
            start: secs(30),
            length,
            tail: secs(90),
            oom: 8_700_000_000,
        }
    }

    /// The same stall, `length` long (tests in debug builds use a few minutes).
    pub fn shortened(length: Duration) -> Self {
        Self {
            length,
            ..Self::story()
        }
    }

    /// When the stall ends.
    pub fn end(&self) -> Instant {
        at(self.start + self.length)
    }

    /// Replays it: servers `0..stalled` hang (their kernels still acknowledge, with a zero
    /// window) for the stall's length.
    pub fn run(&self, name: &str, mode: Mode) -> Run {
        let config = match mode {
            Mode::Before => before_config(),
            Mode::After => after_config(),
        };
        let servers = (0..self.stalled + self.healthy)
            .map(|_| Server::new(ms(5)))
            .collect();
        let mut w = World::new(config, Kernel::linux(), servers).sampling(secs(1));
        streams(&mut w, self.rate, self.size, self.deadline, mode);
        if mode == Mode::Before {
            w.oom_limit = Some(self.oom);
        }
        let start = at(self.start);
        w.at(start, Act::Mark("stall".into()));
        w.at(self.end(), Act::Mark("stall ends".into()));
        for n in 0..self.stalled {
            w.at(start, Act::Fault(n, Fault::Hang { for_: self.length }));
        }
        w.run_until(self.end() + self.tail);
        w.finish();
        let t = &w.tally;
        let detect = (0..self.stalled)
            .filter_map(|n| t.first_close(n, start, true))
            .min()
            .map(|x| seconds(x - start));
        let recover = (0..self.stalled)
            .map(|n| t.resumed_after(n, self.end()))
            .collect::<Option<Vec<_>>>()
            .and_then(|v| v.into_iter().max())
            .map(|x| seconds(x - self.end()));
        let ramp = w
            .timeline
            .as_ref()
            .and_then(|tl| ramp(tl, start, self.end()));
        let peak = (0..self.stalled).map(|n| t.peak_pending[n]).max();
        Run::finish(
            name,
            w,
            vec![
                ("ramp", ramp),
                ("peak", peak.map(|p| p as f64)),
                ("detect", detect),
                ("recover", recover),
            ],
        )
    }
}

/// Growth of the total pending bytes per second during the stall, from a minute in (a
/// quarter in, for a stall shorter than four minutes) until the first drop (a fall of more
/// than 10 %) or the stall's end.
fn ramp(tl: &Timeline, start: Instant, end: Instant) -> Option<f64> {
    let from = start + (end - start).min(secs(240)) / 4;
    let i0 = tl.at.iter().position(|&t| t >= from)?;
    let mut i1 = i0;
    for i in i0 + 1..tl.at.len() {
        if tl.at[i] > end || (tl.total[i] as f64) < 0.9 * tl.total[i - 1] as f64 {
            break;
        }
        i1 = i;
    }
    if i1 < i0 + 10 {
        return None;
    }
    let dt = seconds(tl.at[i1] - tl.at[i0]);
    Some((tl.total[i1] as f64 - tl.total[i0] as f64) / dt)
}

/// Story 2, before and after.
pub fn story2() -> Replay {
    let s = Stall::story();
    let runs = vec![s.run("before", Mode::Before), s.run("after", Mode::After)];
    let mut rows = common_rows(&runs, true, false);
    set(&mut rows, "time to detect", &runs, |r| r.figure("detect"));
    set(&mut rows, "time to recover", &runs, |r| r.figure("recover"));
    set_peak(&mut rows, &runs, |r| r.figure("peak"));
    story_cell(&mut rows, "queries timed out", "1.07 M");
    story_cell(&mut rows, "peak pending, total", "8.7 GB");
    story_cell(&mut rows, "healthy connections closed", "all");
    story_cell(
        &mut rows,
        "stale requests sent after their deadline",
        "the backlog",
    );
    let specific = vec![
        row("pending bytes growth in the stall", "9 MB/s", &runs, |r| {
            r.figure("ramp")
                .map_or("—".into(), |b| format!("{}/s", bytes(b)))
        }),
        row("out-of-memory closes of every connection", "", &runs, |r| {
            thousands(r.tally.ooms)
        }),
    ];
    rows.extend(specific);
    Replay {
        key: "story2",
        title: "Story 2 — a 37-minute stall",
        inputs: format!(
            "{} stalled + {} healthy servers, {:.1} queries/s each (1.07 M over 37 min on 3 \
             connections), {} B frames (9 MB/s over that rate, less the 96 B counted per \
             frame), {} s query timeout. At {} s the three servers' processes stall for 37 min: \
             their kernels keep acknowledging with a zero window, so TCP never gives up \
             without TCP_USER_TIMEOUT. \"before\": queries queue without bound and are never \
             dropped (the broker timed them out itself); an out-of-memory handler closes every \
             connection at {} of pending bytes.",
            s.stalled,
            s.healthy,
            s.rate,
            s.size,
            s.deadline.as_secs(),
            s.start.as_secs(),
            bytes(s.oom as f64),
        ),
        table: Table {
            head: head("story", &runs),
            rows,
        },
        runs,
        extra: None,
    }
}

// -----------------------------------------------------------------------------------------
// Story 3: dead bootstrap servers.

/// How the bootstrap client picks where to connect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bootstrap {
    /// The old rule on keepwire with the fixes off (no setup timeout, no TCP_USER_TIMEOUT:
    /// the kernel's 127 s connect): keep waiting on the connecting node, else connect to the
    /// least recently attempted node past its backoff, in list order.
    OldRule,
    /// `Pool::select` with keepwire's defaults: one attempt at a time.
    Select,
    /// Staggered attempts (happy eyeballs across nodes), modelled in the client on top of the
    /// pool: while no node is ready, start the next candidate in list order every `delay`.
    Staggered(Duration),
}

/// Story 3's inputs.
#[derive(Clone, Debug)]
pub struct Dead {
    /// Bootstrap servers.
    pub nodes: usize,
    /// Of them, never answering SYNs (the first `dead` in the list).
    pub dead: usize,
    /// Time simulated.
    pub end: Duration,
}

impl Dead {
    /// Three of five bootstrap servers never answer.
    pub fn story() -> Self {
        Self::with_dead(5, 3)
    }

    /// `dead` of `nodes` never answer; the run is long enough for the old rule.
    pub fn with_dead(nodes: usize, dead: usize) -> Self {
        Self {
            nodes,
            dead,
            end: secs(127 * dead as u64 + 19).max(secs(60)),
        }
    }

    /// Replays it with `seed`; the first ready node is the run's `first ready` figure.
    pub fn run(&self, name: &str, how: Bootstrap, seed: u64, sample: bool) -> Run {
        let mut config = match how {
            Bootstrap::OldRule => {
                let mut c = before_config();
                c.setup_timeout = MAX_DURATION;
                c.setup_timeout_max = MAX_DURATION;
                c
            }
            _ => after_config(),
        };
        config.seed = Some(seed);
        let servers = (0..self.nodes).map(|_| Server::new(ms(5))).collect();
        let mut w = World::new(config, Kernel::linux(), servers);
        if sample {
            w = w.sampling(ms(250));
        }
        for n in 0..self.dead {
            w.at(
                Instant::ZERO,
                Act::Fault(
                    n,
                    Fault::SynBlackhole {
                        for_: secs(100_000),
                    },
                ),
            );
        }
        w.step(Instant::ZERO); // the faults are in place before the first connect
        let end = at(self.end);
        let mut attempted: Vec<Option<Instant>> = vec![None; self.nodes];
        let mut next_stagger = Instant::ZERO;
        let mut cursor = 0;
        loop {
            if w.tally.first_ready().is_none() {
                let now = w.now;
                let states: Vec<NodeState> = w
                    .nodes
                    .iter()
                    .map(|&n| w.pool.node_state(n).expect("a node"))
                    .collect();
                let connecting = states.iter().any(|s| s.is_connecting());
                let free = |s: &NodeState| match *s {
                    NodeState::Disconnected { reconnect_at } => reconnect_at <= now,
                    _ => false,
                };
                let pick = match how {
                    Bootstrap::OldRule if !connecting => (0..self.nodes)
                        .filter(|&n| free(&states[n]))
                        .min_by_key(|&n| (attempted[n], n)),
                    Bootstrap::Select if !connecting => match w.pool.select(now) {
                        Selection::Connect(id) => Some(id.index()),
                        _ => None,
                    },
                    Bootstrap::Staggered(delay) if now >= next_stagger => {
                        let pick = (0..self.nodes)
                            .map(|i| (cursor + i) % self.nodes)
                            .find(|&n| free(&states[n]));
                        if pick.is_some() {
                            next_stagger = now + delay;
                            w.poke_at(next_stagger);
                        }
                        pick
                    }
                    _ => None,
                };
                if let Some(n) = pick {
                    attempted[n] = Some(now);
                    cursor = n + 1;
                    let _ = w.pool.connect(now, w.nodes[n]);
                    w.pump();
                } else if !connecting {
                    // Everything is backing off: look again when the first backoff ends.
                    let wake = states
                        .iter()
                        .filter_map(|s| match *s {
                            NodeState::Disconnected { reconnect_at } => Some(reconnect_at),
                            _ => None,
                        })
                        .min();
                    if let Some(t) = wake {
                        w.poke_at(t);
                    }
                }
            }
            if !w.step(end) {
                break;
            }
        }
        w.finish();
        let first = w.tally.first_ready().map(|t| seconds(t - Instant::ZERO));
        let abandoned = w
            .tally
            .closes
            .iter()
            .filter(|c| c.2.is_connecting())
            .count() as f64;
        let connects = w.tally.connects as f64;
        Run::finish(
            name,
            w,
            vec![
                ("first ready", first),
                ("connects", Some(connects)),
                ("abandoned", Some(abandoned)),
            ],
        )
    }

    /// The slowest first ready node over `seeds` (the pool's random selection offset varies).
    pub fn worst(&self, how: Bootstrap, seeds: std::ops::Range<u64>) -> f64 {
        seeds
            .map(|seed| {
                self.run("", how, seed, false)
                    .figure("first ready")
                    .unwrap_or(f64::INFINITY)
            })
            .fold(0.0, f64::max)
    }
}

/// Story 3: before, after and staggered.
pub fn story3() -> Replay {
    let d = Dead::story();
    let stagger = Bootstrap::Staggered(ms(250));
    let runs = vec![
        d.run("before", Bootstrap::OldRule, SEED, true),
        d.run("after", Bootstrap::Select, SEED, true),
        d.run("after, staggered", stagger, SEED, true),
    ];
    let seeds = 0..200;
    let worst = [
        d.worst(Bootstrap::OldRule, 0..1),
        d.worst(Bootstrap::Select, seeds.clone()),
        d.worst(stagger, seeds.clone()),
    ];
    let mut rows = common_rows(&runs, false, true);
    let story = format!("127·M = {} s", 127 * d.dead);
    let first = rows.len() - 1;
    rows[first] = row("time to first ready node", &story, &runs, |r| {
        r.figure("first ready").map_or("—".into(), duration)
    });
    rows.push(
        std::iter::once("  worst over 200 seeds".to_string())
            .chain(std::iter::once(String::new()))
            .chain(worst.iter().map(|&w| duration(w)))
            .collect(),
    );
    rows.push(row("connect attempts", "", &runs, |r| {
        count(r.figure("connects"))
    }));
    rows.push(row("  abandoned (timeout)", "", &runs, |r| {
        count(r.figure("abandoned"))
    }));
    // The sweep: M of 5 dead.
    let mut sweep = Vec::new();
    for m in 0..d.nodes {
        let dm = Dead::with_dead(d.nodes, m);
        sweep.push(vec![
            format!("{m} of {}", d.nodes),
            duration(dm.worst(Bootstrap::OldRule, 0..1)),
            duration(dm.worst(Bootstrap::Select, 0..50)),
            duration(dm.worst(stagger, 0..1)),
        ]);
    }
    Replay {
        key: "story3",
        title: "Story 3 — dead bootstrap servers",
        inputs: format!(
            "{} bootstrap servers; the first {} in the list never answer a SYN. \"before\": no \
             setup timeout and no TCP_USER_TIMEOUT, so a connect waits for the kernel's \
             2^(tcp_syn_retries+1) − 1 = 127 s, and the old rule (keep choosing the connecting \
             node; else the least recently attempted one past its backoff, in list order). \
             \"after\": keepwire's defaults through Pool::select (its random offset decides \
             which untried node comes next). \"after, staggered\": the client starts the next \
             candidate in list order every 250 ms until one is ready.",
            d.nodes, d.dead
        ),
        table: Table {
            head: head("story", &runs),
            rows,
        },
        runs,
        extra: Some(Table {
            head: vec![
                "dead of 5 (worst case)".into(),
                "before".into(),
                "after (50 seeds)".into(),
                "staggered".into(),
            ],
            rows: sweep,
        }),
    }
}
