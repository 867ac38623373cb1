//! The protocol ids of requests that may still be answered, for
//! [`Correlation::ById`](crate::Correlation::ById): which request each id names, and the next
//! id to give.
//!
//! Ids are given in sequence and mostly answered in about that order, so the live ones sit in
//! a short run just behind the next id. They are kept in a *window*, a deque indexed by
//! `id - base`: giving, filing, finding and forgetting an id cost an index each, with no
//! hashing. Whatever does not fit the run goes to an [`IdMap`] beside it: an id filed out of
//! sequence, the ids filed after the id space wrapped around, and a long-lived id at the
//! window's front once the window is mostly holes (so one request that stays unanswered
//! cannot make the window grow with every id given after it). Lookups try the window, then
//! the map when it holds anything. The ids in both are the driver's own, so a peer cannot
//! choose keys that collide; an id it echoes is only looked up.

use std::collections::VecDeque;

use crate::sync::IdMap;

/// Holes the window may hold beyond as many as its live ids before its front moves aside.
const WINDOW_SLACK: usize = 64;

#[derive(Debug)]
pub(crate) struct Ids<T> {
    /// The next id to try (before masking to the codec's width).
    next: u64,
    /// The id of `window[0]`.
    base: u64,
    /// `window[k]` is what id `base + k` names, if it is live.
    window: VecDeque<Option<T>>,
    /// Live ids in the window.
    in_window: usize,
    /// Live ids outside the window.
    aside: IdMap<u64, T>,
}

impl<T> Default for Ids<T> {
    fn default() -> Self {
        Self {
            next: 0,
            base: 0,
            window: VecDeque::new(),
            in_window: 0,
            aside: IdMap::default(),
        }
    }
}

impl<T> Ids<T> {
    /// The next id `bits` wide that names no request that may still be answered; `None`
    /// when every such id is taken.
    #[inline]
    pub(crate) fn next_free(&mut self, bits: u32) -> Option<u64> {
        let mask = if bits >= 64 {
            u64::MAX
        } else {
            (1u64 << bits.max(1)) - 1
        };
        // The usual case, ids given and filed in sequence: the next id is the one right after
        // the window, which names nothing while nothing is aside. Being free, it is also the
        // first the search would find (and some id is free), so this is the search's answer,
        // without its calls and loop.
        let id = self.next & mask;
        if self.follows_window(id) {
            self.next = self.next.wrapping_add(1);
            return Some(id);
        }
        self.search_free(mask)
    }

    /// [`next_free`](Self::next_free) past its usual case: tries the ids in turn from `next`.
    #[inline(never)]
    fn search_free(&mut self, mask: u64) -> Option<u64> {
        if (self.len() as u64) > mask {
            return None;
        }
        loop {
            let id = self.next & mask;
            self.next = self.next.wrapping_add(1);
            if self.get(id).is_none() {
                return Some(id);
            }
        }
    }

    /// Whether `id` comes right after the window (or would start an empty one) with nothing
    /// aside: then it names nothing, and filing it is a push onto the window.
    #[inline]
    fn follows_window(&self, id: u64) -> bool {
        self.aside.is_empty()
            && (self.window.is_empty()
                || id.checked_sub(self.base) == Some(self.window.len() as u64))
    }

    /// Files `value` under `id`, replacing what it named: in the window if the window covers
    /// it or it comes right after (an empty window starts at it), else aside.
    #[inline]
    pub(crate) fn insert(&mut self, id: u64, value: T) {
        // The usual case, the id [`next_free`](Self::next_free) just gave: pushed, with what
        // the general case would check for it already known.
        if self.follows_window(id) {
            if self.window.is_empty() {
                self.base = id;
            }
            self.window.push_back(Some(value));
            self.in_window += 1;
            self.keep_window_dense();
            return;
        }
        self.insert_anywhere(id, value);
    }

    /// [`insert`](Self::insert) past its usual case.
    #[inline(never)]
    fn insert_anywhere(&mut self, id: u64, value: T) {
        if self.window.is_empty() {
            self.base = id;
        }
        let len = self.window.len();
        let Some(k) = id.checked_sub(self.base).filter(|&k| k <= len as u64) else {
            self.aside.insert(id, value);
            return;
        };
        let k = k as usize;
        if k < len {
            if self.window[k].replace(value).is_none() {
                self.in_window += 1;
            }
        } else {
            if !self.aside.is_empty() {
                self.aside.remove(&id); // filed aside before: it moves into the window
            }
            self.window.push_back(Some(value));
            self.in_window += 1;
        }
        self.keep_window_dense();
    }

    pub(crate) fn get(&self, id: u64) -> Option<&T> {
        match self.window_index(id) {
            Some(k) => self.window[k].as_ref(),
            None if self.aside.is_empty() => None,
            None => self.aside.get(&id),
        }
    }

