//! Who is asking, and whether they may: the access token and its sessions, the loopback rule
//! without a token, the CSRF token every form carries, read-only mode, and the response headers
//! that keep pages out of other sites' frames and scripts.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::header::{self, HeaderMap, HeaderValue};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};

use crate::problem::Problem;
use crate::sessions::random_secret;
use crate::state::Console;

/// The cookie holding a signed-in session's id.
pub(crate) const SESSION_COOKIE: &str = "jobs_console_session";

/// The cookie holding the CSRF token of a console without an access token.
pub(crate) const CSRF_COOKIE: &str = "jobs_console_csrf";

/// Who a request comes from, as the guard established it.
#[derive(Debug, Clone)]
pub(crate) struct Visitor {
    /// Who, for the audit log and for records such as who paused a queue.
    pub(crate) actor: String,
    /// The token this visitor's forms carry.
    pub(crate) csrf: String,
    /// Whether the request carried the access token itself (a tool, not a browser form): no
    /// CSRF token is needed, since browsers never add that header on their own.
    pub(crate) bearer: bool,
    /// Whether the visitor signed in (and may sign out).
    pub(crate) signed_in: bool,
}

/// Establishes the [`Visitor`] of every request but the sign-in page's, or refuses it.
pub(crate) async fn guard(
    State(console): State<Console>,
    mut request: Request,
    next: Next,
) -> Response {
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(address)| address.ip().to_string());
    let headers = request.headers();
    if let Err(problem) = check_origin(request.method(), headers) {
        return problem.into_response();
    }
    let mut new_csrf_cookie = None;
    let visitor = match &console.config.access_token {
        Some(token) => {
            if let Some(offered) = bearer(headers) {
                if !token.matches(offered) {
                    return Problem::Forbidden(
                        "the access token sent is not this console's".into(),
                    )
                    .into_response();
                }
                Visitor {
                    actor: format!("token holder{}", at(peer.as_deref())),
                    csrf: String::new(),
                    bearer: true,
                    signed_in: false,
                }
            } else {
                match cookie(headers, SESSION_COOKIE).and_then(|id| console.sessions.get(id)) {
                    Some(session) => Visitor {
                        actor: session.actor,
                        csrf: session.csrf,
                        bearer: false,
                        signed_in: true,
                    },
                    None if request.method() == Method::GET => {
                        let next_page = request
                            .uri()
                            .path_and_query()
                            .map(|path| path.as_str().to_owned())
                            .unwrap_or_default();
                        let login = format!(
                            "{}?next={}",
                            console.config.href("/login"),
                            percent_encode(&next_page)
                        );
                        return Redirect::to(&login).into_response();
                    }
                    None => return Problem::SignInRequired.into_response(),
                }
            }
        }
        None => {
            if !host_is_allowed(headers, &console.config.allowed_hosts) {
                return Problem::Forbidden(
                    "this console has no access token, so it answers only requests addressed \
                     to localhost, 127.0.0.1 or [::1] (or a host it was told to allow)"
                        .into(),
                )
                .into_response();
            }
            let csrf = match cookie(headers, CSRF_COOKIE) {
                Some(csrf) if csrf.len() == 64 => csrf.to_owned(),
                _ => {
                    let csrf = random_secret();
                    new_csrf_cookie = Some(csrf.clone());
                    csrf
                }
            };
            Visitor {
                actor: format!("console{}", at(peer.as_deref())),
                csrf,
                bearer: false,
                signed_in: false,
            }
        }
    };
    if request.method() != Method::GET && console.config.read_only {
        return Problem::Forbidden("this console is read-only: it changes nothing".into())
            .into_response();
    }
    request.extensions_mut().insert(visitor.clone());
    let mut response = next.run(request).await;
    response.extensions_mut().insert(visitor);
    if let Some(csrf) = new_csrf_cookie {
        let cookie = session_cookie(CSRF_COOKIE, &csrf, console.config.cookie_path());
        if let Ok(value) = HeaderValue::from_str(&cookie) {
            response.headers_mut().append(header::SET_COOKIE, value);
        }
    }
    response
}

/// Adds the headers every page gets: no framing, no scripts, no referrer, no caching.
pub(crate) async fn headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; \
             frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

