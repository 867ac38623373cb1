//! Scripted faults on a virtual clock, run through the real `keepwire_proto::Pool` on the
//! simulator (`keepwire_tests::sim`): each scenario is one of the failure stories keepwire
//! exists for, at the scale of a unit test.

use std::time::Duration;

use keepwire_proto::{
    CloseReason, Config, Event, Failure, Instant, NodeState, Outcome, Phase, Reason, SubmitError,
    Target,
};
use keepwire_tests::sim::{Act, Fault, Kernel, Restart, Server, World, at, ms, secs};

/// Longer than any test.
const FOREVER: Duration = Duration::from_secs(100_000);

fn exact() -> Config {
    let mut c = Config::default();
    c.setup_timeout_jitter = 0.0;
    c.reconnect_jitter = 0.0;
    c
}

/// Small socket buffers (64 KiB each way) and a 1 ms connect round trip.
fn kernel() -> Kernel {
    Kernel {
        send_buffer: 64 * 1024,
        recv_buffer: 64 * 1024,
        rtt: ms(1),
        ..Kernel::linux()
    }
}

fn healthy() -> Server {
    Server::new(ms(5))
}

/// A world of `servers`, each with the faults it has from the start.
fn world(config: Config, servers: Vec<(Server, Option<Fault>)>) -> World {
    let faults: Vec<Option<Fault>> = servers.iter().map(|s| s.1).collect();
    let mut w =
        World::new(config, kernel(), servers.into_iter().map(|s| s.0).collect()).recording();
    for (n, fault) in faults.into_iter().enumerate() {
        if let Some(fault) = fault {
            w.at(Instant::ZERO, Act::Fault(n, fault));
        }
    }
    w.run_until(Instant::ZERO);
    w
}

/// Times at which the pool closed a connection for `reason`.
fn closes(w: &World, reason: CloseReason) -> Vec<Duration> {
    let record = w.record.as_ref().expect("recording");
    record
        .closes(reason)
        .into_iter()
        .map(|t| t - Instant::ZERO)
        .collect()
}

/// A 16 KiB request to `target`, each with `deadline`.
fn load(target: Target, deadline: Duration) -> impl FnMut(&mut World) {
    move |w: &mut World| {
        let _ = w.submit(target, 16 * 1024, deadline);
    }
}

