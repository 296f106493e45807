//! A workflow in one transaction: fan out, fan in, then chain. An album's photos are resized by
//! one `resize` job each, enqueued as a batch; the batch's callback `build_album` runs once
//! every resize has ended, reads how they went (`Batch::outcome`) and builds the album from the
//! thumbnails that exist; `notify_owner` runs after `build_album`, enqueued with
//! `.after([Dependency::on_job(callback)])`.
//!
//! One photo is corrupt: its resize fails for good (it ends dead). The batch still ends, the
//! album is built without it, and the owner is told which photo is missing.
//!
//! Run it with `cargo run --example album`. It uses the PostgreSQL at `DATABASE_URL`, else the
//! local one, in a scratch database it drops at the end.

use std::time::Duration;

use jobs::{job, Batch, Dependency, JobContext, JobError, JobResult, State, Worker, WorkerConfig};
use sqlx::PgPool;

mod support;

const PHOTOS: [&str; 6] = [
    "beach.jpg",
    "cliffs.jpg",
    "corrupt.jpg",
    "harbour.jpg",
    "lighthouse.jpg",
    "sunset.jpg",
];

/// Makes the thumbnail of one photo (here: records its name); a corrupt photo fails for good.
#[job(max_attempts = 3, backoff_base = "100ms")]
async fn resize(ctx: JobContext, db: State<PgPool>, album_id: i64, photo_id: i64) -> JobResult {
    let name: String = sqlx::query_scalar("SELECT name FROM demo_photos WHERE id = $1")
        .bind(photo_id)
        .fetch_one(&*db)
        .await?;
    if name.starts_with("corrupt") {
        println!("  [worker] resize {name}: not an image, giving up");
        return Err(JobError::permanent(format!("{name} is not an image")));
    }
    sqlx::query("UPDATE demo_photos SET thumbnail = $2 WHERE id = $1")
        .bind(photo_id)
        .bind(format!("thumbs/{album_id}/{name}"))
        .execute(&*db)
        .await?;
    println!(
        "  [worker] resize {name} (job {}, album {album_id})",
        ctx.id()
    );
    Ok(())
}

/// The batch's callback: runs once, after every resize has ended, and builds the album from
/// the photos that have a thumbnail.
#[job(max_attempts = 3, backoff_base = "100ms")]
async fn build_album(ctx: JobContext, db: State<PgPool>, album_id: i64) -> JobResult {
    let outcome = Batch::outcome(&ctx).await.map_err(JobError::transient)?;
    println!(
        "  [worker] build_album {album_id}: {} resizes ended ({} done, {} dead, {} cancelled)",
        outcome.members(),
        outcome.done,
        outcome.dead,
        outcome.cancelled
    );
    let pages = sqlx::query(
        "UPDATE demo_albums
         SET pages = (SELECT count(*) FROM demo_photos
                      WHERE album_id = $1 AND thumbnail IS NOT NULL),
             missing = $2
         WHERE id = $1",
    )
    .bind(album_id)
    .bind(i64::try_from(outcome.dead + outcome.cancelled).unwrap_or(i64::MAX))
    .execute(&*db)
    .await?;
    if pages.rows_affected() != 1 {
        return Err(JobError::permanent(format!("no album {album_id}")));
    }
    Ok(())
}

/// Tells the album's owner that it is ready: runs after `build_album`.
#[job(max_attempts = 3, backoff_base = "100ms")]
async fn notify_owner(db: State<PgPool>, album_id: i64) -> JobResult {
    let (owner, pages, missing): (String, i64, i64) =
        sqlx::query_as("SELECT owner, pages, missing FROM demo_albums WHERE id = $1")
            .bind(album_id)
            .fetch_one(&*db)
            .await?;
    println!(
        "  [worker] notify_owner: emailed {owner}: \"your album is ready: {pages} photos, \
         {missing} could not be used\""
    );
    sqlx::query("UPDATE demo_albums SET notified = notified + 1 WHERE id = $1")
        .bind(album_id)
        .execute(&*db)
        .await?;
    Ok(())
}

