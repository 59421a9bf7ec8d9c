//! What a process knows of its own hold on each device's engine, kept with the process;
//! the engine (`crate::engine`) reads and writes it.

/// What a process knows of its own hold on one device's engine.
#[derive(Debug, Default)]
pub(crate) struct EngineSeat {
    pub(crate) held: bool,
    /// Engine time at which the current slice began.
    pub(crate) slice_start: u64,
    /// Whether it has: a hold taken for zero-length work (an event's timestamp) starts its
    /// slice with the first kernel, which the application submits a moment later, rather
    /// than spend the slice's first microseconds waiting for it and then be cut off just
    /// before the kernel's end.
    pub(crate) slice_started: bool,
    /// Engine time at which this process's last kernel chunk ended.
    pub(crate) cursor: u64,
}
