//! Text from the database made safe for a terminal.
//!
//! Error messages come from third parties (providers, libraries, the jobs themselves), and
//! names, keys and payloads from whoever enqueued: any of them may hold an escape sequence, a
//! carriage return or a line break that would recolour, retitle or clear the operator's
//! terminal, or forge a line of output. Every human-readable printer passes such text through
//! [`shown`]; JSON output goes through [`json_safe`], which keeps every value exact.

use std::fmt::Write;

/// Whether a terminal could act on `c`: the C0 and C1 controls and DEL (`char::is_control`), and
/// the bidirectional formatting characters, which reorder what follows them on screen.
fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

/// `text` with every character a terminal could act on written out: `\n`, `\r`, `\t`, `\0`, or
/// `\u{1b}` for the others (as Rust writes them). Everything else, backslashes included, is
/// left as it is, so plain text reads the same; applying it twice changes nothing more.
pub fn shown(text: &str) -> String {
    if !text.chars().any(is_unsafe) {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\0' => out.push_str("\\0"),
            c if is_unsafe(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out
}

/// JSON text with every character a terminal could act on written as a JSON `\uXXXX` escape.
/// serde_json escapes the C0 controls already; DEL, the C1 controls and the bidirectional
/// characters it leaves as they are. They can only occur inside strings, where the escape reads
/// back as the same character: the document means exactly what it meant.
pub fn json_safe(json: &str) -> String {
    if !json.chars().any(is_unsafe) {
        return json.to_owned();
    }
    let mut out = String::with_capacity(json.len() + 8);
    for c in json.chars() {
        // Line breaks between tokens (pretty printing) are layout, not content: inside strings
        // serde_json has escaped them already.
        if c != '\n' && is_unsafe(c) {
            let _ = write!(out, "\\u{:04x}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_unchanged() {
        assert_eq!(
            shown("no such user: C:\\tmp \u{e9}t\u{e9}"),
            "no such user: C:\\tmp \u{e9}t\u{e9}"
        );
    }

    #[test]
    fn controls_are_written_out() {
        assert_eq!(
            shown("a\u{1b}[31mb\rc\nd\te\0f\u{7f}\u{9b}\u{202e}"),
            "a\\u{1b}[31mb\\rc\\nd\\te\\0f\\u{7f}\\u{9b}\\u{202e}"
        );
        let once = shown("\u{1b}[2J");
        assert_eq!(shown(&once), once);
    }

    #[test]
    fn json_keeps_its_meaning() {
        let value = serde_json::json!({ "error": "a\u{1b}b\u{9b}c\u{202e}d\ne" });
        let text = json_safe(&serde_json::to_string_pretty(&value).unwrap());
        assert!(!text.chars().any(|c| c != '\n' && is_unsafe(c)), "{text}");
        let back: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back, value);
    }
}
