//! The worker's metrics, exposed to Prometheus with `metrics-exporter-prometheus`.
//!
//! A worker drains a small batch of jobs: thumbnails that succeed, invoices whose mail server
//! fails their first two attempts (retried with backoff), and a charge on a declined card that
//! fails for good (dead). Meanwhile the metrics are served at `http://127.0.0.1:9000/metrics`
//! (set `METRICS_ADDR` to listen elsewhere); once every job has settled and the worker has
//! published the settled health gauges, the example prints what a scrape returns and exits.
//! Pass `--serve` to keep serving (and running the worker) until ctrl-c.
//!
//! Run it with `cargo run --example prometheus`. Like the signup example, it uses the
//! PostgreSQL at `DATABASE_URL`, else the local one, and works in a scratch database that it
//! drops at the end.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use jobs::metrics as names;
use jobs::{job, JobContext, JobError, JobResult, Worker, WorkerConfig};
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};
use sqlx::PgPool;

mod support;

/// Renders a thumbnail: always works, in a few milliseconds.
#[job(queue = "media")]
async fn render_thumbnail(image_id: i64) -> JobResult {
    let millis = 5 + 5 * image_id.rem_euclid(4).unsigned_abs();
    tokio::time::sleep(Duration::from_millis(millis)).await;
    Ok(())
}

/// Mails an invoice; the mail server refuses the first two attempts of each.
#[job(
    queue = "email",
    max_attempts = 5,
    backoff_base = "100ms",
    backoff_max = "400ms"
)]
async fn send_invoice(ctx: JobContext, invoice_id: i64) -> JobResult {
    if ctx.attempt() <= 2 {
        return Err(JobError::transient(format!(
            "mail server busy (451) while sending invoice {invoice_id}"
        )));
    }
    Ok(())
}

/// Charges a card; the one ending in 0002 is declined, which no retry fixes.
#[job(queue = "billing", max_attempts = 3)]
async fn charge_card(card_last4: String, amount_cents: i64) -> JobResult {
    if card_last4 == "0002" {
        return Err(JobError::permanent(format!(
            "card declined for {amount_cents} cents"
        )));
    }
    Ok(())
}

/// Bucket bounds, in seconds, for the two histograms.
const RUN_BUCKETS: &[f64] = &[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0];
const PICKUP_BUCKETS: &[f64] = &[0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 60.0, 300.0];

/// The exporter's settings: real histograms (with buckets) for run time and pickup latency.
fn exporter() -> Result<PrometheusBuilder, BuildError> {
    PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Full(names::RUN_SECONDS.into()), RUN_BUCKETS)?
        .set_buckets_for_metric(
            Matcher::Full(names::PICKUP_LATENCY_SECONDS.into()),
            PICKUP_BUCKETS,
        )
}

/// Installs the Prometheus recorder, serving `/metrics` on `address` when it can be bound.
fn install(address: SocketAddr) -> Result<PrometheusHandle, Box<dyn std::error::Error>> {
    let recorder = match exporter()?.with_http_listener(address).build() {
        Ok((recorder, serve)) => {
            tokio::spawn(serve);
            println!("Serving the metrics at http://{address}/metrics");
            recorder
        }
        Err(error) => {
            println!(
                "Cannot listen on {address} ({error}); the metrics are printed at the end only"
            );
            exporter()?.build_recorder()
        }
    };
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder)?;
    // Units and help texts; the worker also does this when it starts.
    jobs::metrics::describe();
    Ok(handle)
}

/// Enqueues the batch: 12 thumbnails, 3 invoices and 2 charges.
async fn enqueue_work(pool: &PgPool) -> Result<(), jobs::EnqueueError> {
    for image_id in 1..=12 {
        render_thumbnail::enqueue(pool, image_id).await?;
    }
    for invoice_id in 1..=3 {
        send_invoice::enqueue(pool, invoice_id).await?;
    }
    charge_card::enqueue(pool, "4242".into(), 1999).await?;
    charge_card::enqueue(pool, "0002".into(), 4999).await?;
    Ok(())
}

/// Whether a scrape shows what the settled jobs leave: none ready, scheduled or running, and
/// the declined charge dead.
fn gauges_settled(scrape: &str) -> bool {
    let live = [names::READY, names::SCHEDULED, names::RUNNING];
    let values = |name: &'static str| {
        scrape
            .lines()
            .filter(move |line| {
                line.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with('{'))
            })
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
    };
    live.iter()
        .all(|name| values(name).all(|value| value == 0.0))
        && values(names::DEAD).sum::<f64>() == 1.0
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    support::init_logging();
    let serve = std::env::args()
        .skip(1)
        .any(|argument| argument == "--serve");
    let address: SocketAddr = std::env::var("METRICS_ADDR")
        .unwrap_or_else(|_| String::from("127.0.0.1:9000"))
        .parse()?;
    let metrics = install(address)?;

    // Room for what the worker can use at once: three queues of 16 jobs at once, a producer for each and 6 connections
    // for the worker's own tasks (LISTEN, heartbeat, rescue, outcomes, retention, gauges).
    let (_database, pool) = support::scratch_database(57).await?;
    jobs::migrate(&pool).await?;
    enqueue_work(&pool).await?;
    println!(
        "Enqueued 12 thumbnails, 3 invoices (each failing twice) and 2 charges (one declined)"
    );

    let worker = Worker::builder(pool.clone())
        .kinds(["render_thumbnail", "send_invoice", "charge_card"])
        .config(WorkerConfig {
            poll_interval: Duration::from_millis(100),
            // Every worker publishes the health gauges, by default every 15 s.
            gauges_interval: Some(Duration::from_millis(200)),
            ..WorkerConfig::default()
        })
        .build()?
        .start();
    let started = Instant::now();
    let deadline = started + Duration::from_secs(60);
    support::wait_until_settled(&pool, 17).await?;
    println!(
        "All jobs settled in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    while !gauges_settled(&metrics.render()) {
        if Instant::now() > deadline {
            return Err("the gauges did not show the settled jobs within 60 s".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    if serve {
        println!("Serving until ctrl-c; try `curl -s http://{address}/metrics`");
        jobs::shutdown_signal().await;
        worker.shutdown().await?;
        return Ok(());
    }
    worker.shutdown().await?;
    println!("\nWhat a scrape of /metrics returns now:\n");
    println!("{}", metrics.render());
    Ok(())
}
