//! Signing in with the access token, and out.

use axum::extract::{Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use maud::html;
use serde::Deserialize;

use crate::audit;
use crate::cookies::{cookie, expired_cookie, set_cookie, SESSION_COOKIE};
use crate::forms::CheckedForm;
use crate::html::{page, Nav};
use crate::problem::Problem;
use crate::state::Console;
use crate::urls::console_page;

/// The most characters of a name given at sign-in.
const MAX_NAME_LEN: usize = 100;

/// Where to go after signing in.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Next {
    next: Option<String>,
}

/// The sign-in form's fields.
#[derive(Debug, Deserialize)]
pub(crate) struct SignIn {
    token: String,
    name: String,
    next: Option<String>,
}

/// `GET /login`.
pub(crate) async fn form(State(console): State<Console>, Query(next): Query<Next>) -> Response {
    sign_in_page(&console, next.next.as_deref(), None)
}

fn sign_in_page(console: &Console, next: Option<&str>, error: Option<&str>) -> Response {
    let Some(_) = &console.config.access_token else {
        return Redirect::to(&console.config.href("/")).into_response();
    };
    let body = html! {
        form class="login" method="post" action=(console.config.href("/login")) {
            @if let Some(error) = error { p class="bad" role="alert" { (error) } }
            label { "Your name (recorded with every action)" input type="text" name="name" required maxlength=(MAX_NAME_LEN) autocomplete="username"; }
            label { "Access token" input type="password" name="token" required autocomplete="current-password"; }
            input type="hidden" name="next" value=(next.unwrap_or(""));
            button type="submit" class="primary" { "Sign in" }
        }
    };
    page(console, None, Nav::None, "Sign in", body).into_response()
}

/// `POST /login`: opens a session when the token matches.
pub(crate) async fn sign_in(State(console): State<Console>, Form(form): Form<SignIn>) -> Response {
    let Some(token) = &console.config.access_token else {
        return Redirect::to(&console.config.href("/")).into_response();
    };
    let name = form.name.trim();
    if name.is_empty() || name.chars().count() > MAX_NAME_LEN || name.chars().any(char::is_control)
    {
        return sign_in_page(
            &console,
            form.next.as_deref(),
            Some("Give your name: 1 to 100 characters, no control characters."),
        );
    }
    if !token.matches(form.token.trim()) {
        audit::record(name, "sign in", "console", "refused: wrong token");
        return (
            axum::http::StatusCode::UNAUTHORIZED,
            sign_in_page(
                &console,
                form.next.as_deref(),
                Some("That is not this console's access token."),
            ),
        )
            .into_response();
    }
    let session = console.sessions.open(name.to_owned());
    audit::record(name, "sign in", "console", "signed in");
    let next = form
        .next
        .as_deref()
        .and_then(|next| console_page(next, &console.config.base_path))
        .unwrap_or_else(|| console.config.href("/"));
    (
        [(
            header::SET_COOKIE,
            set_cookie(SESSION_COOKIE, &session, &console.config),
        )],
        Redirect::to(&next),
    )
        .into_response()
}

/// The sign-out form's fields: only its CSRF token.
#[derive(Debug, Deserialize)]
pub(crate) struct SignOut {}

/// `POST /logout`.
pub(crate) async fn sign_out(
    State(console): State<Console>,
    headers: axum::http::HeaderMap,
    form: CheckedForm<SignOut>,
) -> Result<Response, Problem> {
    if let Some(id) = cookie(&headers, SESSION_COOKIE) {
        console.sessions.close(id);
    }
    audit::record(&form.visitor.actor, "sign out", "console", "signed out");
    Ok((
        [(
            header::SET_COOKIE,
            expired_cookie(SESSION_COOKIE, &console.config),
        )],
        Redirect::to(&console.config.href("/login")),
    )
        .into_response())
}
