//! A job may return `JobResult`, `Result<(), E>` for any error type converting into `JobError`,
//! or nothing.

use jobs::{job, JobError, JobResult};

#[derive(Debug)]
struct Declined;

impl std::fmt::Display for Declined {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("declined")
    }
}

impl std::error::Error for Declined {}

#[job]
async fn job_result(order_id: i64) -> JobResult {
    let _ = order_id;
    Ok(())
}

#[job]
async fn own_error(order_id: i64) -> Result<(), Declined> {
    if order_id < 0 {
        return Err(Declined);
    }
    Ok(())
}

#[job]
async fn io_error(path: String) -> std::io::Result<()> {
    let _ = path;
    Ok(())
}

#[job]
async fn job_error(order_id: i64) -> Result<(), JobError> {
    let _ = order_id;
    Ok(())
}

#[job]
async fn nothing(order_id: i64) {
    let _ = order_id;
}

fn main() {
    let _ = (
        job_result::builder(1),
        own_error::builder(1),
        io_error::builder(String::new()),
        job_error::builder(1),
        nothing::builder(1),
    );
}
