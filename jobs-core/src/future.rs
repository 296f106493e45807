//! The boxed future that crosses the crate's trait-object seams: a kind's handler, and a
//! backend's lease control.

use std::future::Future;
use std::pin::Pin;

/// A boxed future that can move between threads.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;
