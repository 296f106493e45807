//! Building and checking the URLs the console puts in links and redirects.

/// `text` with everything but unreserved characters and `/` percent-encoded, for a query value.
pub(crate) fn percent_encode(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.~/".contains(&byte) {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

/// `next` when it is a page of the console mounted at `base_path` (`""` at the root): a path
/// that starts with the base path followed by `/` or `?` (or is the base path), of visible
/// ASCII without `\`, and not `//`; `None` otherwise, so a sign-in never sends the visitor to
/// another site.
pub(crate) fn console_page(next: &str, base_path: &str) -> Option<String> {
    let printable = next
        .bytes()
        .all(|byte| byte.is_ascii_graphic() && byte != b'\\');
    let rest = next.strip_prefix(base_path)?;
    let inside = rest.is_empty() || rest.starts_with('/') || rest.starts_with('?');
    let local = next.starts_with('/') && !next.starts_with("//");
    (printable && inside && local && !rest.starts_with("//")).then(|| next.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_pages_of_the_console_are_redirected_to() {
        assert_eq!(percent_encode("/dead?kind=a b"), "/dead%3Fkind%3Da%20b");
        for good in ["/", "/dead?kind=x", "/jobs/42"] {
            assert_eq!(console_page(good, "").as_deref(), Some(good), "{good}");
        }
        assert_eq!(
            console_page("/ops/jobs", "/ops/jobs").as_deref(),
            Some("/ops/jobs")
        );
        assert_eq!(
            console_page("/ops/jobs/dead", "/ops/jobs").as_deref(),
            Some("/ops/jobs/dead")
        );
        for bad in [
            "https://evil.example/",
            "//evil.example/",
            "/\\evil.example",
            "/\t/evil.example",
            "dead",
            "/ops/jobsevil",
            "/other",
        ] {
            let base = if bad.starts_with("/o") {
                "/ops/jobs"
            } else {
                ""
            };
            assert_eq!(console_page(bad, base), None, "{bad:?}");
        }
        assert_eq!(console_page("/ops/jobs//evil.example", "/ops/jobs"), None);
    }
}
