//! Rules that involve more than one key, or the attribute and the function: dedupe placeholders
//! must name data arguments, and the backoff cap must not be below its base.

use jobs_core::dedupe::{parse_template, TemplatePart};
use syn::ext::IdentExt;

use crate::ast::JobFn;
use crate::attr::JobAttr;
use crate::errors::Errors;

/// Checks every rule that involves more than one key, or a key and the function.
pub fn check(attr: &JobAttr, job: &JobFn, errors: &mut Errors) {
    check_dedupe(attr, job, errors);
    check_backoff(attr, errors);
    check_heartbeat(attr, errors);
}

/// Checks the dedupe template against the function's data arguments.
fn check_dedupe(attr: &JobAttr, job: &JobFn, errors: &mut Errors) {
    let Some(template) = &attr.dedupe else { return };
    let text = template.value();
    let parts = match parse_template(&text) {
        Ok(parts) => parts,
        Err(error) => {
            errors.error(template, format!("invalid dedupe template: {error}"));
            return;
        }
    };
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
            errors.error(
                template,
                format!(
                    "dedupe placeholder `<{field}>` is not an argument of `{}`; {known}",
                    job.item.sig.ident
                ),
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
