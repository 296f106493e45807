//! Two functions registering the same kind name: a worker refuses to start, naming both.
//! (A binary of its own, since the duplicate would stop every worker in a shared one.)

use jobs::{Worker, WorkerError};
use sqlx::postgres::PgPoolOptions;

mod billing {
    /// One `send_receipt`.
    #[jobs::job]
    pub async fn send_receipt(order_id: i64) -> jobs::JobResult {
        let _ = order_id;
        Ok(())
    }
}

mod shop {
    /// Another kind named `send_receipt`.
    #[jobs::job(name = "send_receipt")]
    pub async fn receipt_email(order_id: i64) -> jobs::JobResult {
        let _ = order_id;
        Ok(())
    }
}

#[tokio::test]
async fn a_worker_refuses_to_start_when_two_kinds_share_a_name() {
    let pool = PgPoolOptions::new()
        .connect_lazy("postgres://unused@127.0.0.1:1/unused")
        .unwrap();
    let error = Worker::builder(pool)
        .build()
        .err()
        .expect("duplicate kinds must be refused");
    assert!(matches!(error, WorkerError::Registry(_)));
    assert_eq!(
        error.to_string(),
        "job kind `send_receipt` is defined twice: by `duplicate_kinds::billing::send_receipt` and by `duplicate_kinds::shop::receipt_email`; give one of them another `name = \"...\"`"
    );
}
