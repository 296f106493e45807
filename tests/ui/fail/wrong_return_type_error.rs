use jobs::job;

#[job]
async fn send_receipt(order_id: i64) -> Result<(), String> {
    if order_id < 0 {
        return Err(format!("no order {order_id}"));
    }
    Ok(())
}

fn main() {}
