//! `#[error_class]`: registers an application's `ClassifyError` impl.

use proc_macro2::TokenStream;
use quote::quote;

use crate::errors::Errors;
use crate::expand::default_crate_path;
use crate::item::{describe, pair};

/// Emits the impl unchanged plus its registration.
pub fn expand(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    if !attr.is_empty() {
        errors.error(&attr, "#[error_class] takes no arguments");
    }
    let implementation: syn::ItemImpl = match syn::parse2(item.clone()) {
        Ok(implementation) => implementation,
        Err(_) => {
            let described = describe(&item);
            errors.error(
                described.tokens,
                format!(
                    "#[error_class] goes on `impl ClassifyError for YourError {{ .. }}`, not on {}",
                    described.what
                ),
            );
            let compile_errors = errors.into_compile_errors();
            return quote!(#item #compile_errors);
        }
    };
    match &implementation.trait_ {
        None => errors.error(
            pair(&implementation.impl_token, &implementation.self_ty),
            "#[error_class] goes on `impl ClassifyError for YourError { .. }`, not on an inherent impl",
        ),
        Some((_, path, _)) => {
            let is_classify = path
                .segments
                .last()
                .is_some_and(|segment| segment.ident == "ClassifyError");
            if !is_classify {
                errors.error(
                    path,
                    "#[error_class] registers `ClassifyError` impls; this impl is of another trait",
                );
            }
        }
    }
    if !implementation.generics.params.is_empty() {
        errors.error(
            &implementation.generics,
            "#[error_class] needs a concrete error type, not a generic impl",
        );
    }
    if !errors.is_empty() {
        let compile_errors = errors.into_compile_errors();
        return quote!(#implementation #compile_errors);
    }
    let krate = default_crate_path();
    let self_ty = &implementation.self_ty;
    quote! {
        #implementation

        #krate::__private::inventory::submit! {
            #krate::ErrorClassifier::of::<#self_ty>()
        }
    }
}
