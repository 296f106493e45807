//! The access token: a secret read from a file or the environment, compared in constant time.

use std::fmt;
use std::path::Path;

use sha2::{Digest, Sha256};

/// The fewest characters an access token may have.
pub const MIN_TOKEN_LEN: usize = 16;

/// The secret that opens the console. It is never taken from a command-line flag's value
/// (which other users of the machine can read in the process list), only from a file or the
/// environment. Its `Debug` output hides it.
#[derive(Clone)]
pub struct AccessToken(String);

/// Why an access token was refused.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The file could not be read.
    #[error("cannot read the access token file {path}: {source}")]
    File {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The environment variable is not set (or not UTF-8).
    #[error("the environment variable {0} holding the access token is not set")]
    Unset(String),
    /// The token is shorter than [`MIN_TOKEN_LEN`] (surrounding whitespace aside).
    #[error("the access token has {0} characters; it needs at least {MIN_TOKEN_LEN}")]
    TooShort(usize),
    /// The token holds a character other than printable ASCII.
    #[error("the access token may hold only printable ASCII characters, without spaces")]
    NotPrintable,
}

impl AccessToken {
    /// A token from its text, surrounding whitespace (a file's final newline) removed.
    pub fn new(text: &str) -> Result<Self, TokenError> {
        let text = text.trim();
        if !text.bytes().all(|byte| byte.is_ascii_graphic()) {
            return Err(TokenError::NotPrintable);
        }
        if text.len() < MIN_TOKEN_LEN {
            return Err(TokenError::TooShort(text.len()));
        }
        Ok(Self(text.to_owned()))
    }

    /// The token held by the file at `path`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, TokenError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| TokenError::File {
            path: path.display().to_string(),
            source,
        })?;
        Self::new(&text)
    }

    /// The token held by the environment variable `name`.
    pub fn from_env(name: &str) -> Result<Self, TokenError> {
        let text = std::env::var(name).map_err(|_| TokenError::Unset(name.to_owned()))?;
        Self::new(&text)
    }

    /// Whether `offered` is the token. Their SHA-256 digests are compared, in time that depends
    /// neither on where they differ nor on the token's length.
    pub fn matches(&self, offered: &str) -> bool {
        constant_time_eq(
            &Sha256::digest(self.0.as_bytes()),
            &Sha256::digest(offered.as_bytes()),
        )
    }
}

impl fmt::Debug for AccessToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AccessToken(..)")
    }
}

/// Whether `a` and `b` are equal, in time that depends only on their lengths.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter()
        .zip(b)
        .fold(0u8, |difference, (x, y)| difference | (x ^ y))
        == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_trimmed_and_checked() {
        let token = AccessToken::new("  0123456789abcdef\n").unwrap();
        assert!(token.matches("0123456789abcdef"));
        assert!(!token.matches("0123456789abcdeF"));
        assert!(!token.matches("0123456789abcde"));
        assert!(matches!(
            AccessToken::new("short"),
            Err(TokenError::TooShort(5))
        ));
        assert!(matches!(
            AccessToken::new("0123456789 abcdef"),
            Err(TokenError::NotPrintable)
        ));
        assert_eq!(format!("{token:?}"), "AccessToken(..)");
    }
}
