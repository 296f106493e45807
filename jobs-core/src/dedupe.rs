//! Dedupe key templates such as `"receipt:<order_id>"`.
//!
//! A template is literal text with `<field>` placeholders naming payload fields. The macro checks
//! the placeholders against the job's arguments at compile time; at enqueue the key is rendered
//! from the encoded payload.

use serde_json::Value;

/// One piece of a parsed dedupe template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplatePart<'a> {
    /// Text copied into the key as it is.
    Literal(&'a str),
    /// A payload field whose value is rendered into the key.
    Field(&'a str),
}

/// Why a dedupe template was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// A `<` was never closed by `>`.
    #[error("unclosed `<` in dedupe template: write placeholders as `<field>`")]
    Unclosed,
    /// A placeholder was empty or not an identifier.
    #[error("`<{0}>` is not a field name: placeholders name one of the job's arguments")]
    BadField(String),
    /// The template is empty.
    #[error("empty dedupe template")]
    Empty,
}

/// Whether a dedupe key holds while the job row exists, or only while the job is pending.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DedupeScope {
    /// The key is taken while the row exists in any state, until retention prunes it.
    #[default]
    Retained,
    /// Only ready or running jobs hold the key ("at most one pending job per key").
    Active,
}

impl DedupeScope {
    /// The name stored in the database and accepted in `#[job(dedupe_scope = "...")]`.
    pub const fn as_str(self) -> &'static str {
        match self {
            DedupeScope::Retained => "retained",
            DedupeScope::Active => "active",
        }
    }

    /// Reads a scope from its name.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "retained" => Some(DedupeScope::Retained),
            "active" => Some(DedupeScope::Active),
            _ => None,
        }
    }
}

/// Splits a template into literal text and field placeholders.
///
/// ```
/// use jobs_core::dedupe::{parse_template, TemplatePart};
/// assert_eq!(
///     parse_template("receipt:<order_id>").unwrap(),
///     vec![TemplatePart::Literal("receipt:"), TemplatePart::Field("order_id")]
/// );
/// ```
pub fn parse_template(template: &str) -> Result<Vec<TemplatePart<'_>>, TemplateError> {
    if template.is_empty() {
        return Err(TemplateError::Empty);
    }
    let mut parts = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('<') {
        if open > 0 {
            parts.push(TemplatePart::Literal(&rest[..open]));
        }
        let after = &rest[open + 1..];
        let close = after.find('>').ok_or(TemplateError::Unclosed)?;
        let field = &after[..close];
        let is_identifier = field
            .chars()
            .next()
            .is_some_and(|c| c.is_alphabetic() || c == '_')
            && field.chars().all(|c| c.is_alphanumeric() || c == '_');
        if !is_identifier {
            return Err(TemplateError::BadField(field.to_string()));
        }
        parts.push(TemplatePart::Field(field));
        rest = &after[close + 1..];
    }
    if !rest.is_empty() {
        parts.push(TemplatePart::Literal(rest));
    }
    Ok(parts)
}

/// Renders a dedupe key from a template and the job's encoded payload.
///
/// Strings are inserted as they are; other values as their JSON text. Returns `None` when the
/// template names a field the payload lacks (the macro rules that out at compile time).
pub fn render_key(template: &str, payload: &Value) -> Option<String> {
    let parts = parse_template(template).ok()?;
    let mut key = String::new();
    for part in parts {
        match part {
            TemplatePart::Literal(text) => key.push_str(text),
            TemplatePart::Field(name) => match payload.get(name)? {
                Value::String(text) => key.push_str(text),
                other => key.push_str(&other.to_string()),
            },
        }
    }
    Some(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn renders_fields_from_the_payload() {
        let payload = json!({"order_id": 1042, "email": "a@b.c"});
        assert_eq!(
            render_key("receipt:<order_id>", &payload).as_deref(),
            Some("receipt:1042")
        );
        assert_eq!(
            render_key("<email>/<order_id>", &payload).as_deref(),
            Some("a@b.c/1042")
        );
        assert_eq!(render_key("x:<missing>", &payload), None);
    }

    #[test]
    fn refuses_malformed_templates() {
        assert_eq!(parse_template("a:<id"), Err(TemplateError::Unclosed));
        assert_eq!(
            parse_template("a:<>"),
            Err(TemplateError::BadField(String::new()))
        );
        assert_eq!(
            parse_template("a:<1x>"),
            Err(TemplateError::BadField("1x".into()))
        );
    }
}
