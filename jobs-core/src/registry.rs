//! The set of job kinds linked into the program, gathered from `#[job]` registrations.

use std::collections::BTreeMap;

use crate::kind::JobRegistration;
use crate::name::{check_kind_name, check_queue_name, NameError};
use crate::retry::{MaxAttemptsError, RetryPolicy};
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
    /// A kind's name or default queue breaks the [naming rules](crate::name).
    #[error("job `{function}` cannot be registered: {error}")]
    InvalidName {
        /// The function that defines the kind.
        function: &'static str,
        /// The rule broken.
        #[source]
        error: NameError,
    },
    /// A kind's `max_attempts` is 0 or does not fit the database's integer.
    #[error("job kind `{kind}` cannot be registered: {error}")]
    InvalidMaxAttempts {
        /// The job kind.
        kind: &'static str,
        /// The value refused.
        #[source]
        error: MaxAttemptsError,
    },
    /// A kind has a fairness key and a limit on its running jobs or their rate (set in
    /// `#[job]`, which refuses the pair at compile time, or on the worker's builder): a kind is
    /// claimed either round-robin by its fairness key or under its limits.
    #[error("job kind `{kind}` has a fairness key (`fair_key`) and a limit (`max_running`, `rate_limit`, `max_running_per_key` or `rate_limit_per_key`): a kind is claimed either round-robin by its fairness key or under its limits; put the limited work in a kind of its own")]
    FairKeyWithLimit {
        /// The job kind.
        kind: &'static str,
    },
    /// A kind has a per-key limit but no limit key to count by (a registration built by hand,
    /// or a run-time limit on a kind whose `#[job]` declares no `limit_key`).
    #[error("job kind `{kind}` has a per-key limit (`max_running_per_key` or `rate_limit_per_key`) but no `limit_key` to count its jobs by: declare one in #[job(limit_key = \"<field>\")]")]
    PerKeyLimitWithoutKey {
        /// The job kind.
        kind: &'static str,
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

    /// A registry of the given kinds; fails when two share a name, or when a kind's name,
    /// default queue or `max_attempts` cannot be stored (see [`crate::name`] and
    /// [`RetryPolicy::check_max_attempts`]).
    pub fn from_registrations(
        registrations: impl IntoIterator<Item = JobRegistration>,
    ) -> Result<Self, RegistryError> {
        let mut kinds: BTreeMap<&'static str, JobRegistration> = BTreeMap::new();
        for registration in registrations {
            check_registration(&registration)?;
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

/// Checks what a registration would store in every job row (its names and `max_attempts`), that
/// a fairness key comes without a limit, and that a per-key limit comes with a key.
fn check_registration(registration: &JobRegistration) -> Result<(), RegistryError> {
    let options = &registration.options;
    let limited = options.max_running.is_some()
        || options.rate_limit.is_some()
        || options.max_running_per_key.is_some()
        || options.rate_limit_per_key.is_some();
    if options.fair_key.is_some() && limited {
        return Err(RegistryError::FairKeyWithLimit {
            kind: registration.name,
        });
    }
    let per_key = options.max_running_per_key.is_some() || options.rate_limit_per_key.is_some();
    if per_key && options.limit_key.is_none() {
        return Err(RegistryError::PerKeyLimitWithoutKey {
            kind: registration.name,
        });
    }
    let invalid_name = |error| RegistryError::InvalidName {
        function: registration.function,
        error,
    };
    check_kind_name(registration.name).map_err(invalid_name)?;
    check_queue_name(registration.options.queue).map_err(invalid_name)?;
    RetryPolicy::check_max_attempts(registration.options.retry.max_attempts).map_err(|error| {
        RegistryError::InvalidMaxAttempts {
            kind: registration.name,
            error,
        }
    })
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
    fn names_that_break_the_rules_are_refused() {
        static LONG: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        let long: &'static str = LONG.get_or_init(|| "k".repeat(3000));
        let error = Registry::from_registrations([registration(long, "app::long")]).unwrap_err();
        assert!(
            matches!(
                error,
                RegistryError::InvalidName {
                    function: "app::long",
                    error: NameError::TooLong { len: 3000, .. }
                }
            ),
            "{error:?}"
        );
        let mut spaced = registration("send", "app::send");
        spaced.options.queue = "mail queue";
        let error = Registry::from_registrations([spaced]).unwrap_err();
        assert!(
            matches!(
                error,
                RegistryError::InvalidName {
                    error: NameError::BadCharacter { character: ' ', .. },
                    ..
                }
            ),
            "{error:?}"
        );
    }

    #[test]
    fn max_attempts_beyond_the_database_integer_are_refused() {
        let mut many = registration("send", "app::send");
        many.options.retry.max_attempts = 3_000_000_000;
        assert_eq!(
            Registry::from_registrations([many]).unwrap_err(),
            RegistryError::InvalidMaxAttempts {
                kind: "send",
                error: MaxAttemptsError(3_000_000_000)
            }
        );
        many.options.retry.max_attempts = 0;
        assert!(Registry::from_registrations([many]).is_err());
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
