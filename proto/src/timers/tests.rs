//! The deadline index's tests: its order against models, positions, the lane and the table.

use alloc::format;

use super::*;
use crate::tests::xorshift;

/// Whether `got` may come out next of an index holding `model`: an entry of the earliest
/// instant and, if a node timer is due then, the least of them (the heap's key order puts
/// node timers first); which request deadline of one instant comes first depends on where
/// each was put (see `equal_instants_fire_node_timers_first_then_requests_as_scheduled`).
fn may_come_next(model: &[(Instant, TimerKey)], got: Option<(Instant, TimerKey)>) -> bool {
    let Some(earliest) = model.iter().map(|e| e.0).min() else {
        return got.is_none();
    };
    let least_node = model
        .iter()
        .filter(|e| e.0 == earliest && matches!(e.1, TimerKey::Node(..)))
        .min();
    got.is_some_and(|got| {
        model.contains(&got) && got.0 == earliest && least_node.is_none_or(|&n| n == got)
    })
}

/// Pops the index, checks the entry against the model (and against the peek before it)
/// and takes it out of the model.
fn pop_checked(heap: &mut TimerHeap, model: &mut Vec<(Instant, TimerKey)>, at: &str) {
    let peeked = heap.peek();
    let got = heap.pop();
    assert_eq!(
        peeked, got,
        "{at}: the peek named another entry than the pop"
    );
    assert!(may_come_next(model, got), "{at}: {got:?}");
    model.retain(|&e| Some(e) != got);
}

/// The checks after a model test's step: what may come next, the count, the positions, and
/// both lanes within their slack of dead entries.
fn assert_agrees(heap: &TimerHeap, model: &[(Instant, TimerKey)], at: &str) {
    assert!(may_come_next(model, heap.peek()), "{at}");
    assert_eq!(heap.len(), model.len(), "{at}");
    assert!(heap.positions_agree(), "{at}");
    let lanes = [
        (heap.lane.len(), heap.lane.live()),
        (heap.write_lane.len(), heap.write_lane.live()),
    ];
    for (len, live) in lanes {
        assert!(
            len <= 2 * live + LANE_SLACK,
            "{at}: a lane outgrew its live entries"
        );
    }
}

#[test]
fn equal_instants_fire_node_timers_first_then_requests_as_scheduled() {
    let node = NodeId::new(0, 0);
    let request = |slot: u32| TimerKey::Request(RequestId::new(slot, 0));
    let mut heap = TimerHeap::default();
    let at = Instant::from_secs(5);
    for slot in [5, 2, 9] {
        heap.schedule(at, request(slot));
    }
    // Earlier than the lane's last: into the heap, and out first.
    heap.schedule(Instant::from_secs(4), request(7));
    // Once a later deadline joins the lane, one at the earlier instant goes to the heap,
    // and at that instant the heap's entries come first.
    heap.schedule(Instant::from_secs(6), request(3));
    heap.schedule(at, request(1));
    heap.schedule(at, TimerKey::Node(node, NodeTimer::Idle));
    heap.schedule(at, TimerKey::Node(node, NodeTimer::Setup));
    let order: Vec<_> = core::iter::from_fn(|| heap.pop()).collect();
    let expected = [
        (Instant::from_secs(4), request(7)),
        (at, TimerKey::Node(node, NodeTimer::Setup)),
        (at, TimerKey::Node(node, NodeTimer::Idle)),
        (at, request(1)),
        (at, request(5)),
        (at, request(2)),
        (at, request(9)),
        (Instant::from_secs(6), request(3)),
    ];
    assert_eq!(order, expected);
}

#[test]
fn heap_pops_earliest_first() {
    let node = NodeId::new(0, 0);
    let mut h = TimerHeap::default();
    h.schedule(
        Instant::from_secs(3),
        TimerKey::Node(node, NodeTimer::Setup),
    );
    h.schedule(
        Instant::from_secs(1),
        TimerKey::Request(RequestId::new(0, 0)),
    );
    h.schedule(Instant::from_secs(2), TimerKey::Node(node, NodeTimer::Idle));
    assert_eq!(h.peek().unwrap().0, Instant::from_secs(1));
    let order: Vec<_> = core::iter::from_fn(|| h.pop()).map(|e| e.0).collect();
    assert_eq!(order, [1, 2, 3].map(Instant::from_secs));
}

