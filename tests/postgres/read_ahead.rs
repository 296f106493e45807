//! Under a backlog of short jobs a producer claims ahead of its free slots, so that one claim
//! serves several rounds of them; the jobs claimed ahead never wait long, and go back to the
//! queue in their place when they would.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use jobs::postgres::__private::store::{claim_ahead, ClaimCount, ClaimedJob};
use jobs::{job, Completion, JobContext, JobResult, WorkerConfig, WorkerHandle};
use jobs_testkit::DEFAULT_WAIT;
use tokio::sync::Semaphore;

use crate::key_limits::most_running_at_once;
use crate::support::{fast_config, start_worker, Db};
use crate::test_jobs::{merchant_task, send_receipt, tenant_task, waits_for_release};

/// The slots of the workers below.
const CONCURRENCY: usize = 2;

/// Short jobs enqueued before the long ones (and, in some tests, as many after them).
const SHORT_JOBS: i64 = 400;

/// Long jobs enqueued after the short ones.
const LONG_JOBS: i64 = 20;

/// A worker draining short jobs, with a batch window long enough that every slot frees within
/// it, however slow the machine: it claims ahead.
fn draining_config() -> WorkerConfig {
    WorkerConfig {
        default_concurrency: CONCURRENCY,
        claim_batch_window: Duration::from_millis(100),
        // Claims of up to 128 ahead: the claims counted are checked against that many.
        claim_ahead: 128,
        ..fast_config()
    }
}

/// The claims run by the connections of `pool`, from their prepared statements.
async fn claims_run(pool: &sqlx::PgPool) -> i64 {
    let mut connections = Vec::new();
    let mut claims = 0;
    for _ in 0..pool.size() {
        let mut connection = pool.acquire().await.unwrap();
        let executions: i64 = sqlx::query_scalar(
            "SELECT coalesce(sum(generic_plans + custom_plans), 0)::bigint
             FROM pg_prepared_statements
             WHERE statement LIKE '%FOR UPDATE SKIP LOCKED%' AND statement LIKE '%SET state = ''running''%'",
        )
        .fetch_one(&mut *connection)
        .await
        .unwrap();
        claims += executions;
        // Kept until every connection is counted, so that each is counted once.
        connections.push(connection);
    }
    claims
}

/// The starts of [`notes_its_start`] jobs: the test each belongs to, its id, and when it
/// started, by the clock the database's `now()` reads too (this machine's).
static STARTS: Mutex<Vec<(String, i64, DateTime<Utc>)>> = Mutex::new(Vec::new());

/// Notes when it starts in [`STARTS`], for the test `test`.
#[job]
pub async fn notes_its_start(ctx: JobContext, test: String) -> JobResult {
    STARTS
        .lock()
        .expect("no run panicked holding it")
        .push((test, ctx.id(), Utc::now()));
    Ok(())
}

/// The slots do not wait for claims: under a backlog of short jobs the next claim goes out
/// while the jobs claimed ahead still start, so most of a claim's jobs start after the next
/// claim began. (A producer that claimed only once no job waited would send the next claim
/// after it had started every job of the last one: at most the slots' jobs, their tasks not yet
/// run, could note their start after it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_claim_goes_out_while_the_jobs_claimed_ahead_still_start() {
    let db = Db::new().await;
    let test = uuid::Uuid::new_v4().to_string();
    let jobs = 3_000;
    let args = (0..jobs).map(|_| notes_its_start::Args { test: test.clone() });
    notes_its_start::enqueue_many(&db.pool, args).await.unwrap();
    assert_drained_with_claims_ahead(&db, "notes_its_start", jobs).await;

    let started: BTreeMap<i64, DateTime<Utc>> = STARTS
        .lock()
        .expect("no run panicked holding it")
        .iter()
        .filter(|(of, _, _)| *of == test)
        .map(|(_, id, at)| (*id, *at))
        .collect();
    // Each claim's jobs share their `attempted_at`: the claim statement's time.
    let claims: Vec<(DateTime<Utc>, Vec<i64>)> = db
        .rows(
            "SELECT attempted_at, array_agg(id ORDER BY id) FROM jobs_queue
             GROUP BY attempted_at ORDER BY attempted_at",
        )
        .await;
    let started_after_the_next_claim: Vec<usize> = claims
        .windows(2)
        .map(|pair| {
            let (_, jobs) = &pair[0];
            let (next_claim_at, _) = &pair[1];
            jobs.iter()
                .filter(|id| started[id] > *next_claim_at)
                .count()
        })
        .collect();
    println!(
        "{} claims; jobs of each that started after the next claim began: {started_after_the_next_claim:?}",
        claims.len()
    );
    let most = started_after_the_next_claim
        .iter()
        .max()
        .copied()
        .unwrap_or(0);
    assert!(
        most > 8 * CONCURRENCY,
        "at most {most} jobs of a claim started after the next claim began, with {CONCURRENCY} \
         slots: the claims waited for the jobs claimed ahead to run out"
    );
}

