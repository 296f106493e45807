//! What `jsonb` cannot store in an event's payload, found before the database refuses it.

use serde_json::Value;

/// The path of the first string or key of `value` holding U+0000 (`jsonb` refuses `\u0000`),
/// in the form `order.notes[1]` (`$` for the payload itself), or `None` when there is none.
pub(crate) fn path_of_nul(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => text.contains('\0').then(|| String::from("$")),
        Value::Array(items) => items.iter().enumerate().find_map(|(index, item)| {
            path_of_nul(item).map(|inner| join(&format!("[{index}]"), &inner))
        }),
        Value::Object(fields) => fields.iter().find_map(|(key, field)| {
            let name = key.replace('\0', "\\0");
            if key.contains('\0') {
                Some(name)
            } else {
                path_of_nul(field).map(|inner| join(&name, &inner))
            }
        }),
        Value::Null | Value::Bool(_) | Value::Number(_) => None,
    }
}

/// `outer` followed by `inner`, a path relative to it.
fn join(outer: &str, inner: &str) -> String {
    match inner.strip_prefix('$') {
        Some("") => outer.to_owned(),
        Some(rest) => format!("{outer}{rest}"),
        None if inner.starts_with('[') => format!("{outer}{inner}"),
        None => format!("{outer}.{inner}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_path_names_the_field_holding_nul() {
        assert_eq!(path_of_nul(&json!({ "a": [1, "x"] })), None);
        assert_eq!(path_of_nul(&json!("a\0")), Some("$".into()));
        assert_eq!(path_of_nul(&json!(["ok", "a\0"])), Some("[1]".into()));
        assert_eq!(
            path_of_nul(&json!({ "order": { "notes": ["fine", "bad\0byte"] } })),
            Some("order.notes[1]".into())
        );
        assert_eq!(
            path_of_nul(&json!({ "a": [{ "b": "\0" }] })),
            Some("a[0].b".into())
        );
        assert_eq!(
            path_of_nul(&json!({ "a": { "b\0c": 1 } })),
            Some("a.b\\0c".into())
        );
    }
}
