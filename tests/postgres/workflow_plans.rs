//! The plans of every statement the workflow code runs, on a million retained rows: the
//! dependency and batch statements of the store, the statements inside the workflow functions
//! (migrations 15 and 17), the operators' reads (a workflow, the longest waiting, the longest open
//! batches, a job's links) and retention's prunes. Each reads through indexes, never a whole
//! table.

use jobs::postgres::__private::sql;
use serde_json::Value;
use sqlx::postgres::PgArguments;
use sqlx::query::QueryScalar;
use sqlx::Postgres;

use crate::plans::{done_outcomes, explain, explain_analyze, leases_of, plan_nodes, plan_of};
use crate::support::Db;

/// A million finished jobs of 50 kinds (a quarter of them prerequisites of the next, a tenth
/// of them members of 100,000 ended batches of 64-id chunks), then live ones: 1,000 running
/// prerequisites with 1,000 waiting dependents, 2,000 dead, 100 open batches with 64 ready
/// members each and a waiting callback.
const FILL: &str = "
INSERT INTO jobs_batches (callback_id, open_chunks, created_at, ended_at)
SELECT NULL, 0, now() - interval '31 days', now() - interval '30 days'
FROM generate_series(1, 100000);
INSERT INTO jobs_queue (kind, queue, payload, state, attempts, max_attempts, finished_at,
                        has_dependents, prerequisites_left, batch_id)
SELECT 'kind_' || (n % 50), 'queue_' || (n % 5), '{}'::jsonb,
       CASE WHEN n % 10 = 0 THEN 'cancelled' ELSE 'done' END, 1, 8,
       now() - interval '30 days' + n * interval '1 ms',
       n % 4 = 0, CASE WHEN n % 4 = 1 AND n > 1 THEN 0 END,
       CASE WHEN n % 10 = 3 THEN (n / 10) % 100000 + 1 END
FROM generate_series(1, 1000000) AS n;
INSERT INTO jobs_dependencies (prerequisite_id, dependent_id, on_failure)
SELECT n, n + 1, 'cancel' FROM generate_series(4, 999996, 4) AS n;
INSERT INTO jobs_batch_chunks (batch_id, chunk, pending, done, closed)
SELECT batch_id, id / 64, 0, count(*), true FROM jobs_queue
WHERE batch_id IS NOT NULL GROUP BY batch_id, id / 64;
INSERT INTO jobs_queue (kind, queue, payload, state, attempts, max_attempts, has_dependents,
                        lease_token, lease_expires_at)
SELECT 'kind_' || (n % 50), 'queue_' || (n % 5), '{}'::jsonb, 'running', 1, 8, true,
       gen_random_uuid(), now() + interval '30 s'
FROM generate_series(1, 1000) AS n;
INSERT INTO jobs_queue (kind, queue, payload, state, attempts, max_attempts, prerequisites_left,
                        created_at)
SELECT 'kind_' || (n % 50), 'queue_' || (n % 5), '{}'::jsonb, 'waiting', 0, 8, 1,
       now() - interval '2 hours'
FROM generate_series(1, 1000) AS n;
INSERT INTO jobs_dependencies (prerequisite_id, dependent_id, on_failure)
SELECT 1000000 + n, 1001000 + n, 'cancel' FROM generate_series(1, 1000) AS n;
INSERT INTO jobs_queue (kind, queue, payload, state, attempts, max_attempts, finished_at)
SELECT 'kind_' || (n % 50), 'queue_' || (n % 5), '{}'::jsonb, 'dead', 8, 8, now()
FROM generate_series(1, 2000) AS n;
INSERT INTO jobs_queue (kind, queue, payload, state, attempts, max_attempts)
SELECT 'callback', 'default', '{}'::jsonb, 'waiting', 0, 8 FROM generate_series(1, 100);
INSERT INTO jobs_batches (callback_id, open_chunks, created_at)
SELECT id, 1, now() - interval '3 hours' FROM jobs_queue WHERE kind = 'callback';
INSERT INTO jobs_queue (kind, queue, payload, state, attempts, max_attempts, batch_id)
SELECT 'member', 'default', '{}'::jsonb, 'ready', 0, 8, b.id
FROM jobs_batches AS b, generate_series(1, 64) WHERE b.ended_at IS NULL;
INSERT INTO jobs_batch_chunks (batch_id, chunk, pending)
SELECT batch_id, id / 64, count(*) FROM jobs_queue WHERE kind = 'member'
GROUP BY batch_id, id / 64;
UPDATE jobs_batches AS b SET open_chunks = (SELECT count(*) FROM jobs_batch_chunks AS c
                                            WHERE c.batch_id = b.id)
