//! What limits and fairness cost, and whether a rate limit delivers its rate: a drain of a kind
//! whose running limit, rate limit or per-key limit (over 1,000 keys) is never reached, and of a
//! kind claimed round-robin across 1,000 tenants, each against the same drain without them, in
//! the same run; and a backlog of a kind held by a rate limit, whose starts per second (from the
//! rows' start times, window to window) are compared with the limit.

use std::time::Duration;

use jobs::{RateLimit, Worker, WorkerBuilder};

use crate::measure::{timed_drain, timed_noop_drain, Backlog, Fresh};
use crate::options::Options;
use crate::report::Report;

/// The rate the held kind is limited to, in jobs per second: well below what the machine
/// drains, so that the limit is what holds it.
const HELD_RATE: u32 = 2_000;
/// Seconds of backlog the held kind starts with.
const HELD_SECONDS: u32 = 5;
/// The slots of the worker held by the rate limit.
const HELD_CONCURRENCY: usize = 16;
/// The tenants the fair drain's jobs take turns between.
const TENANTS: u32 = 1_000;

/// A drain's limits.
#[derive(Clone, Copy)]
enum Limits {
    /// None.
    Unlimited,
    /// A running limit equal to the worker's slots: counted at every claim, never reached.
    RunningNeverReached,
    /// A rate limit far above what the machine drains: recorded at every claim, never reached.
    RateNeverReached,
    /// A rate limit of [`HELD_RATE`] jobs a second.
    Held,
    /// No limit, but a fairness key: jobs of [`TENANTS`] tenants, claimed round-robin.
    FairShare,
    /// A per-key limit of 16 running, which a drain at concurrency 16 never reaches: jobs of
    /// [`TENANTS`] merchants.
    PerKeyNeverReached,
}

impl Limits {
    /// How the progress lines name it.
    fn name(self) -> &'static str {
        match self {
            Limits::Unlimited => "no limit",
            Limits::RunningNeverReached => "running limit never reached",
            Limits::RateNeverReached => "rate limit never reached",
            Limits::Held => "held by a rate limit",
            Limits::FairShare => "fair share between 1,000 tenants",
            Limits::PerKeyNeverReached => "per-key limit never reached, 1,000 keys",
        }
    }
}

pub async fn run(options: &Options, report: &mut Report) -> Result<(), Box<dyn std::error::Error>> {
    for &concurrency in &options.drain_concurrency {
        drains(options, report, concurrency).await?;
    }
    held(options, report, HELD_CONCURRENCY).await
}

/// The drains with and without limits at `concurrency`, sides rotated between runs.
async fn drains(
    options: &Options,
    report: &mut Report,
    concurrency: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut rates = [Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new()];
    for run in 0..options.runs {
        let fresh = Fresh::new(concurrency as u32 + 9).await?;
        let mut sides = [
            (0, Limits::Unlimited),
            (1, Limits::RunningNeverReached),
            (2, Limits::RateNeverReached),
            (3, Limits::FairShare),
            (4, Limits::PerKeyNeverReached),
        ];
        sides.rotate_left(run % 5);
        for (slot, limits) in sides {
            let rate = drain_rate(&fresh, options.drain_jobs, concurrency, limits).await?;
            eprintln!("  C={concurrency}, {}: {rate:.0} jobs/s", limits.name());
            rates[slot].push(rate);
        }
    }
    let [unlimited, running, rate, fair, per_key] = &rates;
    // #17 set a target for the fair and per-key drains only: the kind-wide limits' claims take
    // no job ahead of the free slots, by design, and are shown.
    for (name, limited, target) in [
        ("running limit never reached", running, "(shown)"),
        ("rate limit never reached", rate, "(shown)"),
        (
            &format!("fair share between {TENANTS} tenants") as &str,
            fair,
            ">= 0.8 (#17)",
        ),
        (
            &format!("per-key limit never reached over {TENANTS} keys"),
            per_key,
            ">= 0.8 (#17)",
        ),
    ] {
        report.ratio(
            &format!("drain C={concurrency}, {name} / none"),
            limited,
            unlimited,
            "jobs/s",
            target,
        );
    }
    Ok(())
}