/// Whether [`gated_merchant_task`] jobs that start wait at [`GATE`].
static GATED: AtomicBool = AtomicBool::new(false);

/// Where started [`gated_merchant_task`] jobs wait while [`GATED`]: each takes a permit to end.
static GATE: Semaphore = Semaphore::const_new(0);

/// How many [`gated_merchant_task`] jobs wait at [`GATE`].
static AT_GATE: AtomicUsize = AtomicUsize::new(0);

/// Does nothing (waits at [`GATE`] while [`GATED`]), with a per-key running limit never
/// reached: its claims take the kind's advisory lock, which a test can hold to keep a claim
/// waiting.
#[job(limit_key = "<merchant>", max_running_per_key = 1000)]
pub async fn gated_merchant_task(merchant: String, n: u32) -> JobResult {
    let _ = (merchant, n);
    if GATED.load(Ordering::SeqCst) {
        AT_GATE.fetch_add(1, Ordering::SeqCst);
        GATE.acquire().await.expect("never closed").forget();
        AT_GATE.fetch_sub(1, Ordering::SeqCst);
    }
    Ok(())
}

/// The jobs waiting for a slot are handed back after 100 ms even while the claim that went out
/// ahead of them waits (here on the kind's advisory lock, held by the test): the claim does not
/// keep them from other workers. Its own jobs go back behind them once it returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_waiting_are_handed_back_while_the_claim_ahead_of_them_waits() {
    let db = Db::new().await;
    let jobs = 6_000;
    let args = (0..jobs).map(|n| gated_merchant_task::Args {
        merchant: format!("merchant {}", n % 64),
        n: u32::try_from(n).unwrap(),
    });
    gated_merchant_task::enqueue_many(&db.pool, args)
        .await
        .unwrap();
    let pool = db.other_pool(10).await;
    // Few jobs ahead: a few jobs ending bring the jobs waiting below a claim's worth. Each
    // outcome is written before its slot frees: once both slots hold jobs at the gate, the rows
    // running beyond them are jobs waiting in the worker.
    let config = WorkerConfig {
        claim_ahead: 16,
        completion: Completion::PerJob,
        ..draining_config()
    };
    let worker = start_worker(&pool, &["gated_merchant_task"], config);
    let slots = i64::try_from(CONCURRENCY).unwrap();
    let claim_waits = "SELECT count(*) FROM pg_locks
         WHERE locktype = 'advisory' AND NOT granted
           AND database = (SELECT oid FROM pg_database WHERE datname = current_database())";
    let slots_at_gate =
        || AT_GATE.load(Ordering::SeqCst) == CONCURRENCY && GATE.available_permits() == 0;
    let running = "SELECT count(*) FROM jobs_queue WHERE state = 'running'";
    let handed_back =
        "SELECT count(*) FROM jobs_queue WHERE state = 'ready' AND attempted_at IS NOT NULL";
    let mut reached = false;
    for round in 1..=10 {
        db.wait_for_count_at_least(
            "a backlog draining",
            "SELECT count(*) FROM jobs_queue WHERE state = 'done'",
            300 * round,
        )
        .await;
        // The claims of the kind wait for the lock from now on; the slots fill with jobs that
        // wait at the gate, and the jobs claimed ahead wait for them.
        let handed_back_before = db.count(handed_back).await;
        let mut lock = db.pool.begin().await.unwrap();
        sqlx::query(
            "SELECT pg_advisory_xact_lock(hashtextextended('jobs_max_running:gated_merchant_task', 0))",
        )
        .execute(&mut *lock)
        .await
        .unwrap();
        GATED.store(true, Ordering::SeqCst);
        // One job at the gate ends at a time and a waiting one takes its slot, until fewer wait
        // than a claim takes ahead and the next claim goes out, to wait for the lock. Should the
        // jobs waiting be handed back first (they waited 100 ms), or none be left to wait, the
        // claim that waits is one for free slots, with no job waiting: another round is tried.
        let deadline = Instant::now() + DEFAULT_WAIT;
        loop {
            assert!(Instant::now() < deadline, "no claim waited for the lock");
            if db.count(claim_waits).await > 0 {
                // The job that ended last may still be handing its slot over: polled for a
                // while, well within the 100 ms after which the jobs waiting are handed back (a
                // count of yields is no time at all on a loaded machine).
                let handing_over = Instant::now() + Duration::from_millis(40);
                while !slots_at_gate() && Instant::now() < handing_over {
                    tokio::task::yield_now().await;
                }
                reached = slots_at_gate()
                    && db.count(running).await > slots
                    && db.count(handed_back).await == handed_back_before;
                break;
            }
            if slots_at_gate() {
                GATE.add_permits(1);
            }
            tokio::task::yield_now().await;
        }
        if reached {
            db.wait_for_count(
                "the jobs waiting handed back while the claim waits",
                running,
                slots,
            )
            .await;
            assert_eq!(db.count(claim_waits).await, 1, "the claim still waits");
        }
        lock.rollback().await.unwrap();
        GATED.store(false, Ordering::SeqCst);
        GATE.add_permits(CONCURRENCY);
        if reached {
            println!("round {round}: jobs waited behind the slots while a claim ahead waited");
            break;
        }
    }
    assert!(
        reached,
        "in 10 rounds, no claim ahead waited while jobs waited behind the slots"
    );
    finish_each_once(
        &db,
        worker,
        jobs,
        "those handed back with their attempt given back",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_of_short_jobs_is_claimed_ahead_of_the_free_slots() {
    let db = Db::new().await;
    let jobs = 3_000;
    let args = (0..jobs).map(|order_id| send_receipt::Args { order_id });
    send_receipt::enqueue_many(&db.pool, args).await.unwrap();
    assert_drained_with_claims_ahead(&db, "send_receipt", jobs).await;
}

/// A fair kind's claims take turns between its keys for the jobs claimed ahead too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_of_a_fair_kind_is_claimed_ahead_of_the_free_slots() {
    let db = Db::new().await;
    let jobs = 3_000;
    let args = (0..jobs).map(|n| tenant_task::Args {
        tenant: format!("tenant {}", n % 30),
        n: u32::try_from(n).unwrap(),
    });
    tenant_task::enqueue_many(&db.pool, args).await.unwrap();
    assert_drained_with_claims_ahead(&db, "tenant_task", jobs).await;
}

