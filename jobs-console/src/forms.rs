//! Forms sent to the console: parsed only after their CSRF token is checked.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use serde::de::DeserializeOwned;

use crate::problem::Problem;
use crate::security::Visitor;
use crate::token::constant_time_eq;

/// The largest form the console accepts.
const MAX_FORM_BYTES: usize = 256 * 1024;

/// A form whose `csrf` field matched the visitor's token, with the visitor who sent it.
pub(crate) struct CheckedForm<T> {
    /// Who sent it.
    pub(crate) visitor: Visitor,
    /// Its fields.
    pub(crate) fields: T,
}

impl<T, S> FromRequest<S> for CheckedForm<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = Problem;

    async fn from_request(request: Request, state: &S) -> Result<Self, Problem> {
        let visitor = request
            .extensions()
            .get::<Visitor>()
            .cloned()
            .ok_or_else(|| Problem::Forbidden("the request was not checked".into()))?;
        let body = Bytes::from_request(request, state)
            .await
            .map_err(|rejection| Problem::BadRequest(rejection.body_text()))?;
        if body.len() > MAX_FORM_BYTES {
            return Err(Problem::BadRequest("the form is too large".into()));
        }
        if !visitor.bearer {
            let pairs: Vec<(String, String)> = serde_html_form::from_bytes(&body)
                .map_err(|error| Problem::BadRequest(format!("the form is malformed: {error}")))?;
            let offered = pairs
                .iter()
                .find(|(name, _)| name == "csrf")
                .map(|(_, value)| value.as_str())
                .unwrap_or_default();
            if visitor.csrf.is_empty()
                || !constant_time_eq(offered.as_bytes(), visitor.csrf.as_bytes())
            {
                return Err(Problem::Forbidden(
                    "the form's security token is missing or stale (the console restarted, or \
                     the form came from another site): reload the page and try again"
                        .into(),
                ));
            }
        }
        let fields = serde_html_form::from_bytes(&body)
            .map_err(|error| Problem::BadRequest(format!("the form is malformed: {error}")))?;
        Ok(Self { visitor, fields })
    }
}