    /// Runs `answer` on what `id` names, if anything, and forgets `id` if `answer` says so
    /// (its second value): [`get`](Self::get) and [`remove`](Self::remove) with one lookup,
    /// for a response (the window's slot is found once, not again to empty it).
    #[inline]
    pub(crate) fn answer<R>(&mut self, id: u64, answer: impl FnOnce(&T) -> (R, bool)) -> Option<R> {
        let Some(k) = self.window_index(id) else {
            return self.answer_aside(id, answer);
        };
        let slot = &mut self.window[k];
        let (answered, forget) = answer(slot.as_ref()?);
        if forget {
            *slot = None;
            self.in_window -= 1;
            self.trim_front();
        }
        Some(answered)
    }

    /// [`answer`](Self::answer) for an id outside the window.
    #[inline(never)]
    fn answer_aside<R>(&mut self, id: u64, answer: impl FnOnce(&T) -> (R, bool)) -> Option<R> {
        let (answered, forget) = answer(self.aside.get(&id)?);
        if forget {
            self.aside.remove(&id);
        }
        Some(answered)
    }

    pub(crate) fn remove(&mut self, id: u64) {
        match self.window_index(id) {
            Some(k) => {
                if self.window[k].take().is_some() {
                    self.in_window -= 1;
                    self.trim_front();
                }
            }
            None => {
                if !self.aside.is_empty() {
                    self.aside.remove(&id);
                }
            }
        }
    }

    /// Live ids.
    pub(crate) fn len(&self) -> usize {
        self.in_window + self.aside.len()
    }

