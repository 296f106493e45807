//! The worker's metrics, read through a recorder: runs by outcome, run time, pickup latency, and
//! the health numbers as gauges.
//!
//! The worker records from its own tasks, on any thread, so the recorder is the process's
//! global one, installed once; the tests running in parallel record into it too, so each test
//! here looks only at the series of a queue no other test uses (the labels name it).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use jobs::admin::{Counts, KindStats, Stats};
use jobs::metrics::{self as names, Gauges, OutcomeLabel};
use jobs::{Worker, WorkerConfig};
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use metrics_util::registry::{AtomicStorage, Registry};

use crate::support::{fast_config, wait_until, Db};
use crate::test_jobs::{bad_input, record_run};

/// A recorder whose values can be read at any time without resetting them (the debugging
/// recorder of `metrics-util` resets every value it reports, which tests reading in parallel
/// would race on).
struct Recorded {
    registry: Registry<Key, AtomicStorage>,
    units: Mutex<HashMap<String, Unit>>,
}

/// Installs the recorder the first time; every later call gets the same one.
fn recorded() -> &'static Recorded {
    static RECORDED: OnceLock<Recorded> = OnceLock::new();
    let mut installed = false;
    let recorded = RECORDED.get_or_init(|| {
        installed = true;
        Recorded {
            registry: Registry::atomic(),
            units: Mutex::new(HashMap::new()),
        }
    });
    if installed {
        metrics::set_global_recorder(recorded)
            .expect("no other metrics recorder in this test process");
    }
    recorded
}

/// Whether `key` is `name` with exactly `labels`, in any order.
fn is(key: &Key, name: &str, labels: &[(&str, &str)]) -> bool {
    let mut have: Vec<(&str, &str)> = key.labels().map(|l| (l.key(), l.value())).collect();
    let mut want = labels.to_vec();
    have.sort_unstable();
    want.sort_unstable();
    key.name() == name && have == want
}

impl Recorded {
    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        let mut value = 0;
        self.registry.visit_counters(|key, counter| {
            if is(key, name, labels) {
                value = counter.load(Ordering::SeqCst);
            }
        });
        value
    }

    fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let mut value = None;
        self.registry.visit_gauges(|key, gauge| {
            if is(key, name, labels) {
                value = Some(f64::from_bits(gauge.load(Ordering::SeqCst)));
            }
        });
        value
    }

    fn histogram(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        let mut samples = Vec::new();
        self.registry.visit_histograms(|key, histogram| {
            if is(key, name, labels) {
                samples = histogram.data();
            }
        });
        samples
    }

    fn unit(&self, name: &str) -> Option<Unit> {
        let units = self.units.lock().unwrap_or_else(PoisonError::into_inner);
        units.get(name).copied()
    }

    fn describe(&self, name: KeyName, unit: Option<Unit>) {
        if let Some(unit) = unit {
            let mut units = self.units.lock().unwrap_or_else(PoisonError::into_inner);
            units.insert(name.as_str().to_string(), unit);
        }
    }
}

impl Recorder for Recorded {
    fn describe_counter(&self, name: KeyName, unit: Option<Unit>, _: SharedString) {
        self.describe(name, unit);
    }

    fn describe_gauge(&self, name: KeyName, unit: Option<Unit>, _: SharedString) {
        self.describe(name, unit);
    }