/// The slot a key's entry occupies: one entry per node timer and per request slot.
fn slot(key: TimerKey) -> (u8, u32, u8) {
    match key {
        TimerKey::Node(node, timer) => (0, node.slot(), timer as u8),
        TimerKey::Request(id) => (1, id.slot() as u32, 0),
    }
}

/// A random key over a few node and request slots, of two generations each, so
/// rescheduling, slot reuse and exact-key cancels are all common.
fn some_key(x: u64) -> TimerKey {
    let generation = (x >> 8) as u32 % 2;
    if x % 3 == 0 {
        let node = NodeId::new((x >> 16) as u32 % 5, generation);
        TimerKey::Node(
            node,
            NodeTimer::ALL[(x >> 24) as usize % NodeTimer::ALL.len()],
        )
    } else {
        TimerKey::Request(RequestId::new((x >> 16) as u32 % 40, generation))
    }
}

#[test]
fn the_index_gives_what_a_list_of_one_entry_per_slot_gives() {
    let mut heap = TimerHeap::default();
    let mut model: Vec<(Instant, TimerKey)> = Vec::new();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for step in 0..20_000u64 {
        xorshift(&mut x);
        match x % 10 {
            0..=4 => {
                // Few distinct instants, so ties between keys are common.
                let entry = (Instant::from_secs((x >> 32) % 50), some_key(x));
                let stopped = model.iter().all(|e| slot(e.1) != slot(entry.1));
                match entry.1 {
                    // A stopped node timer is armed as the node arms its write timer: the
                    // push that stays at the heap's end when it can, inline.
                    TimerKey::Node(node, timer) if stopped => {
                        heap.schedule_stopped_node_inline(entry.0, node, timer);
                    }
                    _ => heap.schedule(entry.0, entry.1),
                }
                model.retain(|e| slot(e.1) != slot(entry.1));
                model.push(entry);
            }
            5 | 6 => {
                let key = some_key(x);
                heap.cancel(key);
                model.retain(|e| e.1 != key);
            }
            7 | 8 => {
                pop_checked(&mut heap, &mut model, &format!("step {step}"));
            }
            _ => {
                // Cancel what is there, so exact-key cancels hit as often as they miss.
                if let Some(&(_, key)) = model.get((x >> 32) as usize % model.len().max(1)) {
                    heap.cancel(key);
                    model.retain(|e| e.1 != key);
                }
            }
        }
        assert!(may_come_next(&model, heap.peek()), "step {step}");
        assert_eq!(heap.len(), model.len(), "step {step}");
        assert!(heap.positions_agree(), "step {step}");
    }
}

#[test]
fn a_cancel_of_another_generation_leaves_the_slot_alone() {
    let mut heap = TimerHeap::default();
    let (old, new) = (RequestId::new(3, 0), RequestId::new(3, 1));
    heap.schedule(Instant::from_secs(2), TimerKey::Request(old));
    heap.schedule(Instant::from_secs(5), TimerKey::Request(new));
    assert_eq!(heap.len(), 1, "the newer generation took the slot's entry");
    heap.cancel(TimerKey::Request(old));
    assert_eq!(
        heap.pop(),
        Some((Instant::from_secs(5), TimerKey::Request(new)))
    );
    heap.cancel(TimerKey::Request(new));
    assert_eq!(heap.peek(), None);
}

#[test]
fn an_emptied_heap_keeps_working() {
    let key = |i: u32| TimerKey::Request(RequestId::new(i, 0));
    let mut heap = TimerHeap::default();
    assert_eq!(heap.pop(), None);
    for i in 0..9 {
        heap.schedule(Instant::from_secs(u64::from(i % 3)), key(i));
    }
    for i in 0..9 {
        heap.cancel(key(i));
    }
    assert_eq!((heap.len(), heap.peek()), (0, None));
    heap.schedule(Instant::from_secs(5), key(1));
    heap.schedule(Instant::from_secs(4), key(2));
    assert!(heap.positions_agree());
    assert_eq!(heap.pop(), Some((Instant::from_secs(4), key(2))));
}

