use jobs::error_class;

#[error_class]
#[derive(Debug)]
struct PaymentError;

fn main() {}
