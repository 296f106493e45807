use jobs::{error_class, ClassifyError, ErrorClass};

#[derive(Debug)]
struct PaymentError;

impl std::fmt::Display for PaymentError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("payment failed")
    }
}

impl std::error::Error for PaymentError {}

#[error_class(permanent)]
impl ClassifyError for PaymentError {
    fn class(&self) -> ErrorClass {
        ErrorClass::Permanent
    }
}

fn main() {}
