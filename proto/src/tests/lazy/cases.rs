//! The timer rules, each checked through every lazy loop that can reach it.

use super::*;

// --- Write timeout -----------------------------------------------------------------------------

#[test]
fn a_frame_not_accepted_within_10_s_closes_its_connection_at_submit_plus_10_s_plus_1_ns() {
    // (loop, server, bytes of the 100 on the wire at the deadline). The sleeper never writes:
    // its first wake is the deadline itself, whatever its kernel would take.
    let cases = [
        (Sleeper, GOOD, 0),
        (Sleeper, STALLED, 0),
        (OneByte, GOOD, 10),
        (OneByte, STALLED, 0),
        (Late, STALLED, 0),
        (Late, SLOW, 10),
    ];
    for (style, server, on_wire) in cases {
        let (mut l, node) = Lazy::with(exact(), style, server);
        let conn = ready(&mut l, node);
        let id = l.submit(node, 100, secs(60));
        let due = l.now + secs(10) + NS;
        assert_eq!(l.pool.poll_timeout(), Some(due));
        l.run_for(secs(60));
        assert_eq!(l.closes, [(due, conn, CloseReason::WriteTimeout)]);
        l.assert_ended(id, &Outcome::ConnectionLost(CloseReason::WriteTimeout), due);
        assert_eq!(l.pool.counters().write_timeouts, 1);
        assert_eq!(l.socket(conn).bytes, on_wire);
        l.finish();
    }
}

#[test]
fn a_frame_queued_before_its_connection_is_ready_times_out_10_s_after_ready() {
    for style in STYLES {
        let (mut l, node) = Lazy::with(exact(), style, STALLED);
        let id = l.submit(node, 100, secs(60)); // opens the connection
        l.run_for(secs(60));
        // The late reporter tells of the connect one tick after the submit.
        let ready = l.reported(|r| matches!(r, Io::Connected))[0];
        let due = ready + secs(10) + NS;
        assert_eq!(l.closes, [(due, l.opens[0].1, CloseReason::WriteTimeout)]);
        l.assert_ended(id, &Outcome::ConnectionLost(CloseReason::WriteTimeout), due);
        l.finish();
    }
}

#[test]
fn a_frame_whose_last_byte_is_accepted_before_the_deadline_never_times_out() {
    // An 8-byte frame: the one-byte writers take 8 or 9 ticks, inside the 10 s.
    let cases = [(OneByte, GOOD), (Late, SLOW), (Late, GOOD)];
    for (style, server) in cases {
        let (mut l, node) = Lazy::with(exact(), style, server);
        let conn = ready(&mut l, node);
        let id = l.submit(node, 8, secs(60));
        let due = l.now + secs(10) + NS;
        l.run_for(secs(60));
        let writes = l.reported(|r| matches!(r, Io::Written(n) if *n > 0));
        assert!(*writes.last().unwrap() < due, "the last byte in time");
        assert_eq!(l.closes, []);
        assert_eq!(l.pool.current_conn(node), Some(conn));
        assert_eq!(l.pool.counters().write_timeouts, 0);
        assert_eq!(l.ended(id).1, ok());
        l.finish();
    }
}

// --- Connection setup timeout and reconnect backoff --------------------------------------------

#[test]
fn a_connect_that_never_completes_times_out_at_open_plus_10_20_30_30_s_plus_1_ns() {
    for style in STYLES {
        let (mut l, node) = Lazy::with(exact(), style, HANG);
        l.keep(node);
        l.run_for(secs(100));
        assert_eq!(l.closes.len(), 4, "{:?}", l.closes);
        let setup: Vec<Duration> = l.opens.iter().map(|(at, _, d)| *d - *at).collect();
        assert_eq!(setup[..4], [10, 20, 30, 30].map(secs));
        for (&(_, conn, deadline), &close) in l.opens.iter().zip(&l.closes) {
            assert_eq!(close, (deadline + NS, conn, CloseReason::SetupTimeout));
        }
        // Each timeout is a disconnect: the next attempt waits out the reconnect backoff.
        let closed: Vec<Instant> = l.closes.iter().map(|c| c.0).collect();
        let waits = gaps(&closed, &l.open_times()[1..]);
        assert_eq!(waits, [50, 100, 200, 400].map(ms));
        assert_eq!(l.pool.counters().setup_timeouts, 4);
        l.finish();
    }
}

