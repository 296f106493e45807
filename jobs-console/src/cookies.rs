//! The console's cookies: reading them from a request, and setting them so that scripts cannot
//! read them and other sites' requests do not carry them.

use axum::http::header::{self, HeaderMap};

use crate::config::ConsoleConfig;

/// The cookie holding a signed-in session's id.
pub(crate) const SESSION_COOKIE: &str = "jobs_console_session";

/// The cookie holding the CSRF token of a console without an access token.
pub(crate) const CSRF_COOKIE: &str = "jobs_console_csrf";

/// The value of cookie `name`.
pub(crate) fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
}

/// A `Set-Cookie` value for cookie `name`: `HttpOnly`, `SameSite=Strict`, scoped to the
/// console's path, and `Secure` when the console is served over TLS.
pub(crate) fn set_cookie(name: &str, value: &str, config: &ConsoleConfig) -> String {
    format!(
        "{name}={value}; Path={}; HttpOnly; SameSite=Strict{}",
        config.cookie_path(),
        if config.secure_cookies {
            "; Secure"
        } else {
            ""
        }
    )
}

/// A `Set-Cookie` value that removes cookie `name`.
pub(crate) fn expired_cookie(name: &str, config: &ConsoleConfig) -> String {
    format!("{}; Max-Age=0", set_cookie(name, "", config))
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    #[test]
    fn cookies_are_read_by_name_and_set_strictly() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; jobs_console_session=abc; b=2"),
        );
        assert_eq!(cookie(&headers, SESSION_COOKIE), Some("abc"));
        assert_eq!(cookie(&headers, "missing"), None);
        let config = ConsoleConfig::new().base_path("/ops");
        assert_eq!(
            set_cookie("a", "1", &config),
            "a=1; Path=/ops; HttpOnly; SameSite=Strict"
        );
        assert_eq!(
            set_cookie("a", "1", &config.secure_cookies(true)),
            "a=1; Path=/ops; HttpOnly; SameSite=Strict; Secure"
        );
    }
}
