//! The rules for kind and queue names, checked by `#[job]` at compile time and by every run-time
//! path that takes a name (registrations, worker queues, per-call queue overrides).
//!
//! Names are stored in every job row, sent as NOTIFY payloads, used as metrics labels, and may
//! become parts of message subjects (NATS-like systems split subjects on `.` and treat `*` and
//! `>` as wildcards, and whitespace ends a subject). So a name is 1 to [`MAX_NAME_LEN`] bytes of
//! ASCII letters, digits and the separators `_`, `-`, `.`, `:` and `/`: no whitespace, control
//! characters, wildcards, quotes or non-ASCII characters; and no empty part between dots (a name
//! neither starts nor ends with `.`, nor holds `..`), as subjects require.

use std::fmt;

/// Longest kind or queue name, in bytes.
pub const MAX_NAME_LEN: usize = 128;

/// The separators a name may contain besides ASCII letters and digits.
pub const NAME_SEPARATORS: &[char] = &['_', '-', '.', ':', '/'];

/// What a name names, for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameOf {
    /// A job kind's name.
    Kind,
    /// A queue's name.
    Queue,
}

impl fmt::Display for NameOf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NameOf::Kind => "kind",
            NameOf::Queue => "queue",
        })
    }
}

/// Why a kind or queue name is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// The name is empty.
    #[error("{of} name is empty")]
    Empty {
        /// What the name names.
        of: NameOf,
    },
    /// The name is longer than [`MAX_NAME_LEN`] bytes.
    #[error("{of} name is {len} bytes long, more than the {MAX_NAME_LEN} allowed")]
    TooLong {
        /// What the name names.
        of: NameOf,
        /// Its length in bytes.
        len: usize,
    },
    /// The name holds a character outside the allowed set.
    #[error("{of} name `{name}` holds {character:?} at byte {position}: use ASCII letters, digits and `_` `-` `.` `:` `/` only")]
    BadCharacter {
        /// What the name names.
        of: NameOf,
        /// The name, with any control characters escaped by `Debug` in the message.
        name: String,
        /// The first refused character.
        character: char,
        /// Its byte offset in the name.
        position: usize,
    },
    /// A `.` starts or ends the name, or follows another: message subjects split names on `.`
    /// and refuse empty tokens.
    #[error("{of} name `{name}` has an empty part between dots: `.` separates non-empty parts")]
    EmptyToken {
        /// What the name names.
        of: NameOf,
        /// The name.
        name: String,
    },
}

/// Checks a job kind's name against the [rules](self).
pub fn check_kind_name(name: &str) -> Result<(), NameError> {
    check_name(NameOf::Kind, name)
}

/// Checks a queue's name against the [rules](self).
pub fn check_queue_name(name: &str) -> Result<(), NameError> {
    check_name(NameOf::Queue, name)
}

/// Checks a name of `of` against the [rules](self).
pub fn check_name(of: NameOf, name: &str) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Empty { of });
    }
    if name.len() > MAX_NAME_LEN {
        return Err(NameError::TooLong {
            of,
            len: name.len(),
        });
    }
    if let Some((position, character)) = name
        .char_indices()
        .find(|(_, character)| !is_name_character(*character))
    {
        return Err(NameError::BadCharacter {
            of,
            name: name.escape_debug().to_string(),
            character,
            position,
        });
    }
    if name.split('.').any(str::is_empty) {
        return Err(NameError::EmptyToken {
            of,
            name: name.to_owned(),
        });
    }
    Ok(())
}

/// Whether `character` may appear in a kind or queue name.
fn is_name_character(character: char) -> bool {
    character.is_ascii_alphanumeric() || NAME_SEPARATORS.contains(&character)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_in_use_are_valid() {
        for name in [
            "default",
            "send_receipt",
            "billing.send_receipt",
            "billing:send-receipt/v2",
            "A1",
        ] {
            check_kind_name(name).unwrap();
            check_queue_name(name).unwrap();
        }
        check_queue_name(&"q".repeat(MAX_NAME_LEN)).unwrap();
    }

    #[test]
    fn names_with_an_empty_part_between_dots_are_refused() {
        for name in [".a", "a.", "a..b", "."] {
            assert!(
                matches!(check_queue_name(name), Err(NameError::EmptyToken { .. })),
                "{name}"
            );
        }
    }

    #[test]
    fn empty_and_long_names_are_refused() {
        assert_eq!(
            check_queue_name(""),
            Err(NameError::Empty { of: NameOf::Queue })
        );
        assert_eq!(
            check_kind_name(&"k".repeat(3000)),
            Err(NameError::TooLong {
                of: NameOf::Kind,
                len: 3000
            })
        );
    }

    #[test]
    fn whitespace_control_wildcards_and_non_ascii_are_refused() {
        for (name, character, position) in [
            ("send receipt", ' ', 4),
            ("mail\r\nPUB x", '\r', 4),
            ("tab\t", '\t', 3),
            ("orders.*", '*', 7),
            ("orders.>", '>', 7),
            ("quote\"", '"', 5),
            ("café", 'é', 3),
            ("nul\0", '\0', 3),
        ] {
            match check_queue_name(name) {
                Err(NameError::BadCharacter {
                    character: found,
                    position: at,
                    ..
                }) => assert_eq!((found, at), (character, position), "{name:?}"),
                other => panic!("{name:?}: {other:?}"),
            }
        }
        let message = check_kind_name("a\nb").unwrap_err().to_string();
        assert!(message.contains(r"a\nb"), "{message}");
    }
}
