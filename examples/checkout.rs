//! Making jobs safe to run twice, in one checkout. Every job may run more than once (a retry
//! after a lost response, a crash before the outcome was written); this example shows the three
//! tools that make a second run harmless:
//!
//! 1. `charge_order` calls a payment provider with the job's stable idempotency key. The
//!    provider charges, but its response is lost; the retry sends the same key and the provider
//!    returns the first charge instead of charging again.
//! 2. The same job records the payment and enqueues the receipt in its own transaction, which
//!    also completes the job (transactional completion): "paid", "receipt to send" and "done"
//!    commit together or not at all.
//! 3. `send_receipt` talks to plain SMTP, which has no idempotency key. It records the email
//!    as sent (a processed key) only after sending: a failure in between makes it send again,
//!    with the same Message-ID so that mail clients show one message. That is the recommended
//!    trade: a rare duplicate rather than an email never sent.
//!
//! Run it with `cargo run --example checkout`. It uses the PostgreSQL at `DATABASE_URL`, else
//! the local one, in a scratch database it drops at the end.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use jobs::{
    is_processed, job, mark_processed, JobContext, JobContextExt, JobError, JobResult, State,
    Worker, WorkerConfig,
};
use sqlx::PgPool;

mod support;

/// A payment provider that honours idempotency keys, like most card APIs: a request with a
/// key it has seen returns the first answer. Its first response is lost on the way back.
#[derive(Default)]
struct PaymentProvider {
    charges: Mutex<HashMap<String, String>>,
    response_lost_once: AtomicBool,
}

#[derive(Debug, thiserror::Error)]
#[error("timed out waiting for the payment provider's response")]
struct ProviderTimeout;

impl PaymentProvider {
    fn charge(&self, idempotency_key: &str, amount_cents: i64) -> Result<String, ProviderTimeout> {
        let mut charges = self.charges.lock().expect("charges");
        if let Some(charge) = charges.get(idempotency_key) {
            println!(
                "  [provider] key {idempotency_key} seen before: returning {charge}, no new charge"
            );
            return Ok(charge.clone());
        }
        let charge = format!("ch_{}", charges.len() + 1);
        println!("  [provider] charged {amount_cents} cents as {charge} (key {idempotency_key})");
        charges.insert(idempotency_key.to_string(), charge.clone());
        if !self.response_lost_once.swap(true, Ordering::SeqCst) {
            return Err(ProviderTimeout);
        }
        Ok(charge)
    }

    fn charge_count(&self) -> usize {
        self.charges.lock().expect("charges").len()
    }
}

/// A plain SMTP server: no idempotency. Counts what it delivers.
#[derive(Default)]
struct Smtp {
    delivered: Mutex<Vec<String>>,
}

impl Smtp {
    fn send(&self, message_id: &str, to: &str, subject: &str) {
        println!("  [smtp] delivered \"{subject}\" to {to}, Message-ID <{message_id}>");
        self.delivered
            .lock()
            .expect("delivered")
            .push(message_id.to_string());
    }
}

/// Fails the first attempt to record a sent receipt, as a crash or a lost connection would.
#[derive(Default)]
struct RecordingHiccup {
    attempts: AtomicU32,
}

#[derive(Debug, thiserror::Error)]
#[error("connection reset while recording the receipt as sent")]
struct ConnectionReset;

/// Charges the order. The dedupe key makes a double-clicked checkout one job, and the
/// idempotency key (derived from it, the same on every attempt and after a replay) makes a
/// retried charge one charge.
#[job(
    max_attempts = 5,
    backoff_base = "300ms",
    backoff_max = "1s",
    dedupe = "charge:<order_id>"
)]
async fn charge_order(
    ctx: JobContext,
    provider: State<PaymentProvider>,
    db: State<PgPool>,
    order_id: i64,
) -> JobResult {
    println!(
        "  [worker] charge_order order={order_id} attempt {}",
        ctx.attempt()
    );
    let amount_cents: i64 =
        sqlx::query_scalar("SELECT amount_cents FROM demo_orders WHERE id = $1")
            .bind(order_id)
            .fetch_one(&*db)
            .await?;
    let charge = provider.charge(&ctx.idempotency_key(), amount_cents)?;
    // The payment, the receipt job and this job's completion commit together.
    let mut tx = ctx.transaction().await?;
    sqlx::query("UPDATE demo_orders SET status = 'paid', charge_id = $2 WHERE id = $1")
        .bind(order_id)
        .bind(&charge)
        .execute(&mut *tx)
        .await?;
    send_receipt::enqueue_in(&mut tx, order_id).await?;
    tx.complete().await?;
    Ok(())
}

