//! Typed application state shared with job handlers (`State<Mailer>`).

use std::any::{type_name, Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// A handler parameter that receives shared application state of type `T`.
///
/// Register the value on the worker (`.state(Mailer::new())`); a worker missing a state type
/// that one of its jobs needs refuses to start, naming the job and the type.
pub struct State<T: ?Sized>(pub Arc<T>);

impl<T: ?Sized> Deref for State<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: ?Sized> Clone for State<T> {
    fn clone(&self) -> Self {
        State(Arc::clone(&self.0))
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for State<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("State").field(&&*self.0).finish()
    }
}

/// The state values a worker holds, one per type.
#[derive(Clone, Default)]
pub struct StateMap {
    values: HashMap<TypeId, Arc<dyn Any + Send + Sync>>,
}

impl StateMap {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) the value of type `T`.
    pub fn insert<T: Send + Sync + 'static>(&mut self, value: T) {
        self.values.insert(TypeId::of::<T>(), Arc::new(value));
    }

    /// Adds (or replaces) the value of type `T`, already shared with the rest of the
    /// application.
    pub fn insert_shared<T: Send + Sync + 'static>(&mut self, value: Arc<T>) {
        self.values.insert(TypeId::of::<T>(), value);
    }

    /// The value of type `T`, when present.
    pub fn get<T: Send + Sync + 'static>(&self) -> Option<State<T>> {
        let value = self.values.get(&TypeId::of::<T>())?;
        Arc::clone(value).downcast::<T>().ok().map(State)
    }

    /// Whether a value of the required type is present.
    pub fn satisfies(&self, requirement: &StateRequirement) -> bool {
        self.values.contains_key(&(requirement.type_id)())
    }
}

impl fmt::Debug for StateMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StateMap")
            .field("types", &self.values.len())
            .finish()
    }
}

/// A state type that a job handler needs.
#[derive(Clone, Copy)]
pub struct StateRequirement {
    type_name: fn() -> &'static str,
    type_id: fn() -> TypeId,
}

impl StateRequirement {
    /// The requirement for state of type `T`.
    pub const fn of<T: Send + Sync + 'static>() -> Self {
        Self {
            type_name: type_name::<T>,
            type_id: TypeId::of::<T>,
        }
    }

    /// The type's name, for messages.
    pub fn type_name(&self) -> &'static str {
        (self.type_name)()
    }
}

impl fmt::Debug for StateRequirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.type_name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Mailer(&'static str);

    #[test]
    fn finds_values_by_type() {
        let mut map = StateMap::new();
        assert!(map.get::<Mailer>().is_none());
        assert!(!map.satisfies(&StateRequirement::of::<Mailer>()));
        map.insert(Mailer("smtp"));
        assert_eq!(map.get::<Mailer>().unwrap().0 .0, "smtp");
        assert!(map.satisfies(&StateRequirement::of::<Mailer>()));
    }
}
