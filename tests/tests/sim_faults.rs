//! Scripted faults on a virtual clock, run through the real `keepwire_proto::Pool`: each
//! scenario is one of the failure stories keepwire exists for.

#[allow(dead_code)] // the shared simulator: each scenario file uses part of it
mod sim;

use std::time::Duration;

use keepwire_proto::{CloseReason, Config, Event, Outcome, Phase, SubmitError, Target};
use sim::{Peer, Server, World, at, ms, secs};

fn exact() -> Config {
    let mut c = Config::default();
    c.setup_timeout_jitter = 0.0;
    c.reconnect_jitter = 0.0;
    c
}

fn peer(server: Server) -> Peer {
    Peer {
        server,
        stalls: Vec::new(),
    }
}

fn healthy() -> Peer {
    peer(Server::Healthy { latency: ms(5) })
}

/// Times at which the pool closed a connection for `reason`.
fn closes(w: &World, reason: CloseReason) -> Vec<Duration> {
    w.events
        .iter()
        .filter_map(|(t, e)| match e {
            Event::StateChanged {
                reason: keepwire_proto::Reason::Closed(r),
                ..
            } if *r == reason => Some(*t - keepwire_proto::Instant::ZERO),
            _ => None,
        })
        .collect()
}

/// A 16 KiB request every 10 ms to `target`, each with a `deadline`.
fn load(target: Target, deadline: Duration) -> impl FnMut(&mut World) {
    move |w: &mut World| {
        let _ = w.submit(target, 16 * 1024, deadline);
    }
}

#[test]
fn accept_and_never_read_is_closed_by_the_write_timeout_and_memory_stays_bounded() {
    let mut config = exact();
    config.max_in_flight = 100_000; // let the watermarks, not the in-flight cap, bound memory
    let mut w = World::new(config, vec![peer(Server::NeverRead)]);
    let node = w.nodes[0];
    let mut peak = 0;
    let mut f = load(Target::Node(node), secs(30));
    let mut tracking = |w: &mut World| {
        f(w);
        peak = peak.max(w.pool.pending_bytes(node).unwrap());
    };
    // 16 KiB every 5 ms: the 16 MiB high watermark is crossed after about 5 s.
    w.run_until(at(secs(12)), Some((ms(5), &mut tracking)));
    let closed = closes(&w, CloseReason::WriteTimeout);
    // The kernel's 64 KiB buffer fills within ~40 ms; the first frame it could not take was
    // queued then, so the write timeout fires 10 s later — not after the kernel's 15 minutes.
    assert_eq!(closed.len(), 1, "{closed:?}");
    assert!(
        closed[0] > secs(10) && closed[0] < secs(10) + ms(100),
        "{closed:?}"
    );
    let lost = w.count(|o| *o == Outcome::ConnectionLost(CloseReason::WriteTimeout));
    assert!(lost > 0);
    // Every request lost with the connection ended at that very instant.
    for (t, o) in w.outcomes.values() {
        if *o == Outcome::ConnectionLost(CloseReason::WriteTimeout) {
            assert_eq!(*t - keepwire_proto::Instant::ZERO, closed[0]);
        }
    }
    let c = w.pool.counters();
    assert_eq!(c.write_timeouts, 1);
    assert!(
        c.unwritable_rejections > 0,
        "submits failed fast instead of queuing"
    );
    let config = w.pool.config();
    assert!(
        peak <= config.high_watermark + 16 * 1024 + 12 + config.per_frame_overhead,
        "peak {peak}"
    );
}

