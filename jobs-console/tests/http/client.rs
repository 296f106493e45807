//! A client for the console's router, without a network: requests go straight to the router.
//! It keeps cookies, the last page's CSRF token, and sends a loopback `Host` unless told
//! otherwise.

use axum::body::Body;
use axum::http::{header, HeaderMap, Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use tower::ServiceExt;

/// A page as the console answered it.
#[derive(Debug)]
pub struct Page {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
    pub location: Option<String>,
}

impl Page {
    /// Panics unless the page holds `text`.
    #[track_caller]
    pub fn shows(&self, text: &str) -> &Self {
        assert!(
            self.body.contains(text),
            "expected {text:?} in the page:\n{}",
            self.body
        );
        self
    }

    /// Panics if the page holds `text`.
    #[track_caller]
    pub fn hides(&self, text: &str) -> &Self {
        assert!(
            !self.body.contains(text),
            "did not expect {text:?} in the page:\n{}",
            self.body
        );
        self
    }
}

/// A browser-like client of one console router.
pub struct Client {
    app: Router,
    pub host: String,
    pub origin: Option<String>,
    pub bearer: Option<String>,
    cookies: Vec<(String, String)>,
    csrf: Option<String>,
}

impl Client {
    /// A client of `app`, addressing it as `127.0.0.1:8080`.
    pub fn new(app: Router) -> Self {
        Self {
            app,
            host: "127.0.0.1:8080".to_owned(),
            origin: None,
            bearer: None,
            cookies: Vec::new(),
            csrf: None,
        }
    }

    /// GETs `path`.
    pub async fn get(&mut self, path: &str) -> Page {
        let request = self.request("GET", path).body(Body::empty()).unwrap();
        self.send(request).await
    }

    /// POSTs `fields` to `path` with the CSRF token of the last page fetched.
    pub async fn post(&mut self, path: &str, fields: &[(&str, &str)]) -> Page {
        let mut all: Vec<(&str, &str)> = fields.to_vec();
        let csrf = self
            .csrf
            .clone()
            .or_else(|| {
                self.cookies
                    .iter()
                    .find(|(name, _)| name == "jobs_console_csrf")
                    .map(|(_, value)| value.clone())
            })
            .unwrap_or_default();
        all.push(("csrf", &csrf));
        self.post_exactly(path, &all).await
    }

    /// POSTs exactly `fields` to `path` (no CSRF token added).
    pub async fn post_exactly(&mut self, path: &str, fields: &[(&str, &str)]) -> Page {
        let body: String = fields
            .iter()
            .map(|(name, value)| format!("{}={}", encode(name), encode(value)))
            .collect::<Vec<_>>()
            .join("&");
        let request = self
            .request("POST", path)
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Body::from(body))
            .unwrap();
        self.send(request).await
    }

    fn request(&self, method: &str, path: &str) -> axum::http::request::Builder {
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, &self.host);
        if !self.cookies.is_empty() {
            let cookies: Vec<String> = self
                .cookies
                .iter()
                .map(|(name, value)| format!("{name}={value}"))
                .collect();
            request = request.header(header::COOKIE, cookies.join("; "));
        }
        if let Some(origin) = &self.origin {
            request = request.header(header::ORIGIN, origin);
        }
        if let Some(token) = &self.bearer {
            request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        request
    }

    async fn send(&mut self, request: Request<Body>) -> Page {
        let response = self.app.clone().oneshot(request).await.unwrap();
        for value in response.headers().get_all(header::SET_COOKIE) {
            let cookie = value.to_str().unwrap();
            let (pair, _) = cookie.split_once(';').unwrap_or((cookie, ""));
            let (name, value) = pair.split_once('=').unwrap();
            self.cookies.retain(|(known, _)| known != name);
            if !cookie.contains("Max-Age=0") {
                self.cookies.push((name.to_owned(), value.to_owned()));
            }
        }
        let status = response.status();
        let headers = response.headers().clone();
        let location = response
            .headers()
            .get(header::LOCATION)
            .map(|value| value.to_str().unwrap().to_owned());
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let body = String::from_utf8(bytes.to_vec()).unwrap();
        if let Some(start) = body.find(r#"name="csrf" value=""#) {
            let rest = &body[start + r#"name="csrf" value=""#.len()..];
            self.csrf = rest.split('"').next().map(str::to_owned);
        }
        Page {
            status,
            headers,
            body,
            location,
        }
    }
}

fn encode(text: &str) -> String {
    text.bytes()
        .map(|byte| {
            if byte.is_ascii_alphanumeric() || b"-_.~".contains(&byte) {
                char::from(byte).to_string()
            } else {
                format!("%{byte:02X}")
            }
        })
        .collect()
}
