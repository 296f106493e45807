//! The syntax of outbox topics, checked where rows are written ([`publish_in`](super::publish_in)),
//! by the table's CHECK constraint, and again by publishers before a topic reaches a broker's
//! protocol: [`validate_topic`].
//!
//! A topic becomes a broker's subject or routing key, written into a text protocol: a line break
//! in it can inject a command (for NATS, a publish to another subject), a space breaks every
//! attempt, a wildcard publishes to nothing a consumer expects. So a topic is one or more
//! non-empty tokens separated by `.`, each token free of whitespace, control characters and the
//! wildcards `*` and `>`, the whole at most [`MAX_TOPIC_BYTES`] bytes of UTF-8.

use std::fmt;

/// Longest topic, in bytes of UTF-8: 255. Room for any sensible hierarchy, and with a prefix far
/// below the line lengths brokers accept (NATS: 4 kB of control line by default).
pub const MAX_TOPIC_BYTES: usize = 255;

/// Why a topic was refused. Its text shows characters that cannot be printed as escapes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopicError {
    /// The topic is empty.
    #[error("an outbox topic cannot be empty")]
    Empty,
    /// The topic is longer than [`MAX_TOPIC_BYTES`].
    #[error("the outbox topic is {bytes} bytes long, more than the {max} allowed")]
    TooLong {
        /// Its length in bytes.
        bytes: usize,
        /// The limit, [`MAX_TOPIC_BYTES`].
        max: usize,
    },
    /// A token is empty: the topic starts or ends with `.`, or has `..`.
    #[error("the outbox topic {topic} has an empty token at byte {at}: tokens are separated by single dots")]
    EmptyToken {
        /// The topic, escaped.
        topic: String,
        /// Where the empty token starts, in bytes.
        at: usize,
    },
    /// The topic holds a character no token may hold.
    #[error("the outbox topic {topic} holds {character} at byte {at}: topics may not hold whitespace, control characters or the wildcards `*` and `>`")]
    Forbidden {
        /// The topic, escaped.
        topic: String,
        /// The character, escaped.
        character: String,
        /// Where it is, in bytes.
        at: usize,
    },
}

/// Checks that `topic` is a valid outbox topic (see the [module](self) docs): one or more
/// non-empty tokens separated by `.`, no whitespace, no control characters, no `*` or `>`, at
/// most [`MAX_TOPIC_BYTES`] bytes.
///
/// ```
/// use jobs_postgres::outbox::{validate_topic, TopicError};
///
/// assert!(validate_topic("orders.placed").is_ok());
/// assert!(matches!(validate_topic("orders..placed"), Err(TopicError::EmptyToken { .. })));
/// assert!(matches!(validate_topic("orders.placed\r\nPUB x 1"), Err(TopicError::Forbidden { .. })));
/// assert!(matches!(validate_topic("orders.>"), Err(TopicError::Forbidden { .. })));
/// ```
pub fn validate_topic(topic: &str) -> Result<(), TopicError> {
    if topic.is_empty() {
        return Err(TopicError::Empty);
    }
    if topic.len() > MAX_TOPIC_BYTES {
        return Err(TopicError::TooLong {
            bytes: topic.len(),
            max: MAX_TOPIC_BYTES,
        });
    }
    let mut token_start = 0;
    for (at, character) in topic.char_indices() {
        if character == '.' {
            if at == token_start {
                return Err(TopicError::EmptyToken {
                    topic: escaped(topic),
                    at,
                });
            }
            token_start = at + 1;
        } else if is_forbidden(character) {
            return Err(TopicError::Forbidden {
                topic: escaped(topic),
                character: escaped(&character.to_string()),
                at,
            });
        }
    }
    if token_start == topic.len() {
        return Err(TopicError::EmptyToken {
            topic: escaped(topic),
            at: token_start,
        });
    }
    Ok(())
}

/// Whether a token may not hold `character`: whitespace, control characters and wildcards.
/// The CHECK constraint `jobs_outbox_topic_syntax` lists the same characters.
fn is_forbidden(character: char) -> bool {
    character.is_whitespace() || character.is_control() || character == '*' || character == '>'
}

/// `text` quoted, with control characters and whitespace other than a plain space escaped.
fn escaped(text: &str) -> String {
    struct Escaped<'a>(&'a str);
    impl fmt::Display for Escaped<'_> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("`")?;
            for character in self.0.chars() {
                if character == ' ' || !is_forbidden(character) {
                    write!(f, "{character}")?;
                } else {
                    write!(f, "{}", character.escape_unicode())?;
                }
            }
            f.write_str("`")
        }
    }
    Escaped(text).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_topics_are_valid() {
        for topic in [
            "orders",
            "orders.placed",
            "a.b.c.d",
            "ünïcødé.事件",
            "x-y_z.1",
        ] {
            assert_eq!(validate_topic(topic), Ok(()), "{topic}");
        }
        assert_eq!(validate_topic(&"a".repeat(MAX_TOPIC_BYTES)), Ok(()));
    }

    #[test]
    fn every_forbidden_character_is_refused() {
        for character in [
            ' ', '\t', '\r', '\n', '\0', '\u{7f}', '\u{85}', '\u{a0}', '\u{2028}', '\u{3000}', '*',
            '>',
        ] {
            let topic = format!("orders.pl{character}aced");
            assert!(
                matches!(
                    validate_topic(&topic),
                    Err(TopicError::Forbidden { at: 9, .. })
                ),
                "{character:?}"
            );
        }
    }

    #[test]
    fn empty_tokens_and_long_topics_are_refused() {
        assert_eq!(validate_topic(""), Err(TopicError::Empty));
        for (topic, at) in [(".a", 0), ("a.", 2), ("a..b", 2), (".", 0)] {
            assert!(
                matches!(validate_topic(topic), Err(TopicError::EmptyToken { at: found, .. }) if found == at),
                "{topic}"
            );
        }
        assert_eq!(
            validate_topic(&"a".repeat(MAX_TOPIC_BYTES + 1)),
            Err(TopicError::TooLong {
                bytes: MAX_TOPIC_BYTES + 1,
                max: MAX_TOPIC_BYTES
            })
        );
    }

    #[test]
    fn the_error_shows_an_injected_line_break_as_an_escape() {
        let error = validate_topic("a\r\nPUB b 1").unwrap_err().to_string();
        assert!(error.contains(r"`a\u{d}\u{a}PUB b 1`"), "{error}");
        assert!(!error.contains('\n'), "{error}");
    }
}
