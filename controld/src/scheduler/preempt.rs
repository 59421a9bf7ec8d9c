//! Preemption without waiting for a tick: a thread that sleeps on the `active` words of the
//! online containers of every GPU that also has offline containers, and blocks those
//! offline containers the moment an online one raises its word (its library raises it at
//! its first launch after idle and wakes it); when the last online container's library
//! clears its word (and wakes it again), the thread lifts the blocks at once.
//!
//! No wake-up is lost: the thread loads each word, decides from what it loaded, then
//! sleeps only while every word still holds what it loaded (`futex_waitv` compares in the
//! kernel), so a raise after the load ends the sleep at once. A roster change bumps a word
//! of this process's own that is waited on too. Where `futex_waitv` is missing (Linux
//! before 5.16, or forbidden) the thread polls every [`POLL`].

use super::gpu::{block, has_work, is_blocked, unblock};
use super::{Member, Shared};
use crate::policy::Priority;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tessera_region::futex::{self, Sharing, Waited, Watch};
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

/// The nice value the thread asks for: its latency is the preemption's, and it sleeps
/// nearly all the time, so running it ahead of the node's batch work costs them nothing.
const NICE: libc::c_int = -10;

/// Runs until the scheduler stops.
pub(super) fn run(shared: &Shared) {
    raise_priority();
    let mut generation = None;
    let mut gpus: Vec<Contested> = Vec::new();
    let mut polling = false;
    let mut seen: Vec<u32> = Vec::new();
    while !shared.stopping() {
        // SeqCst: loaded before the roster and the words it guards, so that a change
        // published after this load moves the word and ends the wait below at once.
        let rearm_seen = shared.roster.rearm.load(Ordering::SeqCst);
        if generation != Some(shared.roster.generation()) {
            let (g, members) = shared.roster.snapshot();
            generation = Some(g);
            gpus = contested(&members);
        }
        // First decide and block, from the words loaded now; then build the wait on the
        // same loaded values (a raise after the load ends the wait at once), so that no
        // bookkeeping comes between a raise and the block.
        seen.clear();
        for c in &gpus {
            let mut busy = false;
            for m in &c.online {
                // SeqCst: the value compared by the wait below; see `has_work`.
                seen.push(m.region.compute(c.gpu).active.load(Ordering::SeqCst));
                busy |= has_work(m, c.gpu);
            }
            // No lock: the tick may block too (it decides the same way) but never lifts a
            // block on a GPU with online containers; this thread alone does, and reads the
            // online words again afterwards, blocking again if work came meanwhile.
            if busy {
                for m in &c.offline {
                    block(m, c.gpu);
                }
            } else if c.offline.iter().any(|m| is_blocked(m, c.gpu)) {
                for m in &c.offline {
                    unblock(m, c.gpu);
                }
                if c.online.iter().any(|m| has_work(m, c.gpu)) {
                    for m in &c.offline {
                        block(m, c.gpu);
                    }
                }
            }
        }
        let mut watches = vec![Watch {
            word: &shared.roster.rearm,
            expected: rearm_seen,
            sharing: Sharing::Private,
        }];
        let words = gpus
            .iter()
            .flat_map(|c| c.online.iter().map(|m| &m.region.compute(c.gpu).active));
        watches.extend(words.zip(&seen).map(|(word, &expected)| Watch {
            word,
            expected,
            sharing: Sharing::Shared,
        }));
        if polling || watches.len() > futex::MAX_WORDS {
            std::thread::sleep(POLL);
            continue;
        }
        if futex::wait_any(&watches, MAX_SLEEP) == Waited::Unsupported {
            tracing::warn!("futex_waitv is not available; online work preempts offline work by polling every {} µs",
                POLL.as_micros());
            polling = true;
        }
    }
}

/// Asks for real-time scheduling (`SCHED_FIFO` at the lowest priority) for this thread, or
/// else for [`NICE`], so that a wake-up runs at once ahead of busy processes on a loaded
/// node. The thread sleeps nearly all the time and its work per wake-up is bounded (a few
/// loads and stores per container), so it cannot starve a CPU; the kernel's real-time
/// throttling backs that up. Without the privilege (`CAP_SYS_NICE`) it keeps its
/// scheduling: preemption works the same, only its tail latency grows under CPU load.
fn raise_priority() {
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: pthread_self is this thread; the parameter is a live local.
    let rc = unsafe { libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_FIFO, &param) };
    if rc == 0 {
        return;
    }
    // SAFETY: gettid has no arguments and cannot fail.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) };
    // SAFETY: setpriority on this thread's own id (Linux applies PRIO_PROCESS to one
    // thread); it reads and writes no memory of ours.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, NICE) };
    if rc != 0 {
        tracing::info!(
            "the preemption thread keeps its priority (nice {NICE} refused: {})",
            std::io::Error::last_os_error()
        );
    }
}
