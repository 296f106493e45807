//! A view of the `async fn` under `#[job]`: which parameters are data and which are supplied by
//! the worker, keeping the original syntax nodes for their spans.

use proc_macro2::{TokenStream, TokenTree};
use quote::ToTokens;
use syn::{FnArg, GenericArgument, Ident, ItemFn, Pat, PatType, PathArguments, ReturnType, Type};

use crate::errors::Errors;
use crate::resolve::type_in_module;

/// A parameter of the job function.
pub enum Param {
    /// `JobContext`: supplied by the worker.
    Context,
    /// `State<T>`: shared application state of type `T` (as written in the generated module),
    /// supplied by the worker.
    State(Type),
    /// A data argument: part of the stored payload.
    Data(DataArg),
}

/// A data argument: a field of the generated payload type.
pub struct DataArg {
    pub ident: Ident,
    /// The type as written in the generated module (see [`crate::resolve`]), with its spans.
    pub ty: Type,
    /// The argument as the user wrote it, such as `order_id: i64`, for errors about it.
    pub declared: PatType,
}

/// The job function, read.
pub struct JobFn {
    pub item: ItemFn,
    pub params: Vec<Param>,
}

impl JobFn {
    /// The data arguments, in order.
    pub fn data_args(&self) -> impl Iterator<Item = &DataArg> {
        self.params.iter().filter_map(|param| match param {
            Param::Data(arg) => Some(arg),
            _ => None,
        })
    }

    /// The state types the handler needs.
    pub fn state_types(&self) -> impl Iterator<Item = &Type> {
        self.params.iter().filter_map(|param| match param {
            Param::State(ty) => Some(ty),
            _ => None,
        })
    }

    /// The job's output type, read from the return type as written (in the generated module, see
    /// [`crate::resolve`]): `T` of `JobResult<T>`, `Result<T, E>` and `Result<T>` (any path
    /// ending in those names, such as `std::io::Result<T>`); `None`, for `()`, when the function
    /// returns `()`, `JobResult` or nothing. `None` too for any other type: that is either a
    /// mistake, reported at the return type by the generated code, or an alias that must then
    /// stand for a result of `()`.
    pub fn output_type(&self) -> Option<Type> {
        let ReturnType::Type(_, ty) = &self.item.sig.output else {
            return None;
        };
        let Type::Path(path) = &**ty else {
            return None;
        };
        if path.qself.is_some() {
            return None;
        }
        let segment = path.path.segments.last()?;
        if segment.ident != "Result" && segment.ident != "JobResult" {
            return None;
        }
        let PathArguments::AngleBracketed(arguments) = &segment.arguments else {
            return None;
        };
        match arguments.args.first() {
            Some(GenericArgument::Type(output)) if arguments.args.len() <= 2 => {
                Some(type_in_module(output))
            }
            _ => None,
        }
    }

    /// Reads the function's signature, recording every mistake in `errors`.
    pub fn read(item: ItemFn, errors: &mut Errors) -> Self {
        let signature = &item.sig;
        if signature.asyncness.is_none() {
            errors.error(
                signature.fn_token,
                "#[job] functions must be `async fn`: jobs run on the worker's async runtime",
            );
        }
        if let Some(unsafety) = &signature.unsafety {
            errors.error(
                unsafety,
                "#[job] functions cannot be `unsafe`: the worker calls them, and cannot uphold their safety conditions",
            );
        }
        if !signature.generics.params.is_empty() || signature.generics.where_clause.is_some() {
            errors.error(
                &signature.generics,
                "#[job] functions cannot be generic: each job kind has one concrete payload type",
            );
        }
        let mut params = Vec::new();
        for input in &signature.inputs {
            match input {
                FnArg::Receiver(receiver) => errors.error(
                    receiver,
                    "#[job] functions cannot take `self`: write a free function and pass what it needs as arguments or `State<T>`",
                ),
                FnArg::Typed(typed) => match &*typed.pat {
                    Pat::Ident(pat) if pat.by_ref.is_none() && pat.subpat.is_none() => {
                        let param = classify(pat.ident.clone(), typed);
                        if let Param::Data(arg) = &param {
                            check_data_type(&arg.ty, errors);
                        }
                        params.push(param);
                    }
                    other => errors.error(
                        other,
                        "#[job] arguments must be plain names, like `order_id: i64`",
                    ),
                },
            }
        }
        JobFn { item, params }
    }
}

