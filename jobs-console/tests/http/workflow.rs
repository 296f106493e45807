//! Workflows in the console: waiting jobs on the overview and the jobs page, a job's links on
//! its page, and the workflow page.

use axum::http::StatusCode;
use jobs_console::ConsoleConfig;
use jobs_testkit::Db;

use crate::console;

/// A chain written as the enqueue writes it: `charge` (ready), `receipt` waiting for it,
/// `ledger` waiting for `receipt` (running even if it fails); returns their ids.
async fn chain(db: &Db) -> (i64, i64, i64) {
    let ids: Vec<i64> = sqlx::query_scalar(
        "WITH charge AS (
             INSERT INTO jobs_queue (kind, queue, payload, state, max_attempts, has_dependents)
             VALUES ('charge_card', 'payments', '{}', 'ready', 8, true) RETURNING id
         ), receipt AS (
             INSERT INTO jobs_queue (kind, queue, payload, state, max_attempts, prerequisites_left,
                                     has_dependents)
             VALUES ('send_receipt', 'emails', '{}', 'waiting', 8, 1, true) RETURNING id
         ), ledger AS (
             INSERT INTO jobs_queue (kind, queue, payload, state, max_attempts, prerequisites_left)
             VALUES ('update_ledger', 'payments', '{}', 'waiting', 8, 1) RETURNING id
         ), edges AS (
             INSERT INTO jobs_dependencies (prerequisite_id, dependent_id, on_failure)
             SELECT charge.id, receipt.id, 'cancel' FROM charge, receipt
             UNION ALL
             SELECT receipt.id, ledger.id, 'run' FROM receipt, ledger
         )
         SELECT id FROM charge UNION ALL SELECT id FROM receipt UNION ALL SELECT id FROM ledger",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    (ids[0], ids[1], ids[2])
}

#[tokio::test]
async fn waiting_jobs_show_on_the_overview_and_the_jobs_page() {
    let (db, mut client) = console(ConsoleConfig::new()).await;
    let (charge, receipt, ledger) = chain(&db).await;
    client
        .get("/")
        .await
        .shows(r#"<th class="num">Waiting</th>"#)
        .shows(
            r#"<tr data-queue="emails"><td>emails</td><td class="num">0</td><td class="num">0</td><td class="num">1</td>"#,
        );
    client
        .get("/jobs?state=waiting")
        .await
        .shows(r#"<option value="waiting" selected>waiting</option>"#)
        .shows(&format!(r#"href="/jobs/{receipt}""#))
        .shows(&format!(r#"href="/jobs/{ledger}""#))
        .hides(&format!(r#"href="/jobs/{charge}""#));
}

#[tokio::test]
async fn a_job_page_links_its_prerequisites_dependents_and_workflow() {
    let (db, mut client) = console(ConsoleConfig::new()).await;
    let (charge, receipt, ledger) = chain(&db).await;
    client
        .get(&format!("/jobs/{receipt}"))
        .await
        .shows(r#"<span class="badge" id="state">waiting</span>"#)
        .shows(&format!(
            r#"<td><a href="/jobs/{charge}">job {charge}</a></td><td>charge_card</td><td><span class="badge">ready</span></td><td>cancel this job</td>"#
        ))
        .shows(&format!(
            r#"<td><a href="/jobs/{ledger}">job {ledger}</a></td><td>update_ledger</td><td><span class="badge">waiting</span></td>"#
        ))
        .shows(&format!(r#"href="/jobs/{receipt}/workflow""#))
        // A waiting job is not run now (it waits for its prerequisites), but may be cancelled.
        .hides("Run now")
        .shows(r#"<button type="submit">Cancel</button>"#);
    // A job outside any workflow has no such section.
    let [plain] = db.insert_all([jobs_testkit::JobRow::new("resize")]).await;
    client
        .get(&format!("/jobs/{}", plain[0]))
        .await
        .hides("/workflow\"");
}

#[tokio::test]
async fn the_workflow_page_lists_every_connected_job_and_its_edges() {
    let (db, mut client) = console(ConsoleConfig::new()).await;
    let (charge, receipt, ledger) = chain(&db).await;
    let page = client.get(&format!("/jobs/{ledger}/workflow")).await;
    assert_eq!(page.status, StatusCode::OK);
    page.shows(&format!("Workflow of job {ledger}"))
        .shows(&format!(
            r#"<tr data-job="{charge}"><td class="num"><a href="/jobs/{charge}">{charge}</a></td><td>charge_card</td><td>payments</td><td><span class="badge">ready</span></td><td></td></tr>"#
        ))
        .shows(&format!(
            r#"<tr data-job="{receipt}"><td class="num"><a href="/jobs/{receipt}">{receipt}</a></td><td>send_receipt</td><td>emails</td><td><span class="badge">waiting</span></td><td><a href="/jobs/{charge}">{charge}</a></td></tr>"#
        ))
        .shows(&format!(r#"<tr data-job="{ledger}" class="current">"#))
        .hides(r#"id="truncated""#);
    client
        .get(&format!("/jobs/{ledger}/workflow?limit=2"))
        .await
        .shows(r#"id="truncated""#);
    let missing = client.get("/jobs/999999/workflow").await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    let bad = client
        .get(&format!("/jobs/{ledger}/workflow?limit=0"))
        .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn cancelling_a_waiting_job_from_its_page_moves_its_dependents_on() {
    let (db, mut client) = console(ConsoleConfig::new()).await;
    let (_, receipt, ledger) = chain(&db).await;
    let id = receipt.to_string();
    client.get(&format!("/jobs/{id}")).await.shows("Cancel");
    let page = client
        .post("/jobs/cancel", &[("id", &id), ("confirm", "yes")])
        .await;
    assert_eq!(page.status, StatusCode::SEE_OTHER, "{}", page.body);
    client
        .get(page.location.as_deref().unwrap())
        .await
        .shows("Cancelled 1 job")
        .shows(">cancelled<");
    // The ledger runs even if the receipt fails (`run`): it is ready now.
    let state: String = sqlx::query_scalar("SELECT state FROM jobs_queue WHERE id = $1")
        .bind(ledger)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(state, "ready");
}
