//! Parses `#[job(key = value, ...)]` into typed settings, keeping each value's span.

use std::time::Duration;

use proc_macro2::Span;
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Expr, ExprLit, ExprUnary, Ident, Lit, LitStr, Meta, Token, UnOp};

use jobs_core::name::check_name;
use jobs_core::schedule::MIN_INTERVAL;
use jobs_core::{
    check_cron, format_duration, parse_duration, DedupeScope, DurationError, MissedTicks, NameOf,
    RateLimit, RetryPolicy,
};

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
    "cron",
    "timezone",
    "every",
    "missed",
    "max_missed",
    "max_running",
    "rate_limit",
    "fair_key",
    "limit_key",
    "max_running_per_key",
    "rate_limit_per_key",
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
    /// A cron expression, checked on its own (its time zone cannot make it invalid).
    pub cron: Option<Setting<String>>,
    /// An IANA time zone name, checked on its own.
    pub timezone: Option<Setting<String>>,
    pub every: Option<Setting<Duration>>,
    /// The missed-ticks policy; `All` holds the default bound, `max_missed` is kept apart.
    pub missed: Option<Setting<MissedTicks>>,
    pub max_missed: Option<Setting<u32>>,
    pub max_running: Option<Setting<u32>>,
    pub rate_limit: Option<Setting<RateLimit>>,
    /// The fairness key template, checked against the arguments in `valid`.
    pub fair_key: Option<LitStr>,
    /// The limit key template, checked against the arguments in `valid`.
    pub limit_key: Option<LitStr>,
    pub max_running_per_key: Option<Setting<u32>>,
    pub rate_limit_per_key: Option<Setting<RateLimit>>,
    pub krate: Option<Setting<syn::Path>>,
    /// The keys as written, in order, for errors about a key rather than its value.
    pub keys: Vec<Ident>,
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
            if let Some(ident) = path.get_ident() {
                attr.keys.push(ident.clone());
            }
            attr.set(&key, &value, errors);
        }
        attr
    }

    fn set(&mut self, key: &str, value: &Expr, errors: &mut Errors) {
        match key {
            "name" => self.name = name(key, NameOf::Kind, value, errors),
            "queue" => self.queue = name(key, NameOf::Queue, value, errors),
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
            "cron" => self.cron = cron(value, errors),
            "timezone" => self.timezone = timezone(value, errors),
            "every" => self.every = interval(value, errors),
            "missed" => self.missed = missed(value, errors),
            "max_missed" => self.max_missed = at_least_one(key, value, errors),
            "max_running" => self.max_running = at_least_one(key, value, errors),
            "rate_limit" => self.rate_limit = rate_limit(key, value, errors),
            "rate_limit_per_key" => self.rate_limit_per_key = rate_limit(key, value, errors),
            "fair_key" => self.fair_key = string_literal(key, value, errors),
            "limit_key" => self.limit_key = string_literal(key, value, errors),
            "max_running_per_key" => self.max_running_per_key = at_least_one(key, value, errors),
            "crate" => self.krate = crate_path(value, errors),
            _ => unreachable!("keys are checked against KEYS"),
        }
    }

    /// The key as written, when it was.
    pub fn key(&self, name: &str) -> Option<&Ident> {
        self.keys.iter().find(|key| *key == name)
    }

    /// Whether the key was written (even with a value refused).
    pub fn has(&self, name: &str) -> bool {
        self.key(name).is_some()
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

/// The string literal `value` is, or `None` with the error `expected` says recorded.
fn string_or<'a>(
    value: &'a Expr,
    errors: &mut Errors,
    expected: impl FnOnce() -> String,
) -> Option<&'a LitStr> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(text),
            ..
        }) => Some(text),
        other => {
            errors.error(other, expected());
            None
        }
    }
}

