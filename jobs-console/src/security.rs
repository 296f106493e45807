//! Who is asking, and whether they may: the access token and its sessions, the loopback rule
//! without a token, the CSRF token every form carries, read-only mode, and the response headers
//! that keep pages out of other sites' frames and scripts.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, OriginalUri, Request, State};
use axum::http::header::{self, HeaderMap, HeaderValue};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};

use crate::cookies::{cookie, set_cookie, CSRF_COOKIE, SESSION_COOKIE};
use crate::problem::Problem;
use crate::sessions::random_secret;
use crate::state::Console;
use crate::urls::percent_encode;

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
                        // The URI as the client sent it: a router nested under a path sees
                        // its own part only.
                        let uri = request
                            .extensions()
                            .get::<OriginalUri>()
                            .map_or_else(|| request.uri().clone(), |OriginalUri(uri)| uri.clone());
                        let next_page = uri
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
            match host_of(headers, &console.config.allowed_hosts) {
                Some(HostName::Loopback) => {}
                Some(HostName::Allowed) if request.method() == Method::GET => {}
                Some(HostName::Allowed) => {
                    return Problem::Forbidden(
                        "this console has no access token, so requests addressed to a host name \
                         it was told to allow may only look: act from localhost, or give the \
                         console an access token"
                            .into(),
                    )
                    .into_response();
                }
                None => {
                    return Problem::Forbidden(
                        "this console has no access token, so it answers only requests \
                         addressed to localhost, 127.0.0.1 or [::1] (or a host it was told to \
                         allow)"
                            .into(),
                    )
                    .into_response();
                }
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
    let signing_out = request.uri().path() == "/logout";
    if request.method() != Method::GET && console.config.read_only && !signing_out {
        return Problem::Forbidden("this console is read-only: it changes nothing".into())
            .into_response();
    }
    request.extensions_mut().insert(visitor.clone());
    let mut response = next.run(request).await;
    response.extensions_mut().insert(visitor);
    if let Some(csrf) = new_csrf_cookie {
        let cookie = set_cookie(CSRF_COOKIE, &csrf, &console.config);
        if let Ok(value) = HeaderValue::from_str(&cookie) {
            response.headers_mut().append(header::SET_COOKIE, value);
        }
    }
    response
}

/// Adds the headers every page gets: no framing, no scripts, no referrer sent to other sites,
/// no caching.
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
        HeaderValue::from_static("same-origin"),
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
        // A sandboxed frame or a `data:` page says `null`; so may a browser for a page of this
        // very console, which it then marks same-origin.
        let same_site_null =
            origin == "null" && header_str(headers, "sec-fetch-site") == Some("same-origin");
        if !same_site_null && (origin == "null" || !origin_host.eq_ignore_ascii_case(host)) {
            return Err(from_another_site());
        }
    }
    Ok(())
}

/// Which kind of name a request without an access token is addressed to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HostName {
    /// `localhost`, a 127.x address or `::1`: the machine itself.
    Loopback,
    /// A name the console was told to allow (behind a proxy): it may look, not act.
    Allowed,
}

/// The kind of name the request is addressed to; `None` for any other name (a DNS name rebound
/// to 127.0.0.1, say) or none.
fn host_of(headers: &HeaderMap, allowed: &[String]) -> Option<HostName> {
    let host = header_str(headers, header::HOST.as_str())?;
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split_once(']').map_or(rest, |(name, _)| name)
    } else {
        host.rsplit_once(':').map_or(host, |(name, _)| name)
    }
    .to_ascii_lowercase();
    let loopback = name == "localhost"
        || name == "::1"
        || name
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|address| address.is_loopback());
    if loopback {
        Some(HostName::Loopback)
    } else if allowed.contains(&name) {
        Some(HostName::Allowed)
    } else {
        None
    }
}

/// The access token sent as `Authorization: Bearer`.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    header_str(headers, header::AUTHORIZATION.as_str())?
        .strip_prefix("Bearer ")
        .map(str::trim)
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}

fn at(peer: Option<&str>) -> String {
    peer.map(|peer| format!(" at {peer}")).unwrap_or_default()
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
            assert_eq!(
                host_of(&with(&[("host", host)]), &[]),
                Some(HostName::Loopback),
                "{host}"
            );
        }
        for host in [
            "evil.example:8080",
            "10.0.0.1:8080",
            "localhost.evil.example",
        ] {
            assert_eq!(host_of(&with(&[("host", host)]), &[]), None, "{host}");
        }
        assert_eq!(
            host_of(
                &with(&[("host", "ops.internal:80")]),
                &["ops.internal".to_owned()]
            ),
            Some(HostName::Allowed)
        );
        assert_eq!(host_of(&HeaderMap::new(), &[]), None);
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
        let sandboxed = with(&[("host", "127.0.0.1:8080"), ("origin", "null")]);
        assert!(check_origin(&Method::POST, &sandboxed).is_err());
        let own_page = with(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "null"),
            ("sec-fetch-site", "same-origin"),
        ]);
        assert!(check_origin(&Method::POST, &own_page).is_ok());
        let cross = with(&[("sec-fetch-site", "cross-site")]);
        assert!(check_origin(&Method::POST, &cross).is_err());
    }
}
