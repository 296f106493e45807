//! Key templates such as `"receipt:<order_id>"`: dedupe keys, and the fairness keys of
//! [`fair_key`](crate::JobOptions::fair_key).
//!
//! A template is literal text with `<field>` placeholders naming payload fields. The macro checks
//! the placeholders against the job's arguments at compile time; at enqueue the key is rendered
//! from the encoded payload.

use serde_json::Value;

/// One piece of a parsed key template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplatePart<'a> {
    /// Text copied into the key as it is.
    Literal(&'a str),
    /// A payload field whose value is rendered into the key.
    Field(&'a str),
}

/// Why a key template was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// A `<` was never closed by `>`.
    #[error("unclosed `<`: write placeholders as `<field>`")]
    Unclosed,
    /// A placeholder was empty or not an identifier.
    #[error("`<{0}>` is not a field name: placeholders name one of the job's arguments")]
    BadField(String),
    /// The template is empty.
    #[error("the template is empty")]
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

/// Why no key could be rendered from a template.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The template is malformed (the macro rules that out at compile time).
    #[error(transparent)]
    Template(#[from] TemplateError),
    /// The payload has no such field: the arguments skipped it when serializing.
    #[error("the key names `{0}`, which the encoded arguments lack")]
    MissingField(String),
}

/// Renders a key (a dedupe key, a fairness key) from a template and the job's encoded payload.
///
/// Each placeholder is written so that different values always give different keys, whatever
/// the literal text around them:
///
/// - a string as a JSON string literal, quotes and escapes included (`"a@b.c"`), so it can
///   never read as a number, as `null`, or as part of the text around it;
/// - a number as its JSON text (`1042`), in parentheses (`(1042)`) when the template goes on
///   with another placeholder or with text that could continue a number (a digit, `.`, `e`,
///   `E`, `+` or `-`);
/// - `true`, `false`, `null` (a `None`), arrays and objects as their JSON text.
///
/// So `"receipt:<order_id>"` renders `receipt:1042` for the number 1042, `receipt:"1042"` for the
/// string `"1042"`, and `receipt:null` for `None`. A field the payload lacks (skipped when
/// serializing) is an error rather than a key: no rendering of it could be told apart safely.
///
/// ```
/// use jobs_core::dedupe::render_key;
/// use serde_json::json;
/// let key = |a, b| render_key("<a>:<b>", &json!({"a": a, "b": b})).unwrap();
/// assert_eq!(key(json!("x:y"), json!("z")), r#""x:y":"z""#);
/// assert_eq!(key(json!("x"), json!("y:z")), r#""x":"y:z""#);
/// assert_eq!(key(json!(1042), json!(null)), "1042:null");
/// ```
pub fn render_key(template: &str, payload: &Value) -> Result<String, KeyError> {
    let parts = parse_template(template)?;
    let mut key = String::new();
    for (position, part) in parts.iter().enumerate() {
        match part {
            TemplatePart::Literal(text) => key.push_str(text),
            TemplatePart::Field(name) => {
                let value = payload
                    .get(name)
                    .ok_or_else(|| KeyError::MissingField((*name).to_string()))?;
                let text = value.to_string();
                if value.is_number() && !ends_a_number(parts.get(position + 1)) {
                    key.push('(');
                    key.push_str(&text);
                    key.push(')');
                } else {
                    key.push_str(&text);
                }
            }
        }
    }
    Ok(key)
}

/// Whether a number written just before `next` ends where its JSON text ends: at the end of the
/// key, or before literal text that no number can continue. A sign continues a number only
/// after an exponent's `e`, and a number's text never ends in `e`, so `+` and `-` end it: a key
/// such as `"<user>-<day>"` renders `1-2`, as it did before keys were made injective.
fn ends_a_number(next: Option<&TemplatePart<'_>>) -> bool {
    match next {
        None => true,
        Some(TemplatePart::Field(_)) => false,
        Some(TemplatePart::Literal(text)) => {
            !text.starts_with(|c: char| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E'))
        }
    }
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
            Ok("receipt:1042")
        );
        assert_eq!(
            render_key("<email>/<order_id>", &payload).as_deref(),
            Ok(r#""a@b.c"/1042"#)
        );
        assert_eq!(
            render_key("x:<missing>", &payload),
            Err(KeyError::MissingField("missing".into()))
        );
    }

    #[test]
    fn strings_keep_their_boundaries() {
        let key = |a: &str, b: &str| render_key("<a>:<b>", &json!({"a": a, "b": b})).unwrap();
        assert_ne!(key("x:y", "z"), key("x", "y:z"));
        assert_ne!(key("a\"", "b"), key("a", "\"b"));
        assert_eq!(key("x:y", "z"), r#""x:y":"z""#);
    }

    #[test]
    fn a_string_of_digits_and_a_number_differ() {
        let key = |id| render_key("receipt:<id>", &json!({ "id": id })).unwrap();
        assert_ne!(key(json!("1042")), key(json!(1042)));
        assert_eq!(key(json!(1042)), "receipt:1042");
        assert_eq!(key(json!("1042")), r#"receipt:"1042""#);
    }

    #[test]
    fn null_and_the_string_null_differ() {
        let key = |user| render_key("user:<user>", &json!({ "user": user })).unwrap();
        assert_ne!(key(json!(null)), key(json!("null")));
        assert_eq!(key(json!(null)), "user:null");
    }

    #[test]
    fn numbers_next_to_each_other_or_to_digits_keep_their_boundaries() {
        let pair = |a, b| render_key("<a><b>", &json!({"a": a, "b": b})).unwrap();
        assert_ne!(pair(json!(1), json!(23)), pair(json!(12), json!(3)));
        assert_eq!(pair(json!(1), json!(23)), "(1)23");
        let before_digit = |a| render_key("<a>0", &json!({ "a": a })).unwrap();
        assert_eq!(before_digit(json!(1)), "(1)0");
        assert_eq!(before_digit(json!(10)), "(10)0");
        let exponent = |a, b| render_key("<a>e<b>", &json!({"a": a, "b": b})).unwrap();
        assert_ne!(
            exponent(json!(1), json!(1e16)),
            exponent(json!(1e16), json!(1))
        );
        let other = |a, b| render_key("<a>-<b>", &json!({"a": a, "b": b})).unwrap();
        assert_ne!(other(json!(-1), json!(-2)), other(json!(-1), json!("-2")));
        // A sign continues no number that ends a number's text: integer keys render as before.
        assert_eq!(other(json!(1), json!(2)), "1-2");
        assert_eq!(other(json!(1e-7), json!(5)), "1e-7-5");
        assert_ne!(other(json!(1), json!(-2)), other(json!(-1), json!(2)));
        let plus = |a| render_key("<a>+1", &json!({ "a": a })).unwrap();
        assert_eq!(plus(json!(1)), "1+1");
    }

    #[test]
    fn booleans_arrays_and_objects_render_as_json() {
        let key = |v| render_key("k:<v>", &json!({ "v": v })).unwrap();
        assert_eq!(key(json!(true)), "k:true");
        assert_ne!(key(json!(true)), key(json!("true")));
        assert_eq!(key(json!([1, "a"])), r#"k:[1,"a"]"#);
        assert_ne!(key(json!({"a": 1})), key(json!("{\"a\":1}")));
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