#[test]
fn after_a_refused_connect_the_next_open_comes_at_exactly_50_100_200_ms_capped_at_1_s() {
    for style in STYLES {
        let (mut l, node) = Lazy::with(exact(), style, REFUSE);
        l.keep(node);
        l.run_for(secs(20));
        let refused = l.reported(|r| matches!(r, Io::Refused));
        let opens = l.open_times();
        let backoff = [50, 100, 200, 400, 800, 1000, 1000, 1000].map(ms);
        assert_eq!(gaps(&refused, &opens[1..])[..8], backoff);
        if style == Sleeper {
            // It hears of each refusal at the Open, and wakes for nothing but the next Open.
            assert_eq!(refused, opens[..refused.len()]);
            assert_eq!(l.wakes, opens[1..]);
        }
        l.finish();
    }
}

// --- Request deadlines -------------------------------------------------------------------------

#[test]
fn a_request_whose_deadline_passes_while_queued_is_dropped_and_never_reaches_the_peer() {
    for style in STYLES {
        let (mut l, node) = Lazy::with(exact(), style, GOOD);
        ready(&mut l, node);
        let t0 = l.now;
        let a = l.submit(node, 8, secs(60));
        let b = l.submit(node, 8, ms(500));
        l.run_for(secs(30));
        let due = t0 + ms(500) + NS;
        assert_eq!(l.wakes.iter().find(|&&w| w > t0), Some(&due));
        l.assert_ended(b, &deadline_exceeded(Phase::Queued), due);
        assert!(!l.on_wire.contains(&b), "b's bytes never reach the peer");
        assert!(l.on_wire.contains(&a));
        assert_eq!(l.ended(a).1, ok());
        assert_eq!(l.pool.counters().queued_deadline_drops, 1);
        l.finish();
    }
}

/// The sleeper is absent: its first wake after a submit is the request's deadline or its
/// write timeout, so it never has a request in flight.
#[test]
fn a_written_request_never_answered_times_out_in_flight_at_its_deadline_plus_1_ns() {
    for style in [OneByte, Late] {
        let (mut l, node) = Lazy::with(exact(), style, SILENT);
        let conn = ready(&mut l, node);
        let id = l.submit(node, 8, secs(20));
        let due = l.now + secs(20) + NS;
        l.run_for(secs(30));
        l.assert_ended(id, &deadline_exceeded(Phase::InFlight), due);
        assert!(l.on_wire.contains(&id));
        assert_eq!(l.pool.counters().request_timeouts, 1);
        assert_eq!(l.pool.current_conn(node), Some(conn)); // the connection stays
        l.finish();
    }
}

// --- Idle and frame timeouts -------------------------------------------------------------------

#[test]
fn an_idle_ready_connection_closes_at_its_last_request_end_plus_the_limit_plus_1_ns() {
    let mut config = exact();
    config.idle_timeout = secs(30);
    for style in STYLES {
        let (mut l, node) = Lazy::with(config.clone(), style, GOOD);
        // The sleeper never completes a request (nothing wakes it to write one), so it is idle
        // from the moment it is ready; the others finish one first.
        let quiet_since = if style == Sleeper {
            l.connect(node);
            l.now
        } else {
            ready(&mut l, node);
            let id = l.submit(node, 8, secs(60));
            l.run_for(secs(20));
            assert_eq!(l.ended(id).1, ok());
            l.reported(|r| matches!(r, Io::Response(_)))[0]
        };
        let conn = l.pool.current_conn(node).unwrap();
        l.run_for(secs(60));
        let due = quiet_since + secs(30) + NS;
        assert_eq!(l.closes, [(due, conn, CloseReason::Idle)]);
        assert_eq!(l.pool.counters().idle_closes, 1);
        l.finish();
    }
}

