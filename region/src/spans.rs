//! The busy spans of a container on one device: when its measured kernels ran, on the node
//! clock, for whoever settles overlap (`controld`, or the container's own processes in
//! local mode).
//!
//! A GPU time-slices the contexts of different processes, and a slice that cuts into a
//! kernel lies inside that kernel's event interval: two containers' intervals then overlap,
//! and each was charged for the other's slice. Who really had the engine in an overlap can
//! be told from the spans themselves: a span starts when its context had the engine (its
//! START event is written then), so the container whose span began last is the one running
//! — for up to one time slice. The settler therefore needs the spans, not totals per
//! millisecond; this ring carries them.
//!
//! Each slot is one word: the start in µs of the node clock, modulo 2^40 (about 12.7 days;
//! the reader restores the high bits from its own clock), shifted above the length in µs
//! (at least 1; longer spans are cut into pieces). 0 is an empty slot. Writers (every
//! process of the container) claim slots round-robin with a compare-and-swap from 0; the
//! reader empties them with a swap. A span that finds the ring full is dropped: the bucket
//! was charged already, so a lost span only forgoes a refund.

use crate::layout::{ComputeAccount, SPAN_LEN_BITS, SPAN_SLOTS};
use std::sync::atomic::Ordering;

/// Microseconds a slot's length field holds at most.
const LEN_MAX_US: u64 = (1 << SPAN_LEN_BITS) - 1;
/// Bits of the start field.
const START_BITS: u32 = 64 - SPAN_LEN_BITS;
const START_MASK: u64 = (1 << START_BITS) - 1;

/// A busy span on the node clock, in ns (µs resolution).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BusySpan {
    /// When it started.
    pub start_ns: u64,
    /// When it ended.
    pub end_ns: u64,
}

impl BusySpan {
    /// Its length in ns.
    pub fn len_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }
}

fn pack(start_us: u64, len_us: u64) -> u64 {
    (start_us & START_MASK) << SPAN_LEN_BITS | len_us
}

/// The span in `word`, its start restored to the full clock as the latest value at most a
/// day after `now_us` (spans are read soon after they are written; the margin only covers
/// a writer whose clock reading came a moment after the reader's).
fn unpack(word: u64, now_us: u64) -> BusySpan {
    let len_us = word & LEN_MAX_US;
    let low = word >> SPAN_LEN_BITS;
    let horizon = now_us + 86_400_000_000;
    let mut start = (horizon & !START_MASK) | low;
    if start > horizon {
        start = start.saturating_sub(1 << START_BITS);
    }
    BusySpan {
        start_ns: start * 1000,
        end_ns: (start + len_us) * 1000,
    }
}

impl ComputeAccount {
    /// Records that the container's work ran from `start_ns` to `end_ns` on the node clock
    /// (the library, as kernels complete). Spans shorter than a µs are not kept.
    pub fn add_span(&self, start_ns: u64, end_ns: u64) {
        let (mut start_us, end_us) = (start_ns / 1000, end_ns / 1000);
        while start_us < end_us {
            let len = (end_us - start_us).min(LEN_MAX_US);
            if !self.claim_slot(pack(start_us, len)) {
                return;
            }
            start_us += len;
        }
    }

    /// Puts `word` in a free slot, looking at most once round the ring; `false` when full.
    fn claim_slot(&self, word: u64) -> bool {
        // Relaxed (all): the cursor only spreads writers over the ring; each slot is one
        // word claimed by a compare-and-swap from 0 and emptied by the reader's swap, and
        // carries no other data.
        let first = self.span_cursor.fetch_add(1, Ordering::Relaxed) as usize;
        (0..SPAN_SLOTS).any(|k| {
            self.spans[(first + k) % SPAN_SLOTS]
                .compare_exchange(0, word, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        })
    }

    /// Empties the ring, returning every span in it (any order). `now_ns` is the reader's
    /// node clock, to restore the spans' full start times.
    pub fn take_spans(&self, now_ns: u64) -> Vec<BusySpan> {
        let now_us = now_ns / 1000;
        self.spans
            .iter()
            // Relaxed (both): see `claim_slot`; the load first leaves empty slots' cache
            // lines unwritten.
            .filter(|slot| slot.load(Ordering::Relaxed) != 0)
            .map(|slot| slot.swap(0, Ordering::Relaxed))
            .filter(|&w| w != 0)
            .map(|w| unpack(w, now_us))
            .collect()
    }
}

/// The time covered by the union of `spans`, in ns (sorts them).
pub fn union_ns(spans: &mut [BusySpan]) -> u64 {
    spans.sort_unstable_by_key(|s| s.start_ns);
    let mut total = 0;
    let mut reach = 0;
    for s in spans.iter() {
        let from = s.start_ns.max(reach);
        if s.end_ns > from {
            total += s.end_ns - from;
        }
        reach = reach.max(s.end_ns);
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    fn account() -> Box<ComputeAccount> {
        // SAFETY: all-zero bytes are a valid ComputeAccount (integers and atomics).
        unsafe { Box::new(std::mem::zeroed()) }
    }

    #[test]
    fn spans_round_trip_at_microsecond_resolution() {
        let a = account();
        let now = 3_000_000_000_000_000; // about 35 days of uptime
        a.add_span(now - 5_000_500, now - 2_000_250);
        let spans = a.take_spans(now);
        assert_eq!(
            spans,
            [BusySpan {
                start_ns: now - 5_001_000,
                end_ns: now - 2_001_000
            }]
        );
        assert!(a.take_spans(now).is_empty(), "taking empties the ring");
    }

    #[test]
    fn long_spans_are_cut_and_a_full_ring_drops_the_rest() {
        let a = account();
        let now = 100_000_000_000;
        // 40 s: three pieces of at most 16.7 s.
        a.add_span(now - 40_000_000_000, now);
        let mut spans = a.take_spans(now);
        assert_eq!(spans.len(), 3);
        assert_eq!(union_ns(&mut spans), 40_000_000_000);
        for i in 0..SPAN_SLOTS as u64 + 10 {
            a.add_span(i * 10_000, i * 10_000 + 5_000);
        }
        assert_eq!(a.take_spans(now).len(), SPAN_SLOTS);
    }

    #[test]
    fn union_counts_overlap_once() {
        let s = |a: u64, b: u64| BusySpan {
            start_ns: a,
            end_ns: b,
        };
        let mut spans = vec![s(5, 9), s(0, 4), s(2, 6), s(20, 21)];
        assert_eq!(union_ns(&mut spans), 10);
    }
}
