//! Compile-time behaviour of `#[job]` and `#[error_class]`: every mistake is one clear error at
//! the offending token (`tests/ui/fail`), and every supported shape compiles (`tests/ui/pass`).
//!
//! # The snapshots belong to one compiler
//!
//! Each `tests/ui/fail/*.stderr` is the exact output of the compiler the snapshots were made
//! with, currently **rustc 1.95 stable**. Another compiler words, orders or underlines some of
//! those errors differently, so `compile_fail` runs only on 1.95 stable and is ignored, with the
//! reason printed by `cargo test`, on every other compiler: a new stable release cannot turn CI
//! red before anyone has looked at its output. `pass` has no snapshots and runs everywhere.
//!
//! # Moving to a new compiler
//!
//! 1. With the new toolchain, run the snapshots whatever the gate says and rewrite them:
//!    `TRYBUILD=overwrite cargo test --test ui -- --include-ignored`
//! 2. Read `git diff tests/ui`: every error must still point at the offending token and say what
//!    to do. A message that got worse is a bug in the macro, not a snapshot to accept.
//! 3. Change the version in both `stable(...)` and the reason of `compile_fail` below, and
//!    commit the snapshots with it.

/// Every mistake in `tests/ui/fail` is a compile error matching its `.stderr` snapshot.
#[rustversion::attr(
    not(stable(1.95)),
    ignore = "tests/ui/fail/*.stderr are rustc 1.95 stable's output; see tests/ui.rs to regenerate them for this compiler"
)]
#[test]
fn compile_fail() {
    trybuild::TestCases::new().compile_fail("tests/ui/fail/*.rs");
}

/// Every supported shape in `tests/ui/pass` compiles and runs.
#[test]
fn pass() {
    trybuild::TestCases::new().pass("tests/ui/pass/*.rs");
}