#[test]
fn deep_heaps_pop_in_order_through_growing_and_shrinking_phases() {
    // Many distinct instants and thousands of entries, so sifts run several levels deep
    // between siblings' and cousins' subtrees; cancels take entries from the middle.
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for round in 0..4u32 {
        let mut heap = TimerHeap::default();
        let mut model: Vec<(Instant, TimerKey)> = Vec::new();
        for step in 0..6_000u32 {
            xorshift(&mut x);
            // Grow for the first half, then mostly shrink.
            let push = if step < 3_000 { x % 4 != 0 } else { x % 4 == 0 };
            if push {
                let entry = (
                    Instant::from_nanos(x % 1_000_000),
                    TimerKey::Request(RequestId::new(step, round)),
                );
                heap.schedule(entry.0, entry.1);
                model.push(entry);
            } else if x % 3 == 0 && !model.is_empty() {
                let (_, key) = model.swap_remove((x >> 8) as usize % model.len());
                heap.cancel(key);
            } else {
                pop_checked(&mut heap, &mut model, &format!("round {round} step {step}"));
            }
        }
        assert!(heap.positions_agree());
    }
}

#[test]
fn node_timers_armed_in_place_pop_in_order_in_a_deep_heap() {
    // Hundreds of nodes, each timer armed from stopped (as a submit arms its write timer:
    // the push that stays at the heap's end when its parent is no later), so the node heap
    // is several levels deep and most pushes compare with a parent that is not the entry
    // just before them; pops and cancels keep it churning.
    let mut x = 0x6a09_e667_f3bc_c908u64;
    let mut heap = TimerHeap::default();
    let mut model: Vec<(Instant, TimerKey)> = Vec::new();
    for step in 0..6_000u32 {
        xorshift(&mut x);
        let node = NodeId::new((x >> 8) as u32 % 300, 0);
        let timer = NodeTimer::ALL[(x >> 24) as usize % NodeTimer::ALL.len()];
        let key = TimerKey::Node(node, timer);
        if x % 4 != 0 && !model.iter().any(|e| e.1 == key) {
            let at = Instant::from_nanos((x >> 32) % 1_000_000);
            heap.schedule_stopped_node_inline(at, node, timer);
            model.push((at, key));
        } else if x % 8 == 0 && !model.is_empty() {
            let (_, key) = model.swap_remove((x >> 40) as usize % model.len());
            heap.cancel(key);
        } else {
            pop_checked(&mut heap, &mut model, &format!("step {step}"));
        }
        assert_eq!(heap.len(), model.len(), "step {step}");
        assert!(heap.positions_agree(), "step {step}");
    }
    while !model.is_empty() {
        pop_checked(&mut heap, &mut model, "draining");
    }
}

#[test]
fn rising_deadlines_ended_in_any_order_come_out_by_instant() {
    // Mostly rising instants (one timeout per request, some shorter), ended oldest first,
    // from the middle or by popping, with slots reused by newer generations: the lane
    // takes most entries, the heap the rest, and together they give the model's order.
    let mut x = 0x853c_49e6_748f_ea9bu64;
    for round in 0..4u32 {
        let mut heap = TimerHeap::default();
        let mut model: Vec<(Instant, TimerKey)> = Vec::new();
        let mut generation = [0u32; 300];
        let mut now = 0u64;
        let mut laned = 0;
        for step in 0..8_000u32 {
            xorshift(&mut x);
            now += x % 3; // sometimes the same instant as the last
            match x % 8 {
                0..=3 => {
                    let slot = (x >> 16) as usize % generation.len();
                    generation[slot] += 1;
                    let key = TimerKey::Request(RequestId::new(slot as u32, generation[slot]));
                    let timeout = if x % 16 < 14 {
                        1_000
                    } else {
                        (x >> 40) % 1_000
                    };
                    let at = Instant::from_nanos(now + timeout);
                    let live_before = heap.lane.live();
                    heap.schedule(at, key);
                    laned += usize::from(heap.lane.live() > live_before);
                    model.retain(|e| slot_of(e.1) != slot);
                    model.push((at, key));
                }
                4 | 5 => {
                    model.sort();
                    if !model.is_empty() {
                        // Mostly the oldest, sometimes one from the middle.
                        let i = if x % 4 == 0 {
                            (x >> 8) as usize % model.len()
                        } else {
                            0
                        };
                        let (_, key) = model.remove(i);
                        heap.cancel(key);
                    }
                }
                6 => {
                    // A cancel of a key whose slot moved on changes nothing.
                    let slot = (x >> 16) as usize % generation.len();
                    let stale = RequestId::new(slot as u32, generation[slot].wrapping_sub(1));
                    heap.cancel(TimerKey::Request(stale));
                }
                _ => {
                    let at = format!("round {round} step {step}");
                    pop_checked(&mut heap, &mut model, &at);
                }
            }
            assert_agrees(&heap, &model, &format!("round {round} step {step}"));
        }
        assert!(
            laned > 2_000,
            "round {round}: only {laned} entries went to the lane"
        );
    }

    fn slot_of(key: TimerKey) -> usize {
        match key {
            TimerKey::Request(id) => id.slot(),
            TimerKey::Node(..) => unreachable!("requests only"),
        }
    }
}

