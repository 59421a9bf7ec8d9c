//! An event's records as the executor completes them: how many were submitted, the latest
//! that has run and when, in simulated time. The event holds them and its records in flight
//! hold them too, so that the executor completes records without knowing events.

use std::sync::{Condvar, Mutex, MutexGuard};

/// The records of one event.
#[derive(Default)]
pub(crate) struct Records {
    state: Mutex<RecordState>,
    cv: Condvar,
}

#[derive(Default)]
pub(crate) struct RecordState {
    /// How many times it was recorded (outside captures).
    pub(crate) recorded: u64,
    /// The latest record that has run.
    pub(crate) done: u64,
    /// When that record ran, in simulated time.
    pub(crate) timestamp_ns: u64,
}

impl Records {
    pub(crate) fn state(&self) -> MutexGuard<'_, RecordState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// On the executor: the `n`th record ran at `timestamp_ns`.
    pub(crate) fn complete(&self, n: u64, timestamp_ns: u64) {
        let mut s = self.state();
        // A later record may have completed first, on another stream: it is the one the
        // event now stands for.
        if n > s.done {
            s.done = n;
            s.timestamp_ns = timestamp_ns;
        }
        self.cv.notify_all();
    }

    /// Whether the `n`th record has run.
    pub(crate) fn reached(&self, n: u64) -> bool {
        self.state().done >= n
    }

    /// The time of the latest completed record.
    pub(crate) fn timestamp_ns(&self) -> u64 {
        self.state().timestamp_ns
    }

    /// Whether every record so far has run.
    pub(crate) fn complete_now(&self) -> bool {
        let s = self.state();
        s.done >= s.recorded
    }

    /// Blocks until every record so far has run.
    pub(crate) fn wait_all(&self) {
        let mut s = self.state();
        let n = s.recorded;
        while s.done < n {
            s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }
}
