//! The set of job kinds linked into the program, gathered from `#[job]` registrations.

use std::collections::BTreeMap;

use crate::kind::JobRegistration;
use crate::state::StateMap;

/// Why a set of registrations cannot be run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// Two functions registered the same kind name.
    #[error("job kind `{name}` is defined twice: by `{first}` and by `{second}`; give one of them another `name = \"...\"`")]
    DuplicateName {
        /// The shared name.
        name: &'static str,
        /// One function.
        first: &'static str,
        /// The other function.
        second: &'static str,
    },
    /// A job needs a state type that the worker was not given.
    #[error("job `{kind}` (`{function}`) needs `State<{type_name}>`, but the worker was not given a `{type_name}`: add `.state(..)` with one")]
    MissingState {
        /// The job kind.
        kind: &'static str,
        /// Its function.
        function: &'static str,
        /// The missing type.
        type_name: &'static str,
    },
    /// A kind that was asked for is not registered.
    #[error("no job kind named `{0}` is registered")]
    UnknownKind(String),
}

/// Registered job kinds by name.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    kinds: BTreeMap<&'static str, JobRegistration>,
}

impl Registry {
    /// Every kind registered with `#[job]` in the program; fails when two share a name.
    pub fn collect() -> Result<Self, RegistryError> {
        Self::from_registrations(inventory::iter::<JobRegistration>.into_iter().copied())
    }

    /// A registry of the given kinds; fails when two share a name.
    pub fn from_registrations(
        registrations: impl IntoIterator<Item = JobRegistration>,
    ) -> Result<Self, RegistryError> {
        let mut kinds: BTreeMap<&'static str, JobRegistration> = BTreeMap::new();
        for registration in registrations {
            if let Some(existing) = kinds.get(registration.name) {
                let (first, second) = if existing.function <= registration.function {
                    (existing.function, registration.function)
                } else {
                    (registration.function, existing.function)
                };
                return Err(RegistryError::DuplicateName {
                    name: registration.name,
                    first,
                    second,
                });
            }
            kinds.insert(registration.name, registration);
        }
        Ok(Self { kinds })
    }

    /// Keeps only the named kinds; fails on a name that is not registered.
    pub fn only<'a>(
        &self,
        names: impl IntoIterator<Item = &'a str>,
    ) -> Result<Self, RegistryError> {
        let mut kinds = BTreeMap::new();
        for name in names {
            let registration = self
                .kinds
                .get(name)
                .ok_or_else(|| RegistryError::UnknownKind(name.to_string()))?;
            kinds.insert(registration.name, *registration);
        }
        Ok(Self { kinds })
    }

    /// The kind with this name.
    pub fn get(&self, name: &str) -> Option<&JobRegistration> {
        self.kinds.get(name)
    }

    /// All kinds, by name.
    pub fn iter(&self) -> impl Iterator<Item = &JobRegistration> {
        self.kinds.values()
    }

    /// Whether no kind is registered.
    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }

    /// Checks that every kind's state types are present.
    pub fn check_state(&self, states: &StateMap) -> Result<(), RegistryError> {
        for registration in self.iter() {
            for requirement in registration.required_state {
                if !states.satisfies(requirement) {
                    return Err(RegistryError::MissingState {
                        kind: registration.name,
                        function: registration.function,
                        type_name: requirement.type_name(),
                    });
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::JobOptions;
    use crate::state::StateRequirement;

    struct Mailer;

    fn registration(name: &'static str, function: &'static str) -> JobRegistration {
        JobRegistration {
            takes_arguments: false,
            name,
            function,
            options: JobOptions::DEFAULT,
            required_state: &[],
            handler: |_, _, _| unreachable!(),
        }
    }

    #[test]
    fn duplicate_names_name_both_functions() {
        let error = Registry::from_registrations([
            registration("send", "app::b::send"),
            registration("send", "app::a::send"),
        ])
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "job kind `send` is defined twice: by `app::a::send` and by `app::b::send`; give one of them another `name = \"...\"`"
        );
    }

    #[test]
    fn missing_state_names_the_job_and_the_type() {
        static NEEDS: [StateRequirement; 1] = [StateRequirement::of::<Mailer>()];
        let mut needy = registration("welcome", "app::welcome");
        needy.required_state = &NEEDS;
        let registry = Registry::from_registrations([needy]).unwrap();
        let error = registry.check_state(&StateMap::new()).unwrap_err();
        assert!(error.to_string().contains("job `welcome`"), "{error}");
        assert!(error.to_string().contains("Mailer"), "{error}");
        let mut states = StateMap::new();
        states.insert(Mailer);
        registry.check_state(&states).unwrap();
    }
}
