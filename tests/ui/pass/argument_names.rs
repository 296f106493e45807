//! Job arguments may have the names the generated code uses for its own parameters and locals.

use jobs::{job, JobContext, JobResult, PgConnection, PgPool};

#[job]
async fn sync_account(
    conn: String,
    pool: String,
    jobs: Vec<i64>,
    args: u8,
    ctx: i32,
    states: bool,
    payload: String,
    context: JobContext,
) -> JobResult {
    let _ = (conn, pool, jobs, args, ctx, states, payload, context);
    Ok(())
}

async fn enqueue(conn: &mut PgConnection, pool: &PgPool) {
    let _ = sync_account::enqueue_in(
        conn,
        String::from("conn"),
        String::from("pool"),
        vec![1],
        2,
        3,
        true,
        String::new(),
    )
    .await;
    let _ = sync_account::enqueue(
        pool,
        String::from("conn"),
        String::from("pool"),
        vec![1],
        2,
        3,
        true,
        String::new(),
    )
    .await;
}

fn main() {
    let _ = enqueue;
}
