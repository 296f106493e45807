//! One module per workload; each measures the framework and its raw-SQL ceiling in the same run.

pub mod batch;
pub mod bulk;
pub mod drain;
pub mod enqueue;
pub mod growth;
pub mod latency;
pub mod limits;
pub mod memory;
pub mod outbox;
pub mod pressure;
pub mod stats;
pub mod throughput;

use std::future::Future;
use std::pin::Pin;

use crate::options::Options;
use crate::report::Report;

/// What a workload returns.
pub type Outcome<'a> = Pin<Box<dyn Future<Output = Result<(), Box<dyn std::error::Error>>> + 'a>>;

/// A named workload.
pub struct Workload {
    pub name: &'static str,
    pub run: for<'a> fn(&'a Options, &'a mut Report) -> Outcome<'a>,
}

/// The workloads of the modules named, each under its module's name and running its `run`.
macro_rules! workloads {
    ($($module:ident),* $(,)?) => {
        &[$(Workload {
            name: stringify!($module),
            run: |options, report| Box::pin($module::run(options, report)),
        }),*]
    };
}

/// Every workload, in the order they run.
pub const ALL: &[Workload] = workloads![
    enqueue, bulk, drain, batch, latency, limits, growth, pressure, memory, outbox, stats,
    throughput
];
