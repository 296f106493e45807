//! Collects every mistake in one `#[job]` so that one compile shows them all.

use std::fmt::Display;

use proc_macro2::TokenStream;
use quote::ToTokens;

/// Compile errors gathered while reading a `#[job]`.
#[derive(Default)]
pub struct Errors {
    combined: Option<syn::Error>,
}

impl Errors {
    /// Records an error.
    pub fn push(&mut self, error: syn::Error) {
        match &mut self.combined {
            Some(combined) => combined.combine(error),
            None => self.combined = Some(error),
        }
    }

    /// Records an error pointing at `tokens`.
    pub fn error(&mut self, tokens: impl ToTokens, message: impl Display) {
        self.push(syn::Error::new_spanned(tokens, message));
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.combined.is_none()
    }

    /// The errors as `compile_error!` invocations.
    pub fn into_compile_errors(self) -> TokenStream {
        self.combined
            .map(|error| error.to_compile_error())
            .unwrap_or_default()
    }
}
