//! The error every settings type of the crate gives for a setting that cannot work: the
//! worker's, retention's and the outbox relay's.

/// A setting that cannot work, named.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid setting `{setting}`: {reason}")]
pub struct ConfigError {
    /// The setting's name.
    pub setting: &'static str,
    /// Why it cannot work.
    pub reason: &'static str,
}