/// The starts per second of a kind held by a rate limit, against the limit.
async fn held(
    options: &Options,
    report: &mut Report,
    concurrency: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut held = Vec::new();
    for _ in 0..options.runs {
        let fresh = Fresh::new(concurrency as u32 + 9).await?;
        held.push(held_rate(&fresh, concurrency).await?);
    }
    let limit = vec![f64::from(HELD_RATE); held.len()];
    let windows: Vec<f64> = held.iter().map(|rate| rate.windows).collect();
    let first_to_last: Vec<f64> = held.iter().map(|rate| rate.first_to_last).collect();
    report.ratio(
        &format!("kind held by a rate limit of {HELD_RATE}/1s: started / limit, window to window"),
        &windows,
        &limit,
        "jobs/s",
        "0.95 to 1.0 (#17)",
    );
    report.ratio(
        "same, first start to last (with the last window's share at the worker's speed)",
        &first_to_last,
        &limit,
        "jobs/s",
        "(shown)",
    );
    Ok(())
}

/// A worker of `noop` (`fair_noop` for [`Limits::FairShare`], `keyed_noop` for
/// [`Limits::PerKeyNeverReached`]) at `concurrency` with `limits`.
fn worker(fresh: &Fresh, concurrency: usize, limits: Limits) -> WorkerBuilder {
    let kind = match limits {
        Limits::FairShare => "fair_noop",
        Limits::PerKeyNeverReached => "keyed_noop",
        _ => "noop",
    };
    let builder = Worker::builder(fresh.pool.clone())
        .kinds([kind])
        .queue("default", concurrency);
    match limits {
        Limits::Unlimited | Limits::FairShare | Limits::PerKeyNeverReached => builder,
        Limits::RunningNeverReached => builder.max_running("noop", concurrency as u32),
        Limits::RateNeverReached => builder.rate_limit(
            "noop",
            RateLimit::new(100_000_000, Duration::from_secs(1)).expect("a valid limit"),
        ),
        Limits::Held => builder.rate_limit(
            "noop",
            RateLimit::new(HELD_RATE, Duration::from_secs(1)).expect("a valid limit"),
        ),
    }
}

/// How fast a worker with `limits` drains `jobs` ready no-ops.
async fn drain_rate(
    fresh: &Fresh,
    jobs: usize,
    concurrency: usize,
    limits: Limits,
) -> Result<f64, Box<dyn std::error::Error>> {
    let backlog = match limits {
        Limits::FairShare => Backlog::Fair(TENANTS),
        Limits::PerKeyNeverReached => Backlog::Keyed(TENANTS),
        _ => Backlog::Noops,
    };
    timed_drain(fresh, "jobs_queue, jobs_rate_limits", jobs, backlog, || {
        Ok(worker(fresh, concurrency, limits).build()?.start())
    })
    .await
}

/// The jobs a kind held by a rate limit started per second, from the rows' start times.
struct HeldRate {
    /// Window to window: the jobs started before the first job of the last window's share, over
    /// the time from the first start to that one. A limit of N jobs a second lets job k·N + 1
    /// start k seconds after the first at the earliest; this is how closely the claims follow.
    windows: f64,
    /// From the first start to the last, for the same jobs: this also counts the time the last
    /// window's share took to run, which the worker's speed sets, not the limit.
    first_to_last: f64,
}

/// Lets a worker held by the rate limit drain [`HELD_SECONDS`] of its rate, and returns the jobs
/// it started per second after the first window.
async fn held_rate(
    fresh: &Fresh,
    concurrency: usize,
) -> Result<HeldRate, Box<dyn std::error::Error>> {
    let jobs = (HELD_RATE * HELD_SECONDS) as usize;
    timed_noop_drain(fresh, "jobs_queue, jobs_rate_limits", jobs, || {
        Ok(worker(fresh, concurrency, Limits::Held).build()?.start())
    })
    .await?;
    let after_first_window = HELD_RATE * (HELD_SECONDS - 1);
    let (to_last_share, to_last): (f64, f64) = sqlx::query_as(
        "SELECT extract(epoch FROM (SELECT attempted_at FROM jobs_queue
                                    ORDER BY attempted_at, id OFFSET $1 LIMIT 1)
                                   - min(attempted_at))::float8,
                extract(epoch FROM max(attempted_at) - min(attempted_at))::float8
         FROM jobs_queue",
    )
    .bind(i64::from(after_first_window))
    .fetch_one(&fresh.pool)
    .await?;
    Ok(HeldRate {
        windows: f64::from(after_first_window) / to_last_share,
        first_to_last: f64::from(after_first_window) / to_last,
    })
}
