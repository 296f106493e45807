//! The sign-up scenario: a request inserts a user and enqueues a welcome email and an avatar
//! resize in the same transaction, then returns. A worker does the rest: the mail server is down
//! for the first attempts (a simulated SMTP outage) so the email is retried with backoff until
//! it goes through; one avatar has an unsupported address and fails permanently, landing dead
//! with its error kept; and a sign-up that rolls back leaves no job behind.
//!
//! Run it with `cargo run --example signup`. It uses the PostgreSQL at `DATABASE_URL`, else the
//! local one, and works in a scratch database that it drops at the end.
//!
//! Its tests (`cargo test --example signup`) show how an application tests its jobs with
//! `jobs::testing`: what a sign-up enqueued, what each job decides when run inline, and how the
//! rows end when the due jobs are drained.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use jobs::{job, JobContext, JobError, JobResult, State, Worker, WorkerConfig};
use sqlx::{PgConnection, PgPool};

mod support;

/// A mail server that is down for its first `outage_attempts` calls.
struct FlakySmtp {
    outage_attempts: u32,
    calls: AtomicU32,
}

#[derive(Debug, thiserror::Error)]
#[error("SMTP server unavailable (421 service not available)")]
struct SmtpUnavailable;

impl FlakySmtp {
    fn send(&self, to: &str, subject: &str) -> Result<(), SmtpUnavailable> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        if call <= self.outage_attempts {
            return Err(SmtpUnavailable);
        }
        println!("  [smtp] sent \"{subject}\" to {to}");
        Ok(())
    }
}

/// Sends the welcome email. The payload is the user's id, not a copy of the user: the job reads
/// the current row when it runs.
#[job(
    queue = "email",
    max_attempts = 5,
    backoff_base = "500ms",
    backoff_max = "2s",
    dedupe = "welcome:<user_id>"
)]
async fn send_welcome_email(
    ctx: JobContext,
    smtp: State<FlakySmtp>,
    db: State<PgPool>,
    user_id: i64,
) -> JobResult {
    let email: Option<String> = sqlx::query_scalar("SELECT email FROM demo_users WHERE id = $1")
        .bind(user_id)
        .fetch_optional(&*db)
        .await?;
    let Some(email) = email else {
        return Err(JobError::permanent(format!(
            "user {user_id} does not exist"
        )));
    };
    println!(
        "  [worker] send_welcome_email user={user_id} attempt {}/{}",
        ctx.attempt(),
        ctx.max_attempts()
    );
    smtp.send(&email, "Welcome aboard")?;
    Ok(())
}

/// Resizes the user's avatar. Only http(s) addresses can be fetched: anything else is bad input
/// that no retry will fix, so it fails permanently.
#[job(queue = "media", max_attempts = 3, backoff_base = "500ms")]
async fn resize_avatar(ctx: JobContext, user_id: i64, avatar_url: String) -> JobResult {
    println!(
        "  [worker] resize_avatar user={user_id} attempt {}/{}",
        ctx.attempt(),
        ctx.max_attempts()
    );
    if !(avatar_url.starts_with("https://") || avatar_url.starts_with("http://")) {
        return Err(JobError::permanent(format!(
            "unsupported avatar address `{avatar_url}`: expected http(s)"
        )));
    }
    println!("  [media] resized {avatar_url} to 256x256 for user {user_id}");
    Ok(())
}

/// The request handler: one transaction for the user and both jobs.
async fn sign_up(
    pool: &PgPool,
    email: &str,
    avatar_url: &str,
) -> Result<i64, Box<dyn std::error::Error>> {
    let mut tx = pool.begin().await?;
    let user_id = insert_user(&mut tx, email).await?;
    send_welcome_email::enqueue_in(&mut tx, user_id).await?;
    resize_avatar::enqueue_in(&mut tx, user_id, avatar_url.to_string()).await?;
    tx.commit().await?;
    Ok(user_id)
}

/// The application's own table.
async fn create_users_table(pool: &PgPool) -> Result<(), sqlx::Error> {
    sqlx::query("CREATE TABLE demo_users (id bigserial PRIMARY KEY, email text NOT NULL UNIQUE)")
        .execute(pool)
        .await
        .map(drop)
}