/// A kind with a per-key running limit (and no rate limit) claims ahead too: the jobs claimed
/// ahead count against the limit from their claim, so the limit holds for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_of_a_per_key_limited_kind_is_claimed_ahead_of_the_free_slots() {
    let db = Db::new().await;
    let jobs = 3_000;
    let args = (0..jobs).map(|n| merchant_task::Args {
        merchant: format!("merchant {}", n % 200),
        n: u32::try_from(n).unwrap(),
    });
    merchant_task::enqueue_many(&db.pool, args).await.unwrap();
    assert_drained_with_claims_ahead(&db, "merchant_task", jobs).await;
    assert!(
        most_running_at_once(&db, true).await <= 2,
        "never more than 2 of a merchant running, claimed ahead or started"
    );
}

/// Drains the `jobs` jobs of `kind` enqueued in `db` with a worker that claims ahead, and checks
/// that its claims took jobs ahead of its free slots and that every job ran once.
async fn assert_drained_with_claims_ahead(db: &Db, kind: &'static str, jobs: i64) {
    let pool = db.other_pool(10).await;
    let config = draining_config();
    let claim_ahead = i64::try_from(config.claim_ahead).unwrap();
    let worker = start_worker(&pool, &[kind], config);
    finish_each_once(db, worker, jobs, "none claimed twice").await;
    let claims = claims_run(&pool).await;
    println!("{claims} claims for {jobs} jobs of {kind} at concurrency {CONCURRENCY}");
    // Claims of the free slots alone would be at least one per CONCURRENCY jobs.
    assert!(
        claims <= jobs / (claim_ahead / 2),
        "{claims} claims for {jobs} jobs: the claims took no more than their free slots"
    );
}

