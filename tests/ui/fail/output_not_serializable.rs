use jobs::{job, JobResult};

struct Receipt {
    number: String,
}

#[job]
async fn issue_receipt(order_id: i64) -> JobResult<Receipt> {
    Ok(Receipt {
        number: format!("R-{order_id}"),
    })
}

fn main() {}