#[test]
fn a_syn_blackhole_costs_one_setup_timeout_not_127_seconds() {
    let mut w = World::new(exact(), vec![peer(Server::Blackhole), healthy()]);
    let mut f = load(Target::Best, secs(60));
    w.run_until(at(secs(40)), Some((ms(100), &mut f)));
    // However selection's random offset fell, nothing waited longer than one setup timeout.
    assert!(
        w.slowest_end() <= secs(10) + ms(100),
        "slowest {:?}",
        w.slowest_end()
    );
    let answered = w.count(|o| matches!(o, Outcome::Response(_)));
    assert!(answered > 250, "answered {answered} of ~400");
    let c = w.pool.counters();
    assert!(
        c.setup_timeouts <= 1,
        "the blackhole is tried at most once while another node is ready"
    );
    // Every request submitted after the healthy node was ready was answered by it.
    let lost = w.count(|o| matches!(o, Outcome::ConnectionLost(CloseReason::SetupTimeout)));
    assert!(
        lost <= 101,
        "only requests queued on the first attempt: {lost}"
    );
}

#[test]
fn a_blackholed_node_alone_gets_growing_setup_timeouts() {
    let mut config = exact();
    config.quarantine_after_failures = 1_000;
    config.quarantine_after_timeouts = 1_000;
    let mut w = World::new(config, vec![peer(Server::Blackhole)]);
    let mut f = load(Target::Best, secs(200));
    w.run_until(at(secs(100)), Some((secs(1), &mut f)));
    // Each attempt lasts exactly its setup timeout, 1 ns past the limit: 10 s, 20 s, 30 s, 30 s.
    let mut started = None;
    let mut lasted = Vec::new();
    for (t, e) in &w.events {
        if let Event::StateChanged { to, reason, .. } = e {
            if *to == keepwire_proto::NodeState::Connecting {
                started = Some(*t);
            } else if *reason == keepwire_proto::Reason::Closed(CloseReason::SetupTimeout) {
                lasted.push(*t - started.take().unwrap());
            }
        }
    }
    let nanos = Duration::from_nanos(1);
    assert_eq!(
        lasted,
        [
            secs(10) + nanos,
            secs(20) + nanos,
            secs(30) + nanos,
            secs(30) + nanos
        ]
    );
}

#[test]
fn a_reset_fails_in_flight_requests_at_once_and_the_next_request_reconnects_after_backoff() {
    let mut w = World::new(exact(), vec![peer(Server::Healthy { latency: secs(2) })]);
    let node = w.nodes[0];
    let a = w.submit(Target::Node(node), 100, secs(10)).unwrap();
    w.run_for(secs(1));
    w.restart(0); // the server resets the connection
    assert_eq!(
        w.outcome(a),
        Some(&Outcome::ConnectionLost(CloseReason::Io(
            keepwire_proto::Failure::Reset
        )))
    );
    assert_eq!(w.outcomes[&a].0, at(secs(1)) + ms(0));
    let b = w.submit(Target::Node(node), 100, secs(10)).unwrap();
    w.run_for(secs(3));
    assert!(matches!(w.outcome(b), Some(Outcome::Response(_))));
    assert_eq!(w.pool.counters().reconnects, 1);
}

#[test]
fn a_restart_on_the_same_address_never_delivers_the_stale_backlog() {
    // The path to the server dies at 1 s; at 5 s the server is back as a new process on the
    // same address, and service discovery announces its new epoch. The old connection never
    // sees a FIN or RST.
    let mut config = exact();
    config.write_timeout = secs(60); // only deadlines and eviction act here
    config.quarantine_after_failures = 1_000;
    config.quarantine_after_timeouts = 1_000;
    config.max_in_flight = 10_000;
    let mut w = World::new(config, vec![peer(Server::Healthy { latency: ms(5) })]);
    let node = w.nodes[0];
    w.peers[0].stalls.push(at(secs(1))..at(secs(1_000)));
    let mut f = load(Target::Node(node), secs(2));
    w.run_until(at(secs(5)), Some((ms(10), &mut f)));
    // Requests piled up behind the dead connection; those past their deadline were dropped.
    let dropped = w.count(|o| {
        *o == Outcome::DeadlineExceeded {
            phase: Phase::Queued,
        }
    });
    assert!(dropped > 100, "dropped {dropped}");
    w.restart_silently(0);
    w.peers[0].stalls.clear();
    w.pool.set_epoch(w.now, node, 2).unwrap();
    w.pump();
    assert_eq!(
        w.pool.counters().evictions,
        1,
        "the cached connection is evicted"
    );
    assert!(
        w.pool.counters().eviction_retries > 0,
        "queued ones move once to a fresh connection"
    );
    w.run_until(at(secs(6)), Some((ms(10), &mut f)));
    // The new process got only requests still within their deadline: no stale backlog.
    let fresh = &w.delivered[0];
    assert!(fresh.len() > 90, "the new process serves: {}", fresh.len());
    for (id, delivered_at) in fresh {
        let deadline = w.submitted[id] + secs(2);
        assert!(
            deadline >= *delivered_at,
            "{id:?} delivered at {delivered_at:?}, past its deadline"
        );
    }
}