/// Waits until the `jobs` jobs enqueued in `db` are all done, stops `worker`, and checks that
/// each ran once (`how`: in what way, for the test at hand).
async fn finish_each_once(db: &Db, worker: WorkerHandle, jobs: i64, how: &str) {
    db.wait_for_count(
        "every job done",
        "SELECT count(*) FROM jobs_queue WHERE state = 'done'",
        jobs,
    )
    .await;
    worker.shutdown().await.unwrap();
    assert_eq!(
        db.count("SELECT count(*) FROM jobs_queue WHERE attempts <> 1")
            .await,
        0,
        "every job ran once: {how}"
    );
}

/// Every job of a backlog, in claim order: `(id, kind, run_at in seconds)`, read before any
/// worker starts.
type Backlog = Vec<(i64, String, f64)>;

/// Enqueues [`SHORT_JOBS`] short jobs, then [`LONG_JOBS`] jobs that run until released, then
/// `short_after` short jobs.
async fn enqueue_backlog(db: &Db, short_after: i64) -> Backlog {
    db.create_releases().await;
    let before = (0..SHORT_JOBS).map(|order_id| send_receipt::Args { order_id });
    send_receipt::enqueue_many(&db.pool, before).await.unwrap();
    for _ in 0..LONG_JOBS {
        waits_for_release::enqueue(&db.pool).await.unwrap();
    }
    let after =
        (SHORT_JOBS..SHORT_JOBS + short_after).map(|order_id| send_receipt::Args { order_id });
    send_receipt::enqueue_many(&db.pool, after).await.unwrap();
    db.rows(
        "SELECT id, kind, extract(epoch FROM run_at)::float8 FROM jobs_queue
         ORDER BY priority DESC, run_at, id",
    )
    .await
}

/// Waits until the short jobs before the long ones are done and nothing runs but the long jobs
/// in the slots: the jobs claimed ahead behind them were handed back. Returns the ids of the
/// jobs handed back (ready, and claimed before); none when the claims happened to end with the
/// long jobs that took the slots.
async fn handed_back_behind_long_jobs(db: &Db) -> Vec<i64> {
    db.wait_for_count(
        "the short jobs before the long ones done",
        "SELECT count(*) FROM jobs_queue WHERE kind = 'send_receipt' AND state = 'done'",
        SHORT_JOBS,
    )
    .await;
    db.wait_for_count(
        "nothing running but the long jobs in the slots",
        "SELECT count(*) FROM jobs_queue WHERE state = 'running'",
        i64::try_from(CONCURRENCY).unwrap(),
    )
    .await;
    db.column(
        "SELECT id FROM jobs_queue WHERE state = 'ready' AND attempted_at IS NOT NULL ORDER BY id",
    )
    .await
}

/// Lets every long job of `backlog` finish.
async fn release_long_jobs(db: &Db, backlog: &Backlog) {
    for (id, kind, _) in backlog {
        if kind == "waits_for_release" {
            db.release(*id).await;
        }
    }
}

