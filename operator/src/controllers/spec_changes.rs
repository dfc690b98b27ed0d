//! The objects whose spec changed (created, deleted, or updated in more than their status), by
//! watch `W` and name, for the status writer to work out first: a pass that writes thousands of
//! statuses (the first after start-up or a new leader, at 100,000 bindings, takes minutes)
//! yields to them instead of leaving them for its end. At most [`MAX_RECORDED`] are held
//! between two passes: past it a change is not recorded (still signalled), and the pass
//! writes its status in turn, as it writes every stale one.

use std::collections::HashSet;
use std::hash::Hash;
use std::sync::{Mutex, PoisonError};

use tokio::sync::watch;

/// How many changed objects are held until the status writer takes them.
pub const MAX_RECORDED: usize = 1024;

/// The changed objects not yet taken, and a signal that changes with each one recorded.
#[derive(Debug)]
pub struct SpecChanges<W> {
    names: Mutex<HashSet<(W, String)>>,
    signal: watch::Sender<()>,
}

impl<W> Default for SpecChanges<W> {
    fn default() -> Self {
        Self {
            names: Mutex::default(),
            signal: watch::Sender::new(()),
        }
    }
}

impl<W: Hash + Eq> SpecChanges<W> {
    /// Records that the spec of the object `name` of `watched` changed (unless
    /// [`MAX_RECORDED`] are held).
    pub fn record(&self, watched: W, name: &str) {
        let mut names = self.names.lock().unwrap_or_else(PoisonError::into_inner);
        if names.len() < MAX_RECORDED {
            names.insert((watched, name.to_string()));
        }
        drop(names);
        self.signal.send_replace(());
    }

    /// The objects recorded since the last call, each once.
    pub fn take(&self) -> HashSet<(W, String)> {
        std::mem::take(&mut *self.names.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Changes with every object recorded.
    pub fn subscribe(&self) -> watch::Receiver<()> {
        self.signal.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::policies::Watched;

    #[test]
    fn each_recorded_object_is_taken_once_and_signalled() {
        let changes = SpecChanges::default();
        let mut signal = changes.subscribe();
        assert!(!signal.has_changed().unwrap());
        changes.record(Watched::Policies, "p");
        changes.record(Watched::Bindings, "b");
        changes.record(Watched::Policies, "p");
        assert!(signal.has_changed().unwrap());
        signal.borrow_and_update();
        let taken = changes.take();
        assert_eq!(
            taken,
            HashSet::from([
                (Watched::Policies, "p".to_string()),
                (Watched::Bindings, "b".to_string())
            ])
        );
        assert!(changes.take().is_empty());
        assert!(!signal.has_changed().unwrap());
    }

    #[test]
    fn past_the_bound_a_change_is_signalled_but_not_held() {
        let changes = SpecChanges::default();
        for i in 0..MAX_RECORDED {
            changes.record(Watched::Bindings, &format!("b{i}"));
        }
        let mut signal = changes.subscribe();
        changes.record(Watched::Policies, "p");
        assert!(signal.has_changed().unwrap());
        signal.borrow_and_update();
        let taken = changes.take();
        assert_eq!(taken.len(), MAX_RECORDED);
        assert!(!taken.contains(&(Watched::Policies, "p".to_string())));
        // Taken, there is room again.
        changes.record(Watched::Policies, "p");
        assert_eq!(
            changes.take(),
            HashSet::from([(Watched::Policies, "p".to_string())])
        );
    }
}