#[test]
fn accept_and_never_read_is_closed_by_the_write_timeout_and_memory_stays_bounded() {
    let mut config = exact();
    config.max_in_flight = 100_000; // let the watermarks, not the in-flight cap, bound memory
    let hang = Fault::Hang { for_: FOREVER };
    let mut w = world(config, vec![(healthy(), Some(hang))]);
    let node = w.nodes[0];
    let mut peak = 0;
    let mut f = load(Target::Node(node), secs(30));
    let mut tracking = |w: &mut World| {
        f(w);
        peak = peak.max(w.pool.pending_bytes(node).unwrap());
    };
    // 16 KiB every 5 ms: the 16 MiB high watermark is crossed after about 5 s.
    w.run_with(at(secs(12)), ms(5), &mut tracking);
    let closed = closes(&w, CloseReason::WriteTimeout);
    // The kernel's buffers fill within ~40 ms; the first frame they could not take was
    // queued then, so the write timeout fires 10 s later — not after the kernel's 15 minutes
    // (and before TCP_USER_TIMEOUT, which counts from the first zero-window probe).
    assert_eq!(closed.len(), 1, "{closed:?}");
    assert!(
        closed[0] > secs(10) && closed[0] < secs(10) + ms(100),
        "{closed:?}"
    );
    let record = w.record.as_ref().unwrap();
    let lost = record.count(|o| *o == Outcome::ConnectionLost(CloseReason::WriteTimeout));
    assert!(lost > 0);
    // Every request lost with the connection ended at that very instant.
    for (t, o) in record.outcomes.values() {
        if *o == Outcome::ConnectionLost(CloseReason::WriteTimeout) {
            assert_eq!(*t - Instant::ZERO, closed[0]);
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
        peak <= config.high_watermark + 16 * 1024 + config.per_frame_overhead,
        "peak {peak}"
    );
}

#[test]
fn a_syn_blackhole_costs_one_setup_timeout_not_127_seconds() {
    let blackhole = Fault::SynBlackhole { for_: FOREVER };
    let mut w = world(
        exact(),
        vec![(healthy(), Some(blackhole)), (healthy(), None)],
    );
    let mut f = load(Target::Best, secs(60));
    w.run_with(at(secs(40)), ms(100), &mut f);
    let record = w.record.as_ref().unwrap();
    // However selection's random offset fell, nothing waited longer than one setup timeout.
    assert!(
        record.slowest_end() <= secs(10) + ms(100),
        "slowest {:?}",
        record.slowest_end()
    );
    let answered = record.count(|o| matches!(o, Outcome::Response(_)));
    assert!(answered > 250, "answered {answered} of ~400");
    // The blackhole is tried at most once while another node is ready: TCP_USER_TIMEOUT
    // (10 s) or the setup timeout ends it.
    let attempts = record
        .events
        .iter()
        .filter(|(_, e)| {
            matches!(e, Event::StateChanged { node, to: NodeState::Connecting, .. } if node.index() == 0)
        })
        .count();
    assert!(attempts <= 1, "{attempts} attempts");
    // Only requests queued on that first attempt were lost.
    let lost = record.count(|o| matches!(o, Outcome::ConnectionLost(_)));
    assert!(lost <= 101, "{lost}");
}

#[test]
fn a_blackholed_node_alone_gets_growing_setup_timeouts() {
    let mut config = exact();
    config.quarantine_after_failures = 1_000;
    config.quarantine_after_timeouts = 1_000;
    config.socket.user_timeout = None; // the kernel's own SYN give-up is 127 s
    let blackhole = Fault::SynBlackhole { for_: FOREVER };
    let mut w = world(config, vec![(healthy(), Some(blackhole))]);
    let mut f = load(Target::Best, secs(200));
    w.run_with(at(secs(100)), secs(1), &mut f);
    // Each attempt lasts exactly its setup timeout, 1 ns past the limit: 10 s, 20 s, 30 s, 30 s.
    let mut started = None;
    let mut lasted = Vec::new();
    for (t, e) in &w.record.as_ref().unwrap().events {
        if let Event::StateChanged { to, reason, .. } = e {
            if *to == NodeState::Connecting {
                started = Some(*t);
            } else if *reason == Reason::Closed(CloseReason::SetupTimeout) {
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
    let mut w = world(exact(), vec![(Server::new(secs(2)), None)]);
    let node = w.nodes[0];
    let a = w.submit(Target::Node(node), 100, secs(10)).unwrap();
    w.run_for(secs(1));
    // The server resets the connection.
    w.apply(Act::Fault(
        0,
        Fault::Restart {
            how: Restart::Rst,
            down: Duration::ZERO,
        },
    ));
    let record = w.record.as_ref().unwrap();
    assert_eq!(
        record.outcome(a),
        Some(&Outcome::ConnectionLost(CloseReason::Io(Failure::Reset)))
    );
    assert_eq!(record.outcomes[&a].0, at(secs(1)));
    let b = w.submit(Target::Node(node), 100, secs(10)).unwrap();
    w.run_for(secs(3));
    let record = w.record.as_ref().unwrap();
    assert!(matches!(record.outcome(b), Some(Outcome::Response(_))));
    assert_eq!(w.pool.counters().reconnects, 1);
}

#[test]
fn a_restart_on_the_same_address_never_delivers_the_stale_backlog() {
    // The path to the server dies at 1 s; just before 5 s the server is back as a new process
    // on the same address (its host replaced: the old connection never sees a FIN or RST),
    // the path returns at 5 s, and service discovery announces the new epoch.
    let mut config = exact();
    config.write_timeout = secs(60); // only deadlines and eviction act here
    config.quarantine_after_failures = 1_000;
    config.quarantine_after_timeouts = 1_000;
    config.max_in_flight = 10_000;
    let mut w = world(config, vec![(healthy(), None)]);
    let node = w.nodes[0];
    w.at(
        at(secs(1)),
        Act::Fault(0, Fault::PathDrop { for_: secs(4) }),
    );
    let mut f = load(Target::Node(node), secs(2));
    w.run_with(at(secs(5) - ms(1)), ms(10), &mut f);
    // Requests piled up behind the dead connection; those past their deadline were dropped.
    let dropped = w.record.as_ref().unwrap().count(|o| {
        *o == Outcome::DeadlineExceeded {
            phase: Phase::Queued,
        }
    });
    assert!(dropped > 100, "dropped {dropped}");
    let silent = Fault::Restart {
        how: Restart::Silent,
        down: Duration::ZERO,
    };
    w.apply(Act::Fault(0, silent));
    w.run_with(at(secs(5)), ms(10), &mut f);
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
    w.run_with(at(secs(6)), ms(10), &mut f);
    // The new process got only requests still within their deadline: no stale backlog.
    let record = w.record.as_ref().unwrap();
    let fresh = &record.delivered[0];
    assert!(fresh.len() > 90, "the new process serves: {}", fresh.len());
    for (id, delivered_at) in fresh {
        let deadline = record.submitted[id] + secs(2);
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
    let slow = Fault::Slow {
        bytes_per_sec: 400 * 1024,
        latency: Duration::ZERO,
        for_: FOREVER,
    };
    let mut w = world(config, vec![(healthy(), Some(slow))]);
    let node = w.nodes[0];
    let mut f = load(Target::Node(node), secs(30));
    w.run_with(at(secs(8)), ms(10), &mut f);
    let flips: Vec<bool> = w
        .record
        .as_ref()
        .unwrap()
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
    assert_eq!(c.connects, 1, "and no TCP_USER_TIMEOUT either");
    let answered = w
        .record
        .as_ref()
        .unwrap()
        .count(|o| matches!(o, Outcome::Response(_)));
    assert!(answered > 100, "{answered}");
}

#[test]
fn a_path_stall_shorter_than_the_write_timeout_is_survived_a_longer_one_is_detected() {
    let mut config = exact();
    config.socket.user_timeout = None; // the write timeout alone, the portable defence
    let mut w = world(config, vec![(healthy(), None)]);
    let node = w.nodes[0];
    w.at(
        at(secs(2)),
        Act::Fault(0, Fault::PathDrop { for_: secs(4) }),
    );
    w.at(
        at(secs(10)),
        Act::Fault(0, Fault::PathDrop { for_: secs(30) }),
    );
    let mut f = load(Target::Node(node), secs(60));
    w.run_with(at(secs(9)), ms(10), &mut f);
    assert_eq!(
        w.pool.counters().write_timeouts,
        0,
        "a 4 s stall is ridden out"
    );
    w.run_with(at(secs(25)), ms(10), &mut f);
    let closed = closes(&w, CloseReason::WriteTimeout);
    assert_eq!(closed.len(), 1);
    assert!(
        closed[0] > secs(20) && closed[0] < secs(20) + ms(200),
        "{closed:?}"
    );
}

#[test]
fn a_stalled_node_does_not_starve_the_healthy_one() {
    let hang = Fault::Hang { for_: FOREVER };
    let mut w = world(exact(), vec![(healthy(), Some(hang)), (healthy(), None)]);
    let mut rejected = 0;
    let mut f = |w: &mut World| {
        if let Err(SubmitError::NoNode { .. }) = w.submit(Target::Best, 16 * 1024, secs(30)) {
            rejected += 1;
        }
    };
    w.run_with(at(secs(20)), ms(10), &mut f);
    let record = w.record.as_ref().unwrap();
    let answered = record.count(|o| matches!(o, Outcome::Response(_)));
    let lost = record.count(|o| matches!(o, Outcome::ConnectionLost(_)));
    assert!(answered > 1900, "answered {answered} of 2000");
    assert!(
        lost < 10,
        "lost {lost}: selection keeps load off the stalled node"
    );
    assert_eq!(rejected, 0);
}
