use jobs::error_class;

#[derive(Debug)]
struct PaymentError;

#[error_class]
impl PaymentError {
    fn is_retryable(&self) -> bool {
        false
    }
}

fn main() {}
