//! Rules that involve more than one key, or the attribute and the function: a kind named after
//! its function follows the naming rules, dedupe and fairness placeholders
//! must name data arguments, the backoff cap must not be below its base, the heartbeat must be
//! shorter than the lease, and a schedule is one cadence, with settings that need it, on a
//! function without data arguments.

use jobs_core::dedupe::{parse_template, TemplatePart};
use jobs_core::{check_kind_name, MissedTicks};
use syn::ext::IdentExt;

use crate::ast::JobFn;
use crate::attr::JobAttr;
use crate::errors::Errors;

/// Checks every rule that involves more than one key, or a key and the function.
pub fn check(attr: &JobAttr, job: &JobFn, errors: &mut Errors) {
    check_default_name(attr, job, errors);
    if let Some(template) = &attr.dedupe {
        check_template("dedupe", template, job, errors);
    }
    if let Some(template) = &attr.fair_key {
        check_template("fair_key", template, job, errors);
    }
    if let Some(template) = &attr.limit_key {
        check_template("limit_key", template, job, errors);
    }
    check_per_key_limits(attr, errors);
    check_fair_key_alone(attr, errors);
    check_backoff(attr, errors);
    check_heartbeat(attr, errors);
    check_schedule_keys(attr, errors);
    check_scheduled_arguments(attr, job, errors);
}

/// Checks that the function's name, when it is the kind's name, follows the naming rules.
fn check_default_name(attr: &JobAttr, job: &JobFn, errors: &mut Errors) {
    if attr.has("name") {
        return;
    }
    let ident = &job.item.sig.ident;
    if let Err(error) = check_kind_name(&ident.to_string()) {
        errors.error(
            ident,
            format!("the function's name is the job's kind name, and {error}; set another with `#[job(name = \"...\")]`"),
        );
    }
}

/// Checks a key template (`dedupe`, `fair_key`) against the function's data arguments.
fn check_template(key: &str, template: &syn::LitStr, job: &JobFn, errors: &mut Errors) {
    let text = template.value();
    let parts = match parse_template(&text) {
        Ok(parts) => parts,
        Err(error) => {
            errors.error(template, format!("invalid `{key}` template: {error}"));
            return;
        }
    };
    let placeholders = parts
        .iter()
        .filter(|part| matches!(part, TemplatePart::Field(_)))
        .count();
    if placeholders == 0 && key != "dedupe" {
        errors.error(
            template,
            format!("`{key}` names no argument, so every job would have the same key: write a placeholder such as `\"<tenant_id>\"`"),
        );
        return;
    }
    // The payload keys: argument names without any `r#`.
    let fields: Vec<String> = job
        .data_args()
        .map(|arg| arg.ident.unraw().to_string())
        .collect();
    for part in parts {
        let TemplatePart::Field(field) = part else {
            continue;
        };
        if !fields.iter().any(|name| name == field) {
            let known = if fields.is_empty() {
                String::from("the job has no data arguments")
            } else {
                let listed: Vec<String> = fields.iter().map(|name| format!("`{name}`")).collect();
                format!("its data arguments are {}", listed.join(", "))
            };
            let what = if key == "dedupe" {
                String::from("dedupe")
            } else {
                format!("`{key}`")
            };
            errors.error(
                template,
                format!(
                    "{what} placeholder `<{field}>` is not an argument of `{}`; {known}",
                    job.item.sig.ident
                ),
            );
        }
    }
}

/// Checks that a kind with a fairness key has no limit on its running jobs or their rate: its
/// jobs are claimed round-robin by key, and a limited kind's are claimed under its limit.
fn check_fair_key_alone(attr: &JobAttr, errors: &mut Errors) {
    let Some(template) = &attr.fair_key else {
        return;
    };
    for limit in [
        "max_running",
        "rate_limit",
        "max_running_per_key",
        "rate_limit_per_key",
    ] {
        if attr.has(limit) {
            errors.error(
                template,
                format!("`fair_key` cannot be combined with `{limit}`: a kind is claimed either round-robin by its fairness key or under its limit; put the limited work in a kind of its own"),
            );
        }
    }
}