WHERE b.ended_at IS NULL";

/// The tables the workflow statements read.
const TABLES: [&str; 4] = [
    "jobs_queue",
    "jobs_dependencies",
    "jobs_batches",
    "jobs_batch_chunks",
];

/// Runs `query` (an `EXPLAIN` of `name`, bound) rolled back, and asserts that no node of its
/// plan reads one of [`TABLES`] whole nor hashes a subplan over one; returns the plan.
async fn assert_indexed(
    db: &Db,
    name: &str,
    query: QueryScalar<'_, Postgres, Value, PgArguments>,
) -> Value {
    let plan = plan_of(db, name, query).await;
    let nodes = plan_nodes(&plan);
    for node in &nodes {
        let relation = node["Relation Name"].as_str().unwrap_or_default();
        assert!(
            !(node["Node Type"] == "Seq Scan" && TABLES.contains(&relation)),
            "{name} reads {relation} whole"
        );
        let subplan = node["Subplan Name"].as_str().unwrap_or_default();
        assert!(
            !subplan.starts_with("hashed"),
            "{name} hashes a subplan over a table: {subplan}"
        );
    }
    if let Some(time) = plan[0]["Execution Time"].as_f64() {
        println!("{name}: {time:.1} ms");
    }
    plan
}

/// An id of the given shape in [`FILL`]: the first row matching `condition`.
async fn an_id(db: &Db, condition: &str) -> i64 {
    db.count(&format!("SELECT min(id) FROM jobs_queue WHERE {condition}"))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_workflow_statement_reads_through_indexes_on_a_million_rows() {
    let db = Db::new().await;
    db.execute(FILL).await;
    for table in TABLES {
        db.execute(&format!("VACUUM ANALYZE {table}")).await;
    }
    let prerequisite = an_id(&db, "state = 'running' AND has_dependents").await;
    let dependent = an_id(&db, "state = 'waiting' AND prerequisites_left = 1").await;
    let finished_prerequisite = an_id(&db, "state = 'done' AND has_dependents").await;
    let member = an_id(&db, "kind = 'member'").await;
    let batch: i64 = db
        .count(&format!(
            "SELECT batch_id FROM jobs_queue WHERE id = {member}"
        ))
        .await;
    let callback: i64 = db
        .count(&format!(
            "SELECT callback_id FROM jobs_batches WHERE id = {batch}"
        ))
        .await;
    let lock = sql::RETENTION_LOCK_KEY;
    let week = 7.0 * 86_400.0_f64;

    // Enqueueing after others (store/dependencies.rs).
    let insert = explain_analyze(sql::INSERT_DEPENDENT_JOB);
    assert_indexed(
        &db,
        "INSERT_DEPENDENT_JOB",
        sqlx::query_scalar(&insert)
            .bind("kind_1")
            .bind("queue_1")
            .bind(serde_json::json!({}))
            .bind(0_i16)
            .bind(8_i32)
            .bind(None::<f64>)
            .bind(0.0_f64)
            .bind(None::<String>)
            .bind(None::<String>)
            .bind(None::<String>)
            .bind(None::<String>)
            .bind(vec![prerequisite, finished_prerequisite])
            .bind(vec!["cancel", "run"]),
    )
    .await;
    for (name, statement) in [
        ("EXISTING_JOBS", sql::EXISTING_JOBS),
        ("LOCK_PREREQUISITES", sql::LOCK_PREREQUISITES),
    ] {
        let text = explain_analyze(statement);
        assert_indexed(
            &db,
            name,
            sqlx::query_scalar(&text).bind(vec![prerequisite, finished_prerequisite, 5]),
        )
        .await;
    }

    // Batches (store/batches.rs).
    let create = explain_analyze(sql::CREATE_BATCH);
    assert_indexed(
        &db,
        "CREATE_BATCH",
        sqlx::query_scalar(&create).bind(Some(member)),
    )
    .await;
    let open = explain_analyze(sql::OPEN_BATCH);
    assert_indexed(
        &db,
        "OPEN_BATCH",
        sqlx::query_scalar(&open)
            .bind(batch)
            .bind(vec![2_000_000_i64, 2_000_001]),
    )
    .await;
    let lock_member = explain_analyze(sql::LOCK_RUNNING_MEMBER);
    assert_indexed(
        &db,
        "LOCK_RUNNING_MEMBER",
        sqlx::query_scalar(&lock_member)
            .bind(member)
            .bind(uuid::Uuid::new_v4()),
    )
    .await;
    let add = explain_analyze(sql::ADD_TO_CHUNKS);
    assert_indexed(
        &db,
        "ADD_TO_CHUNKS",
        sqlx::query_scalar(&add)
            .bind(batch)
            .bind(vec![member, 2_000_000_i64]),
    )
    .await;
    let counts = explain_analyze(sql::BATCH_COUNTS);
    for (label, id, callback_id) in [
        ("by id", Some(batch), None),
        ("by callback", None, Some(callback)),
    ] {
        assert_indexed(
            &db,
            &format!("BATCH_COUNTS, {label}"),
            sqlx::query_scalar(&counts).bind(id).bind(callback_id),
        )
        .await;
    }
    let failed = explain_analyze(sql::FAILED_MEMBERS);
    assert_indexed(
        &db,
        "FAILED_MEMBERS",
        sqlx::query_scalar(&failed).bind(batch),
    )
    .await;

    // A worker's outcomes for the members of one batch (counted per chunk by
    // `jobs_workflow_steps`, whose statements are checked below).
    let (members, tokens) = leases_of(
        &db,
        &format!(
            "UPDATE jobs_queue SET state = 'running', attempts = 1,
                 lease_token = gen_random_uuid(), lease_expires_at = now() + interval '30 s'
             WHERE batch_id = {batch} RETURNING id, lease_token"
        ),
    )
    .await;
    let outcomes = explain_analyze(sql::RECORD_OUTCOMES);
    assert_indexed(
        &db,
        "RECORD_OUTCOMES, batch members",
        done_outcomes(&outcomes, &members, &tokens),
    )
    .await;

    // The statements inside the workflow functions of migrations 15 and 17, with
    // representative parameters.
    for (name, statement, id) in [
        (
            "jobs_release_dependents: the dependents' UPDATE",
            FUNCTION_RELEASE,
            prerequisite,
        ),
        (
            "jobs_reopen_dependents: the dependents' UPDATE",
            FUNCTION_REOPEN,
            prerequisite,
        ),
        (
            "jobs_reopen_dependents: another failed prerequisite",
            FUNCTION_OTHER_FAILED,
            dependent,
        ),
        (
            "jobs_workflow_steps: the chunks' UPDATE",
            FUNCTION_CHUNKS,
            member,
        ),
        (
            "jobs_batch_chunk_settle: the chunk read",
            FUNCTION_SETTLE_READ,
            member,
        ),
        (
            "jobs_batch_chunk_settle: the batch UPDATE",
            FUNCTION_SETTLE_BATCH,
            member,
        ),
        (
            "jobs_batch_ended: the callback's lock",
            FUNCTION_BATCH_ENDED,
            callback,
        ),
    ] {
        let text = explain_analyze(statement);
        assert_indexed(&db, name, sqlx::query_scalar(&text).bind(id)).await;
    }

    // What operators read.
    let workflow = explain_analyze(sql::WORKFLOW_JOBS);
    for (label, id) in [
        ("a dependent", dependent),
        ("a finished chain", finished_prerequisite),
        ("a batch member", member),
    ] {
        assert_indexed(
            &db,
            &format!("WORKFLOW_JOBS, {label}"),
            sqlx::query_scalar(&workflow).bind(id).bind(1_001_i64),
        )
        .await;
    }
    for (name, statement) in [
        ("LONGEST_WAITING", sql::LONGEST_WAITING),
        ("LONGEST_OPEN_BATCHES", sql::LONGEST_OPEN_BATCHES),
    ] {
        let text = explain_analyze(statement);
        assert_indexed(&db, name, sqlx::query_scalar(&text).bind(10_i64)).await;
    }
    let details = explain_analyze(sql::JOB_DETAILS);
    for id in [prerequisite, dependent, callback] {
        assert_indexed(
            &db,
            &format!("JOB_DETAILS of {id}"),
            sqlx::query_scalar(&details).bind(id),
        )
        .await;
    }

    // Retention: the prune of jobs probes their dependents and batches per candidate, the
    // prune of batches probes their callback and members.
    let lock_prunable = explain_analyze(sql::LOCK_PRUNABLE);
    let plan = assert_indexed(
        &db,
        "LOCK_PRUNABLE",
        sqlx::query_scalar(&lock_prunable)
            .bind(week)
            .bind(1_000_i64)
            .bind(lock),
    )
    .await;
    let locked = plan_nodes(&plan)
        .iter()
        .find(|node| node["Node Type"] == "LockRows")
        .and_then(|node| node["Actual Rows"].as_i64())
        .expect("locked rows");
    assert_eq!(locked, 1_000, "a full batch of the prunable jobs");
    // The oldest thousand jobs: plain ones, prerequisites and batch members among them.
    let oldest: Vec<i64> = (1..=1_000).collect();
    let prune = explain_analyze(sql::PRUNE_FINISHED);
    let plan = assert_indexed(
        &db,
        "PRUNE_FINISHED",
        sqlx::query_scalar(&prune).bind(&oldest),
    )
    .await;
    let deleted = plan_nodes(&plan)
        .iter()
        .find(|node| node["Node Type"] == "ModifyTable" && node["Relation Name"] == "jobs_queue")
        .and_then(|node| node["Actual Rows"].as_i64())
        .expect("deleted rows");
    assert_eq!(deleted, 1_000, "every prunable job of the batch");
    let batches = explain_analyze(sql::PRUNE_BATCHES);
    assert_indexed(
        &db,
        "PRUNE_BATCHES",
        sqlx::query_scalar(&batches)
            .bind(week)
            .bind(1_000_i64)
            .bind(lock),
    )
    .await;
    // The preview counts every old finished job (as it did before workflows); its workflow
    // probes must not hash a subplan over the dependencies or batches either.
    let count = explain(sql::COUNT_PRUNABLE);
    let plan = plan_of(&db, "COUNT_PRUNABLE", sqlx::query_scalar(&count).bind(week)).await;
    for node in plan_nodes(&plan) {
        let relation = node["Relation Name"].as_str().unwrap_or_default();
        assert!(
            !(node["Node Type"] == "Seq Scan"
                && relation != "jobs_queue"
                && TABLES.contains(&relation)),
            "COUNT_PRUNABLE reads {relation} whole"
        );
        assert!(
            !node["Subplan Name"]
                .as_str()
                .unwrap_or_default()
                .starts_with("hashed"),
            "COUNT_PRUNABLE hashes a subplan"
        );
    }
}

/// `jobs_release_dependents`' lock and UPDATE of the dependents, prerequisite `$1` ended dead.
const FUNCTION_RELEASE: &str = "
WITH dependents AS (
    SELECT d.id, d.state AS was, e.on_failure
    FROM jobs_dependencies AS e
    JOIN jobs_queue AS d ON d.id = e.dependent_id
    WHERE e.prerequisite_id = $1
    ORDER BY d.id
    FOR NO KEY UPDATE OF d
)
UPDATE jobs_queue AS d
SET prerequisites_left = d.prerequisites_left - 1,
    state = CASE WHEN d.state <> 'waiting' THEN d.state
                 WHEN e.on_failure = 'cancel' THEN 'cancelled'
                 WHEN d.prerequisites_left = 1 THEN 'ready' ELSE 'waiting' END
FROM dependents AS e
WHERE d.id = e.id
RETURNING d.id, e.was, d.state, d.queue, d.run_at, d.prerequisites_left, d.batch_id,
          d.has_dependents";

/// `jobs_reopen_dependents`' UPDATE, prerequisite `$1` replayed.
const FUNCTION_REOPEN: &str = "
UPDATE jobs_queue AS d
SET prerequisites_left = d.prerequisites_left + 1
FROM jobs_dependencies AS e
WHERE e.prerequisite_id = $1 AND d.id = e.dependent_id
RETURNING d.id, d.state, d.cancelled_by_prerequisite";

/// `jobs_reopen_dependents`' search for another failed prerequisite of dependent `$1`.
const FUNCTION_OTHER_FAILED: &str = "
SELECT p.id, p.state
FROM jobs_dependencies AS other
JOIN jobs_queue AS p ON p.id = other.prerequisite_id
WHERE other.dependent_id = $1 AND other.prerequisite_id <> 0
  AND other.on_failure = 'cancel' AND p.state IN ('dead', 'cancelled')
ORDER BY p.id
LIMIT 1";

/// `jobs_workflow_steps`' UPDATE of the chunks, member `$1` ended done.
const FUNCTION_CHUNKS: &str = "
WITH ended_or_reopened AS (
    SELECT m.id, m.batch, m.was, m.became, m.became IN ('done', 'dead', 'cancelled') AS ended
    FROM unnest(ARRAY[$1::bigint], ARRAY[(SELECT batch_id FROM jobs_queue WHERE id = $1)],
                ARRAY['running'], ARRAY['done']) AS m(id, batch, was, became)
    WHERE m.batch IS NOT NULL
      AND (m.was IN ('done', 'dead', 'cancelled')) <> (m.became IN ('done', 'dead', 'cancelled'))
), per_chunk AS (
    SELECT batch, id / 64 AS chunk,
           sum(CASE WHEN ended THEN -1 ELSE 1 END) AS pending,
           sum(CASE WHEN ended AND became = 'done' THEN 1
                    WHEN NOT ended AND was = 'done' THEN -1 ELSE 0 END) AS done
    FROM ended_or_reopened
    GROUP BY batch, id / 64
), locked AS (
    SELECT c.batch_id, c.chunk
    FROM jobs_batch_chunks AS c
    JOIN per_chunk AS p ON p.batch = c.batch_id AND p.chunk = c.chunk
    ORDER BY c.batch_id, c.chunk
    FOR NO KEY UPDATE OF c
)
UPDATE jobs_batch_chunks AS c
SET pending = c.pending + p.pending, done = c.done + p.done
FROM per_chunk AS p JOIN locked AS l ON l.batch_id = p.batch AND l.chunk = p.chunk
WHERE c.batch_id = p.batch AND c.chunk = p.chunk";

/// `jobs_batch_chunk_settle`'s read of the chunk of member `$1`.
const FUNCTION_SETTLE_READ: &str = "
SELECT pending, closed FROM jobs_batch_chunks
WHERE batch_id = (SELECT batch_id FROM jobs_queue WHERE id = $1) AND chunk = $1 / 64";

/// `jobs_batch_chunk_settle`'s UPDATE of the batch of member `$1`.
const FUNCTION_SETTLE_BATCH: &str = "
UPDATE jobs_batches
SET open_chunks = open_chunks - 1,
    ended_at = CASE WHEN open_chunks = 1 THEN now() ELSE ended_at END
WHERE id = (SELECT batch_id FROM jobs_queue WHERE id = $1)
RETURNING *";

/// `jobs_batch_ended`'s lock of callback `$1` (its UPDATE then goes by primary key).
const FUNCTION_BATCH_ENDED: &str = "
SELECT state, batch_id, has_dependents
FROM jobs_queue WHERE id = $1 AND state IN ('waiting', 'done', 'dead')
FOR NO KEY UPDATE";
