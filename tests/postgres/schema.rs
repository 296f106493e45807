//! Migrations, and the plan of the claim query.

use crate::plans::{assert_no_seq_scan, claim_of_16, explain, plan_nodes, plan_of, scans_of};
use crate::support::{fast_config, start_worker, Db};
use jobs::postgres::__private::sql;
use jobs::postgres::testing::TestDatabase;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrations_are_safe_to_run_from_many_processes_at_once() {
    let database = TestDatabase::create().await.unwrap();
    let mut runs = Vec::new();
    for _ in 0..6 {
        let pool = database.pool(2).await.unwrap();
        runs.push(tokio::spawn(async move { jobs::migrate(&pool).await }));
    }
    let mut applied = Vec::new();
    for run in runs {
        applied.extend(run.await.unwrap().unwrap().applied);
    }
    let all: Vec<i32> = jobs::postgres::migrate::MIGRATIONS
        .iter()
        .map(|migration| migration.version)
        .collect();
    assert_eq!(applied, all, "each migration applied exactly once");
    let pool = database.pool(1).await.unwrap();
    assert!(jobs::migrate(&pool).await.unwrap().applied.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migration_history_is_kept_apart_from_the_applications() {
    let db = Db::new().await;
    let history: Vec<(i32, String)> = db
        .rows("SELECT version, name FROM jobs_migrations ORDER BY version")
        .await;
    assert_eq!(
        history,
        vec![
            (1, "jobs_queue".to_string()),
            (2, "operating".to_string()),
            (3, "processed_keys".to_string()),
            (4, "schedules".to_string()),
            (5, "outbox".to_string()),
            (6, "dedupe_digest".to_string()),
            (7, "outbox_ids_topics".to_string()),
            (8, "claims_and_gauges".to_string()),
            (9, "processed_key_digest".to_string()),
            (10, "operator_controls".to_string()),
            (11, "cancellation".to_string()),
            (12, "workers_and_throughput".to_string()),
            (13, "job_search".to_string()),
            (14, "outputs".to_string()),
            (15, "workflows".to_string()),
            (16, "operating_workflows".to_string()),
            (17, "workflow_steps".to_string()),
            (18, "rate_limits".to_string()),
            (19, "fair_share".to_string()),
            (20, "per_key_limits".to_string()),
            (21, "per_key_rate_limits".to_string()),
            (22, "fair_turns".to_string()),
            (23, "key_turns".to_string()),
            (24, "limited_claims".to_string())
        ]
    );
    let sqlx_history: Option<String> =
        sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations')::text")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(sqlx_history, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claiming_never_walks_done_or_dead_rows() {
    let db = Db::new().await;
    db.execute(
        "INSERT INTO jobs_queue (kind, queue, payload, state, attempts, max_attempts, finished_at)
         SELECT 'record_run', 'default', '{}'::jsonb,
                CASE WHEN n % 10 = 0 THEN 'dead' ELSE 'done' END, 1, 8, now()
         FROM generate_series(1, 50000) AS n",
    )
    .await;
    db.execute(
        "INSERT INTO jobs_queue (kind, queue, payload, max_attempts)
         SELECT 'record_run', 'default', '{}'::jsonb, 8 FROM generate_series(1, 20)",
    )
    .await;
    db.execute("ANALYZE jobs_queue").await;

    let claim = explain(sql::CLAIM_JOBS);
    let plan = plan_of(&db, "CLAIM_JOBS", claim_of_16(&claim, &["record_run"])).await;
    let scans = scans_of(&plan_nodes(&plan), "jobs_queue");
    assert!(
        scans.iter().any(|(_, index)| index == "jobs_queue_ready"),
        "the claim must find candidates through the ready-only index: {scans:?}"
    );
    assert_no_seq_scan(&scans, "the claim");
}

/// Succeeds at once: a job for the least-privilege runtime role to run.
#[jobs::job]
async fn least_privilege_probe() -> jobs::JobResult {
    Ok(())
}

/// The README's least-privilege recipe for a runtime role `{role}` of a schema the current role
/// owns: DML on the jobs tables, read on the history, the sequences, and the same on tables and
/// sequences that later migrations create.
const RUNTIME_GRANTS: &[&str] = &[
    "CREATE ROLE {role} LOGIN",
    "GRANT USAGE ON SCHEMA public TO {role}",
    "GRANT SELECT, INSERT, UPDATE, DELETE ON jobs_queue, jobs_schedules, jobs_processed_keys, jobs_outbox, jobs_gauges, jobs_queue_pauses, jobs_workers, jobs_throughput, jobs_dependencies, jobs_batches, jobs_batch_chunks TO {role}",
    "GRANT SELECT ON jobs_migrations TO {role}",
    "GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {role}",
    "ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {role}",
    "ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE, SELECT ON SEQUENCES TO {role}",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_role_with_dml_only_migrates_nothing_and_runs_jobs() {
    let database = TestDatabase::create().await.unwrap();
    let owner = database.pool(2).await.unwrap();
    jobs::migrate(&owner).await.unwrap();
    // Roles are cluster-wide: one per test database.
    let role = format!("runtime_{}", database.name());
    for statement in RUNTIME_GRANTS {
        sqlx::query(&statement.replace("{role}", &role))
            .execute(&owner)
            .await
            .unwrap_or_else(|error| panic!("{statement}: {error}"));
    }
    let runtime = sqlx::postgres::PgPoolOptions::new()
        .max_connections(8)
        .connect_with(database.connect_options().username(&role))
        .await
        .unwrap();
    // Run as a task so that the role is dropped whatever happens.
    let run = tokio::spawn({
        let runtime = runtime.clone();
        async move {
            let create: bool =
                sqlx::query_scalar("SELECT has_schema_privilege('public', 'CREATE')")
                    .fetch_one(&runtime)
                    .await
                    .unwrap();
            assert!(!create, "the runtime role must not have CREATE");
            let report = jobs::migrate(&runtime)
                .await
                .expect("an up-to-date schema migrates without CREATE");
            assert!(report.applied.is_empty());
            let id = least_privilege_probe::enqueue(&runtime).await.unwrap().id();
            let worker = start_worker(&runtime, &["least_privilege_probe"], fast_config());
            crate::support::wait_until("the probe to be done", || {
                let runtime = runtime.clone();
                async move {
                    sqlx::query_scalar::<_, String>("SELECT state FROM jobs_queue WHERE id = $1")
                        .bind(id)
                        .fetch_one(&runtime)
                        .await
                        .unwrap()
                        == "done"
                }
            })
            .await;
            worker.shutdown().await.expect("the worker stops");
        }
    })
    .await;
    runtime.close().await;
    sqlx::query(&format!("DROP OWNED BY {role}"))
        .execute(&owner)
        .await
        .unwrap();
    sqlx::query(&format!("DROP ROLE {role}"))
        .execute(&owner)
        .await
        .unwrap();
    if let Err(error) = run {
        std::panic::resume_unwind(error.into_panic());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_applied_migration_edited_since_is_reported() {
    let db = Db::new().await;
    let checksums: Vec<Option<String>> = db
        .column("SELECT checksum FROM jobs_migrations ORDER BY version")
        .await;
    let embedded: Vec<Option<String>> = jobs::postgres::migrate::MIGRATIONS
        .iter()
        .map(|migration| Some(migration.checksum()))
        .collect();
    assert_eq!(checksums, embedded);
    db.execute("UPDATE jobs_migrations SET checksum = 'edited' WHERE version = 2")
        .await;
    match jobs::migrate(&db.pool).await {
        Err(jobs::postgres::migrate::MigrateError::ChecksumMismatch {
            version: 2,
            name: "operating",
            recorded,
            ..
        }) => assert_eq!(recorded, "edited"),
        other => panic!("expected a checksum mismatch, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_from_before_checksums_gets_them() {
    let db = Db::new().await;
    db.execute("ALTER TABLE jobs_migrations DROP COLUMN checksum")
        .await;
    let report = jobs::migrate(&db.pool).await.unwrap();
    assert!(report.applied.is_empty());
    let missing = db
        .count("SELECT count(*) FROM jobs_migrations WHERE checksum IS NULL")
        .await;
    assert_eq!(missing, 0);
    assert!(jobs::migrate(&db.pool).await.unwrap().applied.is_empty());
}