/// The sleeper is absent: it never gets a request out, so no response ever starts.
#[test]
fn a_response_that_never_completes_closes_the_connection_too_slow_at_first_partial_plus_10_s() {
    for style in [OneByte, Late] {
        let (mut l, node) = Lazy::with(exact(), style, DRIP);
        let conn = ready(&mut l, node);
        let id = l.submit(node, 8, secs(60));
        l.run_for(secs(40));
        let first = l.reported(|r| matches!(r, Io::Received { partial: true }))[0];
        let due = first + secs(10) + NS;
        let elapsed = secs(10) + NS;
        let reason = CloseReason::Protocol(Violation::TooSlow { elapsed });
        assert_eq!(l.closes, [(due, conn, reason)]);
        l.assert_ended(id, &Outcome::ConnectionLost(reason), due);
        assert_eq!(l.pool.counters().protocol_violations, 1);
        l.finish();
    }
}

// --- Failure detection -------------------------------------------------------------------------

#[test]
fn a_quarantined_node_is_probed_5_10_20_s_after_each_failure_so_at_5_15_35_s() {
    let mut config = exact();
    config.quarantine_after_failures = 1;
    config.quarantine_after_timeouts = 1;
    config.panic_threshold = 0.0;
    for style in STYLES {
        let (mut l, node) = Lazy::with(config.clone(), style, REFUSE);
        l.connect(node);
        l.run_for(secs(6_000));
        let failed = l.reported(|r| matches!(r, Io::Refused));
        let quarantined = l.event_at(|e| match e {
            Event::Quarantined { at, .. } => Some(*at),
            _ => None,
        });
        assert_eq!(quarantined, [failed[0]]);
        let probes = &l.open_times()[1..];
        let pinot = [5, 10, 20, 40, 80, 160, 320, 640, 1280, 2560].map(secs);
        assert_eq!(gaps(&failed, probes), pinot);
        if style != Late {
            let since: Vec<u64> = probes.iter().map(|p| (*p - failed[0]).as_secs()).collect();
            assert_eq!(since, [5, 15, 35, 75, 155, 315, 635, 1275, 2555, 5115]);
        }
        assert_eq!(l.pool.counters().probes, 10);
        assert_eq!(l.pool.is_quarantined(node), Some(true), "stays excluded");
        l.finish();
    }
}

#[test]
fn after_the_last_failed_probe_readmission_comes_one_more_probe_delay_later() {
    let mut config = exact();
    config.quarantine_after_failures = 1;
    config.quarantine_after_timeouts = 1;
    config.panic_threshold = 0.0;
    config.probe_retries = 2;
    config.after_last_probe = AfterLastProbe::Readmit;
    for style in STYLES {
        let (mut l, node) = Lazy::with(config.clone(), style, REFUSE);
        l.connect(node);
        l.run_for(secs(100));
        let failed = l.reported(|r| matches!(r, Io::Refused));
        assert_eq!(failed.len(), 3, "the connect and two probes");
        assert_eq!(l.opens[1].0, failed[0] + secs(5));
        assert_eq!(l.opens[2].0, failed[1] + secs(10));
        let readmitted = l.event_at(|e| match e {
            Event::Readmitted {
                via: Readmission::GaveUp,
                at,
                ..
            } => Some(*at),
            _ => None,
        });
        assert_eq!(readmitted, [failed[2] + secs(20)]);
        assert_eq!(l.pool.is_quarantined(node), Some(false));
        l.finish();
    }
}

// --- Properties --------------------------------------------------------------------------------

