//! One module per workload; each measures the framework and its raw-SQL ceiling in the same run.

pub mod bulk;
pub mod drain;
pub mod enqueue;
pub mod growth;
pub mod latency;
pub mod memory;
pub mod outbox;
pub mod pressure;
pub mod stats;

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

/// Every workload, in the order they run.
pub const ALL: &[Workload] = &[
    Workload {
        name: "enqueue",
        run: |options, report| Box::pin(enqueue::run(options, report)),
    },
    Workload {
        name: "bulk",
        run: |options, report| Box::pin(bulk::run(options, report)),
    },
    Workload {
        name: "drain",
        run: |options, report| Box::pin(drain::run(options, report)),
    },
    Workload {
        name: "latency",
        run: |options, report| Box::pin(latency::run(options, report)),
    },
    Workload {
        name: "growth",
        run: |options, report| Box::pin(growth::run(options, report)),
    },
    Workload {
        name: "pressure",
        run: |options, report| Box::pin(pressure::run(options, report)),
    },
    Workload {
        name: "memory",
        run: |options, report| Box::pin(memory::run(options, report)),
    },
    Workload {
        name: "outbox",
        run: |options, report| Box::pin(outbox::run(options, report)),
    },
    Workload {
        name: "stats",
        run: |options, report| Box::pin(stats::run(options, report)),
    },
];
