//! Parses `#[job(key = value, ...)]` into typed settings, keeping each value's span.

use std::time::Duration;

use proc_macro2::Span;
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Expr, ExprLit, ExprUnary, Lit, LitStr, Meta, Token, UnOp};

use jobs_core::{parse_duration, DedupeScope, DurationError};

use crate::errors::Errors;

/// Every key `#[job(...)]` accepts, in the order the "expected one of" message lists them.
pub const KEYS: &[&str] = &[
    "name",
    "queue",
    "max_attempts",
    "priority",
    "timeout",
    "lease",
    "heartbeat",
    "backoff_base",
    "backoff_max",
    "jitter",
    "dedupe",
    "dedupe_scope",
    "crate",
];

/// A value together with the span of the value that set it.
#[derive(Clone)]
pub struct Setting<T> {
    pub value: T,
    pub span: Span,
}

/// The settings written in `#[job(...)]`; absent keys take their defaults at expansion.
#[derive(Default)]
pub struct JobAttr {
    pub name: Option<Setting<String>>,
    pub queue: Option<Setting<String>>,
    pub max_attempts: Option<Setting<u32>>,
    pub priority: Option<Setting<i16>>,
    pub timeout: Option<Setting<Duration>>,
    pub lease: Option<Setting<Duration>>,
    pub heartbeat: Option<Setting<Duration>>,
    pub backoff_base: Option<Setting<Duration>>,
    pub backoff_max: Option<Setting<Duration>>,
    pub jitter: Option<Setting<f64>>,
    pub dedupe: Option<LitStr>,
    pub dedupe_scope: Option<Setting<DedupeScope>>,
    pub krate: Option<Setting<syn::Path>>,
}

impl JobAttr {
    /// Parses the attribute's arguments, recording every mistake in `errors`.
    pub fn parse(tokens: proc_macro2::TokenStream, errors: &mut Errors) -> Self {
        let mut attr = JobAttr::default();
        let parser = Punctuated::<Meta, Token![,]>::parse_terminated;
        let metas = match syn::parse::Parser::parse2(parser, tokens) {
            Ok(metas) => metas,
            Err(error) => {
                errors.push(error);
                return attr;
            }
        };
        let mut seen: Vec<String> = Vec::new();
        for meta in metas {
            let (path, value) = match meta {
                Meta::NameValue(pair) => (pair.path, pair.value),
                Meta::Path(path) => {
                    errors.error(&path, "expected `key = value`");
                    continue;
                }
                Meta::List(list) => {
                    errors.error(&list.path, "expected `key = value`");
                    continue;
                }
            };
            let Some(key) = path.get_ident().map(|ident| ident.to_string()) else {
                errors.error(&path, unknown_key_message("this path"));
                continue;
            };
            if !KEYS.contains(&key.as_str()) {
                let mut message = unknown_key_message(&format!("`{key}`"));
                if let Some(close) = closest_key(&key) {
                    message.push_str(&format!(" (did you mean `{close}`?)"));
                }
                errors.error(&path, message);
                continue;
            }
            if seen.contains(&key) {
                errors.error(
                    &path,
                    format!("duplicate key `{key}`: it is already set earlier in this #[job]"),
                );
                continue;
            }
            seen.push(key.clone());
            attr.set(&key, &value, errors);
        }
        attr
    }

    fn set(&mut self, key: &str, value: &Expr, errors: &mut Errors) {
        match key {
            "name" => self.name = non_empty_string(key, value, errors),
            "queue" => self.queue = non_empty_string(key, value, errors),
            "max_attempts" => self.max_attempts = max_attempts(value, errors),
            "priority" => self.priority = priority(value, errors),
            "timeout" => self.timeout = duration(key, value, errors),
            "lease" => self.lease = duration(key, value, errors),
            "heartbeat" => self.heartbeat = duration(key, value, errors),
            "backoff_base" => self.backoff_base = duration(key, value, errors),
            "backoff_max" => self.backoff_max = duration(key, value, errors),
            "jitter" => self.jitter = jitter(value, errors),
            "dedupe" => self.dedupe = string_literal(key, value, errors),
            "dedupe_scope" => self.dedupe_scope = dedupe_scope(value, errors),
            "crate" => self.krate = crate_path(value, errors),
            _ => unreachable!("keys are checked against KEYS"),
        }
    }
}

fn unknown_key_message(what: &str) -> String {
    let expected: Vec<String> = KEYS.iter().map(|key| format!("`{key}`")).collect();
    format!(
        "unknown key {what} in #[job]; expected one of {}",
        expected.join(", ")
    )
}

/// The accepted key closest to a misspelt one, when it is close enough to be what was meant.
fn closest_key(key: &str) -> Option<&'static str> {
    KEYS.iter()
        .map(|candidate| (edit_distance(key, candidate), *candidate))
        .filter(|(distance, candidate)| *distance <= 2.max(candidate.len() / 4))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

/// The Levenshtein distance between two strings.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, a_char) in a.chars().enumerate() {
        let mut current = vec![i + 1];
        for (j, b_char) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(a_char != *b_char);
            current.push(substitution.min(previous[j + 1] + 1).min(current[j] + 1));
        }
        previous = current;
    }
    previous[b.len()]
}

fn string_literal(key: &str, value: &Expr, errors: &mut Errors) -> Option<LitStr> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(text),
            ..
        }) => Some(text.clone()),
        other => {
            errors.error(
                other,
                format!("expected a string for `{key}`, like `{key} = \"...\"`"),
            );
            None
        }
    }
}