/// Refuses a state-changing request that the browser says comes from another site.
fn check_origin(method: &Method, headers: &HeaderMap) -> Result<(), Problem> {
    if method == Method::GET || method == Method::HEAD {
        return Ok(());
    }
    let from_another_site = || {
        Problem::Forbidden(
            "the form was sent from another site; actions are taken only from the console's own \
             pages"
                .into(),
        )
    };
    if header_str(headers, "sec-fetch-site")
        .is_some_and(|site| site != "same-origin" && site != "none")
    {
        return Err(from_another_site());
    }
    if let (Some(origin), Some(host)) = (
        header_str(headers, header::ORIGIN.as_str()),
        header_str(headers, header::HOST.as_str()),
    ) {
        let origin_host = origin.split_once("://").map_or(origin, |(_, rest)| rest);
        if origin != "null" && !origin_host.eq_ignore_ascii_case(host) {
            return Err(from_another_site());
        }
    }
    Ok(())
}

/// Whether the request is addressed to a loopback name, or to one the console was told to
/// allow.
fn host_is_allowed(headers: &HeaderMap, allowed: &[String]) -> bool {
    let Some(host) = header_str(headers, header::HOST.as_str()) else {
        return false;
    };
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split_once(']').map_or(rest, |(name, _)| name)
    } else {
        host.rsplit_once(':').map_or(host, |(name, _)| name)
    }
    .to_ascii_lowercase();
    name == "localhost"
        || name == "::1"
        || name
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|address| address.is_loopback())
        || allowed.contains(&name)
}

/// The access token sent as `Authorization: Bearer`.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    header_str(headers, header::AUTHORIZATION.as_str())?
        .strip_prefix("Bearer ")
        .map(str::trim)
}

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

/// A `Set-Cookie` value scripts cannot read and other sites' requests do not carry.
pub(crate) fn session_cookie(name: &str, value: &str, path: &str) -> String {
    format!("{name}={value}; Path={path}; HttpOnly; SameSite=Strict")
}

/// A `Set-Cookie` value that removes cookie `name`.
pub(crate) fn expired_cookie(name: &str, path: &str) -> String {
    format!("{name}=; Path={path}; HttpOnly; SameSite=Strict; Max-Age=0")
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}

fn at(peer: Option<&str>) -> String {
    peer.map(|peer| format!(" at {peer}")).unwrap_or_default()
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn with(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(*name, HeaderValue::from_static(value));
        }
        headers
    }

    #[test]
    fn only_loopback_hosts_are_answered_without_a_token() {
        for host in [
            "localhost:8080",
            "127.0.0.1:8080",
            "127.1.2.3",
            "[::1]:8080",
            "LOCALHOST",
        ] {
            assert!(host_is_allowed(&with(&[("host", host)]), &[]), "{host}");
        }
        for host in [
            "evil.example:8080",
            "10.0.0.1:8080",
            "localhost.evil.example",
        ] {
            assert!(!host_is_allowed(&with(&[("host", host)]), &[]), "{host}");
        }
        assert!(host_is_allowed(
            &with(&[("host", "ops.internal:80")]),
            &["ops.internal".to_owned()]
        ));
        assert!(!host_is_allowed(&HeaderMap::new(), &[]));
    }

    #[test]
    fn posts_from_another_origin_are_refused() {
        let same = with(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "http://127.0.0.1:8080"),
        ]);
        assert!(check_origin(&Method::POST, &same).is_ok());
        let other = with(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "https://evil.example"),
        ]);
        assert!(check_origin(&Method::POST, &other).is_err());
        assert!(check_origin(&Method::GET, &other).is_ok());
        let cross = with(&[("sec-fetch-site", "cross-site")]);
        assert!(check_origin(&Method::POST, &cross).is_err());
    }

    #[test]
    fn cookies_are_read_by_name() {
        let headers = with(&[("cookie", "a=1; jobs_console_session=abc; b=2")]);
        assert_eq!(cookie(&headers, SESSION_COOKIE), Some("abc"));
        assert_eq!(cookie(&headers, "missing"), None);
        assert_eq!(percent_encode("/dead?kind=a b"), "/dead%3Fkind%3Da%20b");
    }
}
