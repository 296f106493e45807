//! Text from the database reaches the terminal escaped: an error message, a payload or a name
//! holding escape sequences, carriage returns or bell characters cannot drive the terminal.

use crate::fixtures::RunOutput;
use crate::support::Db;

/// An error text as a third party might write it: an ANSI colour sequence, a carriage return
/// that would overwrite the line, a bell, an 8-bit CSI and a line break.
const HOSTILE: &str = "boom\u{1b}[31mred\roverwritten\u{7}\u{9b}2J\nsecond line";

/// Whether `text` holds a character a terminal could act on (line breaks end lines and are
/// allowed).
fn has_raw_control(text: &str) -> bool {
    text.chars().any(|c| c != '\n' && c.is_control())
}

async fn hostile_dead_job(db: &Db) -> i64 {
    let ids = db
        .insert(1, "evil\u{1b}]0;title\u{7}", "default", "dead")
        .await;
    sqlx::query(
        "UPDATE jobs_queue
         SET errors = jsonb_build_array(jsonb_build_object(
                 'attempt', 1, 'at', now(), 'kind', 'permanent', 'error', $1::text)),
             payload = jsonb_build_object('note', $1::text),
             dedupe_key = $1, dedupe_scope = 'retained'
         WHERE id = $2",
    )
    .bind(HOSTILE)
    .bind(ids[0])
    .execute(&db.pool)
    .await
    .expect("make the job hostile");
    ids[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_list_and_show_escape_control_characters() {
    let db = Db::migrated().await;
    let id = hostile_dead_job(&db).await;

    let list = db.jobs(&["dead", "list"]).await.success();
    assert!(!has_raw_control(&list.stdout), "{list:?}");
    assert!(
        list.stdout.contains("evil\\u{1b}]0;title\\u{7}"),
        "{list:?}"
    );
    assert!(
        list.stdout
            .contains("permanent: boom\\u{1b}[31mred\\roverwritten\\u{7}\\u{9b}2J\\nsecond line"),
        "{list:?}"
    );

    let show = db.jobs(&["dead", "show", &id.to_string()]).await.success();
    assert!(!has_raw_control(&show.stdout), "{show:?}");
    // One line per error, per field: the line break in the text cannot forge another line.
    assert!(
        show.stdout.contains(
            " permanent: boom\\u{1b}[31mred\\roverwritten\\u{7}\\u{9b}2J\\nsecond line\n"
        ),
        "{show:?}"
    );
    assert!(!show.stdout.contains("\nsecond line"), "{show:?}");
    assert!(
        show.stdout.contains("  dedupe key   boom\\u{1b}[31m"),
        "{show:?}"
    );
    assert!(show.stdout.contains("\\u{9b}2J"), "{show:?}");

    let stats = db.jobs(&["stats"]).await.success();
    assert!(!has_raw_control(&stats.stdout), "{stats:?}");
    let check = db.jobs(&["check"]).await.failed_check();
    assert!(!has_raw_control(&check.stdout), "{check:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_output_keeps_the_exact_text_and_no_raw_control_character() {
    let db = Db::migrated().await;
    let id = hostile_dead_job(&db).await;

    let list = db.jobs(&["dead", "list", "--json"]).await.success();
    assert!(!has_raw_control(&list.stdout), "{list:?}");
    let listed = list.json();
    assert_eq!(listed["jobs"][0]["last_error"]["error"], HOSTILE);
    assert_eq!(listed["jobs"][0]["kind"], "evil\u{1b}]0;title\u{7}");

    let show = db
        .jobs(&["dead", "show", &id.to_string(), "--json"])
        .await
        .success();
    assert!(!has_raw_control(&show.stdout), "{show:?}");
    let shown = show.json();
    assert_eq!(shown["errors"][0]["error"], HOSTILE);
    assert_eq!(shown["payload"]["note"], HOSTILE);
    assert_eq!(shown["dedupe_key"], HOSTILE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_outbox_errors_are_escaped() {
    let db = Db::migrated().await;
    sqlx::query(
        "INSERT INTO jobs_outbox (topic, payload, state, attempts, last_error, parked_at)
         VALUES ('orders.paid', '{}', 'parked', 1, $1, now())",
    )
    .bind(HOSTILE)
    .execute(&db.pool)
    .await
    .unwrap();
    let list = db.jobs(&["outbox", "list"]).await.success();
    assert!(!has_raw_control(&list.stdout), "{list:?}");
    assert!(list.stdout.contains("boom\\u{1b}[31mred\\r"), "{list:?}");
}
