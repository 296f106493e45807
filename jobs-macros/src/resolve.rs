//! The user's types, as written in the generated module.
//!
//! The generated module sees the user's names through `use super::*`, except the two it defines
//! itself in the type namespace: `Job` and `Args`. A user's own type of either name, written
//! as-is inside the module, would silently mean the generated item, so a path starting with one
//! of them is rewritten to start at `super::`, where the user wrote it.

use proc_macro2::{Ident, Punct, Spacing, TokenStream, TokenTree};
use quote::ToTokens;
use syn::Type;

/// Type names the generated module defines, which would shadow the user's.
const SHADOWED: &[&str] = &["Job", "Args"];

/// `ty` with every path that starts with a shadowed name made to start at `super::`.
pub fn type_in_module(ty: &Type) -> Type {
    let tokens = rewrite(ty.to_token_stream());
    syn::parse2(tokens).unwrap_or_else(|_| ty.clone())
}

fn rewrite(tokens: TokenStream) -> TokenStream {
    let mut output = Vec::new();
    // Whether the previous token ends a path prefix (`::`) or starts a lifetime (`'`): an
    // identifier after either does not start a path.
    let mut continues_path = false;
    let mut colons = 0;
    for token in tokens {
        match token {
            TokenTree::Group(group) => {
                let mut rewritten =
                    proc_macro2::Group::new(group.delimiter(), rewrite(group.stream()));
                rewritten.set_span(group.span());
                output.push(TokenTree::Group(rewritten));
                continues_path = false;
                colons = 0;
            }
            TokenTree::Ident(ident) => {
                if !continues_path && SHADOWED.iter().any(|name| ident == name) {
                    let span = ident.span();
                    output.push(TokenTree::Ident(Ident::new("super", span)));
                    let mut first = Punct::new(':', Spacing::Joint);
                    first.set_span(span);
                    let mut second = Punct::new(':', Spacing::Alone);
                    second.set_span(span);
                    output.push(TokenTree::Punct(first));
                    output.push(TokenTree::Punct(second));
                }
                output.push(TokenTree::Ident(ident));
                continues_path = false;
                colons = 0;
            }
            TokenTree::Punct(punct) => {
                colons = if punct.as_char() == ':' {
                    colons + 1
                } else {
                    0
                };
                continues_path = colons == 2 || punct.as_char() == '\'';
                output.push(TokenTree::Punct(punct));
            }
            TokenTree::Literal(literal) => {
                output.push(TokenTree::Literal(literal));
                continues_path = false;
                colons = 0;
            }
        }
    }
    output.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(ty: &str) -> String {
        let ty: Type = syn::parse_str(ty).unwrap();
        type_in_module(&ty).to_token_stream().to_string()
    }

    #[test]
    fn reaches_shadowed_names_through_super() {
        assert_eq!(rewritten("Job"), "super :: Job");
        assert_eq!(rewritten("Vec<Args>"), "Vec < super :: Args >");
        assert_eq!(
            rewritten("Option<(Job, i64)>"),
            "Option < (super :: Job , i64) >"
        );
        assert_eq!(rewritten("Job::Id"), "super :: Job :: Id");
    }

    #[test]
    fn leaves_other_paths_alone() {
        assert_eq!(rewritten("crate::Job"), "crate :: Job");
        assert_eq!(rewritten("models::Args"), "models :: Args");
        assert_eq!(rewritten("::jobs::Job"), ":: jobs :: Job");
        assert_eq!(rewritten("Jobs"), "Jobs");
    }
}
