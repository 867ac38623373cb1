//! [`Fifo`], a first-in first-out queue of small `Copy` items for the request path: the
//! connections waiting to hand out bytes and the deadline index's lane.
//!
//! It is one `Vec` read from a moving start. A push is a `Vec` push and a pop moves the start
//! on, both inlined with no wrap-around arithmetic (a `VecDeque` calls out of line for both
//! here); a queue that empties (the usual case: a request or a connection comes and goes)
//! starts again at the beginning of its buffer, and one that never empties drops the items
//! read once they are three quarters of its buffer, so it holds at most about four times its
//! items and moves at most one for every three it reads.
//!
//! [`Queue`] is the same for items that are not `Copy` (the pool's events), moved out as they
//! are read.

use alloc::vec::Vec;

/// Items read off the front before the queue drops them from its buffer (at least three
/// quarters of it).
pub(crate) const SLACK: usize = 32;

/// A first-in first-out queue of `Copy` items (see the module's documentation).
#[derive(Debug, Clone)]
pub(crate) struct Fifo<T> {
    items: Vec<T>,
    /// Where the queue starts in `items`: those before it have been read.
    start: usize,
}

impl<T> Default for Fifo<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Fifo<T> {
    pub(crate) const fn new() -> Self {
        Self {
            items: Vec::new(),
            start: 0,
        }
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.items.len() - self.start
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[inline]
    pub(crate) fn front(&self) -> Option<&T> {
        self.items.get(self.start)
    }

    #[inline]
    pub(crate) fn back(&self) -> Option<&T> {
        if self.is_empty() {
            None
        } else {
            self.items.last()
        }
    }

    #[inline]
    pub(crate) fn push_back(&mut self, item: T) {
        crate::hint::push(&mut self.items, item);
    }

    #[inline]
    pub(crate) fn pop_front(&mut self) -> Option<T>
    where
        T: Copy,
    {
        let item = *self.items.get(self.start)?;
        self.skip_front();
        Some(item)
    }

    /// Drops the front item, which the caller has just read: [`Self::pop_front`] without
    /// the copy and the check that there is one. `#[inline(always)]`: a deadline's cancel,
    /// inlined into a response, made `pop_front` a call.
    #[inline(always)]
    pub(crate) fn skip_front(&mut self) {
        debug_assert!(!self.is_empty(), "nothing to skip");
        self.start += 1;
        if self.start == self.items.len() {
            self.items.clear();
            self.start = 0;
        } else if self.start >= SLACK && self.start >= 3 * self.len() {
            self.drop_read();
        }
    }

    pub(crate) fn pop_back(&mut self) -> Option<T> {
        if self.is_empty() {
            return None;
        }
        let item = self.items.pop();
        if self.start == self.items.len() {
            self.items.clear();
            self.start = 0;
        }
        item
    }

    /// Drops the items read from the buffer (rare: only a queue that never empties, or a
    /// retain), out of the inlined pops' way.
    #[cold]
    fn drop_read(&mut self) {
        self.items.drain(..self.start);
        self.start = 0;
    }

    /// The items, front first.
    pub(crate) fn iter(&self) -> core::slice::Iter<'_, T> {
        self.items[self.start..].iter()
    }

    /// Keeps only the items `keep` says to, in order.
    pub(crate) fn retain(&mut self, keep: impl FnMut(&T) -> bool) {
        self.drop_read();
        self.items.retain(keep);
    }

    /// Sorts the items (of which no two are equal, so the order is the only one).
    pub(crate) fn sort_unstable(&mut self)
    where
        T: Ord,
    {
        self.drop_read();
        self.items.sort_unstable();
    }
}

/// A first-in first-out queue of items that are not `Copy` (the pool's events): a [`Fifo`]
/// of options whose items are moved out as they are read, leaving `None` behind. The last
/// item is popped off the buffer itself, so a queue that empties (the usual case) starts
/// again at the beginning of its buffer.
#[derive(Debug)]
pub(crate) struct Queue<T>(Fifo<Option<T>>);

impl<T> Default for Queue<T> {
    fn default() -> Self {
        Self(Fifo::new())
    }
}

impl<T> Queue<T> {
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    #[inline]
    pub(crate) fn push_back(&mut self, item: T) {
        self.0.push_back(Some(item));
    }

    // `#[inline]` alone was not taken: the pool's `poll_event` made it a call, twice a request.
    #[inline(always)]
    pub(crate) fn pop_front(&mut self) -> Option<T> {
        let fifo = &mut self.0;
        if fifo.len() <= 1 {
            // The last item (or none): off the end of the buffer, which then starts afresh.
            let item = fifo.items.pop()?;
            fifo.start = 0;
            if !fifo.items.is_empty() {
                // The places of items read before it: once per batch of two or more.
                crate::hint::cold_path();
                fifo.items.clear();
            }
            return item;
        }
        let item = fifo.items.get_mut(fifo.start).and_then(Option::take);
        fifo.start += 1;
        if fifo.start >= SLACK && fifo.start >= 3 * fifo.len() {
            fifo.drop_read();
        }
        item
    }
}

impl<T> core::ops::Index<usize> for Fifo<T> {
    type Output = T;

