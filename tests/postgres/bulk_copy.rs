//! A large bulk of jobs alike, enqueued on its own, is written by `COPY`: ids in input order,
//! every field as an insert writes it, a refusal falls back to the insert, and an interrupted
//! copy never leaves a connection out of step.

use std::str::FromStr;
use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;

use jobs::EnqueueError;

use crate::support::Db;
use crate::test_jobs::record_run;

/// Enough jobs alike for `enqueue_many` to write them by `COPY`.
const BULK: usize = jobs::postgres::__private::COPY_MIN_JOBS + 200;

/// Records in `statements_seen` the start of each top-level statement that writes rows into
/// `jobs_queue`: `COPY ..` or `INSERT ..`. A statement-level trigger leaves `COPY` writing
/// rows many at a time.
async fn note_writing_statements(db: &Db) {
    db.execute(
        r"CREATE TABLE statements_seen (statement text NOT NULL);
         CREATE FUNCTION note_statement() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             INSERT INTO statements_seen VALUES ((regexp_match(current_query(), '^\s*(\w+)'))[1]);
             RETURN NULL;
         END $$;
         CREATE TRIGGER note_statement BEFORE INSERT ON jobs_queue
             FOR EACH STATEMENT EXECUTE FUNCTION note_statement();
         GRANT SELECT, INSERT ON statements_seen TO PUBLIC",
    )
    .await;
}

async fn statements_seen(db: &Db) -> Vec<String> {
    db.column("SELECT statement FROM statements_seen").await
}

/// Labels that a field of `COPY`'s text format must escape, and some it need not.
fn label(n: usize) -> String {
    const AWKWARD: [&str; 8] = [
        "back\\slash",
        "tab\there",
        "new\nline",
        "carriage\rreturn",
        "quote\"d",
        "\\.",
        "é ✓ 🦀",
        "\\N",
    ];
    format!("{n}:{}", AWKWARD[n % AWKWARD.len()])
}

/// [`BULK`] jobs, each with its [`label`].
pub fn labels() -> impl Iterator<Item = record_run::Args> {
    (0..BULK).map(|n| record_run::Args { label: label(n) })
}