    /// Forgets every id `keep` rejects.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        for slot in &mut self.window {
            if slot.as_ref().is_some_and(|value| !keep(value)) {
                *slot = None;
                self.in_window -= 1;
            }
        }
        self.trim_front();
        self.aside.retain(|_, value| keep(value));
    }

    /// Where `id` sits in the window, if the window covers it.
    fn window_index(&self, id: u64) -> Option<usize> {
        let k = id.checked_sub(self.base)?;
        (k < self.window.len() as u64).then_some(k as usize)
    }

    /// Pops the holes at the window's front, so its front is live (or it is empty).
    fn trim_front(&mut self) {
        while self.window.front().is_some_and(Option::is_none) {
            self.window.pop_front();
            self.base += 1;
        }
    }

    /// Moves live ids from the window's front aside while the window is mostly holes.
    #[inline]
    fn keep_window_dense(&mut self) {
        if self.window.len() > 2 * self.in_window + WINDOW_SLACK {
            self.move_front_aside();
        }
    }

    /// [`keep_window_dense`](Self::keep_window_dense) once the window is mostly holes.
    #[inline(never)]
    fn move_front_aside(&mut self) {
        while self.window.len() > 2 * self.in_window + WINDOW_SLACK {
            if let Some(Some(value)) = self.window.pop_front() {
                self.in_window -= 1;
                self.aside.insert(self.base, value);
            }
            self.base += 1;
            self.trim_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_wrap_around_and_skip_the_ones_still_in_use() {
        let mut ids = Ids::default();
        let got: Vec<_> = (0..4).map(|_| ids.next_free(2).unwrap()).collect();
        assert_eq!(got, [0, 1, 2, 3]);
        ids.insert(0, "a");
        ids.insert(2, "b");
        let got: Vec<_> = (0..3).map(|_| ids.next_free(2).unwrap()).collect();
        assert_eq!(got, [1, 3, 1], "0 and 2 are still in use");
        ids.remove(0);
        assert_eq!(ids.next_free(2), Some(3));
        assert_eq!(ids.next_free(2), Some(0));
        ids.insert(1, "c");
        ids.insert(3, "d");
        ids.insert(0, "e");
        assert_eq!(ids.next_free(2), None, "all four taken");
        let mut wide = Ids::<()>::default();
        wide.next = u64::MAX;
        assert_eq!(wide.next_free(64), Some(u64::MAX));
        assert_eq!(wide.next_free(64), Some(0), "wraps at 2^64");
    }

    #[test]
    fn ids_in_sequence_stay_in_the_window() {
        let mut ids = Ids::default();
        for round in 0..1_000u64 {
            let id = ids.next_free(64).unwrap();
            assert_eq!(id, round);
            ids.insert(id, round);
            if round >= 64 {
                ids.remove(round - 64); // 64 in flight, answered oldest first
            }
        }
        assert_eq!((ids.len(), ids.in_window, ids.aside.len()), (64, 64, 0));
        assert_eq!(ids.window.len(), 64);
        assert_eq!(ids.get(999), Some(&999));
        assert_eq!(ids.get(935), None, "answered");
    }

    #[test]
    fn a_long_lived_id_moves_aside_instead_of_stretching_the_window() {
        let mut ids = Ids::default();
        let stuck = [ids.next_free(64).unwrap(), ids.next_free(64).unwrap()];
        for id in stuck {
            ids.insert(id, "stuck");
        }
        let mut longest = 0;
        for _ in 0..10_000 {
            let id = ids.next_free(64).unwrap();
            ids.insert(id, "quick");
            longest = longest.max(ids.window.len());
            ids.remove(id);
        }
        // The window stretched behind the two stuck ids until it held more than twice its
        // live ids (3) plus the slack, then moved them aside, and never stretched again.
        assert_eq!(longest, 2 * 3 + WINDOW_SLACK);
        assert_eq!(
            (ids.aside.len(), ids.in_window, ids.window.len()),
            (2, 0, 0)
        );
        assert_eq!(ids.len(), 2);
        assert_eq!(ids.get(stuck[0]), Some(&"stuck"));
        ids.remove(stuck[0]);
        assert_eq!(
            (ids.len(), ids.get(stuck[0]), ids.get(stuck[1])),
            (1, None, Some(&"stuck"))
        );
    }

    #[test]
    fn an_answer_reads_its_id_and_forgets_it_only_when_told() {
        let mut ids = Ids::default();
        for id in 0..3 {
            ids.insert(id, id * 10);
        }
        ids.insert(1_000, 7); // out of sequence: aside
        assert_eq!(ids.answer(1, |v| (*v, false)), Some(10));
        assert_eq!(ids.get(1), Some(&10), "kept: told not to forget");
        assert_eq!(ids.answer(0, |v| (*v, true)), Some(0));
        assert_eq!(
            (ids.get(0), ids.len(), ids.window.len(), ids.in_window),
            (None, 3, 2, 2),
            "forgotten, and the window's front moved past it"
        );
        assert_eq!(ids.answer(1_000, |v| (*v, true)), Some(7));
        assert_eq!((ids.get(1_000), ids.aside.len()), (None, 0));
        let mut called = false;
        assert_eq!(
            ids.answer(5, |v| (*v, {
                called = true;
                true
            })),
            None
        );
        assert_eq!(ids.answer(1_000, |v| (*v, true)), None);
        assert!(!called, "an id that names nothing is not answered");
        assert_eq!(ids.len(), 2);
    }

    /// The ids as one plain map: the reference the window and the map beside it are held to.
    #[derive(Default)]
    struct Model {
        next: u64,
        live: IdMap<u64, u32>,
    }

    impl Model {
        fn next_free(&mut self, bits: u32) -> Option<u64> {
            let mask = if bits >= 64 {
                u64::MAX
            } else {
                (1u64 << bits.max(1)) - 1
            };
            if (self.live.len() as u64) > mask {
                return None;
            }
            loop {
                let id = self.next & mask;
                self.next = self.next.wrapping_add(1);
                if !self.live.contains_key(&id) {
                    return Some(id);
                }
            }
        }
    }

    #[test]
    fn the_window_and_its_map_answer_as_one_map_does() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for bits in [2u32, 3, 5, 8, 64] {
            let (mut ids, mut model) = (Ids::default(), Model::default());
            for step in 0..20_000u32 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let mask = if bits == 64 {
                    u64::MAX
                } else {
                    (1 << bits) - 1
                };
                let some_id = (x >> 20) & mask.min(300);
                match x % 16 {
                    // Mostly: give the next id and file it (sometimes not: a submit refused).
                    0..=6 => {
                        let got = ids.next_free(bits);
                        assert_eq!(got, model.next_free(bits), "bits {bits} step {step}");
                        if let Some(id) = got.filter(|_| x % 64 != 0) {
                            ids.insert(id, step);
                            model.live.insert(id, step);
                            // The window grows only here, and stays mostly live.
                            assert!(
                                ids.window.len() <= 2 * ids.in_window + WINDOW_SLACK,
                                "bits {bits} step {step}: the window outgrew its live ids"
                            );
                        }
                    }
                    // Answers, mostly the oldest live ones.
                    7..=10 => {
                        let oldest = model.live.iter().min_by_key(|(_, v)| **v).map(|(k, _)| *k);
                        let id = if x % 3 == 0 {
                            some_id
                        } else {
                            oldest.unwrap_or(0)
                        };
                        ids.remove(id);
                        model.live.remove(&id);
                    }
                    // An id filed out of sequence.
                    11 => {
                        ids.insert(some_id, step);
                        model.live.insert(some_id, step);
                    }
                    12 => {
                        let cut = (x >> 40) as u32 % 20_000;
                        ids.retain(|v| *v >= cut);
                        model.live.retain(|_, v| *v >= cut);
                    }
                    _ => {
                        assert_eq!(
                            ids.get(some_id),
                            model.live.get(&some_id),
                            "bits {bits} step {step}: id {some_id}"
                        );
                    }
                }
                assert_eq!(ids.len(), model.live.len(), "bits {bits} step {step}");
                assert!(
                    ids.window.front().is_none_or(Option::is_some),
                    "bits {bits} step {step}: a hole at the window's front"
                );
            }
            for (id, v) in &model.live {
                assert_eq!(ids.get(*id), Some(v), "bits {bits}: id {id} at the end");
            }
        }
    }
}
