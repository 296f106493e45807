use jobs::{job, JobKind, JobResult};

/// At most two charges per merchant at once, ten a second per merchant, and ten at once in all.
#[job(
    limit_key = "merchant:<merchant_id>",
    max_running_per_key = 2,
    rate_limit_per_key = "10/1s",
    max_running = 10
)]
async fn charge(merchant_id: i64, amount_cents: i64) -> JobResult {
    let _ = (merchant_id, amount_cents);
    Ok(())
}

fn main() {
    let options = <charge::Job as JobKind>::OPTIONS;
    assert_eq!(options.limit_key, Some("merchant:<merchant_id>"));
    assert_eq!(options.max_running_per_key, Some(2));
    assert_eq!(options.max_running, Some(10));
    assert_eq!(
        options.rate_limit_per_key,
        Some("10/1s".parse::<jobs::RateLimit>().unwrap())
    );
    let job = jobs::NewJob::of::<charge::Job>(&charge::Args {
        merchant_id: 7,
        amount_cents: 1_000,
    })
    .unwrap();
    assert_eq!(job.limit_key.as_deref(), Some("merchant:7"));
}
