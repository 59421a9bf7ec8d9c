//! Preemption without waiting for a tick: a thread that sleeps on the `active` words of the
//! online containers of every GPU that also has offline containers, and blocks those
//! offline containers the moment an online one raises its word (its library raises it at
//! its first launch after idle and wakes it).
//!
//! No wake-up is lost: the thread loads each word, decides from what it loaded, then
//! sleeps only while every word still holds what it loaded (`futex_waitv` compares in the
//! kernel), so a raise after the load ends the sleep at once. A roster change bumps a word
//! of this process's own that is waited on too. Where `futex_waitv` is missing (Linux
//! before 5.16, or forbidden) the thread polls every [`POLL`].

use super::futex::{self, Waited, Watch};
use super::gpu::{block, has_work};
use super::{Member, Shared};
use crate::policy::Priority;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tessera_region::MAX_DEVICES;

/// The polling period without `futex_waitv`.
pub const POLL: Duration = Duration::from_micros(100);
/// The longest sleep: the thread looks again after it even if nothing woke it.
const MAX_SLEEP: Duration = Duration::from_millis(250);

/// A GPU with online and offline containers on it.
struct Contested {
    gpu: usize,
    online: Vec<Arc<Member>>,
    offline: Vec<Arc<Member>>,
}

/// The GPUs where online work can preempt offline work.
fn contested(members: &[Arc<Member>]) -> Vec<Contested> {
    (0..MAX_DEVICES)
        .filter_map(|gpu| {
            let on = |p: Priority| -> Vec<Arc<Member>> {
                members
                    .iter()
                    .filter(|m| m.priority == p && m.gpus.contains(&(gpu as u32)))
                    .cloned()
                    .collect()
            };
            let (online, offline) = (on(Priority::Online), on(Priority::Offline));
            (!online.is_empty() && !offline.is_empty()).then_some(Contested {
                gpu,
                online,
                offline,
            })
        })
        .collect()
}

/// Runs until the scheduler stops.
pub(super) fn run(shared: &Shared) {
    let mut generation = None;
    let mut gpus: Vec<Contested> = Vec::new();
    let mut polling = false;
    while !shared.stopping() {
        // SeqCst: loaded before the roster and the words it guards, so that a change
        // published after this load moves the word and ends the wait below at once.
        let rearm_seen = shared.roster.rearm.load(Ordering::SeqCst);
        if generation != Some(shared.roster.generation()) {
            let (g, members) = shared.roster.snapshot();
            generation = Some(g);
            gpus = contested(&members);
        }
        let mut watches = vec![Watch {
            word: &shared.roster.rearm,
            expected: rearm_seen,
            private: true,
        }];
        for c in &gpus {
            let mut busy = false;
            for m in &c.online {
                let word = &m.region.compute(c.gpu).active;
                // SeqCst: the value compared by the wait below; see `has_work`.
                let seen = word.load(Ordering::SeqCst);
                watches.push(Watch {
                    word,
                    expected: seen,
                    private: false,
                });
                busy |= has_work(m, c.gpu);
            }
            if busy && c.offline.iter().any(|m| !is_blocked(m, c.gpu)) {
                let _guard = shared.block[c.gpu]
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                // Fresh under the lock: the tick may have decided since.
                if c.online.iter().any(|m| has_work(m, c.gpu)) {
                    for m in &c.offline {
                        block(m.region.compute(c.gpu));
                    }
                }
            }
        }
        if polling || watches.len() > futex::MAX_WORDS {
            std::thread::sleep(POLL);
            continue;
        }
        if futex::wait_any(&watches, MAX_SLEEP) == Waited::Unsupported {
            crate::log::warn(&format!(
                "futex_waitv is not available; online work preempts offline work by polling every {} µs",
                POLL.as_micros()
            ));
            polling = true;
        }
    }
}

fn is_blocked(m: &Member, gpu: usize) -> bool {
    // Relaxed: a hint that saves taking the lock; the decision is made under it.
    m.region.compute(gpu).blocked.load(Ordering::Relaxed) != 0
}
