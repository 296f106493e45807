//! Query plans, as the plan tests read them: `EXPLAIN` texts, plans run and rolled back, and
//! the nodes that read a table.

use serde_json::Value;
use sqlx::postgres::PgArguments;
use sqlx::query::QueryScalar;
use sqlx::Postgres;

use crate::support::Db;

/// `EXPLAIN (FORMAT JSON) statement`: the plan the planner chose, nothing run.
pub fn explain(statement: &str) -> String {
    format!("EXPLAIN (FORMAT JSON) {statement}")
}

/// `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) statement`: the plan run, with the rows and
/// buffers each node touched.
pub fn explain_analyze(statement: &str) -> String {
    format!("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {statement}")
}

/// `explain`, the [`explain`] or [`explain_analyze`] text of a claim from the front
/// (`CLAIM_JOBS`, `CLAIM_ONE_KIND`), bound as a worker claims up to 16 jobs of `kinds` from
/// queue `default` for 16 free slots, with 30 s leases; a claim from the last place binds that
/// place after.
pub fn claim_of_16<'q>(
    explain: &'q str,
    kinds: &[&'static str],
) -> QueryScalar<'q, Postgres, Value, PgArguments> {
    sqlx::query_scalar(explain)
        .bind("default")
        .bind(kinds.to_vec())
        .bind(16_i64)
        .bind(vec![30.0_f64; kinds.len()])
        .bind(16_i64)
}

/// `statement`, `RECORD_OUTCOMES` or its [`explain`] or [`explain_analyze`] text, bound as a
/// worker writes the runs `(ids, tokens)` done without output; `O` is its first column (the
/// plan, or the id of a job written).
pub fn done_outcomes<'q, O>(
    statement: &'q str,
    ids: &'q [i64],
    tokens: &'q [uuid::Uuid],
) -> QueryScalar<'q, Postgres, O, PgArguments>
where
    O: Send + Unpin + for<'r> sqlx::Decode<'r, Postgres> + sqlx::Type<Postgres>,
{
    let count = ids.len();
    sqlx::query_scalar(statement)
        .bind(ids)
        .bind(tokens)
        .bind(vec!["done"; count])
        .bind(vec![0.0_f64; count])
        .bind(vec![false; count])
        .bind(vec![None::<&str>; count])
        .bind(vec![None::<&str>; count])
        .bind(vec![None::<&str>; count])
}

/// The `(id, lease_token)` pairs that `query` returns (the rows of running jobs it selects or
/// leases), as two columns in its order.
pub async fn leases_of(db: &Db, query: &str) -> (Vec<i64>, Vec<uuid::Uuid>) {
    sqlx::query_as::<_, (i64, uuid::Uuid)>(query)
        .fetch_all(&db.pool)
        .await
        .unwrap()
        .into_iter()
        .unzip()
}

/// Runs `explain` (an [`explain`] or [`explain_analyze`] query, its parameters bound) in a
/// transaction rolled back afterwards, so that an analyzed claim or delete changes nothing;
/// prints the plan under `name` and returns it.
pub async fn plan_of(
    db: &Db,
    name: &str,
    explain: QueryScalar<'_, Postgres, Value, PgArguments>,
) -> Value {
    let mut transaction = db.pool.begin().await.unwrap();
    let plan: Value = explain.fetch_one(&mut *transaction).await.unwrap();
    transaction.rollback().await.unwrap();
    println!("{name}:\n{}", serde_json::to_string_pretty(&plan).unwrap());
    plan
}

/// Runs `statement` with `arguments` (SQL literals, one per parameter) under `EXPLAIN
/// (ANALYZE, BUFFERS, FORMAT JSON)` on its generic plan: the plan a connection keeps once it
/// stops planning the statement at each execution, made without the parameters' values.
/// `statement` is prepared and run under `plan_cache_mode = force_generic_plan`, in a
/// transaction rolled back afterwards; prints the plan under `name` and returns it.
pub async fn generic_plan_of(db: &Db, name: &str, statement: &str, arguments: &[String]) -> Value {
    let mut transaction = db.pool.begin().await.unwrap();
    sqlx::raw_sql(&format!(
        "PREPARE generic AS {statement}; SET LOCAL plan_cache_mode = force_generic_plan"
    ))
    .execute(&mut *transaction)
    .await
    .unwrap();
    let execute = format!("EXECUTE generic({})", arguments.join(", "));
    let plan: Value = sqlx::query_scalar(&explain_analyze(&execute))
        .fetch_one(&mut *transaction)
        .await
        .unwrap();
    // A prepared statement outlives the transaction, and the connection goes back to the pool.
    sqlx::raw_sql("DEALLOCATE generic")
        .execute(&mut *transaction)
        .await
        .unwrap();
    transaction.rollback().await.unwrap();
    println!(
        "{name} (generic plan):\n{}",
        serde_json::to_string_pretty(&plan).unwrap()
    );
    plan
}

/// How many times PostgreSQL planned `statement`, prepared on `conn`, for its parameters'
/// values alone (`custom`) and once for all (`generic`): `(generic, custom)`.
pub async fn plans_made(conn: &mut sqlx::PgConnection, statement: &str) -> (i64, i64) {
    sqlx::query_as(
        "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1",
    )
    .bind(statement)
    .fetch_one(conn)
    .await
    .unwrap()
}

/// Every node of an `EXPLAIN (FORMAT JSON)` plan, depth first.
pub fn plan_nodes(plan: &Value) -> Vec<Value> {
    fn walk(node: &Value, into: &mut Vec<Value>) {
        into.push(node.clone());
        for child in node["Plans"].as_array().into_iter().flatten() {
            walk(child, into);
        }
    }
    let mut nodes = Vec::new();
    walk(&plan[0]["Plan"], &mut nodes);
    nodes
}

/// The `(node type, index name)` of every plan node that reads `relation`.
pub fn scans_of(nodes: &[Value], relation: &str) -> Vec<(String, String)> {
    nodes
        .iter()
        .filter(|node| node["Relation Name"] == relation)
        .map(|node| {
            (
                node["Node Type"].as_str().unwrap_or_default().to_string(),
                node["Index Name"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// Asserts that none of `scans` (from [`scans_of`]) reads its table whole; `what` names the
/// statement in the failure.
pub fn assert_no_seq_scan(scans: &[(String, String)], what: &str) {
    assert!(
        scans.iter().all(|(node, _)| node != "Seq Scan"),
        "{what} scans the whole table: {scans:?}"
    );
}

/// The names of the indexes the nodes of a plan read, in plan order.
pub fn indexes_read(nodes: &[Value]) -> Vec<&str> {
    nodes
        .iter()
        .filter_map(|node| node["Index Name"].as_str())
        .collect()
}

/// Asserts that `indexes` (from [`indexes_read`]) hold each of `expected` and nothing else.
pub fn assert_reads_just(indexes: &[&str], expected: &[&str]) {
    for index in expected {
        assert!(indexes.contains(index), "{index} not used: {indexes:?}");
    }
    assert!(
        indexes.iter().all(|index| expected.contains(index)),
        "only {expected:?} are read: {indexes:?}"
    );
}
