//! Generates the code for a `#[job]`: the payload type, the kind marker, typed enqueue functions,
//! the handler and its registration.

use std::time::Duration;

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Path, Visibility};

use jobs_core::{DedupeScope, RetryPolicy};

use crate::ast::{JobFn, Param};
use crate::attr::JobAttr;

/// The path through which generated code reaches the `jobs` crate.
pub fn crate_path(attr: &JobAttr) -> Path {
    if let Some(path) = &attr.krate {
        return path.value.clone();
    }
    default_crate_path()
}

/// `::jobs`, or the name the user's Cargo.toml gives the `jobs` dependency.
pub fn default_crate_path() -> Path {
    use proc_macro_crate::{crate_name, FoundCrate};
    let name = match crate_name("jobs") {
        Ok(FoundCrate::Name(name)) => name,
        Ok(FoundCrate::Itself) | Err(_) => String::from("jobs"),
    };
    let ident = syn::Ident::new(&name, Span::call_site());
    syn::parse_quote!(::#ident)
}

/// The whole expansion for a valid `#[job]`.
pub fn expand(attr: &JobAttr, job: &JobFn) -> TokenStream {
    let krate = crate_path(attr);
    let item = &job.item;
    let fn_ident = &item.sig.ident;
    let fn_name = fn_ident.to_string();
    let kind_name = attr
        .name
        .as_ref()
        .map_or_else(|| fn_name.clone(), |name| name.value.clone());
    let module_vis = &item.vis;
    let inner_vis = inner_visibility(&item.vis);

    let field_idents: Vec<_> = job.data_args().map(|arg| &arg.ident).collect();
    let field_types: Vec<_> = job.data_args().map(|arg| &arg.ty).collect();
    let payload_assertions = job.data_args().map(|arg| {
        let ty = &arg.ty;
        quote_spanned! {ty.span()=>
            #krate::__private::assert_payload_type::<#ty>();
        }
    });

    let call_args = job.params.iter().map(|param| match param {
        Param::Context => quote!(ctx.clone()),
        Param::State(ty) => {
            quote!(#krate::__private::require_state::<#ty>(<Job as #krate::JobKind>::NAME, states)?)
        }
        Param::Data(arg) => {
            let ident = &arg.ident;
            quote!(args.#ident)
        }
    });
    let state_types: Vec<_> = job.state_types().collect();
    let call = quote_spanned! {fn_ident.span()=>
        #krate::__private::assert_send_future(super::#fn_ident(#(#call_args),*))
    };

    let options = options_tokens(attr, &krate);
    let serde_path = format!("{}::__private::serde", quote!(#krate)).replace(' ', "");
    let doc_module = format!(
        "Enqueue functions and payload type of the [`{fn_name}`](fn@{fn_name}) job (kind `\"{kind_name}\"`)."
    );
    let doc_args = format!("The data arguments of the `{kind_name}` job, as stored in its row.");
    let doc_enqueue_in = format!(
        "Enqueues a `{kind_name}` job on the caller's connection or transaction: it exists exactly when that transaction commits."
    );
    let doc_enqueue =
        format!("Enqueues a `{kind_name}` job on its own, outside any transaction of the caller.");
    let doc_builder = format!(
        "A `{kind_name}` job with per-call options (delay, run-at time, priority, queue), to enqueue with `.enqueue_in(..)` or `.enqueue(..)`."
    );
    let doc_many_in = format!(
        "Enqueues many `{kind_name}` jobs in one round trip on the caller's connection or transaction, with dedupe applied per job."
    );
    let doc_many = format!("Enqueues many `{kind_name}` jobs in one round trip, on their own.");

    quote! {
        #item

        #[doc = #doc_module]
        #[allow(non_snake_case, clippy::module_name_repetitions)]
        #module_vis mod #fn_ident {
            #[allow(unused_imports)]
            use super::*;

            #[doc = #doc_args]
            #[derive(#krate::__private::serde::Serialize, #krate::__private::serde::Deserialize)]
            #[serde(crate = #serde_path)]
            #inner_vis struct Args {
                #(
                    #[allow(missing_docs)]
                    #inner_vis #field_idents: #field_types,
                )*
            }

            /// The job kind, for APIs that take a kind as a type parameter.
            #inner_vis struct Job;

            impl #krate::JobKind for Job {
                const NAME: &'static str = #kind_name;
                type Args = Args;
                const OPTIONS: #krate::JobOptions = #options;
            }

            #[doc = #doc_builder]
            #inner_vis fn builder(#(#field_idents: #field_types),*) -> #krate::EnqueueBuilder {
                #krate::EnqueueBuilder::new::<Job>(&Args { #(#field_idents),* })
            }

            #[doc = #doc_enqueue_in]
            #inner_vis async fn enqueue_in(
                conn: &mut #krate::PgConnection,
                #(#field_idents: #field_types),*
            ) -> ::core::result::Result<#krate::Enqueued, #krate::EnqueueError> {
                builder(#(#field_idents),*).enqueue_in(conn).await
            }

            #[doc = #doc_enqueue]
            #inner_vis async fn enqueue(
                pool: &#krate::PgPool,
                #(#field_idents: #field_types),*
            ) -> ::core::result::Result<#krate::Enqueued, #krate::EnqueueError> {
                builder(#(#field_idents),*).enqueue(pool).await
            }

            #[doc = #doc_many_in]
            #inner_vis async fn enqueue_many_in(
                conn: &mut #krate::PgConnection,
                jobs: impl ::core::iter::IntoIterator<Item = Args>,
            ) -> ::core::result::Result<::std::vec::Vec<#krate::Enqueued>, #krate::EnqueueError> {
                #krate::__private::enqueue_many_in::<Job>(conn, jobs).await
            }

            #[doc = #doc_many]
            #inner_vis async fn enqueue_many(
                pool: &#krate::PgPool,
                jobs: impl ::core::iter::IntoIterator<Item = Args>,
            ) -> ::core::result::Result<::std::vec::Vec<#krate::Enqueued>, #krate::EnqueueError> {
                #krate::__private::enqueue_many::<Job>(pool, jobs).await
            }

            fn handle(
                ctx: #krate::JobContext,
                payload: &str,
                states: &#krate::StateMap,
            ) -> ::core::result::Result<
                #krate::BoxFuture<'static, #krate::JobResult>,
                #krate::InvocationError,
            > {
                let args: Args = #krate::__private::decode_args::<Job>(payload)?;
                let future = #call;
                ::core::result::Result::Ok(::std::boxed::Box::pin(async move {
                    #krate::__private::IntoJobResult::into_job_result(future.await)
                }))
            }

            #[allow(dead_code)]
            fn assert_payload_types() {
                #(#payload_assertions)*
            }

            #krate::__private::inventory::submit! {
                #krate::JobRegistration {
                    name: #kind_name,
                    function: ::core::module_path!(),
                    options: <Job as #krate::JobKind>::OPTIONS,
                    required_state: &[#(#krate::StateRequirement::of::<#state_types>()),*],
                    handler: handle,
                }
            }
        }
    }
}