#[test]
fn a_lane_ended_from_the_middle_is_compacted_and_keeps_its_order() {
    let key = |i: u32| TimerKey::Request(RequestId::new(i, 0));
    let mut heap = TimerHeap::default();
    for i in 0..500 {
        heap.schedule(Instant::from_secs(u64::from(i)), key(i));
    }
    assert_eq!(
        (heap.lane.live(), heap.requests.entries.len()),
        (500, 0),
        "all in the lane"
    );
    // End everything but the first and the last: the ends stay live, so the dead ones
    // wait in the middle until they outnumber the live ones by more than the slack, and
    // compaction takes them out (rarely: each one costs a pass over the lane).
    let mut compactions = 0;
    for i in 1..499 {
        let before = heap.lane.len();
        heap.cancel(key(i));
        assert!(
            heap.lane.len() <= 2 * heap.lane.live() + LANE_SLACK,
            "at {i}"
        );
        compactions += usize::from(heap.lane.len() < before);
    }
    assert!(heap.positions_agree());
    assert_eq!(heap.len(), 2);
    // Compacted at 217 live (500 > 2 x 217 + 64), at 76 (217 > 2 x 76 + 64) and at 5
    // (76 > 2 x 5 + 64), leaving those 2 live and the 3 ended since.
    assert_eq!((compactions, heap.lane.len()), (3, 5));
    // An earlier deadline than the lane's last goes to the heap, and still comes first.
    heap.schedule(Instant::from_secs(3), key(7));
    assert_eq!(heap.requests.entries.len(), 1);
    let order: Vec<_> = core::iter::from_fn(|| heap.pop()).collect();
    let expected = [(0, 0), (3, 7), (499, 499)].map(|(at, i)| (Instant::from_secs(at), key(i)));
    assert_eq!(order, expected);
    assert!(heap.positions_agree());
}

#[test]
fn an_early_stack_ended_from_below_its_top_is_compacted_and_keeps_its_order() {
    let key = |i: u32| TimerKey::Request(RequestId::new(i, 0));
    let mut heap = TimerHeap::default();
    // The first deadline goes to the lane; each later one is earlier than every other, so
    // all 500 go onto the early stack, key 1 at the bottom and key 500 on top.
    heap.schedule(Instant::from_secs(1_000), key(0));
    for i in 1..=500 {
        heap.schedule(Instant::from_secs(u64::from(1_000 - i)), key(i));
    }
    assert_eq!(
        (
            heap.lane.live(),
            heap.early_live,
            heap.requests.entries.len()
        ),
        (1, 500, 0),
        "all but the first on the early stack"
    );
    // End everything on the stack but its bottom and its top: the dead ones wait below the
    // live top until they outnumber the live ones by more than the slack, and compaction
    // takes them out, as in the lane.
    let mut compactions = 0;
    for i in 2..500 {
        let before = heap.early.len();
        heap.cancel(key(i));
        assert!(
            heap.early.len() <= 2 * heap.early_live + LANE_SLACK,
            "at {i}"
        );
        compactions += usize::from(heap.early.len() < before);
    }
    assert!(heap.positions_agree());
    assert_eq!(heap.len(), 3);
    // Compacted at 217 live (500 > 2 x 217 + 64), at 76 (217 > 2 x 76 + 64) and at 5
    // (76 > 2 x 5 + 64), leaving those 2 live and the 3 ended since.
    assert_eq!((compactions, heap.early.len()), (3, 5));
    let order: Vec<_> = core::iter::from_fn(|| heap.pop()).collect();
    let expected =
        [(500, 500), (999, 1), (1_000, 0)].map(|(at, i)| (Instant::from_secs(at), key(i)));
    assert_eq!(order, expected);
    assert!(heap.positions_agree());
}