fn non_empty_string(key: &str, value: &Expr, errors: &mut Errors) -> Option<Setting<String>> {
    let literal = string_literal(key, value, errors)?;
    let text = literal.value();
    if text.trim().is_empty() {
        errors.error(&literal, format!("`{key}` must not be empty"));
        return None;
    }
    Some(Setting {
        value: text,
        span: literal.span(),
    })
}

fn integer(key: &str, value: &Expr, errors: &mut Errors) -> Option<(i128, Span)> {
    let (literal, negative) = match value {
        Expr::Lit(ExprLit {
            lit: Lit::Int(int), ..
        }) => (int, false),
        Expr::Unary(ExprUnary {
            op: UnOp::Neg(_),
            expr,
            ..
        }) => match &**expr {
            Expr::Lit(ExprLit {
                lit: Lit::Int(int), ..
            }) => (int, true),
            _ => {
                errors.error(value, expected_integer(key, value));
                return None;
            }
        },
        other => {
            errors.error(other, expected_integer(key, other));
            return None;
        }
    };
    match literal.base10_parse::<i128>() {
        Ok(number) => Some((if negative { -number } else { number }, value.span())),
        Err(error) => {
            errors.push(error);
            None
        }
    }
}

/// "expected an integer", with an example; a quoted number is told to lose its quotes.
fn expected_integer(key: &str, value: &Expr) -> String {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(text),
            ..
        }) if text.value().trim().parse::<i64>().is_ok() => {
            let number = text.value();
            let number = number.trim();
            format!("expected an integer for `{key}`, not a string: write `{key} = {number}`, without quotes")
        }
        _ => format!("expected an integer for `{key}`, like `{key} = 8`"),
    }
}

fn max_attempts(value: &Expr, errors: &mut Errors) -> Option<Setting<u32>> {
    let (number, span) = integer("max_attempts", value, errors)?;
    if number < 1 {
        errors.error(
            value,
            "`max_attempts` must be at least 1: it counts every run, the first included",
        );
        return None;
    }
    match u32::try_from(number) {
        Ok(value) => Some(Setting { value, span }),
        Err(_) => {
            errors.error(value, "`max_attempts` is too large");
            None
        }
    }
}

fn priority(value: &Expr, errors: &mut Errors) -> Option<Setting<i16>> {
    let (number, span) = integer("priority", value, errors)?;
    match i16::try_from(number) {
        Ok(value) => Some(Setting { value, span }),
        Err(_) => {
            errors.error(value, "`priority` must fit in an i16 (-32768 to 32767)");
            None
        }
    }
}

fn duration(key: &str, value: &Expr, errors: &mut Errors) -> Option<Setting<Duration>> {
    let Expr::Lit(ExprLit {
        lit: Lit::Str(literal),
        ..
    }) = value
    else {
        errors.error(
            value,
            format!("expected a duration string for `{key}`, like `{key} = \"5m\"`"),
        );
        return None;
    };
    match parse_duration(&literal.value()) {
        Ok(duration) if duration.is_zero() => {
            errors.error(literal, format!("`{key}` must be longer than zero"));
            None
        }
        Ok(duration) => Some(Setting {
            value: duration,
            span: literal.span(),
        }),
        Err(DurationError::UnknownUnit(unit)) => {
            errors.error(
                literal,
                format!(
                    "invalid duration for `{key}`: unknown unit `{}`; use one of ms, s, m, h, d, with no spaces, like \"5m\" or \"1h30m\"",
                    unit.trim()
                ),
            );
            None
        }
        Err(error) => {
            errors.error(literal, format!("invalid duration for `{key}`: {error}"));
            None
        }
    }
}

fn jitter(value: &Expr, errors: &mut Errors) -> Option<Setting<f64>> {
    let (literal, negative) = match value {
        Expr::Unary(ExprUnary {
            op: UnOp::Neg(_),
            expr,
            ..
        }) => (&**expr, true),
        other => (other, false),
    };
    let number = match literal {
        Expr::Lit(ExprLit {
            lit: Lit::Float(float),
            ..
        }) => float.base10_parse::<f64>().ok(),
        Expr::Lit(ExprLit {
            lit: Lit::Int(int), ..
        }) => int.base10_parse::<f64>().ok(),
        _ => None,
    };
    match number.map(|number| if negative { -number } else { number }) {
        Some(fraction) if (0.0..=1.0).contains(&fraction) => Some(Setting {
            value: fraction,
            span: value.span(),
        }),
        Some(fraction) => {
            errors.error(
                value,
                format!("`jitter` must be from 0.0 to 1.0 (the fraction of each delay that jitter may remove), not {fraction}"),
            );
            None
        }
        None => {
            errors.error(
                value,
                "expected a number from 0.0 to 1.0 for `jitter`, like `jitter = 0.5`",
            );
            None
        }
    }
}

fn dedupe_scope(value: &Expr, errors: &mut Errors) -> Option<Setting<DedupeScope>> {
    let literal = string_literal("dedupe_scope", value, errors)?;
    match DedupeScope::from_name(&literal.value()) {
        Some(scope) => Some(Setting {
            value: scope,
            span: literal.span(),
        }),
        None => {
            errors.error(
                &literal,
                "expected `\"retained\"` or `\"active\"` for `dedupe_scope`",
            );
            None
        }
    }
}

fn crate_path(value: &Expr, errors: &mut Errors) -> Option<Setting<syn::Path>> {
    let literal = string_literal("crate", value, errors)?;
    match literal.parse::<syn::Path>() {
        Ok(path) => Some(Setting {
            value: path,
            span: literal.span(),
        }),
        Err(_) => {
            errors.error(
                &literal,
                "expected a path for `crate`, like `crate = \"jobs\"`",
            );
            None
        }
    }
}
