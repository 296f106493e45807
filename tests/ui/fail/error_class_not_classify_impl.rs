use std::fmt;

use jobs::error_class;

#[derive(Debug)]
struct PaymentError;

#[error_class]
impl fmt::Display for PaymentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("payment failed")
    }
}

fn main() {}
