use jobs::job;

#[job]
async fn send_receipt(order_id: i64) -> impl std::fmt::Display {
    order_id
}

fn main() {}
