//! Command-line options: which workloads, how many runs, and their sizes.

/// What to run and how big.
#[derive(Debug, Clone)]
pub struct Options {
    /// Runs per workload; the report shows the median with min and max.
    pub runs: usize,
    /// Transactions in the one-per-transaction enqueue workload.
    pub single_enqueues: usize,
    /// Connections enqueueing at once in that workload: it is measured at each.
    pub enqueue_connections: Vec<usize>,
    /// Jobs in one bulk enqueue.
    pub bulk_jobs: usize,
    /// Jobs drained per drain measurement.
    pub drain_jobs: usize,
    /// Jobs in the batch of the batch-drain workload (and as many plain jobs beside it).
    pub batch_jobs: usize,
    /// Concurrencies at which drains are measured.
    pub drain_concurrency: Vec<usize>,
    /// Jobs per raw claim in the batched ceiling.
    pub raw_batch: usize,
    /// Jobs in the latency workload, and the gap between them in ms.
    pub latency_jobs: usize,
    /// Gap between enqueues in the latency workload.
    pub latency_gap_ms: u64,
    /// Done rows retained in the growth workload.
    pub retained_rows: usize,
    /// Seconds the xmin horizon is held in the pressure workload.
    pub hold_secs: u64,
    /// Outbox rows relayed per run of the outbox workload.
    pub outbox_rows: usize,
    /// Workloads to run (all when empty).
    pub only: Vec<String>,
}

impl Options {
    /// Reads `--quick` and `--only a,b` from the command line.
    pub fn from_args() -> Result<Self, String> {
        let mut options = Self::full();
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--quick" => {
                    options = Self {
                        only: options.only,
                        ..Self::quick()
                    }
                }
                "--only" => {
                    let list = args.next().ok_or("--only needs a comma-separated list")?;
                    options.only = list.split(',').map(str::to_string).collect();
                }
                "--runs" => {
                    let runs = args.next().ok_or("--runs needs a number")?;
                    options.runs = runs.parse().map_err(|_| format!("bad --runs `{runs}`"))?;
                }
                other => {
                    return Err(format!(
                        "unknown argument `{other}`; expected --quick, --runs N or --only {}",
                        crate::workloads::ALL
                            .iter()
                            .map(|workload| workload.name)
                            .collect::<Vec<_>>()
                            .join(",")
                    ))
                }
            }
        }
        Ok(options)
    }

    fn full() -> Self {
        Self {
            runs: 3,
            single_enqueues: 2_000,
            enqueue_connections: vec![1, 4, 16],
            bulk_jobs: 10_000,
            drain_jobs: 50_000,
            batch_jobs: 100_000,
            drain_concurrency: vec![16, 64],
            raw_batch: 16,
            latency_jobs: 200,
            latency_gap_ms: 20,
            retained_rows: 1_000_000,
            hold_secs: 60,
            outbox_rows: 20_000,
            only: Vec::new(),
        }
    }

    fn quick() -> Self {
        Self {
            runs: 1,
            single_enqueues: 400,
            bulk_jobs: 10_000,
            drain_jobs: 10_000,
            batch_jobs: 10_000,
            latency_jobs: 100,
            retained_rows: 100_000,
            hold_secs: 10,
            outbox_rows: 5_000,
            ..Self::full()
        }
    }

    /// Whether the named workload should run.
    pub fn wants(&self, name: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|wanted| wanted == name)
    }
}
