//! A worker that hands back jobs it claimed ahead of its slots (they waited too long behind runs
//! that turned long) gives their keys their turns first: its next round of a fair kind goes on
//! after the key of the last job that started, whichever way it writes outcomes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use jobs::{job, Completion, JobContext, JobResult, State, WorkerConfig};
use sqlx::PgPool;

use crate::support::{fast_config, start_worker, Db};
use crate::test_jobs::released;

/// The tenants, in key order: the ring a fair claim walks.
const TENANTS: [&str; 5] = ["a", "b", "c", "d", "e"];

/// Whether the runs of [`tenant_held`] that start from now on wait for their release.
static HOLDING: AtomicBool = AtomicBool::new(false);

/// A run of [`tenant_held`] that waited for its release: its job id, tenant, and place among
/// its tenant's jobs.
type HeldRun = (i64, String, u32);

/// The runs of [`tenant_held`] that waited for their release since the test last cleared it.
static HELD: Mutex<Vec<HeldRun>> = Mutex::new(Vec::new());

/// Returns at once, or, when [`HOLDING`] is set as it starts, once the test inserts its id into
/// `releases`: a run that turns long when the test says so. Its jobs are claimed round-robin
/// across tenants.
#[job(fair_key = "<tenant>")]
pub async fn tenant_held(
    ctx: JobContext,
    pool: State<PgPool>,
    tenant: String,
    n: u32,
) -> JobResult {
    if !HOLDING.load(Ordering::SeqCst) {
        return Ok(());
    }
    HELD.lock()
        .expect("no run panicked holding it")
        .push((ctx.id(), tenant, n));
    released(&pool, &ctx).await?;
    Ok(())
}

/// The runs held so far, once there are at least `count`; panics after 30 s.
async fn wait_for_held(count: usize) -> Vec<HeldRun> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let held = HELD.lock().unwrap().clone();
        if held.len() >= count {
            return held;
        }
        assert!(
            Instant::now() < deadline,
            "waited 30 s for {count} held runs, saw {held:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The place of tenant `tenant` in [`TENANTS`].
fn place_of(tenant: &str) -> usize {
    TENANTS
        .iter()
        .position(|known| *known == tenant)
        .unwrap_or_else(|| panic!("unknown tenant {tenant}"))
}

/// Of two runs held in the two slots, in no known order, the place in [`TENANTS`] of the tenant
/// of the one that started last in claim order, when the two runs tell. The claims take the
/// tenants' jobs turn by turn (every tenant's n-th job, then every tenant's next), so of two runs
/// whose places among their tenants' jobs are two or more apart, the further one started last:
/// a run whose task started late on a busy machine can be held after runs claimed after it
/// ended. Otherwise the two started one right after the other in turn order, or with one run
/// between them that ended before the hold began, and the later one is the fewer steps ahead
/// around the ring; but when that one is a place behind the other among its tenant's jobs, the
/// other may as well have been claimed three runs after it (the tenant a turn ahead, the runs
/// between ended, its own task started late), and the runs do not tell: `None`.
fn last_started(first: &HeldRun, second: &HeldRun) -> Option<usize> {
    if first.2.abs_diff(second.2) >= 2 {
        let later = if first.2 > second.2 { first } else { second };
        return Some(place_of(&later.1));
    }
    let ahead = (place_of(&second.1) + TENANTS.len() - place_of(&first.1)) % TENANTS.len();
    let (earlier, later) = if ahead <= TENANTS.len() / 2 {
        (first, second)
    } else {
        (second, first)
    };
    (later.2 >= earlier.2).then(|| place_of(&later.1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_keys_of_jobs_handed_back_get_their_turns_first() {
    for completion in [Completion::Batched { max_batch: 500 }, Completion::PerJob] {
        let db = Db::new().await;
        db.create_releases().await;
        for tenant in TENANTS {
            let args = (0..2_000).map(|n| tenant_held::Args {
                tenant: tenant.to_owned(),
                n,
            });
            tenant_held::enqueue_many(&db.pool, args).await.unwrap();
        }
        HOLDING.store(false, Ordering::SeqCst);
        let config = WorkerConfig {
            default_concurrency: 2,
            // Every slot frees within the window while runs are short: claims go ahead.
            claim_batch_window: Duration::from_millis(100),
            completion,
            ..fast_config()
        };
        let worker = start_worker(&db.pool, &["tenant_held"], config);
        let mut checked = 0;
        for round in 1..=6 {
            db.wait_for_count_at_least(
                "the backlog under way",
                "SELECT count(*) FROM jobs_queue WHERE state = 'done'",
                round * 400,
            )
            .await;
            let held_from: f64 = sqlx::query_scalar(
                "SELECT extract(epoch FROM clock_timestamp() - interval '1 second')::float8",
            )
            .fetch_one(&db.pool)
            .await
            .unwrap();
            HELD.lock().unwrap().clear();
            HOLDING.store(true, Ordering::SeqCst);
            // Held runs take both slots; the jobs claimed ahead behind them go back.
            let held = wait_for_held(2).await;
            db.wait_for_count(
                "nothing running but the two held runs",
                "SELECT count(*) FROM jobs_queue WHERE state = 'running'",
                2,
            )
            .await;
            assert_eq!(held.len(), 2, "{held:?}");
            let handed_back = db
                .count(&format!(
                    "SELECT count(*) FROM jobs_queue
                     WHERE state = 'ready' AND attempted_at > to_timestamp({held_from})"
                ))
                .await;
            let last = last_started(&held[0], &held[1]);
            if let (true, Some(last)) = (handed_back > 0, last) {
                // One slot frees: the next claim takes one job, the first of the next round.
                db.release(held[0].0).await;
                // The job the next claim took, and its tenant (the key is the tenant as JSON).
                let next_query = format!(
                    "SELECT id, fair_key::jsonb #>> '{{}}' FROM jobs_queue
                     WHERE state = 'running' AND id NOT IN ({}, {})",
                    held[0].0, held[1].0
                );
                db.wait_for_count(
                    "the next round's first job claimed",
                    &format!("SELECT count(*) FROM ({next_query}) AS next"),
                    1,
                )
                .await;
                let next: (i64, String) = db.rows(&next_query).await.remove(0);
                let expected = (last + 1) % TENANTS.len();
                assert_eq!(
                    place_of(&next.1),
                    expected,
                    "{completion:?}, round {round}: held {held:?}, {handed_back} handed back, \
                     next {next:?}"
                );
                checked += 1;
            }
            HOLDING.store(false, Ordering::SeqCst);
            let blocked: Vec<i64> = HELD.lock().unwrap().iter().map(|(id, ..)| *id).collect();
            db.execute(&format!(
                "INSERT INTO releases (job_id) SELECT unnest(ARRAY{blocked:?}::bigint[])
                 ON CONFLICT DO NOTHING"
            ))
            .await;
        }
        worker.shutdown().await.unwrap();
        println!("{completion:?}: {checked} hand-backs checked");
        assert!(
            checked >= 3,
            "{completion:?}: only {checked} rounds handed jobs back"
        );
    }
}
