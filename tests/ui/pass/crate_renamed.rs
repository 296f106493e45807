//! A crate that reaches `jobs` under another name points the macro at it with `crate = "..."`.

extern crate jobs as renamed;

use renamed::{job, JobKind, JobResult};

#[job(crate = "renamed", queue = "email")]
async fn send_receipt(order_id: i64) -> JobResult {
    let _ = order_id;
    Ok(())
}

#[job(crate = "renamed", every = "1m", missed = "all", max_missed = 2, max_running = 1)]
async fn tidy() -> JobResult {
    Ok(())
}

mod nested {
    use jobs as aliased_jobs;

    #[aliased_jobs::job(crate = "aliased_jobs")]
    pub async fn send_invoice(invoice_id: i64) -> aliased_jobs::JobResult {
        let _ = invoice_id;
        Ok(())
    }
}

fn main() {
    assert_eq!(<send_receipt::Job as JobKind>::OPTIONS.queue, "email");
    assert_eq!(<nested::send_invoice::Job as JobKind>::NAME, "send_invoice");
    let tidy = <tidy::Job as JobKind>::OPTIONS;
    assert_eq!(tidy.max_running, Some(1));
    assert_eq!(
        tidy.schedule.map(|schedule| schedule.missed),
        Some(renamed::MissedTicks::All { max: 2 })
    );
}
