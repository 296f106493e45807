//! Without `crate = "..."` the generated code reaches the crate as `::jobs`; spelling that path
//! out works too.

#[jobs::job]
async fn send_receipt(order_id: i64) -> jobs::JobResult {
    let _ = order_id;
    Ok(())
}

#[jobs::job(crate = "::jobs")]
async fn send_invoice(invoice_id: i64) -> jobs::JobResult {
    let _ = invoice_id;
    Ok(())
}

fn main() {
    use jobs::JobKind;
    assert_eq!(<send_receipt::Job as JobKind>::NAME, "send_receipt");
    assert_eq!(<send_invoice::Job as JobKind>::NAME, "send_invoice");
}
