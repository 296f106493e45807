use jobs::job;

#[job]
async fn send_receipt(order_id: i64) -> i64 {
    order_id
}

fn main() {}