/// Emails the receipt over plain SMTP: checks it was not sent already, sends, then records it
/// as sent in the transaction that completes the job.
#[job(max_attempts = 5, backoff_base = "300ms", backoff_max = "1s")]
async fn send_receipt(
    ctx: JobContext,
    smtp: State<Smtp>,
    hiccup: State<RecordingHiccup>,
    db: State<PgPool>,
    order_id: i64,
) -> JobResult {
    println!(
        "  [worker] send_receipt order={order_id} attempt {}",
        ctx.attempt()
    );
    let sent_key = format!("receipt-email:{order_id}");
    let mut connection = db.acquire().await?;
    if is_processed(&mut connection, &sent_key).await? {
        println!("  [worker] receipt for order {order_id} already sent; nothing to do");
        return Ok(());
    }
    drop(connection);
    let email: String = sqlx::query_scalar("SELECT email FROM demo_orders WHERE id = $1")
        .bind(order_id)
        .fetch_one(&*db)
        .await?;
    // The Message-ID is stable across attempts, so a duplicate shows as one message.
    let message_id = format!("{}@shop.example", ctx.idempotency_key());
    smtp.send(&message_id, &email, "Your receipt");
    // A failure from here on means the email went out but is not recorded: it will go again.
    if hiccup.attempts.fetch_add(1, Ordering::SeqCst) == 0 {
        return Err(JobError::transient(ConnectionReset));
    }
    let mut tx = ctx.transaction().await?;
    let keep_for = Duration::from_secs(30 * 86_400);
    let _ = mark_processed(&mut tx, &sent_key, Some(keep_for)).await?;
    tx.complete().await?;
    Ok(())
}

/// The checkout request: the order and its charge job in one transaction.
async fn checkout(
    pool: &PgPool,
    email: &str,
    amount_cents: i64,
) -> Result<i64, Box<dyn std::error::Error>> {
    let mut tx = pool.begin().await?;
    let order_id: i64 = sqlx::query_scalar(
        "INSERT INTO demo_orders (email, amount_cents) VALUES ($1, $2) RETURNING id",
    )
    .bind(email)
    .bind(amount_cents)
    .fetch_one(&mut *tx)
    .await?;
    charge_order::enqueue_in(&mut tx, order_id).await?;
    tx.commit().await?;
    Ok(order_id)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    support::init_logging();
    // Room for what the worker can use at once: one queue of 16 jobs at once, its producer and 7 connections for the
    // worker's own tasks (LISTEN, heartbeat, rescue, presence, outcomes, retention, gauges).
    let (_database, pool) = support::scratch_database(24).await?;
    jobs::migrate(&pool).await?;
    sqlx::query(
        "CREATE TABLE demo_orders (
             id bigserial PRIMARY KEY, email text NOT NULL, amount_cents bigint NOT NULL,
             status text NOT NULL DEFAULT 'new', charge_id text)",
    )
    .execute(&pool)
    .await?;

    println!("\n1. Checkout: the order and its charge job commit together");
    let order_id = checkout(&pool, "ada@example.com", 4_200).await?;
    let again = charge_order::enqueue(&pool, order_id).await?;
    println!(
        "  order {order_id} placed; a double-click enqueued its charge again: {}",
        if !again.is_new() {
            "the dedupe key made it the same job"
        } else {
            "a second job (unexpected)"
        }
    );

    println!("\n2. A worker runs the jobs");
    let provider = std::sync::Arc::new(PaymentProvider::default());
    let smtp = std::sync::Arc::new(Smtp::default());
    let worker = Worker::builder(pool.clone())
        .shared_state(std::sync::Arc::clone(&provider))
        .shared_state(std::sync::Arc::clone(&smtp))
        .state(RecordingHiccup::default())
        .state(pool.clone())
        .kinds(["charge_order", "send_receipt"])
        .config(WorkerConfig {
            poll_interval: Duration::from_millis(100),
            ..WorkerConfig::default()
        })
        .build()?
        .start();
    // The charge and the receipt it enqueued.
    support::wait_until_settled(&pool, 2).await?;
    worker.shutdown().await?;

    println!("\n3. Outcome");
    let (status, charge): (String, Option<String>) =
        sqlx::query_as("SELECT status, charge_id FROM demo_orders WHERE id = $1")
            .bind(order_id)
            .fetch_one(&pool)
            .await?;
    let jobs: Vec<(String, String, i32)> =
        sqlx::query_as("SELECT kind, state, attempts FROM jobs_queue ORDER BY id")
            .fetch_all(&pool)
            .await?;
    for (kind, state, attempts) in &jobs {
        println!("  job {kind:<13} {state}, {attempts} attempts");
    }
    println!(
        "  order {order_id}: {status}, charge {}",
        charge.as_deref().unwrap_or("none")
    );
    println!(
        "  charges at the provider: {} (two attempts, one idempotency key)",
        provider.charge_count()
    );
    let delivered = smtp.delivered.lock().expect("delivered").clone();
    let distinct: std::collections::BTreeSet<&String> = delivered.iter().collect();
    println!(
        "  receipt emails delivered: {} with {} Message-ID (recorded after sending: a failure in between sends again)",
        delivered.len(),
        distinct.len()
    );
    let all_done = jobs.iter().all(|(_, state, _)| state == "done");
    if provider.charge_count() != 1 || status != "paid" || !all_done || distinct.len() != 1 {
        return Err("the checkout did not end as described".into());
    }
    Ok(())
}
