//! `#[error_class]`: registers an application's `ClassifyError` impl.

use proc_macro2::TokenStream;
use quote::quote;

use crate::errors::Errors;
use crate::expand::default_crate_path;

/// Emits the impl unchanged plus its registration.
pub fn expand(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    if !attr.is_empty() {
        errors.error(&attr, "#[error_class] takes no arguments");
    }
    let implementation: syn::ItemImpl = match syn::parse2(item.clone()) {
        Ok(implementation) => implementation,
        Err(_) => {
            errors.error(
                &item,
                "#[error_class] goes on `impl ClassifyError for YourError { .. }`",
            );
            let compile_errors = errors.into_compile_errors();
            return quote!(#item #compile_errors);
        }
    };
    let is_classify_impl = implementation
        .trait_
        .as_ref()
        .and_then(|(_, path, _)| path.segments.last())
        .is_some_and(|segment| segment.ident == "ClassifyError");
    if !is_classify_impl {
        errors.error(
            &implementation.self_ty,
            "#[error_class] goes on `impl ClassifyError for YourError { .. }`",
        );
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
