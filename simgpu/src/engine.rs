//! The execution engine of one device, time-sliced between the processes of the node.
//! (API sketch; bodies arrive next.)

/// One process's view of one device's engine. Kernels of one process run one at a time; the
/// caller is the process's executor thread for that device.
pub struct Engine<'p> {
    _p: std::marker::PhantomData<&'p ()>,
}

/// When a piece of work ran, on the node clock ([`crate::clock::now_ns`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// When the engine started it.
    pub start_ns: u64,
    /// When it finished.
    pub end_ns: u64,
}

impl Engine<'_> {
    /// Runs `ns` of kernel time that became ready at `ready_ns`: takes the engine (waiting
    /// while another process holds it), gives it up at each quantum boundary when another
    /// process waits, and returns when the kernel's time has passed. The span is engine
    /// time: a hand-off starts the next process at the instant the previous one stopped.
    /// Busy time is charged to this process.
    pub fn run(&self, _ready_ns: u64, _ns: u64) -> Span {
        todo!()
    }
    /// Says this process has no kernel ready on the device: the engine goes to a waiting
    /// process or becomes free.
    pub fn idle(&self) {
        todo!()
    }
}