/// The jobs claimed ahead behind jobs that turned out long are handed back once they have
/// waited a moment: ready again, their attempt given back, in their place in the claim order.
/// The worker's next claim starts at the front: the jobs handed back are claimed before any
/// job after them, though the claims had ended past them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_claimed_ahead_behind_long_jobs_go_back_in_their_place_and_first() {
    // The claims may end right after the long jobs that take the slots (one chance in a
    // claim's length): then nothing was claimed behind them, and the test starts again.
    for _ in 0..3 {
        let db = Db::new().await;
        let backlog = enqueue_backlog(&db, SHORT_JOBS).await;
        let worker = start_worker(
            &db.pool,
            &["send_receipt", "waits_for_release"],
            draining_config(),
        );
        let handed_back = handed_back_behind_long_jobs(&db).await;
        if handed_back.is_empty() {
            println!("nothing was claimed behind the long jobs in the slots; again");
            release_long_jobs(&db, &backlog).await;
            worker.shutdown().await.unwrap();
            continue;
        }
        println!("{} jobs handed back", handed_back.len());
        let rows: Vec<(i64, String, i32, f64)> = sqlx::query_as(
            "SELECT id, state, attempts, extract(epoch FROM run_at)::float8 FROM jobs_queue
             WHERE id = ANY($1) ORDER BY id",
        )
        .bind(&handed_back)
        .fetch_all(&db.pool)
        .await
        .unwrap();
        for (id, state, attempts, run_at) in rows {
            let enqueued = backlog.iter().find(|job| job.0 == id).unwrap();
            assert_eq!(
                (state.as_str(), attempts),
                ("ready", 0),
                "job {id}: the attempt is given back"
            );
            assert_eq!(run_at, enqueued.2, "job {id} keeps its place");
        }
        release_long_jobs(&db, &backlog).await;
        let jobs = i64::try_from(backlog.len()).unwrap();
        finish_each_once(&db, worker, jobs, "those handed back run after").await;
        // In claim order, each job not handed back was claimed no earlier than every job handed
        // back before it.
        let claims: Vec<(i64, f64)> = db
            .rows(
                "SELECT id, extract(epoch FROM attempted_at)::float8 FROM jobs_queue
                 ORDER BY priority DESC, run_at, id",
            )
            .await;
        let mut latest_handed_back: Option<(i64, f64)> = None;
        for (id, claimed_at) in claims {
            if handed_back.contains(&id) {
                if latest_handed_back.is_none_or(|(_, at)| claimed_at > at) {
                    latest_handed_back = Some((id, claimed_at));
                }
            } else if let Some((before, at)) = latest_handed_back {
                assert!(
                    claimed_at >= at,
                    "job {id} was claimed before job {before}, handed back ahead of it in the claim order"
                );
            }
        }
        return;
    }
    panic!("nothing was ever claimed behind the long jobs");
}

/// Asserts that every long job is ready again, its attempt given back.
async fn assert_every_long_job_handed_back(db: &Db) {
    let rows: Vec<(String, i32)> = db
        .rows("SELECT state, attempts FROM jobs_queue WHERE kind = 'waits_for_release' ORDER BY id")
        .await;
    assert!(
        rows.iter()
            .all(|(state, attempts)| state == "ready" && *attempts == 0),
        "every long job handed back, its attempt given back: {rows:?}"
    );
}

/// A graceful shutdown leaves no job claimed ahead `running`: each is handed back with its
/// attempt given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_shutdown_hands_back_the_jobs_claimed_ahead() {
    let db = Db::new().await;
    enqueue_backlog(&db, 0).await;
    // The long jobs running when the grace period ends are interrupted and handed back too.
    let config = WorkerConfig {
        shutdown_grace: Duration::from_millis(300),
        ..draining_config()
    };
    let worker = start_worker(&db.pool, &["send_receipt", "waits_for_release"], config);
    db.wait_for_count(
        "the long jobs to fill the slots",
        "SELECT count(*) FROM runs",
        i64::try_from(CONCURRENCY).unwrap(),
    )
    .await;
    // The shutdown usually comes before the jobs claimed ahead have waited long enough to be
    // handed back on their own: then it hands them back itself.
    let waiting = db
        .count("SELECT count(*) FROM jobs_queue WHERE kind = 'waits_for_release' AND state = 'running'")
        .await;
    println!("{waiting} long jobs running or claimed ahead when the shutdown began");
    worker.shutdown().await.unwrap();
    assert_every_long_job_handed_back(&db).await;
}

/// Makes the database refuse, while table `outage` has a row, to hand back jobs claimed ahead
/// (from running to ready with the attempt given back) with an error of reach (too many
/// connections), counting the refusals in sequence `refusals`.
async fn refuse_hand_backs(db: &Db) {
    for statement in [
        "CREATE TABLE outage ()",
        "INSERT INTO outage DEFAULT VALUES",
        "CREATE SEQUENCE refusals",
        "CREATE FUNCTION refuse_hand_back() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF EXISTS (SELECT FROM outage) THEN
                 PERFORM nextval('refusals');
                 RAISE EXCEPTION 'simulated outage' USING ERRCODE = '53300';
             END IF;
             RETURN NEW;
         END $$",
        "CREATE TRIGGER refuse_hand_back BEFORE UPDATE ON jobs_queue FOR EACH ROW
         WHEN (OLD.state = 'running' AND NEW.state = 'ready' AND NEW.attempts < OLD.attempts)
         EXECUTE FUNCTION refuse_hand_back()",
    ] {
        db.execute(statement).await;
    }
}

