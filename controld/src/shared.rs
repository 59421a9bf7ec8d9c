//! What the daemon's threads share ([`Core`]): the state behind one lock, and the steps that
//! add to its status. The daemon makes it; the socket server, the reaper, the watchdog and
//! the metrics use it, so it lives below all of them.

use crate::state::State;
use crate::status::NodeStatus;
use std::sync::{Mutex, MutexGuard, RwLock};

/// Adds to a status what the regions cannot tell (the watchdog's GPU figures, real usage,
/// unmanaged processes).
pub type StatusEnricher = Box<dyn Fn(&mut NodeStatus) + Send + Sync>;

/// What the daemon's threads share: the state, behind one lock, and the status enrichers.
pub struct Core {
    state: Mutex<State>,
    enrichers: RwLock<Vec<StatusEnricher>>,
}

impl Core {
    /// A core over `state`.
    pub fn new(state: State) -> Core {
        Core {
            state: Mutex::new(state),
            enrichers: RwLock::new(Vec::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves the state consistent enough to go on with:
        // every change to it is a single map insert or remove.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` on the state, holding its lock.
    pub fn with_state<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        f(&mut self.lock())
    }

    /// The node now: the regions' view ([`State::node_status`]), then each enricher in turn.
    /// What `controld status` and the metrics show.
    pub fn node_status(&self) -> NodeStatus {
        let mut status = self.lock().node_status();
        let enrichers = self.enrichers.read().unwrap_or_else(|p| p.into_inner());
        for enrich in enrichers.iter() {
            enrich(&mut status);
        }
        status
    }

    /// Adds a step to [`Core::node_status`].
    pub fn add_status_enricher(&self, enrich: StatusEnricher) {
        self.enrichers
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push(enrich);
    }
}
