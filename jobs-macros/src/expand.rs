//! Generates the code for a `#[job]`: the payload type, the kind marker, typed enqueue functions,
//! the handler and its registration.

use std::time::Duration;

use proc_macro2::{Delimiter, Group, Span, TokenStream, TokenTree};
use quote::{format_ident, quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::{Ident, Path, ReturnType, Visibility};

use jobs_core::{DedupeScope, MissedTicks, RateLimit, RetryPolicy};

use crate::ast::{JobFn, Param};
use crate::attr::{JobAttr, Setting};
use crate::payload;
use crate::resolve::type_in_module;

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

    let takes_arguments = job.data_args().next().is_some();
    let field_idents: Vec<_> = job.data_args().map(|arg| &arg.ident).collect();
    let field_types: Vec<_> = job.data_args().map(|arg| &arg.ty).collect();
    // The enqueue functions' own parameters, next to the job's arguments: hygienic, so that a
    // job argument may be called `conn` or `pool` too.
    let conn = Ident::new("conn", Span::mixed_site());
    let pool = Ident::new("pool", Span::mixed_site());

    let call_args = job.params.iter().map(|param| match param {
        Param::Context => quote!(ctx.clone()),
        Param::State(ty) => quote! {
            #krate::__private::StateArg::<#ty>::require(<Job as #krate::JobKind>::NAME, states)?
        },
        Param::Data(arg) => {
            let ident = &arg.ident;
            quote!(args.#ident)
        }
    });
    let state_types: Vec<_> = job.state_types().collect();
    let state_assertions = state_types.iter().map(|ty| {
        quote_spanned! {ty.span()=>
            #krate::__private::assert_state_type::<#ty>();
        }
    });
    let call = quote_spanned! {fn_ident.span()=>
        super::#fn_ident(#(#call_args),*)
    };
    let output_type = job
        .output_type()
        .map_or_else(|| quote!(()), |ty| ty.to_token_stream());
    let into_job_result = into_job_result_tokens(job, &krate, &output_type);
    // The output type's bound (`JobOutput`) is checked here, at the type as the user wrote it.
    let output_item = match job.output_type() {
        Some(ty) => quote_spanned!(ty.span()=> type Output = #ty;),
        None => quote!(
            type Output = ();
        ),
    };

    let mod_token = quote_spanned!(fn_ident.span()=> mod);
    // `Args` must be `Send`; when an argument type is not, say so at the function.
    let args_type = quote_spanned!(fn_ident.span()=> type Args = Args;);

    let options = options_tokens(attr, &krate);
    let doc_module = format!(
        "Enqueue functions and payload type of the [`{fn_name}`](fn@{fn_name}) job (kind `\"{kind_name}\"`)."
    );
    let doc_args = format!("The data arguments of the `{kind_name}` job, as stored in its row.");
    let args = payload::expand(job, &krate, &inner_vis, &doc_args);
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
    let doc_many = format!(
        "Enqueues many `{kind_name}` jobs on their own, in one round trip, or by `COPY` when they are 1,000 or more without dedupe, fairness or limit keys."
    );

    let body = quote! {
        #![doc = #doc_module]
        #![allow(
            non_snake_case,
            clippy::module_name_repetitions,
            clippy::module_inception
        )]

        #[allow(unused_imports)]
        use super::*;
        // In scope for `Arg::<T>` and `StateArg::<T>` paths, but not named: the user's types,
        // written in this module, must not meet names of ours.
        #[allow(unused_imports)]
        use #krate::__private::{
            ArgFallback as _, OutputCodecFallback as _, StateArgFallback as _,
        };

        #args

        /// The job kind, for APIs that take a kind as a type parameter.
        #inner_vis struct Job;

        impl #krate::JobKind for Job {
            const NAME: &'static str = #kind_name;
            #args_type
            #output_item
            const OPTIONS: #krate::JobOptions = #options;
        }

        #[doc = #doc_builder]
        #inner_vis fn builder(#(#field_idents: #field_types),*) -> #krate::EnqueueBuilder {
            #krate::EnqueueBuilder::new::<Job>(&Args { #(#field_idents),* })
        }

        #[doc = #doc_enqueue_in]
        #inner_vis async fn enqueue_in(
            #conn: &mut #krate::PgConnection,
            #(#field_idents: #field_types),*
        ) -> ::core::result::Result<#krate::Enqueued, #krate::EnqueueError> {
            builder(#(#field_idents),*).enqueue_in(#conn).await
        }

        #[doc = #doc_enqueue]
        #inner_vis async fn enqueue(
            #pool: &#krate::PgPool,
            #(#field_idents: #field_types),*
        ) -> ::core::result::Result<#krate::Enqueued, #krate::EnqueueError> {
            builder(#(#field_idents),*).enqueue(#pool).await
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
        ) -> ::core::result::Result<#krate::HandlerFuture, #krate::InvocationError> {
            let args: Args = #krate::__private::decode_args::<Job>(payload)?;
            ::core::result::Result::Ok(#krate::__private::job_future(
                #call,
                #into_job_result,
                #krate::__private::OutputCodec::<#output_type>::encode,
            ))
        }

        #[allow(dead_code)]
        fn assert_state_types() {
            #(#state_assertions)*
        }

        #krate::__private::inventory::submit! {
            #krate::JobRegistration {
                name: #kind_name,
                function: ::core::module_path!(),
                options: <Job as #krate::JobKind>::OPTIONS,
                required_state: &[#(#krate::__private::StateArg::<#state_types>::REQUIREMENT),*],
                takes_arguments: #takes_arguments,
                handler: handle,
            }
        }
    };
    // The module's header carries the function's span, so that an error about the module as a
    // whole (such as `#[job]` on a method, where a module cannot be) points at the function.
    let mut braces = Group::new(Delimiter::Brace, body);
    braces.set_span(fn_ident.span());
    quote! {
        #item

        #module_vis #mod_token #fn_ident #braces
    }
}