#[test]
fn a_slow_drain_flips_writability_and_fails_fast_without_closing() {
    let mut config = exact();
    config.high_watermark = 256 * 1024;
    config.low_watermark = 128 * 1024;
    let mut w = World::new(
        config,
        vec![peer(Server::SlowDrain {
            bytes_per_sec: 400 * 1024,
        })],
    );
    let node = w.nodes[0];
    let mut f = load(Target::Node(node), secs(30));
    w.run_until(at(secs(8)), Some((ms(10), &mut f)));
    let flips: Vec<bool> = w
        .events
        .iter()
        .filter_map(|(_, e)| match e {
            Event::Writability { writable, .. } => Some(*writable),
            _ => None,
        })
        .collect();
    assert!(flips.len() >= 4, "{flips:?}");
    assert!(
        flips
            .chunks(2)
            .all(|p| !p[0] && p.get(1).is_none_or(|w| *w)),
        "alternating: {flips:?}"
    );
    let c = w.pool.counters();
    assert!(c.unwritable_rejections > 0);
    assert_eq!(c.write_timeouts, 0, "slow but moving: no write timeout");
    assert_eq!(c.connects, 1);
    assert!(w.count(|o| matches!(o, Outcome::Response(_))) > 100);
}

#[test]
fn a_path_stall_shorter_than_the_write_timeout_is_survived_a_longer_one_is_detected() {
    let mut w = World::new(exact(), vec![healthy()]);
    let node = w.nodes[0];
    w.peers[0].stalls.push(at(secs(2))..at(secs(6)));
    w.peers[0].stalls.push(at(secs(10))..at(secs(40)));
    let mut f = load(Target::Node(node), secs(60));
    w.run_until(at(secs(9)), Some((ms(10), &mut f)));
    assert_eq!(
        w.pool.counters().write_timeouts,
        0,
        "a 4 s stall is ridden out"
    );
    w.run_until(at(secs(25)), Some((ms(10), &mut f)));
    let closed = closes(&w, CloseReason::WriteTimeout);
    assert_eq!(closed.len(), 1);
    assert!(
        closed[0] > secs(20) && closed[0] < secs(20) + ms(200),
        "{closed:?}"
    );
}

#[test]
fn a_stalled_node_does_not_starve_the_healthy_one() {
    let mut w = World::new(exact(), vec![peer(Server::NeverRead), healthy()]);
    let mut rejected = 0;
    let mut f = |w: &mut World| {
        if let Err(SubmitError::NoNode { .. }) = w.submit(Target::Best, 16 * 1024, secs(30)) {
            rejected += 1;
        }
    };
    w.run_until(at(secs(20)), Some((ms(10), &mut f)));
    let answered = w.count(|o| matches!(o, Outcome::Response(_)));
    let lost = w.count(|o| matches!(o, Outcome::ConnectionLost(_)));
    assert!(answered > 1900, "answered {answered} of 2000");
    assert!(
        lost < 10,
        "lost {lost}: selection keeps load off the stalled node"
    );
    assert_eq!(rejected, 0);
}