/// A heap entry cancelled below the top is replaced by the last one, sifted down among the
/// hole's own children only: an earlier entry of a cousin's subtree (next to them in the
/// array) stays where it is, under its own parent.
#[test]
fn an_entry_cancelled_from_the_middle_is_replaced_from_the_holes_own_children() {
    let key = |n: u32| {
        let node = NodeId::new(n, 0);
        TimerKey::Node(node, NodeTimer::Setup)
    };
    // A heap laid out in array order (each entry no earlier than its parent stays where it is
    // pushed): position 1 holds 100 s, its child 5 holds 101 s with children 21..=24 at
    // 200..=203 s, and position 20 (a child of 4, beside 5's children) holds 50 s.
    let mut secs = [0, 100, 1, 2, 3, 101, 110, 111, 112].to_vec();
    secs.extend([
        10, 11, 12, 13, 20, 21, 22, 23, 30, 31, 32, 50, 200, 201, 202, 203,
    ]);
    let mut heap = TimerHeap::default();
    for (n, &s) in secs.iter().enumerate() {
        heap.schedule(Instant::from_secs(s), key(n as u32));
    }
    let at = |i: usize| heap.nodes.entries[i].0;
    assert_eq!(
        [at(1), at(5), at(20)],
        [100, 101, 50].map(Instant::from_secs)
    );
    // 101 s goes: the last entry (203 s) fills its place and moves down under 200 s.
    heap.cancel(key(5));
    let at = |i: usize| heap.nodes.entries[i].0;
    assert_eq!(
        [at(5), at(20), at(21)],
        [200, 50, 203].map(Instant::from_secs)
    );
    assert!(heap.positions_agree());
    let order: Vec<_> = core::iter::from_fn(|| heap.pop()).map(|e| e.0).collect();
    let mut expected: Vec<_> = secs.iter().filter(|&&s| s != 101).copied().collect();
    expected.sort_unstable();
    assert_eq!(
        order,
        expected
            .into_iter()
            .map(Instant::from_secs)
            .collect::<Vec<_>>()
    );
}

#[test]
fn a_deadline_earlier_than_all_others_takes_its_place_among_the_heaps_in_key_order() {
    let request = |slot: u32| TimerKey::Request(RequestId::new(slot, 0));
    let mut heap = TimerHeap::default();
    let (soon, sooner, later) = (
        Instant::from_secs(5),
        Instant::from_secs(4),
        Instant::from_secs(10),
    );
    heap.schedule(later, request(1));
    heap.schedule(later, request(2));
    // Earlier than every other deadline: onto the early stack, not into the heap.
    heap.schedule(soon, request(9));
    // At the stack's top instant, so not earlier than all: into the heap.
    heap.schedule(soon, request(3));
    heap.schedule(sooner, request(8));
    assert_eq!((heap.early.len(), heap.requests.entries.len()), (2, 1));
    assert!(heap.positions_agree());
    // At 5 s the heap's 3 and the stack's 9 come out in key order, as from one heap.
    let order: Vec<_> = core::iter::from_fn(|| heap.pop()).collect();
    let expected = [(sooner, 8), (soon, 3), (soon, 9), (later, 1), (later, 2)];
    assert_eq!(order, expected.map(|(at, slot)| (at, request(slot))));
}

