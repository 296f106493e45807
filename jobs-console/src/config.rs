//! What a console may show and do, and where it is mounted.

use crate::token::AccessToken;

/// What a console may show and do, and where it is mounted. The default: mounted at `/`, no
/// access token (loopback requests only), changes allowed, payloads shown.
#[derive(Debug, Clone, Default)]
pub struct ConsoleConfig {
    pub(crate) base_path: String,
    pub(crate) access_token: Option<AccessToken>,
    pub(crate) read_only: bool,
    pub(crate) hide_payloads: bool,
    pub(crate) allowed_hosts: Vec<String>,
    pub(crate) secure_cookies: bool,
}

impl ConsoleConfig {
    /// The default configuration.
    pub fn new() -> Self {
        Self::default()
    }

    /// The path the router is nested under (`"/jobs"` for `Router::new().nest("/jobs", ..)`), so
    /// that links and cookies point inside it. A trailing `/` is ignored.
    pub fn base_path(mut self, path: &str) -> Self {
        self.base_path = path.trim_end_matches('/').to_owned();
        if !self.base_path.is_empty() && !self.base_path.starts_with('/') {
            self.base_path.insert(0, '/');
        }
        self
    }

    /// Requires `token` from every visitor (signed in once per browser session, or sent as
    /// `Authorization: Bearer`); requests may then be addressed to any host name.
    pub fn access_token(mut self, token: AccessToken) -> Self {
        self.access_token = Some(token);
        self
    }

    /// Shows everything and changes nothing: no control is offered, and every POST is refused.
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// Hides job payloads and parked outbox messages (they may hold personal data).
    pub fn hide_payloads(mut self, hide: bool) -> Self {
        self.hide_payloads = hide;
        self
    }

    /// Marks the session and CSRF cookies `Secure`, so that browsers send them over HTTPS only:
    /// for a console served behind TLS (a reverse proxy).
    pub fn secure_cookies(mut self, secure: bool) -> Self {
        self.secure_cookies = secure;
        self
    }

    /// Host names (without port) the console answers besides the loopback ones when it has no
    /// access token (behind a proxy under a name of its own). Requests addressed to them may
    /// only look: every change is refused unless the console has an access token.
    pub fn allow_host(mut self, host: impl Into<String>) -> Self {
        self.allowed_hosts.push(host.into().to_ascii_lowercase());
        self
    }

    /// The URL path of `page` (`"/dead"`, `"/"`, `"/?refresh=5"`) under the base path. The
    /// overview of a console nested under `/ops` is `/ops` (a router nested by axum answers its
    /// root there, not at `/ops/`).
    pub(crate) fn href(&self, page: &str) -> String {
        match page.strip_prefix('/') {
            Some(rest)
                if !self.base_path.is_empty() && (rest.is_empty() || rest.starts_with('?')) =>
            {
                format!("{}{rest}", self.base_path)
            }
            _ => format!("{}{}", self.base_path, page),
        }
    }

    /// The path cookies are scoped to.
    pub(crate) fn cookie_path(&self) -> &str {
        if self.base_path.is_empty() {
            "/"
        } else {
            &self.base_path
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_made_under_the_base_path() {
        assert_eq!(ConsoleConfig::new().href("/dead"), "/dead");
        assert_eq!(ConsoleConfig::new().cookie_path(), "/");
        let nested = ConsoleConfig::new().base_path("ops/jobs/");
        assert_eq!(nested.href("/dead"), "/ops/jobs/dead");
        assert_eq!(nested.href("/"), "/ops/jobs");
        assert_eq!(nested.href("/?refresh=5"), "/ops/jobs?refresh=5");
        assert_eq!(ConsoleConfig::new().href("/?refresh=5"), "/?refresh=5");
        assert_eq!(nested.cookie_path(), "/ops/jobs");
    }
}