/// Checks that a per-key limit has a key to count by, and a limit key a limit to key.
fn check_per_key_limits(attr: &JobAttr, errors: &mut Errors) {
    for name in ["max_running_per_key", "rate_limit_per_key"] {
        if let Some(limit) = attr.key(name) {
            if !attr.has("limit_key") {
                errors.error(
                    limit,
                    format!("`{name}` needs a `limit_key` to count jobs by, such as `limit_key = \"<merchant_id>\"`"),
                );
            }
        }
    }
    if let Some(template) = &attr.limit_key {
        if !attr.has("max_running_per_key") && !attr.has("rate_limit_per_key") {
            errors.error(
                template,
                "`limit_key` keys no limit: add `max_running_per_key = N` (at most N jobs with the same key running at once) or `rate_limit_per_key = \"N/window\"`",
            );
        }
    }
}

/// Checks that the backoff cap is not below the backoff base.
fn check_backoff(attr: &JobAttr, errors: &mut Errors) {
    let (Some(base), Some(max)) = (&attr.backoff_base, &attr.backoff_max) else {
        return;
    };
    if max.value < base.value {
        errors.push(syn::Error::new(
            max.span,
            format!(
                "`backoff_max` ({:?}) must not be shorter than `backoff_base` ({:?}): it caps every delay, the first one included",
                max.value, base.value
            ),
        ));
    }
}

/// Checks that the heartbeat renews the lease before it runs out.
fn check_heartbeat(attr: &JobAttr, errors: &mut Errors) {
    let (Some(lease), Some(heartbeat)) = (&attr.lease, &attr.heartbeat) else {
        return;
    };
    if heartbeat.value >= lease.value {
        errors.push(syn::Error::new(
            heartbeat.span,
            format!(
                "`heartbeat` ({:?}) must be shorter than `lease` ({:?}), or leases run out while jobs run",
                heartbeat.value, lease.value
            ),
        ));
    }
}

/// Checks that a schedule is one cadence, and that the keys which refine a schedule have one.
/// Keys count as written even when their value was refused, so that one mistake is one error.
fn check_schedule_keys(attr: &JobAttr, errors: &mut Errors) {
    if let (Some(cron), Some(every)) = (attr.key("cron"), attr.key("every")) {
        let (first, second) = if attr.keys.iter().position(|key| key == "cron")
            < attr.keys.iter().position(|key| key == "every")
        {
            (cron, every)
        } else {
            (every, cron)
        };
        errors.error(
            second,
            format!("`{second}` and `{first}` cannot both be set: a schedule is one or the other"),
        );
    }
    if let Some(timezone) = attr.key("timezone") {
        if !attr.has("cron") {
            errors.error(
                timezone,
                "`timezone` is the time zone of a `cron` schedule, and this #[job] has no `cron`",
            );
        }
    }
    let scheduled = attr.has("cron") || attr.has("every");
    if let Some(missed) = attr.key("missed") {
        if !scheduled {
            errors.error(
                missed,
                "`missed` applies to scheduled jobs: set `cron` or `every` too, or remove it",
            );
        }
    }
    if let Some(max_missed) = attr.key("max_missed") {
        let all = match &attr.missed {
            Some(missed) => matches!(missed.value, MissedTicks::All { .. }),
            // A refused `missed` value has its own error.
            None => attr.has("missed"),
        };
        if !all {
            let schedule = if scheduled {
                ""
            } else {
                ", on a schedule (`cron` or `every`)"
            };
            errors.error(
                max_missed,
                format!("`max_missed` bounds the missed ticks that `missed = \"all\"` runs: it needs `missed = \"all\"`{schedule}"),
            );
        }
    }
}

/// Checks that a scheduled job takes no data arguments: nobody calls it with any.
fn check_scheduled_arguments(attr: &JobAttr, job: &JobFn, errors: &mut Errors) {
    if !(attr.has("cron") || attr.has("every")) {
        return;
    }
    if let Some(arg) = job.data_args().next() {
        // From the name to the type, leaving out any attributes on the argument.
        let (pat, ty) = (&arg.declared.pat, &arg.declared.ty);
        errors.error(
            quote::quote!(#pat: #ty),
            format!(
                "a scheduled job is enqueued by its schedule and cannot be given arguments: remove `{}`, and read what the job needs from `State<T>` or the database",
                arg.ident.unraw()
            ),
        );
    }
}