fn options_tokens(attr: &JobAttr, krate: &Path) -> TokenStream {
    let queue = attr
        .queue
        .as_ref()
        .map_or_else(|| String::from("default"), |queue| queue.value.clone());
    let priority = attr.priority.as_ref().map_or(0, |priority| priority.value);
    let max_attempts = attr
        .max_attempts
        .as_ref()
        .map_or(RetryPolicy::DEFAULT_MAX_ATTEMPTS, |attempts| attempts.value);
    let backoff_base = duration_tokens(
        attr.backoff_base
            .as_ref()
            .map_or(RetryPolicy::DEFAULT_BACKOFF_BASE, |base| base.value),
    );
    let backoff_max = duration_tokens(
        attr.backoff_max
            .as_ref()
            .map_or(RetryPolicy::DEFAULT_BACKOFF_MAX, |max| max.value),
    );
    let jitter = attr
        .jitter
        .as_ref()
        .map_or(RetryPolicy::DEFAULT_JITTER, |jitter| jitter.value);
    let timeout = match &attr.timeout {
        Some(timeout) => {
            let duration = duration_tokens(timeout.value);
            quote!(::core::option::Option::Some(#duration))
        }
        None => quote!(::core::option::Option::None),
    };
    let dedupe = match &attr.dedupe {
        Some(template) => quote!(::core::option::Option::Some(#template)),
        None => quote!(::core::option::Option::None),
    };
    let scope = match attr.dedupe_scope.as_ref().map(|scope| scope.value) {
        Some(DedupeScope::Active) => format_ident!("Active"),
        _ => format_ident!("Retained"),
    };
    quote! {
        #krate::JobOptions {
            queue: #queue,
            priority: #priority,
            retry: #krate::RetryPolicy {
                max_attempts: #max_attempts,
                backoff_base: #backoff_base,
                backoff_max: #backoff_max,
                jitter: #jitter,
            },
            timeout: #timeout,
            dedupe: #dedupe,
            dedupe_scope: #krate::DedupeScope::#scope,
        }
    }
}

fn duration_tokens(duration: Duration) -> TokenStream {
    let millis = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
    quote!(::core::time::Duration::from_millis(#millis))
}

/// The visibility of items inside the generated module, so that they are visible exactly where
/// the function is.
fn inner_visibility(vis: &Visibility) -> TokenStream {
    match vis {
        Visibility::Public(_) => quote!(pub),
        Visibility::Inherited => quote!(pub(super)),
        Visibility::Restricted(restricted) => {
            let path = &restricted.path;
            let first = path
                .segments
                .first()
                .map(|segment| segment.ident.to_string());
            match first.as_deref() {
                Some("crate") => quote!(pub(in #path)),
                Some("self") if path.segments.len() == 1 => quote!(pub(super)),
                _ => quote!(pub(in super::#path)),
            }
        }
    }
}
