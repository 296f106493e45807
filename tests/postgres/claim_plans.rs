//! Claims cost what the jobs they can take cost, not what other kinds' backlog costs: with
//! 200,000 due jobs of a kind the worker does not run ranking ahead of its own (a rolling
//! deploy, workers of different kinds on one queue), each claim statement reads a few index
//! pages and filters no foreign row. Each test prints the plan it checks.

use chrono::{DateTime, Utc};
use jobs::postgres::__private::sql;
use serde_json::Value;
use sqlx::pool::PoolConnection;
use sqlx::postgres::PgArguments;
use sqlx::query::QueryScalar;
use sqlx::{Connection, Postgres, Row};

use crate::plans::{
    assert_no_seq_scan, claim_of_16, explain_analyze, generic_plan_of, plan_nodes, plan_of,
    plans_made, scans_of,
};
use crate::support::Db;
use crate::test_jobs::insert_due_record_runs;

/// Foreign jobs among the worker's own, every 30 ms over the same 100 minutes, half of them at a
/// higher priority (ranking ahead of all the worker's jobs), half at the same priority
/// (between each two of the worker's jobs).
const FOREIGN: i64 = 200_000;
/// Most buffers a claim of 16 jobs may touch in all (its scans, and the updates of the rows).
const MAX_BUFFERS: i64 = 600;
/// Most rows a claim may read and throw away.
const MAX_REMOVED: i64 = 100;
/// How many jobs the claims in turn order ask for in the tests of their plans: for one free
/// slot, for 16, and for 16 with 128 and with 512 (the default most, `claim_ahead`) ahead of them.
const CLAIM_SIZES: [i64; 4] = [1, 16, 144, 528];

/// A database with the foreign backlog and 100 due jobs of `record_run` in `default`, one a
/// minute.
async fn backlog_of_another_kind() -> Db {
    let db = Db::new().await;
    db.execute(&format!(
        "INSERT INTO jobs_queue (kind, queue, payload, max_attempts, priority, run_at)
         SELECT 'foreign_kind', 'default', '{{}}', 8, CASE WHEN n % 2 = 0 THEN 5 ELSE 0 END,
                now() - interval '2 hours' + n * interval '30 ms'
         FROM generate_series(1, {FOREIGN}) AS n"
    ))
    .await;
    insert_due_record_runs(&db, 100, "x", "2 hours", "1 minute").await;
    db.execute("VACUUM ANALYZE jobs_queue").await;
    db
}

/// Checks `plan`, a claim's analyzed plan printed as `name`: no table read whole, no foreign job
/// walked (no row of `jobs_queue` read and thrown away); returns the rows the claim took.
fn check(name: &str, plan: &Value) -> i64 {
    check_within(name, plan, MAX_BUFFERS)
}

/// [`check`], with `max_buffers` in place of [`MAX_BUFFERS`].
fn check_within(name: &str, plan: &Value, max_buffers: i64) -> i64 {
    let nodes = plan_nodes(plan);
    assert_no_seq_scan(&scans_of(&nodes, "jobs_queue"), name);
    let removed: i64 = nodes
        .iter()
        .filter(|node| node["Relation Name"] == "jobs_queue")
        .map(|node| node["Rows Removed by Filter"].as_i64().unwrap_or(0))
        .sum();
    let root = &plan[0]["Plan"];
    let buffers =
        root["Shared Hit Blocks"].as_i64().unwrap() + root["Shared Read Blocks"].as_i64().unwrap();
    println!("{name}: {buffers} buffers, {removed} rows removed by filters");
    assert!(
        removed <= MAX_REMOVED,
        "{name} threw away {removed} rows (foreign jobs walked)"
    );
    assert!(
        buffers <= max_buffers,
        "{name} touched {buffers} buffers (foreign jobs walked)"
    );
    root["Actual Rows"].as_i64().unwrap()
}

/// [`check`]s both plans of `statement` (printed as `name`), each run and rolled back: the one
/// made for the values bound to `explain` (its [`explain_analyze`] text), and the generic one,
/// which a connection keeps after five executions, run with `arguments` (the same values as SQL
/// literals); returns the rows each took.
async fn check_plans(
    db: &Db,
    name: &str,
    statement: &str,
    explain: QueryScalar<'_, Postgres, Value, PgArguments>,
    arguments: &[String],
) -> [i64; 2] {
    let custom = plan_of(db, name, explain).await;
    let generic = generic_plan_of(db, name, statement, arguments).await;
    [
        check(name, &custom),
        check(&format!("{name} (generic plan)"), &generic),
    ]
}

/// The SQL literals of [`claim_of_16`]'s values for `kinds`.
fn literals_of_claim_of_16(kinds: &[&str]) -> Vec<String> {
    let kinds: Vec<String> = kinds.iter().map(|kind| format!("'{kind}'")).collect();
    let leases = vec!["30.0"; kinds.len()];
    vec![
        "'default'".to_string(),
        format!("ARRAY[{}]", kinds.join(", ")),
        "16".to_string(),
        format!("ARRAY[{}]::float8[]", leases.join(", ")),
        "16".to_string(),
    ]
}