/// Checks that `ids` are the bulk's, growing in input order, and that each row holds its
/// label and the fields an insert would give it.
async fn assert_written_in_order(db: &Db, ids: &[i64]) {
    assert_eq!(ids.len(), BULK);
    assert!(
        ids.windows(2).all(|pair| pair[0] < pair[1]),
        "ids grow in input order"
    );
    // The fields besides the label, as one line: those of a job ready at once, due when its
    // transaction began, with no attempt, key or batch.
    let rows: Vec<(i64, String, String)> = db
        .rows(
            "SELECT id, payload->>'label',
                    concat_ws(' ', kind, queue, priority, max_attempts, attempts, state,
                              run_at = created_at AND run_at <= now(),
                              num_nonnulls(dedupe_key, dedupe_scope, batch_id, fair_key, limit_key))
             FROM jobs_queue ORDER BY id",
        )
        .await;
    assert_eq!(rows.len(), BULK);
    for (n, ((id, label_written, fields), expected_id)) in rows.iter().zip(ids).enumerate() {
        assert_eq!(id, expected_id);
        assert_eq!(*label_written, label(n), "job {n}'s label");
        assert_eq!(fields, "record_run default 0 8 0 ready t 0", "job {n}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_bulk_on_its_own_is_copied_with_ids_in_input_order() {
    let db = Db::new().await;
    note_writing_statements(&db).await;
    let results = record_run::enqueue_many(&db.pool, labels()).await.unwrap();
    assert!(results.iter().all(|result| result.is_new()));
    let ids: Vec<i64> = results.iter().map(|result| result.id()).collect();
    assert_written_in_order(&db, &ids).await;
    assert_eq!(statements_seen(&db).await, ["COPY"]);
}

/// Enqueues the bulk as a login role of the test's own (roles are cluster-wide), set up by
/// `grants` (`{role}` stands for its name) and dropped afterwards whatever happens, on a pool of
/// one connection; `setting` is a boolean query, run as the role first, that must hold. Checks
/// that the bulk was written by insert, as a copy would have written it, on the session it
/// began on (a refusal leaves the connection in step: it is kept).
async fn assert_inserted_instead(db: &Db, grants: &str, setting: &'static str) {
    note_writing_statements(db).await;
    let role = format!("bulk_{}", db.name());
    db.execute(&format!("CREATE ROLE {role} LOGIN")).await;
    let options = PgConnectOptions::from_str(db.url())
        .unwrap()
        .username(&role);
    let grants = grants.replace("{role}", &role);
    let run = tokio::spawn({
        let pool = db.pool.clone();
        async move {
            sqlx::raw_sql(&grants).execute(&pool).await.unwrap();
            let restricted = PgPoolOptions::new()
                .max_connections(1)
                .connect_with(options)
                .await
                .unwrap();
            let session = || async {
                sqlx::query_scalar::<_, i32>("SELECT pg_backend_pid()")
                    .fetch_one(&restricted)
                    .await
                    .unwrap()
            };
            let holds: bool = sqlx::query_scalar(setting)
                .fetch_one(&restricted)
                .await
                .unwrap();
            assert!(holds, "the role's setting: {setting}");
            let before = session().await;
            let results = record_run::enqueue_many(&restricted, labels()).await;
            let kept_open = session().await == before;
            restricted.close().await;
            (results, kept_open)
        }
    })
    .await;
    db.execute(&format!("DROP OWNED BY {role}; DROP ROLE {role}"))
        .await;
    let (results, kept_open) = run.unwrap();
    let ids: Vec<i64> = results.unwrap().iter().map(|result| result.id()).collect();
    assert_written_in_order(db, &ids).await;
    assert_eq!(statements_seen(db).await, ["INSERT"]);
    assert!(kept_open, "the connection was closed after a refusal");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_that_may_not_reserve_ids_gets_its_bulk_inserted() {
    let db = Db::new().await;
    assert_inserted_instead(
        &db,
        "GRANT SELECT, INSERT ON jobs_queue TO {role}",
        "SELECT NOT has_sequence_privilege(pg_get_serial_sequence('jobs_queue', 'id'), 'USAGE')",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_under_row_level_security_gets_its_bulk_inserted() {
    let db = Db::new().await;
    // The role may reserve ids: row-level security refuses its COPY.
    assert_inserted_instead(
        &db,
        "GRANT SELECT, INSERT ON jobs_queue TO {role};
         GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {role};
         ALTER TABLE jobs_queue ENABLE ROW LEVEL SECURITY;
         CREATE POLICY any_row ON jobs_queue USING (true) WITH CHECK (true)",
        "SELECT relrowsecurity
                AND has_sequence_privilege(pg_get_serial_sequence('jobs_queue', 'id'), 'USAGE')
         FROM pg_class WHERE oid = 'jobs_queue'::regclass",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_that_times_out_is_the_callers_error_not_an_insert() {
    let db = Db::new().await;
    let options = PgConnectOptions::from_str(db.url())
        .unwrap()
        .options([("statement_timeout", "300ms")]);
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .connect_with(options)
        .await
        .unwrap();
    // The copy waits at the gate until its statement times out; an insert would pass.
    let _gate = hold_copies(&db).await;
    let error = record_run::enqueue_many(&pool, labels())
        .await
        .expect_err("the copy times out");
    let code = match &error {
        EnqueueError::Database(sqlx::Error::Database(error)) => error.code(),
        _ => None,
    };
    assert_eq!(code.as_deref(), Some("57014"), "{error}");
    assert_eq!(db.count("SELECT count(*) FROM jobs_queue").await, 0);
}

/// The advisory lock that [`hold_copies`] makes each `COPY` into `jobs_queue` wait for.
const COPY_GATE: i64 = 7_340_113;

/// Makes every `COPY` into `jobs_queue` wait, once its rows are on their way, until the advisory
/// lock [`COPY_GATE`] is free (inserts pass); returns the connection holding it.
pub async fn hold_copies(db: &Db) -> sqlx::pool::PoolConnection<sqlx::Postgres> {
    db.execute(&format!(
        "CREATE FUNCTION wait_at_gate() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF current_query() LIKE 'COPY%' THEN
                 PERFORM pg_advisory_xact_lock_shared({COPY_GATE});
             END IF;
             RETURN NULL;
         END $$;
         CREATE TRIGGER wait_at_gate BEFORE INSERT ON jobs_queue
             FOR EACH STATEMENT EXECUTE FUNCTION wait_at_gate()"
    ))
    .await;
    let mut gate = db.pool.acquire().await.unwrap();
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(COPY_GATE)
        .execute(&mut *gate)
        .await
        .unwrap();
    gate
}

/// Counts the `COPY`s of this database that wait at [`COPY_GATE`].
pub fn copies_at_the_gate() -> String {
    format!(
        "SELECT count(*) FROM pg_locks AS l JOIN pg_stat_activity AS a USING (pid)
         WHERE NOT l.granted AND l.locktype = 'advisory' AND l.objid = {COPY_GATE}
           AND a.datname = current_database() AND a.query LIKE 'COPY%'"
    )
}

/// Frees the writes that [`hold_copies`] made wait, on the connection it returned.
pub async fn open_the_gate(gate: &mut sqlx::PgConnection) {
    sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(COPY_GATE)
        .execute(gate)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_dropped_while_it_is_written_leaves_no_job_and_no_connection_out_of_step() {
    let db = Db::new().await;
    // One connection, handed out unchecked: were the interrupted one returned to the pool, the
    // next statements would run on it.
    let options = PgConnectOptions::from_str(db.url()).unwrap();
    let pool: PgPool = PgPoolOptions::new()
        .max_connections(1)
        .test_before_acquire(false)
        .connect_with(options)
        .await
        .unwrap();
    let mut gate = hold_copies(&db).await;
    // The rows are sent; the copy's reply is still owed when the enqueue is dropped.
    let mut enqueue = Box::pin(record_run::enqueue_many(&pool, labels()));
    let deadline = Instant::now() + Duration::from_secs(60);
    while db.count(&copies_at_the_gate()).await == 0 {
        assert!(Instant::now() < deadline, "the copy never reached the gate");
        tokio::select! {
            result = &mut enqueue => panic!("the bulk was written past the gate: {result:?}"),
            () = tokio::time::sleep(Duration::from_millis(5)) => {}
        }
    }
    drop(enqueue);
    open_the_gate(&mut gate).await;

    for n in 0..3_i32 {
        let echoed: i32 = sqlx::query_scalar("SELECT $1")
            .bind(n)
            .fetch_one(&pool)
            .await
            .unwrap_or_else(|error| panic!("statement {n}: {error}"));
        assert_eq!(echoed, n, "a statement read another's reply");
    }
    db.wait_for_count(
        "the interrupted copy's session to end",
        "SELECT count(*) FROM pg_stat_activity
         WHERE datname = current_database() AND query LIKE 'COPY%'",
        0,
    )
    .await;
    assert_eq!(db.count("SELECT count(*) FROM jobs_queue").await, 0);
}
