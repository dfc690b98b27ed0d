//! A watcher's events as changes to a view keyed by object: one object applied or deleted, or,
//! when a list completes (the first one or a re-list after the watch lost track), every object
//! at once. A view built from these converts an object only when its own event arrives.

use kube::runtime::watcher::Event;

/// One change to a view.
#[derive(Debug)]
pub enum Change<K> {
    /// An object was added or modified.
    Apply(K),
    /// An object was deleted.
    Delete(K),
    /// A list completed: these are all the objects, and any other is gone.
    Replace(Vec<K>),
}

/// Turns watcher events into [`Change`]s, holding a list's objects until it completes.
#[derive(Debug)]
pub struct Changes<K> {
    listing: Vec<K>,
}

impl<K> Default for Changes<K> {
    fn default() -> Self {
        Self {
            listing: Vec::new(),
        }
    }
}

impl<K> Changes<K> {
    /// The change `event` makes, if it completes one.
    pub fn next(&mut self, event: Event<K>) -> Option<Change<K>> {
        match event {
            Event::Apply(object) => Some(Change::Apply(object)),
            Event::Delete(object) => Some(Change::Delete(object)),
            Event::Init => {
                self.listing.clear();
                None
            }
            Event::InitApply(object) => {
                self.listing.push(object);
                None
            }
            Event::InitDone => Some(Change::Replace(std::mem::take(&mut self.listing))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_is_one_change_when_it_completes_and_restarts_on_init() {
        let mut changes = Changes::default();
        assert!(changes.next(Event::Init).is_none());
        assert!(changes.next(Event::InitApply("lost")).is_none());
        // The watch lost track mid-list: the next list starts from nothing.
        assert!(changes.next(Event::Init).is_none());
        assert!(changes.next(Event::InitApply("a")).is_none());
        assert!(changes.next(Event::InitApply("b")).is_none());
        assert!(
            matches!(changes.next(Event::InitDone), Some(Change::Replace(all)) if all == ["a", "b"])
        );
        assert!(matches!(
            changes.next(Event::Apply("c")),
            Some(Change::Apply("c"))
        ));
        assert!(matches!(
            changes.next(Event::Delete("a")),
            Some(Change::Delete("a"))
        ));
    }
}