/// The upload request: the album, its photos, the resizes as one batch with `build_album` as
/// its callback, and `notify_owner` after that callback, all in one transaction.
async fn upload_album(pool: &PgPool, owner: &str) -> Result<i64, Box<dyn std::error::Error>> {
    let mut tx = pool.begin().await?;
    let album_id: i64 =
        sqlx::query_scalar("INSERT INTO demo_albums (owner) VALUES ($1) RETURNING id")
            .bind(owner)
            .fetch_one(&mut *tx)
            .await?;
    let photo_ids: Vec<i64> = sqlx::query_scalar(
        "INSERT INTO demo_photos (album_id, name) SELECT $1, unnest($2::text[]) RETURNING id",
    )
    .bind(album_id)
    .bind(PHOTOS)
    .fetch_all(&mut *tx)
    .await?;
    // Fan out, fan in: one resize per photo, and build_album once they have all ended.
    let batch = Batch::new()
        .then(build_album::builder(album_id))
        .enqueue_in(
            &mut tx,
            photo_ids
                .iter()
                .map(|photo_id| resize::builder(album_id, *photo_id)),
        )
        .await?;
    let build = batch.callback.ok_or("the batch has a callback")?;
    // Chain: the notification waits for the album build (and is cancelled if it fails).
    notify_owner::builder(album_id)
        .after([Dependency::on_job(build)])
        .enqueue_in(&mut tx)
        .await?;
    tx.commit().await?;
    println!(
        "  album {album_id}: batch {} of {} resizes, callback build_album (job {build}), \
         notify_owner after it",
        batch.id,
        batch.members.len()
    );
    Ok(album_id)
}

/// Each job's kind and state, in id order, with a count per (kind, state).
async fn job_states(pool: &PgPool) -> Result<Vec<(String, String, i64)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT kind, state, count(*) FROM jobs_queue GROUP BY kind, state ORDER BY min(id)",
    )
    .fetch_all(pool)
    .await
}

async fn print_states(pool: &PgPool) -> Result<(), sqlx::Error> {
    for (kind, state, count) in job_states(pool).await? {
        println!("  {count} x {kind:<12} {state}");
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    support::init_logging();
    // Room for what the worker can use at once: one queue of 16 jobs at once, its producer and
    // 7 connections for the worker's own tasks.
    let (_database, pool) = support::scratch_database(24).await?;
    jobs::migrate(&pool).await?;
    sqlx::raw_sql(
        "CREATE TABLE demo_albums (
             id bigserial PRIMARY KEY, owner text NOT NULL,
             pages bigint NOT NULL DEFAULT 0, missing bigint NOT NULL DEFAULT 0,
             notified integer NOT NULL DEFAULT 0);
         CREATE TABLE demo_photos (
             id bigserial PRIMARY KEY, album_id bigint NOT NULL, name text NOT NULL,
             thumbnail text)",
    )
    .execute(&pool)
    .await?;

    println!("\n1. Upload: the album, its resizes as a batch, the build and the notification");
    let album_id = upload_album(&pool, "ada@example.com").await?;
    print_states(&pool).await?;

    println!("\n2. A worker runs them: resizes first, build_album once, then notify_owner");
    let worker = Worker::builder(pool.clone())
        .state(pool.clone())
        .kinds(["resize", "build_album", "notify_owner"])
        .config(WorkerConfig {
            poll_interval: Duration::from_millis(100),
            ..WorkerConfig::default()
        })
        .build()?
        .start();
    // The resizes, the build and the notification: none ready or running any more.
    support::wait_until_settled(&pool, PHOTOS.len() as i64 + 2).await?;
    worker.shutdown().await?;

    println!("\n3. Outcome");
    print_states(&pool).await?;
    let (pages, missing, notified): (i64, i64, i32) =
        sqlx::query_as("SELECT pages, missing, notified FROM demo_albums WHERE id = $1")
            .bind(album_id)
            .fetch_one(&pool)
            .await?;
    println!(
        "  album {album_id}: {pages} photos, {missing} missing, owner notified {notified} time(s)"
    );
    let states = job_states(&pool).await?;
    let count_of = |kind: &str, state: &str| {
        states
            .iter()
            .find(|(k, s, _)| k == kind && s == state)
            .map_or(0, |(_, _, count)| *count)
    };
    let expected = count_of("resize", "done") == PHOTOS.len() as i64 - 1
        && count_of("resize", "dead") == 1
        && count_of("build_album", "done") == 1
        && count_of("notify_owner", "done") == 1
        && (pages, missing, notified) == (PHOTOS.len() as i64 - 1, 1, 1);
    if !expected {
        return Err("the album workflow did not end as described".into());
    }
    Ok(())
}