    fn describe_histogram(&self, name: KeyName, unit: Option<Unit>, _: SharedString) {
        self.describe(name, unit);
    }

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        self.registry
            .get_or_create_counter(key, |counter| Counter::from_arc(counter.clone()))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        self.registry
            .get_or_create_gauge(key, |gauge| Gauge::from_arc(gauge.clone()))
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        self.registry
            .get_or_create_histogram(key, |histogram| Histogram::from_arc(histogram.clone()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_counts_runs_times_them_and_publishes_the_gauges() {
    const QUEUE: &str = "metered";
    let recorded = recorded();
    let db = Db::new().await;
    let done = record_run::builder("metered".into())
        .queue(QUEUE)
        .enqueue(&db.pool)
        .await
        .unwrap()
        .id();
    let dead = bad_input::builder("not an address".into())
        .queue(QUEUE)
        .enqueue(&db.pool)
        .await
        .unwrap()
        .id();
    let worker = Worker::builder(db.pool.clone())
        .kinds(["record_run", "bad_input"])
        .per_call_queue(QUEUE, 2)
        .state(db.pool.clone())
        .config(WorkerConfig {
            gauges_interval: Some(Duration::from_millis(50)),
            ..fast_config()
        })
        .build()
        .expect("worker builds")
        .start();
    db.wait_for_state(done, "done").await;
    db.wait_for_state(dead, "dead").await;

    let ok = [("kind", "record_run"), ("queue", QUEUE)];
    let failing = [("kind", "bad_input"), ("queue", QUEUE)];
    let with_outcome = |labels: [(&'static str, &'static str); 2], outcome: OutcomeLabel| {
        let mut labels = labels.to_vec();
        labels.push(("outcome", outcome.as_str()));
        labels
    };
    wait_until("the dead job to show in the gauges", || async {
        recorded.gauge(names::DEAD, &failing) == Some(1.0)
    })
    .await;
    worker.shutdown().await.expect("the worker stops");

    for outcome in OutcomeLabel::ALL {
        let expected = |wanted| u64::from(outcome == wanted);
        assert_eq!(
            recorded.counter(names::RUNS_TOTAL, &with_outcome(ok, outcome)),
            expected(OutcomeLabel::Done),
            "record_run runs ending {outcome:?}"
        );
        assert_eq!(
            recorded.counter(names::RUNS_TOTAL, &with_outcome(failing, outcome)),
            expected(OutcomeLabel::Dead),
            "bad_input runs ending {outcome:?}"
        );
    }
    for labels in [&ok, &failing] {
        let run_times = recorded.histogram(names::RUN_SECONDS, labels);
        assert_eq!(run_times.len(), 1, "one run time for {labels:?}");
        assert!(run_times[0] >= 0.0 && run_times[0] < 20.0);
        let latencies = recorded.histogram(names::PICKUP_LATENCY_SECONDS, labels);
        assert_eq!(latencies.len(), 1, "one pickup latency for {labels:?}");
        assert!(latencies[0] >= 0.0 && latencies[0] < 20.0);
    }
    assert_eq!(recorded.gauge(names::DEAD, &failing), Some(1.0));
    assert_eq!(recorded.gauge(names::READY, &failing), Some(0.0));
    assert_eq!(recorded.gauge(names::RUNNING, &failing), Some(0.0));
    assert_eq!(
        recorded.gauge(names::OLDEST_READY_AGE_SECONDS, &failing),
        Some(0.0)
    );
    // Done jobs are not live: the done job's series is 0 if it was published while the job was
    // ready, and absent if not.
    assert!(matches!(
        recorded.gauge(names::READY, &ok),
        None | Some(0.0)
    ));
    // The worker described the metrics when it started.
    assert_eq!(recorded.unit(names::RUN_SECONDS), Some(Unit::Seconds));
    assert_eq!(recorded.unit(names::RUNS_TOTAL), Some(Unit::Count));
}

#[tokio::test]
async fn gauges_of_a_kind_without_live_jobs_go_back_to_zero() {
    const QUEUE: &str = "gauged";
    let recorded = recorded();
    let labels = [("queue", QUEUE), ("kind", "send_receipt")];
    let mut gauges = Gauges::new();
    gauges.publish(&Stats {
        kinds: vec![KindStats {
            queue: QUEUE.into(),
            kind: "send_receipt".into(),
            counts: Counts {
                waiting: 3,
                ready: 4,
                dead: 2,
                oldest_ready_age: Some(Duration::from_millis(1500)),
                ..Counts::default()
            },
        }],
        ..Stats::default()
    });
    assert_eq!(recorded.gauge(names::WAITING, &labels), Some(3.0));
    assert_eq!(recorded.gauge(names::READY, &labels), Some(4.0));
    assert_eq!(recorded.gauge(names::DEAD, &labels), Some(2.0));
    assert_eq!(
        recorded.gauge(names::OLDEST_READY_AGE_SECONDS, &labels),
        Some(1.5)
    );

    gauges.publish(&Stats::default());
    for name in [
        names::WAITING,
        names::READY,
        names::DEAD,
        names::OLDEST_READY_AGE_SECONDS,
    ] {
        assert_eq!(recorded.gauge(name, &labels), Some(0.0), "{name}");
    }
}

#[tokio::test]
async fn a_paused_queue_is_a_gauge_that_goes_back_to_zero_once_resumed() {
    const QUEUE: &str = "gauged_pause";
    let db = Db::new().await;
    let recorded = recorded();
    let labels = [("queue", QUEUE)];
    jobs::admin::pause_queue(&db.pool, QUEUE, "ops@test", None)
        .await
        .unwrap();
    db.execute("UPDATE jobs_queue_pauses SET paused_at = now() - interval '90 seconds'")
        .await;
    let mut gauges = Gauges::new();
    // Both ways of refreshing publish the pauses.
    gauges.refresh(&db.pool).await.unwrap();
    let paused = recorded.gauge(names::QUEUE_PAUSED_SECONDS, &labels);
    assert!(paused.is_some_and(|seconds| seconds >= 90.0), "{paused:?}");
    gauges.publish(&Stats::default());
    assert_eq!(
        recorded.gauge(names::QUEUE_PAUSED_SECONDS, &labels),
        Some(0.0)
    );
    gauges
        .refresh_shared(&db.pool, Duration::from_secs(60))
        .await
        .unwrap();
    let paused = recorded.gauge(names::QUEUE_PAUSED_SECONDS, &labels);
    assert!(paused.is_some_and(|seconds| seconds >= 90.0), "{paused:?}");

    jobs::admin::resume_queue(&db.pool, QUEUE).await.unwrap();
    gauges
        .refresh_shared(&db.pool, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(
        recorded.gauge(names::QUEUE_PAUSED_SECONDS, &labels),
        Some(0.0)
    );
}

#[tokio::test]
async fn the_live_workers_of_each_queue_are_a_gauge() {
    const QUEUE: &str = "gauged_workers";
    let db = Db::new().await;
    let recorded = recorded();
    let labels = [("queue", QUEUE)];
    record_run::builder(String::from("waits"))
        .queue(QUEUE)
        .enqueue(&db.pool)
        .await
        .unwrap();
    let mut gauges = Gauges::new();
    // Jobs and no worker: 0, the number to alert on.
    gauges.refresh(&db.pool).await.unwrap();
    assert_eq!(recorded.gauge(names::LIVE_WORKERS, &labels), Some(0.0));

    db.execute(&format!(
        "INSERT INTO jobs_workers (id, host, pid, version, queues, kinds, gone_after)
         SELECT gen_random_uuid(), 'box', n, '0.1.0',
                '[{{\"queue\": \"{QUEUE}\", \"concurrency\": 2}}]', ARRAY['record_run'],
                interval '1 hour'
         FROM generate_series(1, 2) AS n"
    ))
    .await;
    // Both ways of refreshing publish them.
    gauges.refresh(&db.pool).await.unwrap();
    assert_eq!(recorded.gauge(names::LIVE_WORKERS, &labels), Some(2.0));
    gauges.publish(&Stats::default());
    assert_eq!(recorded.gauge(names::LIVE_WORKERS, &labels), Some(0.0));
    gauges
        .refresh_shared(&db.pool, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(recorded.gauge(names::LIVE_WORKERS, &labels), Some(2.0));
}
