//! Names the item an attribute was put on by mistake, and finds the tokens to point at: its
//! keyword and name (`struct SendReceipt`), not its whole body.

use proc_macro2::TokenStream;
use quote::ToTokens;
use syn::Item;

/// What an item is ("a struct") and the tokens that say so.
pub struct Described {
    pub what: &'static str,
    pub tokens: TokenStream,
}

/// Describes `tokens` as an item, or as "this item" pointing at all of it when it is not one.
pub fn describe(tokens: &TokenStream) -> Described {
    let Ok(item) = syn::parse2::<Item>(tokens.clone()) else {
        return Described {
            what: "this item",
            tokens: tokens.clone(),
        };
    };
    let (what, tokens) = match &item {
        Item::Const(item) => ("a constant", pair(&item.const_token, &item.ident)),
        Item::Enum(item) => ("an enum", pair(&item.enum_token, &item.ident)),
        Item::ExternCrate(item) => ("an `extern crate`", item.to_token_stream()),
        Item::Fn(item) => ("a function", pair(&item.sig.fn_token, &item.sig.ident)),
        Item::ForeignMod(item) => ("an `extern` block", item.abi.to_token_stream()),
        Item::Impl(item) => ("an impl block", pair(&item.impl_token, &item.self_ty)),
        Item::Macro(item) => ("a macro", item.mac.path.to_token_stream()),
        Item::Mod(item) => ("a module", pair(&item.mod_token, &item.ident)),
        Item::Static(item) => ("a static", pair(&item.static_token, &item.ident)),
        Item::Struct(item) => ("a struct", pair(&item.struct_token, &item.ident)),
        Item::Trait(item) => ("a trait", pair(&item.trait_token, &item.ident)),
        Item::TraitAlias(item) => ("a trait alias", pair(&item.trait_token, &item.ident)),
        Item::Type(item) => ("a type alias", pair(&item.type_token, &item.ident)),
        Item::Union(item) => ("a union", pair(&item.union_token, &item.ident)),
        Item::Use(item) => ("a `use` declaration", item.to_token_stream()),
        _ => ("this item", item.to_token_stream()),
    };
    Described { what, tokens }
}

/// Two syntax nodes as one run of tokens, for an error spanning both.
pub fn pair(first: &impl ToTokens, second: &impl ToTokens) -> TokenStream {
    let mut tokens = first.to_token_stream();
    second.to_tokens(&mut tokens);
    tokens
}