/// [`check_plans`] of `statement` (printed as `name`), a claim from the front of up to 16 jobs
/// of `kinds`; returns the rows each plan took.
async fn check_claim_from_the_front(
    db: &Db,
    name: &str,
    statement: &str,
    kinds: &[&'static str],
) -> [i64; 2] {
    let explain = explain_analyze(statement);
    let arguments = literals_of_claim_of_16(kinds);
    check_plans(
        db,
        name,
        statement,
        claim_of_16(&explain, kinds),
        &arguments,
    )
    .await
}

/// [`check_plans`] of `statement` (printed as `name`), a claim of up to 16 jobs of `kinds` from
/// the last place, resuming after the eleventh due `record_run` job; returns the rows each plan
/// took.
async fn check_claim_from_the_last_place(
    db: &Db,
    name: &str,
    statement: &str,
    kinds: &[&'static str],
) -> [i64; 2] {
    let (run_at, id): (DateTime<Utc>, i64) = sqlx::query_as(
        "SELECT run_at, id FROM jobs_queue WHERE kind = 'record_run' ORDER BY run_at, id LIMIT 1 OFFSET 10",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let explain = explain_analyze(statement);
    let query = claim_of_16(&explain, kinds)
        .bind(0_i16)
        .bind(run_at)
        .bind(id);
    let mut arguments = literals_of_claim_of_16(kinds);
    arguments.extend([
        "0".to_string(),
        format!("'{}'::timestamptz", run_at.to_rfc3339()),
        id.to_string(),
    ]);
    check_plans(db, name, statement, query, &arguments).await
}

/// The limits of a limited claim: most jobs running, and the rate limit's count and window.
type Limits = (Option<i64>, Option<i32>, Option<f64>);

/// A running limit of 100.
const RUNNING_LIMIT: Limits = (Some(100), None, None);
/// A rate limit of 1,000,000 starts an hour, which [`with_starts_in_the_window`] fills.
const RATE_LIMIT: Limits = (None, Some(1_000_000), Some(3_600.0));
/// Both.
const BOTH_LIMITS: Limits = (Some(100), Some(1_000_000), Some(3_600.0));

/// The SQL literal of `value`, `NULL` (of `type_name`) when there is none.
fn literal<T: ToString>(value: Option<T>, type_name: &str) -> String {
    value.map_or_else(|| format!("NULL::{type_name}"), |value| value.to_string())
}

/// Records 1,000 claims of 100 `record_run` jobs each in the last half hour, as a rate limit
/// of `record_run` would have.
async fn with_starts_in_the_window(db: &Db) {
    db.execute(
        "INSERT INTO jobs_rate_limits (kind, window_secs, started_at, started)
         SELECT 'record_run', 3600,
                array_agg(now() - interval '30 minutes' + n * interval '1 second' ORDER BY n),
                array_agg(100 ORDER BY n)
         FROM generate_series(1, 1000) AS n",
    )
    .await;
}

/// [`check_plans`] of the claim of a kind with `limits`, as a worker claims up to 16
/// `record_run` jobs from queues `default` and `other` with 30 s leases; returns the rows each
/// plan took.
async fn check_limited_claim(db: &Db, limits: Limits) -> [i64; 2] {
    let (max_running, rate_jobs, rate_window) = limits;
    let explain = explain_analyze(sql::CLAIM_LIMITED_JOBS);
    let query = sqlx::query_scalar(&explain)
        .bind("record_run")
        .bind(vec!["default".to_string(), "other".to_string()])
        .bind(16_i64)
        .bind(max_running)
        .bind(30.0_f64)
        .bind(rate_jobs)
        .bind(rate_window);
    let arguments = [
        "'record_run'".to_string(),
        "ARRAY['default', 'other']".to_string(),
        "16".to_string(),
        literal(max_running, "bigint"),
        "30.0".to_string(),
        literal(rate_jobs, "integer"),
        literal(rate_window, "float8"),
    ];
    let name = match limits {
        RUNNING_LIMIT => "CLAIM_LIMITED_JOBS (running limit)",
        RATE_LIMIT => "CLAIM_LIMITED_JOBS (rate limit)",
        _ => "CLAIM_LIMITED_JOBS (both limits)",
    };
    check_plans(db, name, sql::CLAIM_LIMITED_JOBS, query, &arguments).await
}

/// [`check_plans`] of [`sql::RATE_LIMIT_ROOM_IN`] over the starts [`with_starts_in_the_window`]
/// wrote, under a limit they fill: it reads the kind's one row, by its key.
async fn check_rate_limit_room(db: &Db) {
    let explain = explain_analyze(sql::RATE_LIMIT_ROOM_IN);
    let query = sqlx::query_scalar(&explain)
        .bind("record_run")
        .bind(100_000_i32)
        .bind(3_600.0_f64);
    let arguments = ["'record_run'", "100000", "3600.0"].map(String::from);
    let name = "RATE_LIMIT_ROOM_IN";
    for plan in [
        plan_of(db, name, query).await,
        generic_plan_of(db, name, sql::RATE_LIMIT_ROOM_IN, &arguments).await,
    ] {
        let nodes = plan_nodes(&plan);
        assert_no_seq_scan(&scans_of(&nodes, "jobs_rate_limits"), name);
        assert_eq!(plan[0]["Plan"]["Actual Rows"].as_i64(), Some(1), "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_from_the_front_skips_other_kinds_backlog() {
    let db = backlog_of_another_kind().await;
    let kinds = ["record_run", "bad_input"];
    let taken = check_claim_from_the_front(&db, "CLAIM_JOBS", sql::CLAIM_JOBS, &kinds).await;
    assert_eq!(taken, [16, 16]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_from_the_last_place_skips_other_kinds_backlog() {
    let db = backlog_of_another_kind().await;
    let kinds = ["record_run", "bad_input"];
    let statement = sql::CLAIM_JOBS_AFTER;
    let taken = check_claim_from_the_last_place(&db, "CLAIM_JOBS_AFTER", statement, &kinds).await;
    assert_eq!(taken, [16, 16]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_of_one_kind_skips_other_kinds_backlog() {
    let db = backlog_of_another_kind().await;
    let kinds = ["record_run"];
    let statement = sql::CLAIM_ONE_KIND;
    let taken = check_claim_from_the_front(&db, "CLAIM_ONE_KIND", statement, &kinds).await;
    assert_eq!(taken, [16, 16]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_of_one_kind_from_the_last_place_skips_other_kinds_backlog() {
    let db = backlog_of_another_kind().await;
    let kinds = ["record_run"];
    let statement = sql::CLAIM_ONE_KIND_AFTER;
    let name = "CLAIM_ONE_KIND_AFTER";
    let taken = check_claim_from_the_last_place(&db, name, statement, &kinds).await;
    assert_eq!(taken, [16, 16]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limited_claim_skips_other_kinds_backlog() {
    let db = backlog_of_another_kind().await;
    with_starts_in_the_window(&db).await;
    for limits in [RUNNING_LIMIT, RATE_LIMIT, BOTH_LIMITS] {
        assert_eq!(check_limited_claim(&db, limits).await, [16, 16]);
    }
    check_rate_limit_room(&db).await;
    check_due_jobs_remain(&db).await;
}

/// [`check_plans`] of [`sql::DUE_JOBS_REMAIN`] for `record_run` in queues `default` and `other`:
/// a probe of the ready index per queue, past no foreign job.
async fn check_due_jobs_remain(db: &Db) {
    let explain = explain_analyze(sql::DUE_JOBS_REMAIN);
    let query = sqlx::query_scalar(&explain)
        .bind("record_run")
        .bind(vec!["default".to_string(), "other".to_string()]);
    let arguments = ["'record_run'", "ARRAY['default', 'other']"].map(String::from);
    let name = "DUE_JOBS_REMAIN";
    for plan in [
        plan_of(db, name, query).await,
        generic_plan_of(db, name, sql::DUE_JOBS_REMAIN, &arguments).await,
    ] {
        check(name, &plan);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limited_claim_reads_only_what_it_takes_of_its_own_backlog() {
    let db = Db::new().await;
    db.execute(&format!(
        "INSERT INTO jobs_queue (kind, queue, payload, max_attempts, run_at)
         SELECT 'record_run', CASE WHEN n % 2 = 0 THEN 'default' ELSE 'other' END,
                '{{\"label\": \"x\"}}', 8, now() - interval '2 hours' + n * interval '30 ms'
         FROM generate_series(1, {FOREIGN}) AS n"
    ))
    .await;
    db.execute("VACUUM ANALYZE jobs_queue").await;
    with_starts_in_the_window(&db).await;
    for limits in [RUNNING_LIMIT, RATE_LIMIT, BOTH_LIMITS] {
        assert_eq!(check_limited_claim(&db, limits).await, [16, 16]);
    }
}

/// Every claim is planned once per connection, not at every execution: after the five
/// executions PostgreSQL plans one-off to compare, it keeps the generic plan, whatever the
/// number of jobs asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_keep_one_plan_per_connection() {
    let db = Db::new().await;
    insert_due_record_runs(&db, 1_000, "x", "1 hour", "1 ms").await;
    let mut conn = db.pool.acquire().await.unwrap();
    let before_every_job = (0_i16, DateTime::<Utc>::UNIX_EPOCH, 0_i64);
    let statements = [
        ("CLAIM_ONE_KIND", sql::CLAIM_ONE_KIND),
        ("CLAIM_ONE_KIND_AFTER", sql::CLAIM_ONE_KIND_AFTER),
        ("CLAIM_JOBS", sql::CLAIM_JOBS),
        ("CLAIM_JOBS_AFTER", sql::CLAIM_JOBS_AFTER),
        ("CLAIM_LIMITED_JOBS", sql::CLAIM_LIMITED_JOBS),
    ];
    // Claims of 1, 16, 1, 16, ... jobs: a plan made for the limit would differ from call to
    // call.
    for call in 0..10 {
        let limit: i64 = if call % 2 == 0 { 1 } else { 16 };
        for (name, statement) in statements {
            let query = match name {
                "CLAIM_LIMITED_JOBS" => sqlx::query(statement)
                    .bind("record_run")
                    .bind(vec!["default"])
                    .bind(limit)
                    .bind(1_000_i64)
                    .bind(30.0_f64)
                    .bind(1_000_000_i32)
                    .bind(3_600.0_f64),
                _ => {
                    let kinds = if name.starts_with("CLAIM_ONE_KIND") {
                        vec!["record_run"]
                    } else {
                        vec!["record_run", "bad_input"]
                    };
                    let leases = vec![30.0_f64; kinds.len()];
                    let query = sqlx::query(statement)
                        .bind("default")
                        .bind(kinds)
                        .bind(limit)
                        .bind(leases)
                        .bind(limit);
                    if name.ends_with("_AFTER") {
                        let (priority, run_at, id) = before_every_job;
                        query.bind(priority).bind(run_at).bind(id)
                    } else {
                        query
                    }
                }
            };
            let claimed = query.execute(&mut *conn).await.unwrap().rows_affected();
            assert_eq!(
                claimed, limit as u64,
                "{name} claimed what it was asked for"
            );
        }
    }
    for (name, statement) in statements {
        assert_eq!(
            plans_made(&mut conn, statement).await,
            (5, 5),
            "{name}: planned one-off only for the first five executions"
        );
    }
}

/// A place in a fair kind's claim order at priority 0: turn, key and id.
type FairPlace = (i64, String, i64);

/// [`check_plans`] of a fair claim of `wanted` `tenant_task` jobs, 16 for free slots and the
/// rest ahead of them, from queue `default`: from the front ([`sql::CLAIM_FAIR_JOBS`]), or after
/// `place` ([`sql::CLAIM_FAIR_JOBS_AFTER`]); allowed [`MAX_BUFFERS`] per 16 jobs; returns the
/// rows each plan took.
async fn check_fair_claim(db: &Db, place: Option<&FairPlace>, wanted: i64) -> [i64; 2] {
    let statement = match place {
        None => sql::CLAIM_FAIR_JOBS,
        Some(_) => sql::CLAIM_FAIR_JOBS_AFTER,
    };
    let explain = explain_analyze(statement);
    let query = sqlx::query_scalar(&explain)
        .bind("default")
        .bind("tenant_task")
        .bind(wanted)
        .bind(30.0_f64)
        .bind(16_i64);
    let arguments = vec![
        "'default'".to_string(),
        "'tenant_task'".to_string(),
        wanted.to_string(),
        "30.0".to_string(),
        "16".to_string(),
    ];
    check_turn_claim(
        db,
        "CLAIM_FAIR_JOBS",
        statement,
        query,
        arguments,
        place,
        wanted,
    )
    .await
}

/// [`check_plans`] of `statement` (printed as `name`), a claim in turn order of `wanted` jobs:
/// `query` and `arguments` (the same values as SQL literals) bind its parameters but the place,
/// which follows them when there is one (at priority 0); allowed [`MAX_BUFFERS`] per 16 jobs.
/// The generic plan's estimated cost must stay under `jit_above_cost`. Returns the rows each plan
/// took.
async fn check_turn_claim(
    db: &Db,
    name: &str,
    statement: &str,
    query: QueryScalar<'_, Postgres, Value, PgArguments>,
    mut arguments: Vec<String>,
    place: Option<&FairPlace>,
    wanted: i64,
) -> [i64; 2] {
    let (query, name) = match place {
        None => (query, format!("{name} of {wanted}")),
        Some((turn, key, id)) => {
            arguments.extend([
                "0".to_string(),
                turn.to_string(),
                format!("'{key}'"),
                id.to_string(),
            ]);
            let query = query.bind(0_i16).bind(*turn).bind(key.clone()).bind(*id);
            let name = format!("{name}_AFTER of {wanted} (after turn {turn} of {key})");
            (query, name)
        }
    };
    let max_buffers = MAX_BUFFERS * ((wanted + 15) / 16);
    let custom = plan_of(db, &name, query).await;
    let generic = generic_plan_of(db, &name, statement, &arguments).await;
    // Above `jit_above_cost` (100,000 by default), PostgreSQL compiles the claim at every run
    // (most of a second on a large table); an oldest-first claim is estimated at about 12,000.
    let cost = generic[0]["Plan"]["Total Cost"].as_f64().unwrap();
    assert!(
        cost < 100_000.0,
        "{name}: the generic plan is estimated at {cost}, which JIT would compile at every run"
    );
    [
        check_within(&name, &custom, max_buffers),
        check_within(&format!("{name} (generic plan)"), &generic, max_buffers),
    ]
}

/// The place of the job of kind `kind` whose key in column `column` is `key`, in turn `turn`.
async fn turn_place(db: &Db, kind: &str, column: &str, key: &str, turn: i64) -> FairPlace {
    let id: i64 = sqlx::query_scalar(&format!(
        "SELECT id FROM jobs_queue WHERE kind = $1 AND {column} = $2 AND fair_turn = $3"
    ))
    .bind(kind)
    .bind(key)
    .bind(turn)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    (turn, key.to_string(), id)
}

/// A fair claim reads one range of its index, as any claim does, not the keys nor their jobs:
/// with 1,000 tenants of 100 due jobs each, a tenant of 100,000, and the foreign backlog
/// (another kind's keyed jobs among them), a claim of 16 reads a few pages, from the front or
/// from a place in a round, and claims of 144 and 528 (128 and 512 of them ahead of the free
/// slots) read in proportion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_claim_reads_one_range_of_its_index() {
    let db = backlog_of_another_kind().await;
    db.execute(
        "INSERT INTO jobs_queue (kind, queue, payload, max_attempts, run_at, fair_key)
         SELECT 'tenant_task', 'default', '{\"tenant\": \"t\", \"n\": 0}', 8,
                now() - interval '2 hours' + n * interval '30 ms',
                CASE WHEN n <= 100000 THEN 'tenant ' || lpad((n % 1000)::text, 4, '0')
                     ELSE 'tenant flood' END
         FROM generate_series(1, 200000) AS n;
         INSERT INTO jobs_queue (kind, queue, payload, max_attempts, fair_key)
         SELECT 'foreign_kind', 'default', '{}', 8, 'tenant ' || (n % 5000)
         FROM generate_series(1, 100000) AS n",
    )
    .await;
    db.execute("VACUUM ANALYZE jobs_queue").await;
    let in_a_round = turn_place(&db, "tenant_task", "fair_key", "tenant 0500", 50).await;
    let past_the_rounds = turn_place(&db, "tenant_task", "fair_key", "tenant flood", 50_000).await;
    for place in [None, Some(&in_a_round), Some(&past_the_rounds)] {
        for wanted in CLAIM_SIZES[1..].iter().copied() {
            assert_eq!(check_fair_claim(&db, place, wanted).await, [wanted; 2]);
        }
    }
}

/// The fair claims are planned once per connection too, whatever the number of jobs asked for
/// and wherever they start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_claim_keeps_one_plan_per_connection() {
    let db = Db::new().await;
    db.execute(
        "INSERT INTO jobs_queue (kind, queue, payload, max_attempts, fair_key)
         SELECT 'tenant_task', 'default', '{\"tenant\": \"t\", \"n\": 0}', 8, 'tenant ' || (n % 50)
         FROM generate_series(1, 5000) AS n",
    )
    .await;
    among_other_kinds(&db).await;
    let mut conn = db.pool.acquire().await.unwrap();
    let calls: usize = 12;
    for call in 0..calls {
        // Claims of every size, from the front, then from where that one ended.
        let limit = CLAIM_SIZES[call % CLAIM_SIZES.len()];
        let rows = sqlx::query(sql::CLAIM_FAIR_JOBS)
            .bind("default")
            .bind("tenant_task")
            .bind(limit)
            .bind(30.0_f64)
            .bind(limit)
            .fetch_all(&mut *conn)
            .await
            .unwrap();
        assert_eq!(rows.len() as i64, limit, "claimed what it was asked for");
        let (turn, key, id): (i64, String, i64) = rows
            .iter()
            .map(|row| (row.get("fair_turn"), row.get("turn_key"), row.get("id")))
            .max()
            .unwrap();
        let rows = sqlx::query(sql::CLAIM_FAIR_JOBS_AFTER)
            .bind("default")
            .bind("tenant_task")
            .bind(limit)
            .bind(30.0_f64)
            .bind(limit)
            .bind(0_i16)
            .bind(turn)
            .bind(key)
            .bind(id)
            .fetch_all(&mut *conn)
            .await
            .unwrap();
        assert_eq!(rows.len() as i64, limit, "claimed what it was asked for");
    }
    for statement in [sql::CLAIM_FAIR_JOBS, sql::CLAIM_FAIR_JOBS_AFTER] {
        assert_eq!(
            plans_made(&mut conn, statement).await,
            (calls as i64 - 5, 5),
            "planned one-off only for the first five executions"
        );
    }
}

/// [`check_plans`] of [`sql::CLAIM_KEY_LIMITED_JOBS`], a claim of up to `wanted` `per_merchant`
/// jobs, 16 for free slots and the rest ahead of them, from queue `default` with at most 2
/// running per key, `max_running` in all, going on after `cursor`, allowed its buffers per 16
/// jobs; returns the rows each plan took.
async fn check_key_limited_claim(
    db: &Db,
    max_running: Option<i64>,
    cursor: Option<&str>,
    rate_per_key: Option<(i32, f64)>,
    wanted: i64,
) -> [i64; 2] {
    // Under a per-key rate limit, each key visited costs one more probe (of its row of starts),
    // each key started a rewrite of it, and the claim deletes rows the window left behind.
    let max_buffers = if rate_per_key.is_some() {
        MAX_BUFFERS + 300
    } else {
        MAX_BUFFERS
    } * ((wanted + 15) / 16);
    let explain = explain_analyze(sql::CLAIM_KEY_LIMITED_JOBS);
    let query = sqlx::query_scalar(&explain)
        .bind("per_merchant")
        .bind("default")
        .bind(wanted)
        .bind(max_running)
        .bind(30.0_f64)
        .bind(None::<i32>)
        .bind(None::<f64>)
        .bind(2_i64)
        .bind(cursor)
        .bind(rate_per_key.map(|(jobs, _)| jobs))
        .bind(rate_per_key.map(|(_, window)| window))
        .bind(16_i64);
    let arguments = [
        "'per_merchant'".to_string(),
        "'default'".to_string(),
        wanted.to_string(),
        literal(max_running, "bigint"),
        "30.0".to_string(),
        "NULL::integer".to_string(),
        "NULL::float8".to_string(),
        "2".to_string(),
        cursor.map_or_else(|| "NULL::text".to_string(), |cursor| format!("'{cursor}'")),
        literal(rate_per_key.map(|(jobs, _)| jobs), "integer"),
        literal(rate_per_key.map(|(_, window)| window), "float8"),
        "16".to_string(),
    ];
    let name = format!(
        "CLAIM_KEY_LIMITED_JOBS of {wanted} (after {}, running limit {}, rate per key {})",
        cursor.unwrap_or("no key"),
        literal(max_running, "bigint"),
        literal(rate_per_key.map(|(jobs, _)| jobs), "integer"),
    );
    let custom = plan_of(db, &name, query).await;
    let generic = generic_plan_of(db, &name, sql::CLAIM_KEY_LIMITED_JOBS, &arguments).await;
    [
        check_within(&name, &custom, max_buffers),
        check_within(&format!("{name} (generic plan)"), &generic, max_buffers),
    ]
}

/// A claim under a per-key limit walks keys, one descent each, passing over the keys whose
/// running jobs fill their limit (one descent each), not their jobs: with 1,000 merchants of 100
/// due jobs each, the first 20 of them full (2 running each), and the foreign backlog, a claim of
/// 16 reads a few pages, wherever its round starts, and claims of 144 and 528 (128 and 512 of
/// them ahead of the free slots) read in proportion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_key_limited_claim_walks_keys_not_jobs() {
    let db = backlog_of_another_kind().await;
    db.execute(
        "INSERT INTO jobs_queue (kind, queue, payload, max_attempts, run_at, limit_key)
         SELECT 'per_merchant', 'default', '{\"merchant\": \"m\", \"millis\": 0}', 8,
                now() - interval '2 hours' + n * interval '30 ms',
                'merchant ' || lpad((n % 1000)::text, 4, '0')
         FROM generate_series(1, 100000) AS n",
    )
    .await;
    db.execute(
        "INSERT INTO jobs_queue (kind, queue, payload, max_attempts, state, attempts, attempted_at,
                                 lease_token, lease_expires_at, limit_key)
         SELECT 'per_merchant', 'default', '{\"merchant\": \"m\", \"millis\": 0}', 8, 'running', 1,
                now(), gen_random_uuid(), now() + interval '1 hour',
                'merchant ' || lpad((n % 20)::text, 4, '0')
         FROM generate_series(1, 40) AS n",
    )
    .await;
    db.execute("VACUUM ANALYZE jobs_queue").await;
    for cursor in [None, Some("merchant 0500"), Some("merchant 0999")] {
        for wanted in CLAIM_SIZES[1..].iter().copied() {
            assert_eq!(
                check_key_limited_claim(&db, None, cursor, None, wanted).await,
                [wanted; 2]
            );
        }
    }
    assert_eq!(
        check_key_limited_claim(&db, Some(1_000), None, None, 16).await,
        [16, 16]
    );
    // A running limit the running jobs fill: nothing to walk (one row without a job).
    assert_eq!(
        check_key_limited_claim(&db, Some(40), None, None, 16).await,
        [1, 1]
    );
    // A per-key rate limit of 10 an hour: 500 merchants started jobs in the last half hour, the
    // 10 from merchant 0020 on used up their window (passed over after the 20 at their running
    // limit), and 5,000 rows are older than the window.
    db.execute(
        "INSERT INTO jobs_key_rate_limits (kind, key, window_secs, last_started_at, started_at,
                                           started)
         SELECT 'per_merchant', 'merchant ' || lpad(n::text, 4, '0'), 3600,
                now() - interval '30 minutes',
                ARRAY[now() - interval '40 minutes', now() - interval '30 minutes'],
                ARRAY[CASE WHEN n BETWEEN 20 AND 29 THEN 5 ELSE 1 END, 5]
         FROM generate_series(0, 499) AS n;
         INSERT INTO jobs_key_rate_limits (kind, key, window_secs, last_started_at, started_at,
                                           started)
         SELECT 'per_merchant', 'gone ' || n, 3600, now() - interval '2 hours',
                ARRAY[now() - interval '2 hours'], ARRAY[1]
         FROM generate_series(1, 5000) AS n",
    )
    .await;
    db.execute("VACUUM ANALYZE jobs_key_rate_limits").await;
    assert_eq!(
        check_key_limited_claim(&db, None, None, Some((10, 3_600.0)), 16).await,
        [16, 16]
    );
    // What `jobs stats` reads of the per-key limits: the waiting jobs of the 30 keys at a limit,
    // by key (counting them reads their index entries).
    let explain = explain_analyze(sql::KEY_LIMIT_USE);
    let query = sqlx::query_scalar(&explain)
        .bind("per_merchant")
        .bind(2_i64)
        .bind(vec!["default".to_string()])
        .bind(10_i32)
        .bind(3_600.0_f64);
    let arguments = ["'per_merchant'", "2", "ARRAY['default']", "10", "3600.0"].map(String::from);
    check_plans(&db, "KEY_LIMIT_USE", sql::KEY_LIMIT_USE, query, &arguments).await;
    // Every other merchant's window full too: the claim visits 64 keys more than it may take
    // jobs and keys at their running limit, takes nothing, and says where it stopped (one row
    // without a job).
    db.execute(
        "INSERT INTO jobs_key_rate_limits (kind, key, window_secs, last_started_at, started_at,
                                           started)
         SELECT 'per_merchant', 'merchant ' || lpad(n::text, 4, '0'), 3600,
                now() - interval '30 minutes', ARRAY[now() - interval '30 minutes'], ARRAY[10]
         FROM generate_series(0, 999) AS n
         ON CONFLICT (kind, key) DO UPDATE
         SET started_at = excluded.started_at, started = excluded.started",
    )
    .await;
    db.execute("VACUUM ANALYZE jobs_key_rate_limits").await;
    assert_eq!(
        check_key_limited_claim(&db, None, None, Some((10, 3_600.0)), 16).await,
        [1, 1]
    );
}

/// A database of `jobs` ready jobs of `per_merchant` in queue `default`, over 200 merchants.
async fn merchants_backlog(jobs: i64) -> Db {
    let db = Db::new().await;
    db.execute(&format!(
        "INSERT INTO jobs_queue (kind, queue, payload, max_attempts, limit_key)
         SELECT 'per_merchant', 'default', '{{\"merchant\": \"m\", \"millis\": 0}}', 8,
                'merchant ' || (n % 200)
         FROM generate_series(1, {jobs}) AS n"
    ))
    .await;
    db
}

/// [`sql::CLAIM_KEY_LIMITED_JOBS`], run as a worker runs it (in a transaction after
/// [`sql::LOCK_LIMITED_KIND`], which has it use its generic plan), is planned once per
/// connection, whatever the number of jobs asked for and wherever its round starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_key_limited_claim_keeps_one_plan_per_connection() {
    let db = merchants_backlog(2_000).await;
    let mut conn = db.pool.acquire().await.unwrap();
    let mut cursor: Option<String> = None;
    for call in 0..10 {
        let limit: i64 = if call % 2 == 0 { 1 } else { 16 };
        let mut transaction = conn.begin().await.unwrap();
        sqlx::query(sql::LOCK_LIMITED_KIND)
            .bind("per_merchant")
            .execute(&mut *transaction)
            .await
            .unwrap();
        let rows = sqlx::query(sql::CLAIM_KEY_LIMITED_JOBS)
            .bind("per_merchant")
            .bind("default")
            .bind(limit)
            .bind(None::<i64>)
            .bind(30.0_f64)
            .bind(None::<i32>)
            .bind(None::<f64>)
            .bind(2_i64)
            .bind(cursor.as_deref())
            .bind(None::<i32>)
            .bind(None::<f64>)
            .bind(limit)
            .fetch_all(&mut *transaction)
            .await
            .unwrap();
        transaction.commit().await.unwrap();
        assert_eq!(rows.len() as i64, limit, "claimed what it was asked for");
        cursor = rows[0].get("key_cursor");
    }
    assert_eq!(
        plans_made(&mut conn, sql::CLAIM_KEY_LIMITED_JOBS).await,
        (10, 0),
        "planned once: its generic plan at every execution, no custom plan"
    );
}

/// Claims resuming where the last one ended keep their generic plan too, with the table's
/// statistics known: a place within a backlog enqueued at once (one `run_at`), as a worker's
/// producer passes it, makes the one-off plans estimate few rows after it, and PostgreSQL
/// would otherwise plan every execution again (as long as it takes to run the claim).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_from_the_last_place_keep_one_plan_per_connection() {
    let db = Db::new().await;
    insert_due_record_runs(&db, 50_000, "x", "1 hour", "0 ms").await;
    db.execute("VACUUM ANALYZE jobs_queue").await;
    let mut conn = db.pool.acquire().await.unwrap();
    let statements = [
        ("CLAIM_ONE_KIND_AFTER", sql::CLAIM_ONE_KIND_AFTER),
        ("CLAIM_JOBS_AFTER", sql::CLAIM_JOBS_AFTER),
    ];
    let mut place = (0_i16, DateTime::<Utc>::UNIX_EPOCH, 0_i64);
    for _ in 0..10 {
        for (name, statement) in statements {
            let kinds = if name.starts_with("CLAIM_ONE_KIND") {
                vec!["record_run"]
            } else {
                vec!["record_run", "bad_input"]
            };
            let leases = vec![30.0_f64; kinds.len()];
            let (priority, run_at, id) = place;
            let rows = sqlx::query(statement)
                .bind("default")
                .bind(kinds)
                .bind(16_i64)
                .bind(leases)
                .bind(16_i64)
                .bind(priority)
                .bind(run_at)
                .bind(id)
                .fetch_all(&mut *conn)
                .await
                .unwrap();
            assert_eq!(rows.len(), 16, "{name} claimed what it was asked for");
            for row in rows {
                let claimed: (i16, DateTime<Utc>, i64) =
                    (row.get("priority"), row.get("run_at"), row.get("id"));
                place = place.max(claimed);
            }
        }
    }
    let plans = [
        plans_made(&mut conn, statements[0].1).await,
        plans_made(&mut conn, statements[1].1).await,
    ];
    assert_eq!(
        plans,
        [(5, 5), (5, 5)],
        "{:?}: each planned one-off only for its first five executions",
        statements.map(|(name, _)| name)
    );
}

/// The per-key limited claims in turn order: a statement of its own, which takes all the jobs it
/// read or none ([`sql::CLAIM_KEY_TURNS`], [`sql::CLAIM_KEY_TURNS_AFTER`]), and the claim in a
/// transaction, which takes them up to the first whose key has no room
/// ([`sql::CLAIM_KEY_TURNS_TO_LIMIT`], [`sql::CLAIM_KEY_TURNS_TO_LIMIT_AFTER`]): each named,
/// from the front and after a place.
const KEY_TURN_CLAIMS: [(&str, [&str; 2]); 2] = [
    (
        "CLAIM_KEY_TURNS",
        [sql::CLAIM_KEY_TURNS, sql::CLAIM_KEY_TURNS_AFTER],
    ),
    (
        "CLAIM_KEY_TURNS_TO_LIMIT",
        [
            sql::CLAIM_KEY_TURNS_TO_LIMIT,
            sql::CLAIM_KEY_TURNS_TO_LIMIT_AFTER,
        ],
    ),
];

/// [`check_plans`] of a per-key limited claim in turn order (`claim`, of [`KEY_TURN_CLAIMS`]) of
/// `wanted` `per_merchant` jobs, 16 for free slots and the rest ahead of them, from queue
/// `default`, at most 2 running per key: from the front, or after `place`; allowed
/// [`MAX_BUFFERS`] per 16 jobs; returns the rows each plan took. Both plans are generic, as a
/// worker runs the claim; their estimated cost stays under `jit_above_cost`.
async fn check_key_turns_claim(
    db: &Db,
    (name, statements): (&str, [&str; 2]),
    place: Option<&FairPlace>,
    wanted: i64,
) -> [i64; 2] {
    let statement = match place {
        None => statements[0],
        Some(_) => statements[1],
    };
    let explain = explain_analyze(statement);
    let query = sqlx::query_scalar(&explain)
        .bind("per_merchant")
        .bind("default")
        .bind(wanted)
        .bind(None::<i64>)
        .bind(30.0_f64)
        .bind(None::<i32>)
        .bind(None::<f64>)
        .bind(2_i64)
        .bind(16_i64);
    let arguments = key_turns_arguments(wanted);
    check_turn_claim(db, name, statement, query, arguments, place, wanted).await
}

/// The SQL literals of the parameters of a per-key limited claim in turn order from the front
/// that [`check_key_turns_claim`] binds: `wanted` jobs, 16 for free slots.
fn key_turns_arguments(wanted: i64) -> Vec<String> {
    vec![
        "'per_merchant'".to_string(),
        "'default'".to_string(),
        wanted.to_string(),
        "NULL::bigint".to_string(),
        "30.0".to_string(),
        "NULL::integer".to_string(),
        "NULL::float8".to_string(),
        "2".to_string(),
        "16".to_string(),
    ]
}

/// While no key is at its limit, a per-key limited claim reads one range of the turn index, as
/// a fair claim does, not the keys nor their jobs: with 1,000 merchants of 100 due jobs each, a
/// merchant of 100,000, a fair kind's keyed jobs, and the foreign backlog, a claim of 16 reads a
/// few pages, from the front or from a place in a round, and claims of 144 and 528 (128 and 512
/// of them ahead of the free slots) read in proportion. With a key at its limit, it reads no job
/// at all.
/// (The flood merchant has 100,000 jobs: its turns go on past every other merchant's.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_key_claim_by_turns_reads_one_range_of_its_index() {
    let db = backlog_of_another_kind().await;
    db.execute(
        "INSERT INTO jobs_queue (kind, queue, payload, max_attempts, run_at, limit_key)
         SELECT 'per_merchant', 'default', '{\"merchant\": \"m\", \"millis\": 0}', 8,
                now() - interval '2 hours' + n * interval '30 ms',
                CASE WHEN n <= 100000 THEN 'merchant ' || lpad((n % 1000)::text, 4, '0')
                     ELSE 'merchant flood' END
         FROM generate_series(1, 200000) AS n;
         INSERT INTO jobs_queue (kind, queue, payload, max_attempts, fair_key)
         SELECT 'tenant_task', 'default', '{}', 8, 'merchant ' || (n % 5000)
         FROM generate_series(1, 100000) AS n",
    )
    .await;
    db.execute("VACUUM ANALYZE jobs_queue").await;
    let in_a_round = turn_place(&db, "per_merchant", "limit_key", "merchant 0500", 50).await;
    let past_the_rounds =
        turn_place(&db, "per_merchant", "limit_key", "merchant flood", 50_000).await;
    for claim in KEY_TURN_CLAIMS {
        for place in [None, Some(&in_a_round)] {
            for wanted in CLAIM_SIZES[1..].iter().copied() {
                assert_eq!(
                    check_key_turns_claim(&db, claim, place, wanted).await,
                    [wanted; 2]
                );
            }
        }
    }
    // Past the other merchants' last turns, the flood merchant's jobs alone: the claim reads as
    // many as it may take; in a transaction it takes 2, its limit, and as a statement of its own
    // none (one row without a job).
    let [alone, in_transaction] = KEY_TURN_CLAIMS;
    for (claim, taken) in [(alone, [1, 1]), (in_transaction, [2, 2])] {
        for wanted in CLAIM_SIZES[1..].iter().copied() {
            assert_eq!(
                check_key_turns_claim(&db, claim, Some(&past_the_rounds), wanted).await,
                taken
            );
        }
    }
    // Two jobs of one merchant running: its limit of 2 is reached, and the claim reads nothing
    // (one row without a job).
    db.execute(
        "INSERT INTO jobs_queue (kind, queue, payload, max_attempts, state, attempts, attempted_at,
                                 lease_token, lease_expires_at, limit_key)
         SELECT 'per_merchant', 'default', '{\"merchant\": \"m\", \"millis\": 0}', 8, 'running', 1,
                now(), gen_random_uuid(), now() + interval '1 hour', 'merchant 0007'
         FROM generate_series(1, 2)",
    )
    .await;
    for claim in KEY_TURN_CLAIMS {
        assert_eq!(check_key_turns_claim(&db, claim, None, 16).await, [1, 1]);
    }
}

/// A per-key limited claim in turn order of its own takes all the jobs it read or none, which
/// spares it numbering each key's jobs in turn order against its room: its plan has two
/// `WindowAgg` nodes fewer (each over a sort of the jobs read) than the claim up to the first job
/// without room, which the transaction runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_key_claim_by_turns_of_its_own_numbers_no_key_s_jobs() {
    let db = merchants_backlog(2_000).await;
    db.execute("VACUUM ANALYZE jobs_queue").await;
    let mut windows = Vec::new();
    for (name, [from_the_front, _]) in KEY_TURN_CLAIMS {
        let plan = generic_plan_of(&db, name, from_the_front, &key_turns_arguments(144)).await;
        let nodes = plan_nodes(&plan);
        windows.push(
            nodes
                .iter()
                .filter(|node| node["Node Type"] == "WindowAgg")
                .count(),
        );
    }
    let [alone, to_limit] = windows[..] else {
        unreachable!("two claims")
    };
    println!("WindowAgg nodes: {alone} in the claim of its own, {to_limit} up to the limit");
    assert_eq!(
        alone + 2,
        to_limit,
        "the claim of its own numbers no key's jobs"
    );
}

/// Adds 300,000 ready jobs of 10 other kinds and has PostgreSQL's statistics see them: the kind
/// claimed is a small part of the table, which a plan made for its name (one-off) would count on,
/// and PostgreSQL would then plan the claims one-off at every execution.
async fn among_other_kinds(db: &Db) {
    db.execute(
        "INSERT INTO jobs_queue (kind, queue, payload, max_attempts)
         SELECT 'other_' || (n % 10), 'default', '{}', 8 FROM generate_series(1, 300000) AS n",
    )
    .await;
    db.execute("ANALYZE jobs_queue").await;
}

/// A database of 5,000 ready jobs of `per_merchant` over 200 merchants among 300,000 of other
/// kinds ([`among_other_kinds`]), and a connection to it on which `calls` claims in turn order
/// ran, of each of the [`CLAIM_SIZES`], from the front and from where the last one ended, with
/// `statements` (from the front, after a place): in a
/// transaction after [`sql::LOCK_LIMITED_KIND`] when `locked`, and as statements of their own
/// otherwise.
async fn claims_by_turns_made(
    calls: usize,
    locked: bool,
    statements: [&str; 2],
) -> (Db, PoolConnection<Postgres>) {
    let db = merchants_backlog(5_000).await;
    among_other_kinds(&db).await;
    let mut conn = db.pool.acquire().await.unwrap();
    let mut place: Option<FairPlace> = None;
    for call in 0..calls {
        // Each size from the front, then from where that one ended.
        let limit = CLAIM_SIZES[call / 2 % CLAIM_SIZES.len()];
        let after = place.take().filter(|_| call % 2 == 1);
        let query = sqlx::query(match after {
            None => statements[0],
            Some(_) => statements[1],
        })
        .bind("per_merchant")
        .bind("default")
        .bind(limit)
        .bind(None::<i64>)
        .bind(30.0_f64)
        .bind(None::<i32>)
        .bind(None::<f64>)
        .bind(i64::MAX)
        .bind(limit);
        let query = match after {
            None => query,
            Some((turn, key, id)) => query.bind(0_i16).bind(turn).bind(key).bind(id),
        };
        let rows = if locked {
            let mut transaction = conn.begin().await.unwrap();
            sqlx::query(sql::LOCK_LIMITED_KIND)
                .bind("per_merchant")
                .execute(&mut *transaction)
                .await
                .unwrap();
            let rows = query.fetch_all(&mut *transaction).await.unwrap();
            transaction.commit().await.unwrap();
            rows
        } else {
            query.fetch_all(&mut *conn).await.unwrap()
        };
        assert_eq!(rows.len() as i64, limit, "claimed what it was asked for");
        assert!(rows[0].get::<bool, _>("sole"), "had the kind to itself");
        place = rows
            .iter()
            .map(|row| (row.get("fair_turn"), row.get("turn_key"), row.get("id")))
            .max();
    }
    (db, conn)
}

/// The plans [`claims_by_turns_made`] made on its connection, of `statements` (the claim from
/// the front, then the claim after a place): `(generic, one-off)` each.
async fn plans_of_claims_by_turns(
    calls: usize,
    locked: bool,
    statements: [&str; 2],
) -> Vec<(i64, i64)> {
    let (_db, mut conn) = claims_by_turns_made(calls, locked, statements).await;
    let mut plans = Vec::new();
    for statement in statements {
        plans.push(plans_made(&mut conn, statement).await);
    }
    plans
}

/// The per-key limited claims in turn order up to the first job without room, run in a
/// transaction after [`sql::LOCK_LIMITED_KIND`], are planned once per connection, whatever the
/// number of jobs asked for and wherever they start: their generic plan at every execution, no
/// one-off plan.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_key_claim_by_turns_keeps_one_plan_per_connection() {
    let [_, (_, up_to_limit)] = KEY_TURN_CLAIMS;
    assert_eq!(
        plans_of_claims_by_turns(12, true, up_to_limit).await,
        [(6, 0), (6, 0)]
    );
}

/// The per-key limited claims in turn order, run as statements of their own (as a worker first
/// runs them: all the jobs read or none, or up to the first job without room), are planned
/// one-off only for their first five executions on a connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_key_claim_by_turns_of_its_own_keeps_one_plan_per_connection() {
    for (name, statements) in KEY_TURN_CLAIMS {
        assert_eq!(
            plans_of_claims_by_turns(24, false, statements).await,
            [(7, 5), (7, 5)],
            "{name}"
        );
    }
}
