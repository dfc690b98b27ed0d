//! The objects a pass works out before the others: those whose spec changed and those an
//! earlier pass could not decide yet. At most [`MAX_FIRST`] are held: past it an object keeps
//! its turn in the pass, which writes every stale status anyway, so a burst (a bulk apply of
//! 100,000 bindings, or every policy with params pending after start-up) neither grows this
//! set with it nor makes a first phase of minutes that nothing can interrupt.

use std::collections::HashMap;

use super::Kind;

/// How many objects are held to work out first (and how many bindings of the policies among
/// them a pass works out with them).
pub(super) const MAX_FIRST: usize = 1024;

/// In how many passes in a row an object is worked out first while it cannot be decided yet
/// (its generation not compiled, published or registered, its params syncing); then it waits
/// for its turn in a pass like any other.
const ATTEMPTS: u8 = 5;

/// The objects to work out first, with how many passes did so while they were pending.
#[derive(Debug, Default)]
pub(super) struct First(HashMap<(Kind, String), u8>);

impl First {
    /// Holds the object `name` of `kind` to work out first, unless [`MAX_FIRST`] are held.
    pub(super) fn note(&mut self, kind: Kind, name: String) {
        if self.0.len() < MAX_FIRST {
            self.0.entry((kind, name)).or_insert(0);
        }
    }

    /// Counts a pass that worked the object out: it stays while `pending`, for [`ATTEMPTS`]
    /// passes at most.
    pub(super) fn attempted(&mut self, kind: Kind, name: &str, pending: bool) {
        let key = (kind, name.to_string());
        if let Some(attempts) = self.0.get_mut(&key) {
            *attempts += 1;
            if !pending || *attempts >= ATTEMPTS {
                self.0.remove(&key);
            }
        }
    }

    /// The objects held.
    pub(super) fn keys(&self) -> impl Iterator<Item = &(Kind, String)> {
        self.0.keys()
    }

    /// How many objects are held.
    pub(super) fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether none is held.
    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Holds none.
    pub(super) fn clear(&mut self) {
        self.0.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_the_bound_an_object_keeps_its_turn_and_one_held_stays_held() {
        let mut first = First::default();
        for i in 0..MAX_FIRST + 10 {
            first.note(Kind::ValidatingBinding, format!("b{i}"));
        }
        assert_eq!(first.len(), MAX_FIRST);
        let held = |first: &First, name: &str| {
            first
                .keys()
                .any(|(k, n)| *k == Kind::ValidatingBinding && n == name)
        };
        assert!(held(&first, "b0"));
        assert!(!held(&first, &format!("b{MAX_FIRST}")));
        // Noted again, one held is not dropped nor counted twice.
        first.note(Kind::ValidatingBinding, "b0".into());
        assert_eq!(first.len(), MAX_FIRST);
        assert!(held(&first, "b0"));
    }

    #[test]
    fn an_object_stays_while_pending_for_its_attempts_and_goes_once_decided() {
        let mut first = First::default();
        first.note(Kind::ValidatingPolicy, "p".into());
        first.note(Kind::ValidatingPolicy, "q".into());
        for _ in 1..ATTEMPTS {
            first.attempted(Kind::ValidatingPolicy, "p", true);
        }
        first.attempted(Kind::ValidatingPolicy, "q", false);
        assert_eq!(
            first.keys().collect::<Vec<_>>(),
            [&(Kind::ValidatingPolicy, "p".to_string())]
        );
        first.attempted(Kind::ValidatingPolicy, "p", true);
        assert!(first.is_empty());
    }
}
