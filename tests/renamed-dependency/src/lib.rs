//! A crate whose only dependency is `jobs`, renamed to `renamed_jobs`: every generated path must
//! reach serde, inventory and sqlx through the facade, under the name this crate gives it.

use renamed_jobs::{job, ClassifyError, ErrorClass, JobContext, JobResult, State};

/// Shared state for the jobs below.
pub struct Mailer;

/// Declared failure classes.
#[derive(Debug)]
pub struct Declined;

impl std::fmt::Display for Declined {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("declined")
    }
}

impl std::error::Error for Declined {}

#[renamed_jobs::error_class]
impl ClassifyError for Declined {
    fn class(&self) -> ErrorClass {
        ErrorClass::Permanent
    }
}

/// A job using every kind of parameter and several keys.
#[job(
    queue = "email",
    max_attempts = 3,
    dedupe = "welcome:<user_id>",
    timeout = "1m"
)]
pub async fn send_welcome(
    ctx: JobContext,
    mailer: State<Mailer>,
    user_id: i64,
    note: Option<String>,
) -> JobResult {
    let _ = (ctx, mailer, user_id, note);
    Ok(())
}

/// A scheduled job, one at a time across all workers.
#[job(
    cron = "0 3 * * *",
    timezone = "Europe/Paris",
    missed = "all",
    max_missed = 3,
    max_running = 1
)]
pub async fn nightly_digest(ctx: JobContext, mailer: State<Mailer>) -> JobResult {
    let _ = (ctx, mailer);
    Ok(())
}

/// A job on a fixed interval.
#[job(every = "10m")]
pub async fn refresh_rates() -> JobResult {
    Ok(())
}

/// A private job returning the application's own error type.
#[job]
async fn charge(amount_cents: i64) -> Result<(), Declined> {
    let _ = amount_cents;
    Err(Declined)
}

/// Exposes the private job's enqueue builder, to show it is usable within the crate.
pub fn charge_builder(amount_cents: i64) -> renamed_jobs::EnqueueBuilder {
    charge::builder(amount_cents)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_registered_under_their_names() {
        let registry = renamed_jobs::Registry::collect().unwrap();
        let welcome = registry.get("send_welcome").unwrap();
        assert_eq!(welcome.options.queue, "email");
        assert_eq!(welcome.options.retry.max_attempts, 3);
        assert_eq!(welcome.function, "renamed_dependency::send_welcome");
        assert!(registry.get("charge").is_some());
    }

    #[test]
    fn schedules_and_running_limits_reach_the_registry() {
        use renamed_jobs::{Cadence, MissedTicks, ScheduleOptions};
        let registry = renamed_jobs::Registry::collect().unwrap();
        let digest = registry.get("nightly_digest").unwrap();
        assert_eq!(
            digest.options.schedule,
            Some(ScheduleOptions {
                cadence: Cadence::Cron {
                    expression: "0 3 * * *",
                    timezone: "Europe/Paris",
                },
                missed: MissedTicks::All { max: 3 },
            })
        );
        assert_eq!(digest.options.max_running, Some(1));
        assert!(!digest.takes_arguments);
        let rates = registry.get("refresh_rates").unwrap();
        assert_eq!(
            rates.options.schedule,
            Some(ScheduleOptions {
                cadence: Cadence::Every(std::time::Duration::from_secs(600)),
                missed: MissedTicks::Latest,
            })
        );
        assert_eq!(rates.options.max_running, None);
    }

    #[test]
    fn the_payload_and_dedupe_key_come_from_the_arguments() {
        let job = send_welcome::builder(7, None).into_new_job().unwrap();
        assert_eq!(job.dedupe_key.as_deref(), Some("welcome:7"));
        assert_eq!(
            job.payload,
            renamed_jobs::__private::serde_json::json!({"user_id": 7, "note": null})
        );
        assert!(charge_builder(100).into_new_job().is_ok());
    }
}