/// How many hand-backs the database refused.
const REFUSALS: &str = "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM refusals";

/// A hand-back the database cannot take is tried again, as an outcome is, while the leases
/// hold; a graceful shutdown waits for it instead of leaving the jobs `running` until their
/// leases expire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_hand_back_is_retried_and_a_shutdown_waits_for_it() {
    for _ in 0..3 {
        let db = Db::new().await;
        refuse_hand_backs(&db).await;
        enqueue_backlog(&db, 0).await;
        let config = WorkerConfig {
            shutdown_grace: Duration::from_millis(300),
            max_reconnect_delay: Duration::from_millis(100),
            ..draining_config()
        };
        let worker = start_worker(&db.pool, &["send_receipt", "waits_for_release"], config);
        db.wait_for_count(
            "the short jobs done",
            "SELECT count(*) FROM jobs_queue WHERE kind = 'send_receipt' AND state = 'done'",
            SHORT_JOBS,
        )
        .await;
        let running = db
            .count("SELECT count(*) FROM jobs_queue WHERE state = 'running'")
            .await;
        if running == i64::try_from(CONCURRENCY).unwrap() {
            println!("nothing was claimed behind the long jobs in the slots; again");
            db.execute("DELETE FROM outage").await;
            db.execute("INSERT INTO releases SELECT id FROM jobs_queue")
                .await;
            worker.shutdown().await.unwrap();
            continue;
        }
        db.wait_for_count_at_least("a hand-back refused, then tried again", REFUSALS, 2)
            .await;
        let shutdown = tokio::spawn(worker.shutdown());
        // The long jobs in the slots are interrupted when the grace period ends, and their
        // hand-back is refused too.
        db.wait_for_count_at_least(
            "the hand-backs of the shutdown refused",
            REFUSALS,
            db.count(REFUSALS).await + 4,
        )
        .await;
        assert!(
            !shutdown.is_finished(),
            "the shutdown waits for the hand-backs"
        );
        db.execute("DELETE FROM outage").await;
        tokio::time::timeout(Duration::from_secs(20), shutdown)
            .await
            .expect("the shutdown ends")
            .unwrap()
            .expect("the worker stops");
        assert_every_long_job_handed_back(&db).await;
        assert_eq!(
            db.count("SELECT count(*) FROM runs").await,
            i64::try_from(CONCURRENCY).unwrap(),
            "only the long jobs in the slots ran"
        );
        return;
    }
    panic!("nothing was ever claimed behind the long jobs");
}

/// A claim takes the jobs for the free slots whatever their attempts, but the jobs it claims
/// ahead of them stop before the first job on its last attempt: a crash while it waited would
/// make it dead without running. The next claim takes that job first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_ahead_stop_before_a_job_on_its_last_attempt() {
    for kinds in [&["send_receipt"][..], &["send_receipt", "record_run"][..]] {
        let db = Db::new().await;
        let args = (0..10).map(|order_id| send_receipt::Args { order_id });
        send_receipt::enqueue_many(&db.pool, args).await.unwrap();
        let ids: Vec<i64> = db.column("SELECT id FROM jobs_queue ORDER BY id").await;
        db.put_on_last_attempt(ids[5]).await;
        let leases = vec![Duration::from_secs(30); kinds.len()];
        let claim = |free, ahead, after| {
            let (pool, leases) = (&db.pool, &leases);
            async move {
                let count = ClaimCount { free, ahead };
                claim_ahead(pool, "default", kinds, leases, count, after)
                    .await
                    .unwrap()
            }
        };
        let ids_of = |jobs: Vec<ClaimedJob>| jobs.iter().map(|job| job.id).collect::<Vec<i64>>();
        let first = claim(1, 0, None).await;
        let after = first.first().map(ClaimedJob::place);
        assert_eq!(ids_of(first), ids[..1], "{kinds:?}");
        // Two for the free slots, two ahead, and not the sixth job.
        let resumed = claim(2, 8, after).await;
        assert_eq!(ids_of(resumed), ids[1..5], "{kinds:?}");
        // From the front: the sixth job for the free slot, then the rest ahead.
        let front = claim(1, 8, None).await;
        assert_eq!(ids_of(front), ids[5..], "{kinds:?}");
    }
}
