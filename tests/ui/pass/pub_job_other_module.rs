//! A `pub` job's generated module and items are usable from other modules.

mod billing {
    use jobs::{job, JobResult};

    #[job(queue = "billing")]
    pub async fn send_invoice(invoice_id: i64, email: String) -> JobResult {
        let _ = (invoice_id, email);
        Ok(())
    }

    pub(crate) mod nested {
        use jobs::{job, JobResult};

        #[job]
        pub(crate) async fn refund(invoice_id: i64) -> JobResult {
            let _ = invoice_id;
            Ok(())
        }

        #[job]
        pub(super) async fn audit(invoice_id: i64) -> JobResult {
            let _ = invoice_id;
            Ok(())
        }
    }

    /// `audit` is visible here, in the parent of its module, but no further.
    pub fn audit_invoice_id() -> i64 {
        let args = nested::audit::Args { invoice_id: 3 };
        let _ = nested::audit::builder(args.invoice_id);
        args.invoice_id
    }
}

mod api {
    use jobs::{EnqueueBuilder, JobKind, PgConnection};

    use crate::billing::nested::refund;
    use crate::billing::send_invoice;

    pub fn builders() -> (EnqueueBuilder, EnqueueBuilder) {
        (
            send_invoice::builder(1, String::from("ada@example.com")),
            refund::builder(2),
        )
    }

    pub async fn enqueue(conn: &mut PgConnection) {
        let _ = send_invoice::enqueue_in(conn, 1, String::from("ada@example.com")).await;
        let args = send_invoice::Args {
            invoice_id: 2,
            email: String::from("bob@example.com"),
        };
        let _ = send_invoice::enqueue_many_in(conn, vec![args]).await;
        let _ = refund::enqueue_in(conn, 2).await;
    }

    pub fn queue() -> &'static str {
        <send_invoice::Job as JobKind>::OPTIONS.queue
    }
}

fn main() {
    let _ = api::builders();
    let _ = api::enqueue;
    assert_eq!(billing::audit_invoice_id(), 3);
    assert_eq!(api::queue(), "billing");
}
