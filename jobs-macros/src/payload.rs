//! Generates the payload type `Args`: the struct, its serde impls and the assertion that every
//! field type can be stored.
//!
//! The serde impls are written out rather than derived. A derive calls `Serialize` and
//! `Deserialize` on each field type directly, so one argument type without them would fail in
//! half a dozen places of derived code on top of the assertion. The impls here reach each field
//! type through `Arg::<T>`, which compiles either way, leaving the assertion, placed at the
//! argument's type, as the only error.

use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::Path;

use crate::ast::JobFn;

/// The `Args` struct with its serde impls and payload assertions, for the generated module.
pub fn expand(job: &JobFn, krate: &Path, inner_vis: &TokenStream, doc: &str) -> TokenStream {
    let idents: Vec<_> = job.data_args().map(|arg| &arg.ident).collect();
    let types: Vec<_> = job.data_args().map(|arg| &arg.ty).collect();
    // The JSON keys: field names without any `r#`, as serde's derive writes them.
    let keys: Vec<String> = idents
        .iter()
        .map(|ident| ident.unraw().to_string())
        .collect();
    let count = keys.len();
    let indices = (0..count).map(Literal::usize_unsuffixed);
    let slots: Vec<_> = (0..count)
        .map(|index| format_ident!("__field{index}"))
        .collect();
    let expecting = format!("the arguments of job `{}`", job.item.sig.ident);
    let serde = quote!(#krate::__private::serde);
    let arg = quote!(#krate::__private::Arg);
    let assertions = types.iter().map(|ty| {
        quote_spanned! {ty.span()=>
            #krate::__private::assert_payload_type::<#ty>();
        }
    });

    quote! {
        #[doc = #doc]
        #inner_vis struct Args {
            #(
                #[allow(missing_docs)]
                #inner_vis #idents: #types,
            )*
        }

        const _: () = {
            const __JOB_ARG_FIELDS: &[&str] = &[#(#keys),*];

            #[allow(dead_code)]
            fn assert_payload_types() {
                #(#assertions)*
            }

            impl #serde::Serialize for Args {
                #[allow(unused_mut)]
                fn serialize<S: #serde::Serializer>(
                    &self,
                    serializer: S,
                ) -> ::core::result::Result<S::Ok, S::Error> {
                    let mut fields = #serde::Serializer::serialize_struct(serializer, "Args", #count)?;
                    #(
                        #serde::ser::SerializeStruct::serialize_field(
                            &mut fields,
                            #keys,
                            #arg::<#types>::serializable(&self.#idents),
                        )?;
                    )*
                    #serde::ser::SerializeStruct::end(fields)
                }
            }

            impl<'de> #serde::Deserialize<'de> for Args {
                fn deserialize<D: #serde::Deserializer<'de>>(
                    deserializer: D,
                ) -> ::core::result::Result<Self, D::Error> {
                    struct __JobArgsVisitor;

                    impl<'de> #serde::de::Visitor<'de> for __JobArgsVisitor {
                        type Value = Args;

                        fn expecting(
                            &self,
                            formatter: &mut ::core::fmt::Formatter<'_>,
                        ) -> ::core::fmt::Result {
                            formatter.write_str(#expecting)
                        }

                        fn visit_map<A: #serde::de::MapAccess<'de>>(
                            self,
                            mut map: A,
                        ) -> ::core::result::Result<Args, A::Error> {
                            #( let mut #slots = ::core::option::Option::None; )*
                            while let ::core::option::Option::Some(field) =
                                #serde::de::MapAccess::next_key_seed(
                                    &mut map,
                                    #krate::__private::FieldIndex(__JOB_ARG_FIELDS),
                                )?
                            {
                                match field {
                                    #(
                                        ::core::option::Option::Some(#indices) => {
                                            #krate::__private::read_field(
                                                &mut map,
                                                &mut #slots,
                                                #keys,
                                                #arg::<#types>::seed(),
                                            )?
                                        }
                                    )*
                                    _ => #krate::__private::skip_value(&mut map)?,
                                }
                            }
                            ::core::result::Result::Ok(Args {
                                #(
                                    #idents: match #slots {
                                        ::core::option::Option::Some(value) => value,
                                        ::core::option::Option::None => {
                                            #arg::<#types>::missing(#keys)?
                                        }
                                    },
                                )*
                            })
                        }
                    }

                    #serde::Deserializer::deserialize_struct(
                        deserializer,
                        "Args",
                        __JOB_ARG_FIELDS,
                        __JobArgsVisitor,
                    )
                }
            }
        };
    }
}