fn string_literal(key: &str, value: &Expr, errors: &mut Errors) -> Option<LitStr> {
    string_or(value, errors, || {
        format!("expected a string for `{key}`, like `{key} = \"...\"`")
    })
    .cloned()
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

/// A kind or queue name that follows the rules of [`jobs_core::name`].
fn name(key: &str, of: NameOf, value: &Expr, errors: &mut Errors) -> Option<Setting<String>> {
    let setting = non_empty_string(key, value, errors)?;
    match check_name(of, &setting.value) {
        Ok(()) => Some(setting),
        Err(error) => {
            errors.push(syn::Error::new(
                setting.span,
                format!("invalid `{key}`: {error}"),
            ));
            None
        }
    }
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
        Ok(attempts) if attempts <= RetryPolicy::MAX_ATTEMPTS_LIMIT => Some(Setting {
            value: attempts,
            span,
        }),
        _ => {
            errors.error(
                value,
                format!(
                    "`max_attempts` must be at most {}: the database stores it as a 4-byte integer",
                    RetryPolicy::MAX_ATTEMPTS_LIMIT
                ),
            );
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
    let setting = any_duration(key, value, errors)?;
    if setting.value.is_zero() {
        errors.push(syn::Error::new(
            setting.span,
            format!("`{key}` must be longer than zero"),
        ));
        return None;
    }
    Some(setting)
}

/// The interval of an `every` schedule: a duration of at least [`MIN_INTERVAL`].
fn interval(value: &Expr, errors: &mut Errors) -> Option<Setting<Duration>> {
    let setting = any_duration("every", value, errors)?;
    if setting.value < MIN_INTERVAL {
        errors.push(syn::Error::new(
            setting.span,
            format!(
                "`every` must be at least {}: schedules tick at most once a second",
                format_duration(MIN_INTERVAL)
            ),
        ));
        return None;
    }
    Some(setting)
}

/// A duration string, zero included.
fn any_duration(key: &str, value: &Expr, errors: &mut Errors) -> Option<Setting<Duration>> {
    let literal = string_or(value, errors, || {
        format!("expected a duration string for `{key}`, like `{key} = \"5m\"`")
    })?;
    match parse_duration(&literal.value()) {
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

/// An expression accepted by the cron parser. Its time zone is checked apart: a zone cannot make
/// an expression invalid, so the expression is checked in UTC.
fn cron(value: &Expr, errors: &mut Errors) -> Option<Setting<String>> {
    let literal = string_literal("cron", value, errors)?;
    let expression = literal.value();
    match check_cron(&expression, "UTC") {
        Ok(()) => Some(Setting {
            value: expression,
            span: literal.span(),
        }),
        Err(jobs_core::ScheduleError::InvalidCron { reason, .. }) => {
            errors.error(
                &literal,
                format!(
                    "invalid cron expression for `cron`: {}; expected five fields (minute hour day-of-month month day-of-week), or six with seconds first, like \"0 3 * * *\"",
                    reason.trim_end_matches('.')
                ),
            );
            None
        }
        Err(error) => {
            errors.error(&literal, format!("invalid `cron`: {error}"));
            None
        }
    }
}

/// An IANA time zone name, checked with an expression that is always valid.
fn timezone(value: &Expr, errors: &mut Errors) -> Option<Setting<String>> {
    const ANY_VALID_EXPRESSION: &str = "0 0 * * *";
    let literal = string_literal("timezone", value, errors)?;
    let zone = literal.value();
    match check_cron(ANY_VALID_EXPRESSION, &zone) {
        Ok(()) => Some(Setting {
            value: zone,
            span: literal.span(),
        }),
        Err(_) => {
            errors.error(
                &literal,
                format!("unknown time zone `{zone}` for `timezone`: expected an IANA name such as \"UTC\" or \"Europe/Paris\""),
            );
            None
        }
    }
}

fn missed(value: &Expr, errors: &mut Errors) -> Option<Setting<MissedTicks>> {
    let literal = string_literal("missed", value, errors)?;
    match MissedTicks::parse(&literal.value(), MissedTicks::DEFAULT_MAX) {
        Ok(policy) => Some(Setting {
            value: policy,
            span: literal.span(),
        }),
        Err(_) => {
            errors.error(
                &literal,
                "expected `\"latest\"`, `\"all\"` or `\"skip\"` for `missed`: run the latest missed tick once, every missed tick (up to `max_missed`), or none",
            );
            None
        }
    }
}

/// A rate limit, `"<jobs>/<window>"`.
/// A rate limit: `rate_limit` or `rate_limit_per_key`.
fn rate_limit(key: &str, value: &Expr, errors: &mut Errors) -> Option<Setting<RateLimit>> {
    let literal = string_or(value, errors, || {
        format!("expected a string for `{key}`, like `{key} = \"100/1s\"` (at most 100 jobs started in any second)")
    })?;
    match RateLimit::parse(&literal.value()) {
        Ok(limit) => Some(Setting {
            value: limit,
            span: literal.span(),
        }),
        Err(error) => {
            errors.error(literal, format!("invalid `{key}`: {error}"));
            None
        }
    }
}

/// A count of at least one: `max_missed`, `max_running` or `max_running_per_key`.
fn at_least_one(key: &str, value: &Expr, errors: &mut Errors) -> Option<Setting<u32>> {
    let (number, span) = integer(key, value, errors)?;
    if number < 1 {
        let meaning = match key {
            "max_missed" => {
                "it is the most missed ticks run after one gap; for none, write `missed = \"skip\"`"
            }
            "max_running_per_key" => {
                "it is the most jobs of this kind with the same limit key running at once across all workers"
            }
            _ => "it is the most jobs of this kind running at once across all workers",
        };
        errors.error(value, format!("`{key}` must be at least 1: {meaning}"));
        return None;
    }
    match u32::try_from(number) {
        Ok(number) => Some(Setting {
            value: number,
            span,
        }),
        Err(_) => {
            errors.error(value, format!("`{key}` must fit in a u32"));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses an attribute's arguments; the messages of any errors, joined.
    fn parse(tokens: &str) -> (JobAttr, String) {
        let mut errors = Errors::default();
        let attr = JobAttr::parse(tokens.parse().unwrap(), &mut errors);
        (attr, errors.into_compile_errors().to_string())
    }

    #[test]
    fn misspelt_keys_suggest_the_new_ones() {
        assert_eq!(closest_key("cronn"), Some("cron"));
        assert_eq!(closest_key("time_zone"), Some("timezone"));
        assert_eq!(closest_key("evry"), Some("every"));
        assert_eq!(closest_key("max_runing"), Some("max_running"));
        assert_eq!(closest_key("max_misses"), Some("max_missed"));
    }

    #[test]
    fn schedule_keys_parse() {
        let (attr, errors) = parse(
            r#"cron = "0 3 * * *", timezone = "Europe/Paris", missed = "all", max_missed = 3, max_running = 2"#,
        );
        assert_eq!(errors, "");
        assert_eq!(attr.cron.unwrap().value, "0 3 * * *");
        assert_eq!(attr.timezone.unwrap().value, "Europe/Paris");
        assert_eq!(
            attr.missed.unwrap().value,
            MissedTicks::All {
                max: MissedTicks::DEFAULT_MAX
            }
        );
        assert_eq!(attr.max_missed.unwrap().value, 3);
        assert_eq!(attr.max_running.unwrap().value, 2);
        let (attr, errors) = parse(r#"every = "1m30s", missed = "skip""#);
        assert_eq!(errors, "");
        assert_eq!(attr.every.unwrap().value, Duration::from_secs(90));
        assert_eq!(attr.missed.unwrap().value, MissedTicks::Skip);
    }

    #[test]
    fn schedule_values_are_checked_on_their_own() {
        let (attr, errors) = parse(r#"cron = "61 * * * *", timezone = "Mars/Olympus""#);
        assert!(attr.cron.is_none() && attr.timezone.is_none());
        assert!(
            errors.contains("invalid cron expression for `cron`"),
            "{errors}"
        );
        assert!(
            errors.contains("unknown time zone `Mars/Olympus`"),
            "{errors}"
        );
        assert_eq!(attr.keys.len(), 2);
        let (_, errors) = parse(r#"every = "500ms""#);
        assert!(errors.contains("`every` must be at least 1s"), "{errors}");
        let (_, errors) = parse(r#"every = "0s""#);
        assert!(errors.contains("`every` must be at least 1s"), "{errors}");
        let (_, errors) = parse(r#"missed = "some""#);
        assert!(errors.contains("for `missed`"), "{errors}");
        for key in ["max_missed", "max_running"] {
            let (_, errors) = parse(&format!("{key} = 0"));
            assert!(
                errors.contains(&format!("`{key}` must be at least 1")),
                "{errors}"
            );
        }
    }
}