/// The function that turns the job's return value into a `JobResult` of `output`, naming the
/// declared return type so that a wrong one is reported at that type.
fn into_job_result_tokens(job: &JobFn, krate: &Path, output: &TokenStream) -> TokenStream {
    match &job.item.sig.output {
        // An `impl Trait` cannot be named in a turbofish: the whole path points at its first
        // token instead (the crate path's tokens included, or the error would be at `#[job]`).
        ReturnType::Type(_, ty) if mentions_impl(ty.to_token_stream()) => {
            let span = ty.span();
            quote!(#krate::__private::into_job_result)
                .into_iter()
                .map(|mut token| {
                    token.set_span(span);
                    token
                })
                .collect()
        }
        ReturnType::Type(_, ty) => {
            let ty = type_in_module(ty);
            quote!(#krate::__private::into_job_result::<#ty, #output>)
        }
        ReturnType::Default => quote!(#krate::__private::into_job_result::<(), ()>),
    }
}

/// Whether the tokens contain `impl`, as in `impl Trait`.
fn mentions_impl(tokens: TokenStream) -> bool {
    tokens.into_iter().any(|token| match token {
        TokenTree::Ident(ident) => ident == "impl",
        TokenTree::Group(group) => mentions_impl(group.stream()),
        _ => false,
    })
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
    let optional_duration = |setting: &Option<Setting<Duration>>| match setting {
        Some(setting) => {
            let duration = duration_tokens(setting.value);
            quote!(::core::option::Option::Some(#duration))
        }
        None => quote!(::core::option::Option::None),
    };
    let lease = optional_duration(&attr.lease);
    let heartbeat = optional_duration(&attr.heartbeat);
    let optional_template = |template: &Option<syn::LitStr>| match template {
        Some(template) => quote!(::core::option::Option::Some(#template)),
        None => quote!(::core::option::Option::None),
    };
    let optional_count = |count: &Option<Setting<u32>>| match count {
        Some(count) => {
            let count = count.value;
            quote!(::core::option::Option::Some(#count))
        }
        None => quote!(::core::option::Option::None),
    };
    let optional_rate = |rate: &Option<Setting<RateLimit>>| match rate {
        Some(rate) => {
            let jobs = rate.value.jobs();
            let per = duration_tokens(rate.value.per());
            quote!(::core::option::Option::Some(#krate::RateLimit::from_checked_parts(#jobs, #per)))
        }
        None => quote!(::core::option::Option::None),
    };
    let dedupe = optional_template(&attr.dedupe);
    let fair_key = optional_template(&attr.fair_key);
    let limit_key = optional_template(&attr.limit_key);
    let max_running = optional_count(&attr.max_running);
    let max_running_per_key = optional_count(&attr.max_running_per_key);
    let rate_limit = optional_rate(&attr.rate_limit);
    let rate_limit_per_key = optional_rate(&attr.rate_limit_per_key);
    let schedule = schedule_tokens(attr, krate);
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
            lease: #lease,
            heartbeat: #heartbeat,
            dedupe: #dedupe,
            dedupe_scope: #krate::DedupeScope::#scope,
            schedule: #schedule,
            max_running: #max_running,
            rate_limit: #rate_limit,
            fair_key: #fair_key,
            limit_key: #limit_key,
            max_running_per_key: #max_running_per_key,
            rate_limit_per_key: #rate_limit_per_key,
        }
    }
}

/// `Some(ScheduleOptions { .. })` for a kind with `cron` or `every`, else `None`.
fn schedule_tokens(attr: &JobAttr, krate: &Path) -> TokenStream {
    let cadence = if let Some(cron) = &attr.cron {
        let expression = &cron.value;
        let timezone = attr
            .timezone
            .as_ref()
            .map_or("UTC", |timezone| timezone.value.as_str());
        quote! {
            #krate::Cadence::Cron {
                expression: #expression,
                timezone: #timezone,
            }
        }
    } else if let Some(every) = &attr.every {
        let interval = duration_tokens(every.value);
        quote!(#krate::Cadence::Every(#interval))
    } else {
        return quote!(::core::option::Option::None);
    };
    let missed = match attr.missed.as_ref().map(|missed| missed.value) {
        Some(MissedTicks::All { max }) => {
            let max = attr.max_missed.as_ref().map_or(max, |bound| bound.value);
            quote!(#krate::MissedTicks::All { max: #max })
        }
        Some(MissedTicks::Skip) => quote!(#krate::MissedTicks::Skip),
        Some(MissedTicks::Latest) | None => quote!(#krate::MissedTicks::Latest),
    };
    quote! {
        ::core::option::Option::Some(#krate::ScheduleOptions {
            cadence: #cadence,
            missed: #missed,
        })
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