/// Rejects data argument types that cannot be a field of the stored payload, whatever traits
/// they implement: borrowed types and `impl Trait`.
fn check_data_type(ty: &Type, errors: &mut Errors) {
    if let Type::Reference(reference) = ty {
        let by_value = if last_segment_is(&reference.elem, "JobContext") {
            Some("take the context by value, like `ctx: JobContext`: each run gets its own")
        } else if state_inner(&reference.elem).is_some() {
            Some("take state by value, like `mailer: State<Mailer>`: `State` is a shared handle")
        } else {
            None
        };
        if let Some(message) = by_value {
            errors.error(reference.and_token, message);
            return;
        }
    }
    if let Some(token) = impl_token(ty.to_token_stream()) {
        errors.error(
            token,
            "#[job] arguments cannot be `impl Trait`: each job kind has one concrete payload type",
        );
    } else if borrows(ty.to_token_stream()) {
        errors.error(
            ty,
            "#[job] arguments are stored as JSON in the job's row, so they cannot borrow: use an owned type, like `String` instead of `&str`",
        );
    }
}

/// The `impl` keyword of an `impl Trait` among the tokens, if any.
fn impl_token(tokens: TokenStream) -> Option<Ident> {
    tokens.into_iter().find_map(|token| match token {
        TokenTree::Ident(ident) if ident == "impl" => Some(ident),
        TokenTree::Group(group) => impl_token(group.stream()),
        _ => None,
    })
}

/// Whether the tokens contain a reference (`&`) or a lifetime other than `'static`.
fn borrows(tokens: TokenStream) -> bool {
    let mut tokens = tokens.into_iter().peekable();
    while let Some(token) = tokens.next() {
        let borrowed = match &token {
            TokenTree::Punct(punct) if punct.as_char() == '&' => true,
            TokenTree::Punct(punct) if punct.as_char() == '\'' => {
                !matches!(tokens.peek(), Some(TokenTree::Ident(name)) if name == "static")
            }
            TokenTree::Group(group) => borrows(group.stream()),
            _ => false,
        };
        if borrowed {
            return true;
        }
    }
    false
}

/// Sorts a parameter by its type; the types kept are as written in the generated module.
fn classify(ident: Ident, declared: &PatType) -> Param {
    let ty = &*declared.ty;
    if last_segment_is(ty, "JobContext") {
        return Param::Context;
    }
    if let Some(inner) = state_inner(ty) {
        return Param::State(type_in_module(&inner));
    }
    Param::Data(DataArg {
        ident,
        ty: type_in_module(ty),
        declared: declared.clone(),
    })
}

fn last_segment_is(ty: &Type, name: &str) -> bool {
    match ty {
        Type::Path(path) if path.qself.is_none() => path
            .path
            .segments
            .last()
            .is_some_and(|segment| segment.ident == name && segment.arguments.is_none()),
        _ => false,
    }
}

fn state_inner(ty: &Type) -> Option<Type> {
    let Type::Path(path) = ty else { return None };
    let segment = path.path.segments.last()?;
    if segment.ident != "State" {
        return None;
    }
    let PathArguments::AngleBracketed(arguments) = &segment.arguments else {
        return None;
    };
    match arguments.args.first() {
        Some(GenericArgument::Type(inner)) if arguments.args.len() == 1 => Some(inner.clone()),
        _ => None,
    }
}
