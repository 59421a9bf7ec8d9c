//! The execution engine of one device, time-sliced between the processes of the node.
//!
//! One process holds a device's engine at a time. The holder runs its kernels in chunks of
//! at most one quantum (the profile's time slice); at each quantum boundary, if another
//! process waits, it hands the engine to the next waiter in slot order (round robin),
//! otherwise it keeps going. A hand-off records the engine time at which the holder stopped
//! and the dead time of the switch: the profile's switch cost when the holder was cut in the
//! middle of its kernels (a GPU saves their state, and restores it at their next turn), its
//! idle switch when the holder ran out of work. The next holder starts its clock there plus
//! the dead time (none when it is the last holder again), so that the wake-up latency of the
//! host thread is not lost engine time while the switch is: two saturating processes each
//! get a slice, then the GPU runs nobody's kernels for a switch, as on a GPU whose
//! time-slice scheduler alternates contexts. The dead time is charged to nobody.
//!
//! Each context has its own time slice: the node's quantum, unless a control on its channel
//! group set another (`simgpu/cuda`'s resource manager, where the preload library reaches
//! it). A switch's dead time scales with the shorter of the two slices it lies between
//! (`tessera_region::slicing::switch_between_ns`, fitted to what an H200 showed).

use crate::clock::{now_ns, sleep_until};
use crate::node::handoff::pass_engine;
use crate::node::{DeviceState, EngineSeat, Process};
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::Mutex;
use std::time::Duration;
use tessera_region::futex::{self, Sharing};
use tessera_region::slicing;

/// How long a waiter sleeps before it checks that the holder is still alive.
const HOLDER_CHECK_NS: u64 = 10_000_000;

/// When a piece of work ran, on the node clock ([`crate::clock::now_ns`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// When the engine started it.
    pub start_ns: u64,
    /// When it finished.
    pub end_ns: u64,
}

/// One process's view of one device's engine. Kernels of one process run one at a time; the
/// caller is the process's executor thread for that device.
pub struct Engine<'p> {
    process: &'p Process,
    device: usize,
    seat: &'p Mutex<EngineSeat>,
}

impl<'p> Engine<'p> {
    pub(crate) fn new(process: &'p Process, device: usize, seat: &'p Mutex<EngineSeat>) -> Self {
        Engine {
            process,
            device,
            seat,
        }
    }

    fn state(&self) -> &DeviceState {
        self.process.node().device_state(self.device)
    }

    /// Runs `ns` of kernel time that became ready at `ready_ns`: takes the engine (waiting
    /// while another process holds it), gives it up at each quantum boundary when another
    /// process waits, and returns when the kernel's time has passed. The span is engine
    /// time: a hand-off starts the next process at the instant the previous one stopped.
    /// Busy time is charged to this process.
    pub fn run(&self, ready_ns: u64, ns: u64) -> Span {
        self.run_from(Some(ready_ns), ns)
    }

    /// Runs `ns` more of kernel time for work already running on the engine (the next chunk
    /// of a batch of concurrent kernels): from where the last chunk ended, with no lag
    /// check in between, so that a late wake-up of this thread between two chunks does not
    /// put idle time inside the kernels' spans. Like [`Engine::run`] when the engine was
    /// given up meanwhile.
    pub fn run_on(&self, ns: u64) -> Span {
        self.run_from(None, ns)
    }

    fn run_from(&self, ready_ns: Option<u64>, ns: u64) -> Span {
        let mut seat = self.seat.lock().unwrap_or_else(|e| e.into_inner());
        let config = self.process.node().config();
        let quantum = self.process.timeslice(self.device);
        // The engine cannot run work in a past it already spent idle: at most one quantum of
        // lag is allowed, enough to cover the host's wake-up latency.
        let lag_floor = now_ns().saturating_sub(config.quantum_ns);
        let mut ready = match ready_ns {
            Some(r) => r.max(lag_floor),
            None if seat.held => seat.cursor,
            None => lag_floor,
        };
        let mut remaining = ns;
        let mut first = None;
        loop {
            if !seat.held {
                let start = self.acquire(ready, quantum, config.quantum_ns);
                *seat = EngineSeat {
                    held: true,
                    slice_start: start,
                    slice_started: remaining > 0,
                    cursor: start,
                };
            } else {
                seat.cursor = seat.cursor.max(ready);
            }
            let start = seat.cursor;
            if remaining > 0 && !seat.slice_started {
                seat.slice_start = start;
                seat.slice_started = true;
            }
            if seat.slice_started && start >= seat.slice_start + quantum {
                if self.someone_waits() {
                    self.hand_off(start, config.switch_ns);
                    seat.held = false;
                    ready = start;
                    continue;
                }
                seat.slice_start = start;
            }
            first.get_or_insert(start);
            if remaining == 0 {
                // Zero-length work (an event's timestamp) runs when this process next has
                // the engine: after the others' slices once its own has run out.
                return Span {
                    start_ns: start,
                    end_ns: start,
                };
            }
            let until = (start + remaining).min(seat.slice_start + quantum);
            sleep_until(until);
            let ran = until - start;
            self.charge(ran);
            seat.cursor = until;
            remaining -= ran;
            if remaining == 0 {
                return Span {
                    start_ns: first.unwrap_or(start),
                    end_ns: until,
                };
            }
        }
    }

