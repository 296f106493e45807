use jobs::job;

#[job]
struct SendReceipt {
    order_id: i64,
}

fn main() {}