#[test]
fn a_timer_armed_from_stopped_waits_beside_the_node_heap_and_comes_out_in_key_order() {
    let (a, b, c) = (NodeId::new(0, 0), NodeId::new(1, 0), NodeId::new(2, 0));
    let at = Instant::from_secs(5);
    let mut heap = TimerHeap::default();
    heap.schedule_stopped_node(at, b, NodeTimer::Setup);
    assert_eq!(heap.fresh, Some((at, (b, NodeTimer::Setup))));
    assert!(heap.nodes.entries.is_empty());
    // With the fresh entry taken, the next one goes into the heap (a write timer would go
    // to the write lane: see the next test).
    heap.schedule_stopped_node(at, a, NodeTimer::Probe);
    assert_eq!(heap.nodes.entries, [(at, (a, NodeTimer::Probe))]);
    assert!(heap.positions_agree());
    // Stopped again, the fresh one leaves the index with no heap operation.
    heap.cancel_armed_node(b, NodeTimer::Setup);
    assert_eq!((heap.fresh, heap.nodes.entries.len()), (None, 1));
    // Of two node timers due at one instant the one with the lesser key comes first, held
    // fresh or in the heap.
    heap.schedule_stopped_node(at, a, NodeTimer::Setup);
    assert_eq!(heap.peek(), Some((at, TimerKey::Node(a, NodeTimer::Setup))));
    heap.cancel_node(a, NodeTimer::Setup);
    heap.schedule_stopped_node(at, c, NodeTimer::Idle);
    assert_eq!(heap.peek(), Some((at, TimerKey::Node(a, NodeTimer::Probe))));
    // Re-armed, it moves where it is; a cancel of another generation leaves it.
    heap.schedule_node(Instant::from_secs(2), c, NodeTimer::Idle);
    heap.cancel_node(NodeId::new(2, 1), NodeTimer::Idle);
    assert_eq!(heap.next_instant(), Some(Instant::from_secs(2)));
    assert!(heap.positions_agree());
    let order: Vec<_> = core::iter::from_fn(|| heap.pop()).collect();
    let expected = [
        (Instant::from_secs(2), (c, NodeTimer::Idle)),
        (at, (a, NodeTimer::Probe)),
    ];
    assert_eq!(
        order,
        expected.map(|(at, (n, t))| (at, TimerKey::Node(n, t)))
    );
    assert_eq!((heap.fresh, heap.len()), (None, 0));
    // An entry at the latest instant still counts, wherever it is held: fresh, in the node
    // heap, in the write lane, in the lane (no other part takes one).
    let latest = Instant::from_nanos(u64::MAX);
    heap.schedule_stopped_node(latest, a, NodeTimer::Idle);
    assert_eq!(heap.next_instant(), Some(latest));
    heap.schedule_stopped_node(latest, b, NodeTimer::Idle);
    heap.schedule_stopped_node(latest, c, NodeTimer::WriteTimeout);
    heap.cancel_node(a, NodeTimer::Idle);
    assert_eq!(
        (
            heap.nodes.entries.len(),
            heap.write_lane.len(),
            heap.next_instant()
        ),
        (1, 1, Some(latest))
    );
    heap.cancel_node(b, NodeTimer::Idle);
    assert_eq!(
        (heap.write_lane.len(), heap.next_instant()),
        (1, Some(latest))
    );
    heap.schedule(latest, TimerKey::Request(RequestId::new(0, 0)));
    heap.cancel_node(c, NodeTimer::WriteTimeout);
    assert_eq!((heap.lane.len(), heap.next_instant()), (1, Some(latest)));
    heap.pop();
    assert_eq!(heap.next_instant(), None);
}

#[test]
fn the_table_has_a_slot_for_every_timer() {
    let mut t = TimerTable::default();
    for (i, &timer) in NodeTimer::ALL.iter().enumerate() {
        assert_eq!(timer as usize, i);
        t.set(timer, Instant::from_secs(i as u64));
    }
    for (i, &timer) in NodeTimer::ALL.iter().enumerate() {
        assert_eq!(t.get(timer), Some(Instant::from_secs(i as u64)));
    }
}

#[test]
fn table_arms_and_stops() {
    let mut t = TimerTable::default();
    t.set(NodeTimer::Probe, Instant::from_secs(5));
    assert_eq!(t.get(NodeTimer::Probe), Some(Instant::from_secs(5)));
    t.stop(NodeTimer::Probe);
    assert_eq!(t.get(NodeTimer::Probe), None);
}

