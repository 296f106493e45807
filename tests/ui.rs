//! Compile-time behaviour of `#[job]` and `#[error_class]`: every mistake is one clear error at
//! the offending token (`tests/ui/fail`), and every supported shape compiles (`tests/ui/pass`).
//!
//! The `.stderr` snapshots depend on the compiler version; regenerate them with
//! `TRYBUILD=overwrite cargo test --test ui` and read the diff.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/fail/*.rs");
    t.pass("tests/ui/pass/*.rs");
}