    /// The item `k` places behind the front.
    #[inline]
    fn index(&self, k: usize) -> &T {
        &self.items[self.start + k]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{assert_slides_as_a_fifo, xorshift};
    use alloc::collections::VecDeque;
    use alloc::string::{String, ToString};

    /// Pushes, pops and retains, against a `VecDeque` doing the same: the same items in
    /// the same order, and a buffer never more than four times the items plus the slack.
    #[test]
    fn it_queues_as_a_vec_deque_does() {
        let mut fifo = Fifo::new();
        let mut model = VecDeque::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for step in 0..50_000u32 {
            xorshift(&mut x);
            match x % 16 {
                0..=6 => {
                    fifo.push_back(step);
                    model.push_back(step);
                }
                7..=12 => assert_eq!(fifo.pop_front(), model.pop_front(), "step {step}"),
                13 => assert_eq!(fifo.pop_back(), model.pop_back(), "step {step}"),
                14 => {
                    let odd = x % 2 == 1;
                    fifo.retain(|&i| (i % 2 == 1) == odd);
                    model.retain(|&i| (i % 2 == 1) == odd);
                }
                _ => {}
            }
            assert_eq!(fifo.len(), model.len());
            assert_eq!(fifo.is_empty(), model.is_empty());
            assert_eq!(fifo.front(), model.front());
            assert_eq!(fifo.back(), model.back());
            assert!((0..fifo.len()).all(|k| fifo[k] == model[k]), "step {step}");
            assert!(fifo.iter().eq(model.iter()), "step {step}");
            assert!(fifo.items.len() <= 4 * fifo.len() + SLACK, "step {step}");
        }
    }

    /// A window that slides for ever (a pipeline that never drains) keeps its buffer within
    /// four times its items plus the slack.
    #[test]
    fn a_queue_that_never_empties_keeps_its_buffer_bounded() {
        let mut fifo = Fifo::new();
        for item in 0..10u32 {
            fifo.push_back(item);
        }
        for item in 10..100_000u32 {
            fifo.push_back(item);
            assert_eq!(fifo.pop_front(), Some(item - 10));
            assert!(fifo.items.len() <= 4 * fifo.len() + SLACK, "item {item}");
        }
    }

    /// A window of 20 that slides (one push, one pop) keeps what it read until it is three
    /// quarters of the buffer (60 read, 80 held), then drops it, every 60 reads; a small
    /// window keeps what it read until the slack (32 read) is reached, even past three
    /// quarters.
    #[test]
    fn a_sliding_queue_drops_what_it_read_at_three_quarters_of_its_buffer_and_the_slack() {
        assert_slides_as_a_fifo(Fifo::push_back, Fifo::pop_front, |fifo: &Fifo<u32>| {
            (fifo.start, fifo.items.len())
        });
    }

    /// [`Queue`] drops what it read at the same points as [`Fifo`] (the test above): every 60
    /// pops sliding 20 items, every 32 sliding 4; and an emptied queue starts afresh.
    #[test]
    fn a_sliding_queue_of_items_that_are_not_copy_drops_what_it_read_as_a_fifo_does() {
        let slid = assert_slides_as_a_fifo(
            |queue: &mut Queue<String>, item| queue.push_back(item.to_string()),
            |queue| queue.pop_front().map(|item| item.parse().unwrap()),
            |queue| (queue.0.start, queue.0.items.len()),
        );
        for mut queue in slid {
            while queue.pop_front().is_some() {}
            assert_eq!((queue.0.start, queue.0.items.len()), (0, 0));
        }
    }

    /// A [`Queue`] pushes and pops as a `VecDeque` does, and keeps its buffer within four
    /// times its items plus the slack whether it empties often or never.
    #[test]
    fn a_queue_of_items_that_are_not_copy_pops_as_a_vec_deque_does() {
        let mut queue = Queue::default();
        let mut model = VecDeque::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for step in 0..50_000u32 {
            xorshift(&mut x);
            // Long runs of pushes, then of pops, so the queue both empties and slides.
            let push = if (step / 500) % 2 == 0 {
                x % 8 < 5
            } else {
                x % 8 < 3
            };
            if push {
                let item = step.to_string();
                queue.push_back(item.clone());
                model.push_back(item);
            } else {
                assert_eq!(queue.pop_front(), model.pop_front(), "step {step}");
            }
            assert_eq!(queue.0.len(), model.len());
            assert_eq!(queue.is_empty(), model.is_empty());
            assert!(queue.0.items[..queue.0.start].iter().all(Option::is_none));
            assert!(queue.0.items[queue.0.start..].iter().all(Option::is_some));
            assert!(
                queue.0.items.len() <= 4 * queue.0.len() + SLACK,
                "step {step}"
            );
        }
        for item in 0..10u32 {
            queue.push_back(item.to_string());
        }
        while queue.pop_front().is_some() {}
        assert_eq!((queue.0.start, queue.0.items.len()), (0, 0));
        for item in 10..100_000u32 {
            queue.push_back(item.to_string());
            if item >= 20 {
                assert_eq!(queue.pop_front(), Some((item - 10).to_string()));
            }
            assert!(
                queue.0.items.len() <= 4 * queue.0.len() + SLACK,
                "item {item}"
            );
        }
    }

    #[test]
    fn an_emptied_queue_starts_again_at_the_beginning_of_its_buffer() {
        let mut fifo = Fifo::new();
        fifo.push_back(1);
        fifo.push_back(2);
        assert_eq!(fifo.pop_front(), Some(1));
        assert_eq!(fifo.start, 1);
        assert_eq!(fifo.pop_front(), Some(2));
        assert_eq!((fifo.start, fifo.items.len()), (0, 0));
        assert_eq!(fifo.pop_front(), None);
    }
}