#[test]
fn write_timers_armed_in_key_order_wait_in_the_write_lane_and_leave_its_front() {
    let node = |slot: u32| NodeId::new(slot, 0);
    let write = NodeTimer::WriteTimeout;
    let at = Instant::from_secs(10);
    let mut heap = TimerHeap::default();
    // A round over ten connections at one instant: the first takes the fresh entry, the
    // other nine, armed in key order, the write lane; none goes into the node heap.
    for slot in 0..10 {
        heap.schedule_stopped_node_inline(at, node(slot), write);
    }
    assert_eq!(
        (
            heap.fresh.is_some(),
            heap.write_lane.len(),
            heap.nodes.entries.len()
        ),
        (true, 9, 0)
    );
    // Other timers never go to the write lane. A write timer at the instant of its last entry
    // does, even of a lesser key: the lane is then marked unsorted.
    heap.cancel_armed_node(node(0), write);
    heap.schedule_stopped_node_inline(at, node(20), NodeTimer::Idle);
    assert!(!heap.write_lane_unsorted);
    heap.schedule_stopped_node_inline(at, node(0), write);
    heap.schedule_stopped_node_inline(at, node(30), NodeTimer::Setup);
    assert_eq!(
        (
            heap.write_lane.len(),
            heap.nodes.entries.len(),
            heap.write_lane_unsorted
        ),
        (10, 1, true),
        "node 0's write timer is at the lane's back, the setup timer in the heap"
    );
    assert_eq!(heap.fresh, Some((at, (node(20), NodeTimer::Idle))));
    assert!(heap.positions_agree());
    // The least entry comes first all the same, from the lane's back.
    assert_eq!(heap.peek(), Some((at, TimerKey::Node(node(0), write))));
    // Reports in the order of the arms take the lane's front each time.
    for slot in 1..4 {
        heap.cancel_armed_node(node(slot), write);
        assert_eq!(heap.write_lane.len(), 10 - slot as usize);
        assert!(heap.positions_agree());
    }
    // One from the middle leaves a dead entry, which goes with the front before it.
    heap.cancel_armed_node(node(6), write);
    assert_eq!((heap.write_lane.len(), heap.write_lane.live()), (7, 6));
    heap.cancel_node(NodeId::new(5, 1), write); // another generation: left alone
    assert_eq!(heap.write_lane.live(), 6);
    heap.cancel_armed_node(node(4), write);
    heap.cancel_armed_node(node(5), write);
    assert_eq!((heap.write_lane.len(), heap.write_lane.live()), (4, 4));
    // Re-armed later, a laned timer moves to the lane's back; earlier, into the heap.
    heap.schedule_node(Instant::from_secs(11), node(7), write);
    heap.schedule_node(Instant::from_secs(1), node(8), write);
    assert_eq!((heap.write_lane.len(), heap.write_lane.live()), (3, 3));
    assert!(heap.positions_agree());
    // All of them come out by instant, then in key order, wherever they wait.
    let order: Vec<_> = core::iter::from_fn(|| heap.pop()).collect();
    let expected = [
        (Instant::from_secs(1), node(8), write),
        (at, node(0), write),
        (at, node(9), write),
        (at, node(20), NodeTimer::Idle),
        (at, node(30), NodeTimer::Setup),
        (Instant::from_secs(11), node(7), write),
    ];
    assert_eq!(order, expected.map(|(at, n, t)| (at, TimerKey::Node(n, t))));
    assert_eq!(heap.len(), 0);
}

#[test]
fn write_timers_armed_at_one_instant_out_of_node_order_wait_in_the_lane_and_fire_in_key_order() {
    let write = NodeTimer::WriteTimeout;
    let at = Instant::from_secs(10);
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    // A router's round over 64 connections, submitting to them in a shuffled order at one
    // instant: the first arm takes the fresh entry, every other one the write lane.
    let mut shuffled: Vec<u32> = (0..64).collect();
    for i in (1..shuffled.len()).rev() {
        xorshift(&mut x);
        shuffled.swap(i, x as usize % (i + 1));
    }
    let mut heap = TimerHeap::default();
    for round in 0..2 {
        for &slot in &shuffled {
            heap.schedule_stopped_node(at, NodeId::new(slot, 0), write);
        }
        assert_eq!((heap.write_lane.len(), heap.nodes.entries.len()), (63, 0));
        assert!(heap.write_lane_unsorted && heap.positions_agree());
        if round == 0 {
            // Their reports, in the order of the arms, take the lane's front each time.
            for (k, &slot) in shuffled.iter().enumerate() {
                heap.cancel_armed_node(NodeId::new(slot, 0), write);
                let left = 63 - k.min(63);
                assert_eq!(
                    (heap.write_lane.len(), heap.write_lane.live()),
                    (left, left)
                );
            }
            assert_eq!(heap.len(), 0);
        }
    }
    // One report from the middle. A deadline due earlier comes out first, and its pop
    // leaves the lane as it is.
    heap.cancel_armed_node(NodeId::new(shuffled[40], 0), write);
    let earlier = (
        Instant::from_secs(9),
        TimerKey::Request(RequestId::new(0, 0)),
    );
    heap.schedule(earlier.0, earlier.1);
    assert_eq!(heap.pop(), Some(earlier));
    assert!(heap.write_lane_unsorted && heap.positions_agree());
    // Then the write timers fire: in key order, each the one `peek` named, and the first
    // `pop` leaves the lane sorted.
    let mut fired = Vec::new();
    while let Some(next) = heap.peek() {
        assert_eq!(heap.pop(), Some(next));
        assert!(!heap.write_lane_unsorted && heap.positions_agree());
        fired.push(next);
    }
    let expected: Vec<_> = (0..64u32)
        .filter(|&slot| slot != shuffled[40])
        .map(|slot| (at, TimerKey::Node(NodeId::new(slot, 0), write)))
        .collect();
    assert_eq!(fired, expected);
}

