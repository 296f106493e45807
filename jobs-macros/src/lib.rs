//! The `#[job]` attribute of the `jobs` framework, and `#[error_class]`.
//!
//! Use them through the `jobs` crate. The pipeline: [`attr`] reads the attribute's keys,
//! [`ast`] reads the function, [`valid`] checks the rules that involve both, and [`expand`]
//! generates code, with [`payload`] writing the payload type. Every mistake becomes a compile
//! error at the offending token, all reported in one compile, and the function is still emitted
//! so that follow-on errors stay quiet. Requirements only the type checker can check (an
//! argument type is serializable, the future is `Send`, the return type converts into
//! `JobResult<T>`, the output type `T` can be stored) are asserted once each, at the user's token,
//! with the sentences in `jobs_core::__private` and `jobs_core::JobOutput`; the rest of the
//! generated code compiles either way.

mod ast;
mod attr;
mod error_class;
mod errors;
mod expand;
mod item;
mod payload;
mod resolve;
mod valid;

use proc_macro::TokenStream;

/// Turns an `async fn` into a job kind: a payload type, typed enqueue functions in a module of
/// the same name, a handler and its registration. See the `jobs` crate for the keys.
#[proc_macro_attribute]
pub fn job(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = errors::Errors::default();
    let function: syn::ItemFn = match syn::parse(item.clone()) {
        Ok(function) => function,
        Err(_) => {
            let item: proc_macro2::TokenStream = item.into();
            let described = item::describe(&item);
            errors.error(
                described.tokens,
                format!(
                    "#[job] goes on an `async fn`, not on {}; like `#[job] async fn send_receipt(order_id: i64) -> JobResult`",
                    described.what
                ),
            );
            let compile_errors = errors.into_compile_errors();
            return quote::quote!(#item #compile_errors).into();
        }
    };
    let attr = attr::JobAttr::parse(attr.into(), &mut errors);
    let job = ast::JobFn::read(function, &mut errors);
    valid::check(&attr, &job, &mut errors);
    if errors.is_empty() {
        expand::expand(&attr, &job).into()
    } else {
        let item = &job.item;
        let compile_errors = errors.into_compile_errors();
        quote::quote!(#item #compile_errors).into()
    }
}

/// Registers a `ClassifyError` impl, so that `?` on that error type in a job classifies it.
///
/// ```ignore
/// #[jobs::error_class]
/// impl jobs::ClassifyError for PaymentError {
///     fn class(&self) -> jobs::ErrorClass { jobs::ErrorClass::Permanent }
/// }
/// ```
#[proc_macro_attribute]
pub fn error_class(attr: TokenStream, item: TokenStream) -> TokenStream {
    error_class::expand(attr.into(), item.into()).into()
}