    /// Counts a kernel of `ns` that completed: the work this process got done (its busy time
    /// counts concurrent kernels once; this counts each).
    pub fn completed(&self, ns: u64) {
        // Relaxed: a counter read by observers, ordering nothing else.
        self.process
            .node()
            .process_state(self.process.slot())
            .work_ns[self.device]
            .fetch_add(ns, Relaxed);
    }

    /// Says this process has no kernel ready on the device: the engine goes to a waiting
    /// process or becomes free.
    pub fn idle(&self) {
        let mut seat = self.seat.lock().unwrap_or_else(|e| e.into_inner());
        if seat.held {
            self.hand_off(seat.cursor, self.process.node().config().idle_switch_ns);
            seat.held = false;
        }
    }

    fn me(&self) -> u32 {
        self.process.slot() as u32 + 1
    }

    fn charge(&self, ns: u64) {
        // Relaxed: counters read by observers, ordering nothing else.
        self.process
            .node()
            .process_state(self.process.slot())
            .busy_ns[self.device]
            .fetch_add(ns, Relaxed);
        self.state().busy_ns.fetch_add(ns, Relaxed);
    }

    /// Waits until this process holds the engine; returns the engine time it may start at.
    ///
    /// SeqCst throughout the protocol: the waiter's "set my bit, then read the holder" and
    /// the holder's "write the holder, then read the bits" are a store-then-load pair on
    /// each side, which only sequential consistency keeps from passing each other. The
    /// epoch read before the holder closes the remaining window: any change of holder
    /// after it changes the epoch, so the futex wait returns at once.
    fn acquire(&self, ready: u64, slice: u64, quantum: u64) -> u64 {
        let e = &self.state().engine;
        let me = self.me();
        let slot = self.process.slot();
        let (word, bit) = (slot / 64, 1u64 << (slot % 64));
        e.waiting[word].fetch_or(bit, SeqCst);
        loop {
            let epoch = e.epoch.load(SeqCst);
            let owner = e.owner.load(SeqCst);
            if owner == me {
                break;
            }
            if owner == 0 {
                if e.owner.compare_exchange(0, me, SeqCst, SeqCst).is_ok() {
                    e.epoch.fetch_add(1, SeqCst);
                    break;
                }
                continue;
            }
            futex::wait(
                &e.epoch,
                Sharing::Shared,
                epoch,
                Duration::from_nanos(HOLDER_CHECK_NS),
            );
            if e.owner.load(SeqCst) == owner && !self.process.node().slot_alive(owner as usize - 1)
            {
                // The holder died holding the engine; reaping it passes the engine on.
                self.process.node().reap();
            }
        }
        e.waiting[word].fetch_and(!bit, SeqCst);
        // Loaded after the owner (SeqCst): `pass_engine` stores them before it hands over.
        let free_at = match e.last_holder.load(SeqCst) {
            last if last == me => e.handoff_ns.load(SeqCst),
            _ => {
                let between = slice.min(e.last_slice_ns.load(SeqCst));
                let dead = slicing::switch_between_ns(e.switch_ns.load(SeqCst), quantum, between);
                e.handoff_ns.load(SeqCst) + dead
            }
        };
        ready.max(free_at).max(now_ns().saturating_sub(quantum))
    }

    fn someone_waits(&self) -> bool {
        let me = self.process.slot();
        let e = &self.state().engine;
        e.waiting.iter().enumerate().any(|(w, bits)| {
            let mut b = bits.load(SeqCst);
            if w == me / 64 {
                b &= !(1u64 << (me % 64));
            }
            b != 0
        })
    }

    /// Gives the engine to the next waiter after this process, or frees it; `at` is the
    /// engine time this process stopped, `switch_ns` the dead time before another process's
    /// kernels run.
    fn hand_off(&self, at: u64, switch_ns: u64) {
        let slice = self.process.timeslice(self.device);
        pass_engine(self.state(), self.process.slot(), at, switch_ns, slice);
    }
}

impl Process {
    /// The engine of a device, as this process sees it.
    pub fn engine(&self, device: usize) -> Engine<'_> {
        let device = self.node_index(device);
        Engine::new(self, device, self.seat(device))
    }
}