#[test]
fn write_timers_of_many_connections_come_out_in_key_order_through_the_lane() {
    // A driver's rounds over 200 connections: write timers armed at a rising clock (a third
    // of them at the instant of the arm before, in any node order), mostly stopped in the
    // order they were armed (the write reports of a round), sometimes from the middle,
    // re-armed on progress, or fired; other node timers now and then, and slots reused by a
    // newer generation. The index must give the model's order, and the lane must take many
    // write timers and stay small.
    let mut x = 0x510e_527f_ade6_82d1u64;
    let mut heap = TimerHeap::default();
    let mut model: Vec<(Instant, TimerKey)> = Vec::new();
    let mut armed_order: Vec<TimerKey> = Vec::new();
    let mut generation = [0u32; 200];
    let (mut now, mut laned, mut arms) = (0u64, 0, 0);
    for step in 0..20_000u32 {
        xorshift(&mut x);
        now += (x >> 8) % 3;
        let slot = (x >> 16) as usize % generation.len();
        let node = NodeId::new(slot as u32, generation[slot]);
        let timer = if x % 16 == 0 {
            NodeTimer::ALL[(x >> 32) as usize % NodeTimer::ALL.len()]
        } else {
            NodeTimer::WriteTimeout
        };
        let key = TimerKey::Node(node, timer);
        let armed = model.iter().position(|e| e.1 == key);
        match (x >> 40) % 8 {
            0..=2 if armed.is_none() => {
                let at = Instant::from_nanos(now + 1_000);
                let before = heap.write_lane.live();
                heap.schedule_stopped_node(at, node, timer);
                laned += usize::from(heap.write_lane.live() > before);
                arms += usize::from(timer == NodeTimer::WriteTimeout);
                model.push((at, key));
                armed_order.push(key);
            }
            3 if armed.is_some() => {
                // Progress re-arms it: later, or (half the time) 500 ns earlier than that.
                let at = Instant::from_nanos(now + 1_000 - (x >> 48) % 2 * 500);
                heap.schedule_node(at, node, timer);
                model[armed.unwrap()].0 = at;
            }
            4..=6 if !armed_order.is_empty() => {
                // The oldest armed one's report, or one from the middle.
                let i = if x % 8 == 0 {
                    (x >> 20) as usize % armed_order.len()
                } else {
                    0
                };
                let key = armed_order.remove(i);
                if let TimerKey::Node(node, timer) = key {
                    heap.cancel_armed_node(node, timer);
                }
                model.retain(|e| e.1 != key);
            }
            7 if x % 64 == 7
                && model
                    .iter()
                    .all(|e| !matches!(e.1, TimerKey::Node(n, _) if n.index() == slot)) =>
            {
                generation[slot] += 1; // the node left; its slot's next one is newer
                heap.cancel_node(node, timer); // nothing armed: changes nothing
            }
            _ => {
                let got = heap.peek();
                pop_checked(&mut heap, &mut model, &format!("step {step}"));
                armed_order.retain(|&k| got.is_none_or(|g| g.1 != k));
            }
        }
        assert_agrees(&heap, &model, &format!("step {step}"));
    }
    // (The fresh entry takes many of the others: the oldest timer's report empties it.)
    assert!(
        laned * 3 > arms,
        "only {laned} of {arms} write timers went to the write lane"
    );
    while !model.is_empty() {
        pop_checked(&mut heap, &mut model, "draining");
    }
}