async fn insert_user(conn: &mut PgConnection, email: &str) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("INSERT INTO demo_users (email) VALUES ($1) RETURNING id")
        .bind(email)
        .fetch_one(conn)
        .await
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    support::init_logging();
    // Room for what the worker can use at once: two queues of 16 jobs at once, a producer for each and 6 connections for
    // the worker's own tasks (LISTEN, heartbeat, rescue, outcomes, retention, gauges).
    let (_database, pool) = support::scratch_database(40).await?;
    jobs::migrate(&pool).await?;
    create_users_table(&pool).await?;

    println!("\n1. Requests: each signs a user up and enqueues two jobs in the same transaction");
    let ada = sign_up(&pool, "ada@example.com", "https://img.example.com/ada.png").await?;
    println!("  signed up ada   (user {ada})");
    let bob = sign_up(&pool, "bob@example.com", "ftp://files.example.com/bob.png").await?;
    println!("  signed up bob   (user {bob}); his avatar address is not http(s)");
    match sign_up(&pool, "ada@example.com", "https://img.example.com/ada2.png").await {
        Ok(_) => println!("  unexpected: the duplicate sign-up went through"),
        Err(error) => println!("  a second sign-up for ada@example.com rolled back ({error}); its jobs rolled back with it"),
    }
    let pending: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs_queue")
        .fetch_one(&pool)
        .await?;
    println!("  jobs recorded: {pending} (2 per committed sign-up, none for the rolled-back one)");

    println!("\n2. A worker runs them; the mail server is down for its first 4 calls");
    let smtp = FlakySmtp {
        outage_attempts: 4,
        calls: AtomicU32::new(0),
    };
    let worker = Worker::builder(pool.clone())
        .state(smtp)
        .state(pool.clone())
        .kinds(["send_welcome_email", "resize_avatar"])
        .config(WorkerConfig {
            poll_interval: Duration::from_millis(200),
            ..WorkerConfig::default()
        })
        .build()?
        .start();
    let started = Instant::now();
    support::wait_until_settled(&pool, pending).await?;
    worker.shutdown().await?;
    println!(
        "  all jobs settled in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    println!("\n3. Outcome");
    let rows: Vec<(i64, String, String, i32, serde_json::Value)> =
        sqlx::query_as("SELECT id, kind, state, attempts, errors FROM jobs_queue ORDER BY id")
            .fetch_all(&pool)
            .await?;
    println!(
        "  {:>3}  {:<20} {:<6} {:>8}  errors kept",
        "id", "kind", "state", "attempts"
    );
    for (id, kind, state, attempts, errors) in rows {
        let errors: Vec<String> = errors
            .as_array()
            .map(|list| {
                list.iter()
                    .map(|entry| {
                        format!(
                            "#{} {}: {}",
                            entry["attempt"],
                            entry["kind"].as_str().unwrap_or(""),
                            entry["error"].as_str().unwrap_or("")
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        println!(
            "  {id:>3}  {kind:<20} {state:<6} {attempts:>8}  {}",
            errors.join(" | ")
        );
    }
    println!("\nThe welcome emails were retried through the outage and delivered; bob's avatar job is dead");
    println!(
        "with its error kept, waiting for a human; the rolled-back sign-up left nothing behind."
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use jobs::postgres::testing::{
        assert_enqueued, assert_nothing_enqueued, drain, enqueued, run_job, TestDatabase,
    };
    use jobs::Decision;

    use super::*;

    /// A migrated scratch database with the application's table, and a pool on it.
    async fn database() -> (TestDatabase, PgPool) {
        let database = TestDatabase::migrated().await.expect("test database");
        let pool = database.pool(4).await.expect("pool");
        create_users_table(&pool).await.expect("users table");
        (database, pool)
    }

    #[tokio::test]
    async fn a_sign_up_enqueues_the_welcome_email_and_the_avatar_resize() {
        let (_database, pool) = database().await;
        let ada = sign_up(&pool, "ada@example.com", "https://img.example.com/ada.png")
            .await
            .expect("sign-up");
        let mut conn = pool.acquire().await.expect("connection");
        assert_enqueued::<send_welcome_email::Job>(
            &mut conn,
            &send_welcome_email::Args { user_id: ada },
        )
        .await;
        assert_enqueued::<resize_avatar::Job>(
            &mut conn,
            &resize_avatar::Args {
                user_id: ada,
                avatar_url: String::from("https://img.example.com/ada.png"),
            },
        )
        .await;

        // The same address again: the sign-up rolls back, its jobs with it.
        sign_up(&pool, "ada@example.com", "https://img.example.com/ada2.png")
            .await
            .expect_err("a duplicate address");
        let emails = enqueued::<send_welcome_email::Job>(&mut conn)
            .await
            .expect("enqueued emails");
        assert_eq!(emails.len(), 1);
        assert_eq!(
            enqueued::<resize_avatar::Job>(&mut conn)
                .await
                .unwrap()
                .len(),
            1
        );
    }

    #[tokio::test]
    async fn the_welcome_email_is_retried_through_an_outage_and_dropped_for_a_missing_user() {
        let (_database, pool) = database().await;
        let mut conn = pool.acquire().await.expect("connection");
        let ada = insert_user(&mut conn, "ada@example.com")
            .await
            .expect("user");
        let smtp = Arc::new(FlakySmtp {
            outage_attempts: 1,
            calls: AtomicU32::new(0),
        });
        let send = |user_id, attempt| {
            run_job::<send_welcome_email::Job>(send_welcome_email::Args { user_id })
                .shared_state(Arc::clone(&smtp))
                .state(pool.clone())
                .attempt(attempt)
                .run()
        };
        // The outage: the first of 5 attempts waits the kind's base backoff, 500 ms.
        assert!(matches!(
            send(ada, 1).await.unwrap(),
            Decision::Retry { delay, error }
                if delay == Duration::from_millis(500) && error.kind == "transient"
        ));
        assert_eq!(
            send(ada, 2).await.unwrap(),
            Decision::Complete { output: None }
        );
        assert!(matches!(
            send(ada + 1, 1).await.unwrap(),
            Decision::Dead { error } if error.kind == "permanent"
        ));
    }

    #[tokio::test]
    async fn drained_sign_ups_end_with_the_emails_sent_and_the_unfetchable_avatar_dead() {
        let (_database, pool) = database().await;
        let ada = sign_up(&pool, "ada@example.com", "https://img.example.com/ada.png")
            .await
            .expect("sign-up");
        let bob = sign_up(&pool, "bob@example.com", "ftp://files.example.com/bob.png")
            .await
            .expect("sign-up");
        let smtp = FlakySmtp {
            outage_attempts: 0,
            calls: AtomicU32::new(0),
        };
        let runs = drain(&pool)
            .kind::<send_welcome_email::Job>()
            .kind::<resize_avatar::Job>()
            .state(smtp)
            .state(pool.clone())
            .run()
            .await
            .expect("drain");
        assert_eq!(runs.len(), 4, "{runs:?}");
        let dead: Vec<_> = runs
            .iter()
            .filter(|run| matches!(run.decision, Decision::Dead { .. }))
            .collect();
        assert_eq!(dead.len(), 1, "{runs:?}");
        assert_eq!(dead[0].kind, "resize_avatar");
        assert!(runs
            .iter()
            .filter(|run| run.id != dead[0].id)
            .all(|run| run.decision == Decision::Complete { output: None }));

        // The rows say the same, and nothing waits any more.
        let states: Vec<(String, String)> =
            sqlx::query_as("SELECT kind, state FROM jobs_queue ORDER BY id")
                .fetch_all(&pool)
                .await
                .expect("rows");
        let expected = [
            ("send_welcome_email", "done"),
            ("resize_avatar", "done"),
            ("send_welcome_email", "done"),
            ("resize_avatar", "dead"),
        ];
        let states: Vec<(&str, &str)> = states
            .iter()
            .map(|(kind, state)| (kind.as_str(), state.as_str()))
            .collect();
        assert_eq!(states, expected, "users {ada} and {bob}");
        assert_nothing_enqueued(&mut pool.acquire().await.expect("connection")).await;
    }

    #[tokio::test]
    async fn an_avatar_that_cannot_be_fetched_is_dead_at_once() {
        let resize = |url: &str| {
            run_job::<resize_avatar::Job>(resize_avatar::Args {
                user_id: 1,
                avatar_url: url.to_owned(),
            })
            .run()
        };
        assert_eq!(
            resize("https://img.example.com/ada.png").await.unwrap(),
            Decision::Complete { output: None }
        );
        assert_eq!(
            resize("ftp://files.example.com/bob.png").await.unwrap(),
            Decision::Dead {
                error: jobs::AttemptError {
                    kind: "permanent",
                    message: String::from(
                        "unsupported avatar address `ftp://files.example.com/bob.png`: expected http(s)"
                    ),
                },
            }
        );
    }
}