/// Random sessions over every loop and server script: the checks built into the loops (nothing
/// due left behind after any input, reports refused only about closed connections) and
/// [`Lazy::finish`] (every request ends exactly once) hold throughout.
#[test]
fn no_lazy_loop_leaves_a_timer_due_and_every_request_ends_exactly_once() {
    for seed in 1..=90u64 {
        std::eprintln!("seed {seed}");
        let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut draw = |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        let mut config = exact();
        config.quarantine_after_failures = 1 + draw(3) as u32;
        config.quarantine_after_timeouts = 1 + draw(3) as u32;
        config.panic_threshold = [0.0, 0.5][draw(2)];
        config.retry_unsent = draw(2) == 1;
        config.write_timeout = secs(1 + draw(10) as u64);
        config.idle_timeout = secs(draw(3) as u64 * 5);
        config.frame_timeout = secs(1 + draw(5) as u64);
        config.probe_retries = draw(3) as u32;
        if draw(2) == 0 {
            config.after_last_probe = AfterLastProbe::Readmit;
        }
        let mut l = Lazy::new(config, STYLES[seed as usize % 3]);
        let servers = [GOOD, GOOD, HANG, REFUSE, STALLED, SLOW, SILENT, DRIP];
        let nodes: Vec<NodeId> = (0..3).map(|_| l.node(servers[draw(8)])).collect();
        for _ in 0..60 {
            let (node, now) = (nodes[draw(3)], l.now);
            match draw(10) {
                0..=3 => {
                    l.try_submit(node, 1 + draw(64), ms(100 + draw(15_000) as u64));
                }
                4..=6 => l.run_for(ms(draw(4_000) as u64)),
                7 => {
                    let _ = l.pool.connect(now, node);
                }
                8 => {
                    if let Some(&id) = l.submitted.get(draw(l.submitted.len().max(1))) {
                        let _ = l.pool.cancel(now, id);
                    }
                }
                _ => {
                    let _ = match draw(4) {
                        0 => l.pool.disable_node(now, node),
                        1 => l.pool.enable_node(now, node),
                        2 => l.pool.evict(now, node),
                        _ => l.pool.set_epoch(now, node, draw(3) as u64),
                    };
                }
            }
            l.after_input();
        }
        l.run_for(secs(120));
        l.finish();
    }
}

// --- Regressions the lazy loops found (each failed before its fix) ----------------------

/// A live connection drains a 30-byte frame one byte per tick while three short requests wait
/// behind it and pass their deadlines. None of their bytes is ever written: they are queued
/// drops, and the node is not failing. The late reporter's hand-out carries them too (one
/// vectored write of everything queued) and is still outstanding when each deadline passes, so
/// proto counts each as an in-flight request timeout; the write report that then says none of
/// their bytes went out does not take that back, and the third quarantines the node and closes
/// the healthy connection. The one-byte writer, reporting at once, sees three queued drops.
#[test]
fn requests_that_never_left_the_queue_do_not_quarantine_a_live_node_whatever_the_loop() {
    let mut config = exact();
    config.quarantine_after_failures = 3;
    config.quarantine_after_timeouts = 3;
    config.panic_threshold = 0.0;
    config.write_timeout = secs(60);
    for style in [OneByte, Late] {
        let (mut l, node) = Lazy::with(config.clone(), style, SLOW);
        let conn = ready(&mut l, node);
        let long = l.submit(node, 30, secs(600));
        let short: Vec<RequestId> = (0..3)
            .map(|i| l.submit(node, 8, ms(2_500 + 1_000 * i)))
            .collect();
        l.run_for(secs(60));
        assert!(short.iter().all(|&id| !l.on_wire.contains(&id)));
        assert_eq!(l.pool.counters().quarantines, 0);
        assert_eq!(l.closes, []);
        assert_eq!(l.pool.current_conn(node), Some(conn));
        assert_eq!(l.ended(long).1, ok());
        l.finish();
    }
}

/// A refused connect leaves the node in a 5 s backoff, and a request comes to wait for it.
/// Then the server restarts and the application records its new epoch: `set_epoch` restarts
/// the backoff (`Disconnected { reconnect_at: now }`, `Reason::BackoffReset`: "it may reconnect
/// now"), but the reconnect timer armed for the waiting request keeps the old instant, so every
/// loop sees the `Open` only then, up to `reconnect_backoff_max` late.
#[test]
fn after_a_new_epoch_a_waiting_request_reconnects_at_once_not_at_the_old_backoff_end() {
    let mut config = exact();
    config.reconnect_backoff = secs(5);
    config.reconnect_backoff_max = secs(30);
    for style in STYLES {
        let (mut l, node) = Lazy::with(config.clone(), style, REFUSE);
        l.connect(node);
        l.run_for(secs(2)); // the late reporter tells of the refusal after one tick
        l.submit(node, 8, secs(60));
        l.servers[node.index()] = GOOD; // the server restarts...
        l.pool.set_epoch(l.now, node, 1).unwrap(); // ...and the application learns of it
        l.after_input();
        let epoch_at = l.now;
        l.run_for(secs(10));
        assert_eq!(l.open_times()[1], epoch_at); // the waiting request reconnects at once
        l.finish();
    }
}
