//! Simulated servers and the faults that befall them.

use std::time::Duration;

/// How a server's old connections learn that it restarted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Restart {
    /// The process exits and its kernel sends a FIN on every connection; new connects are
    /// refused until it is back.
    Fin,
    /// Its kernel resets every connection; new connects are refused until it is back.
    Rst,
    /// The host is replaced behind the same address (a new pod behind a service address):
    /// no FIN, no RST, packets on the old connections vanish forever, and SYNs go unanswered
    /// until the new process is up.
    Silent,
}

/// A fault, starting when it is scheduled and lasting `for_`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fault {
    /// The server process hangs: it reads and answers nothing, while its kernel still
    /// completes handshakes and acknowledges with a zero window.
    Hang {
        /// How long.
        for_: Duration,
    },
    /// The server restarts; the new process is up `down` later.
    Restart {
        /// What its old connections see.
        how: Restart,
        /// Downtime.
        down: Duration,
    },
    /// The path to the server drops every packet, both ways, SYNs included.
    PathDrop {
        /// How long.
        for_: Duration,
    },
    /// The host answers no SYN (established connections are untouched).
    SynBlackhole {
        /// How long.
        for_: Duration,
    },
    /// The server reads at most `bytes_per_sec` per connection and answers after `latency`.
    Slow {
        /// Read rate per connection.
        bytes_per_sec: u64,
        /// Service latency meanwhile.
        latency: Duration,
        /// How long.
        for_: Duration,
    },
}

impl Fault {
    /// How long it lasts.
    pub fn duration(&self) -> Duration {
        match *self {
            Fault::Hang { for_ }
            | Fault::PathDrop { for_ }
            | Fault::SynBlackhole { for_ }
            | Fault::Slow { for_, .. } => for_,
            Fault::Restart { down, .. } => down,
        }
    }
}

/// What answers a SYN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    Accept,
    Refuse,
    Nothing,
}

/// One simulated server: its service latency and the faults active on it.
#[derive(Clone, Debug)]
pub struct Server {
    /// Service latency of a healthy server (network included).
    pub latency: Duration,
    pub(crate) hung: u32,
    pub(crate) path_down: u32,
    pub(crate) syn_blackhole: u32,
    pub(crate) slow: Option<(u64, Duration)>,
    pub(crate) slow_depth: u32,
    pub(crate) down: Option<Restart>,
    pub(crate) down_depth: u32,
    /// Restarts so far (the server's epoch).
    pub epoch: u64,
}

impl Server {
    /// A healthy server answering after `latency`.
    pub fn new(latency: Duration) -> Self {
        Self {
            latency,
            hung: 0,
            path_down: 0,
            syn_blackhole: 0,
            slow: None,
            slow_depth: 0,
            down: None,
            down_depth: 0,
            epoch: 0,
        }
    }

    /// Whether no fault is active on it.
    pub fn healthy(&self) -> bool {
        self.hung == 0
            && self.path_down == 0
            && self.syn_blackhole == 0
            && self.slow.is_none()
            && self.down.is_none()
    }

    /// Whether packets reach it.
    pub(crate) fn reachable(&self) -> bool {
        self.path_down == 0
    }

    /// Whether its process reads.
    pub(crate) fn reads(&self) -> bool {
        self.hung == 0 && self.down.is_none()
    }

    pub(crate) fn latency(&self) -> Duration {
        self.slow.map_or(self.latency, |(_, l)| l)
    }

    pub(crate) fn answer(&self) -> Answer {
        if self.path_down > 0 || self.syn_blackhole > 0 {
            return Answer::Nothing;
        }
        match self.down {
            Some(Restart::Silent) => Answer::Nothing,
            Some(_) => Answer::Refuse,
            None => Answer::Accept,
        }
    }
}
