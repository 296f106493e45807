//! A view of the `async fn` under `#[job]`: which parameters are data and which are supplied by
//! the worker, keeping the original syntax nodes for their spans.

use syn::{FnArg, GenericArgument, Ident, ItemFn, Pat, PathArguments, Type};

use crate::errors::Errors;

/// A parameter of the job function.
pub enum Param {
    /// `JobContext`: supplied by the worker.
    Context,
    /// `State<T>`: shared application state of type `T`, supplied by the worker.
    State(Type),
    /// A data argument: part of the stored payload.
    Data(DataArg),
}

/// A data argument: a field of the generated payload type.
pub struct DataArg {
    pub ident: Ident,
    pub ty: Type,
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

    /// Reads the function's signature, recording every mistake in `errors`.
    pub fn read(item: ItemFn, errors: &mut Errors) -> Self {
        let signature = &item.sig;
        if signature.asyncness.is_none() {
            errors.error(
                signature.fn_token,
                "#[job] functions must be `async fn`: jobs run on the worker's async runtime",
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
                        params.push(classify(pat.ident.clone(), (*typed.ty).clone()));
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

fn classify(ident: Ident, ty: Type) -> Param {
    if last_segment_is(&ty, "JobContext") {
        return Param::Context;
    }
    if let Some(inner) = state_inner(&ty) {
        return Param::State(inner);
    }
    Param::Data(DataArg { ident, ty })
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
