//! The outbox relay publishing to NATS JetStream vs publishing the same payloads to JetStream
//! directly, in the same run. Both publish one message at a time and await its acknowledgement
//! (what keeps a topic in order); the relay adds claiming and marking, a batch per transaction.
//! Pipelined publishing (256 acks in flight) is printed too, as the broker's own
//! ceiling without ordering.

use std::time::Instant;

use jobs::outbox::{Relay, RelayConfig};
use jobs_nats::async_nats::jetstream::{self, message::PublishMessage, Context};
use jobs_nats::async_nats::{self};
use jobs_nats::testing::{create_stream, shared_url, unique_name};
use jobs_nats::NatsPublisher;

use crate::measure::Fresh;
use crate::options::Options;
use crate::report::Report;
use crate::workloads::enqueue::order;

/// The payload of every event: an id, as events should carry.
fn payload(n: usize) -> String {
    format!(r#"{{"order_id": {n}}}"#)
}

pub async fn run(options: &Options, report: &mut Report) -> Result<(), Box<dyn std::error::Error>> {
    let rows = options.outbox_rows;
    let client = async_nats::connect(shared_url()).await?;
    let jetstream = jetstream::new(client);
    let (mut relayed, mut direct, mut pipelined) = (Vec::new(), Vec::new(), Vec::new());
    for run in 0..options.runs {
        let fresh = Fresh::new(2).await?;
        for side in order(run) {
            let stream = unique_name("bench_outbox");
            let (_, prefix) = create_stream(&jetstream, &stream).await?;
            if side {
                relayed.push(relay(&fresh, &jetstream, &prefix, rows).await?);
            } else {
                direct.push(publish_directly(&jetstream, &prefix, rows, 1).await?);
            }
            jetstream.delete_stream(&stream).await?;
        }
        let stream = unique_name("bench_outbox");
        let (_, prefix) = create_stream(&jetstream, &stream).await?;
        pipelined.push(publish_directly(&jetstream, &prefix, rows, WINDOW).await?);
        jetstream.delete_stream(&stream).await?;
    }
    report.ratio(
        &format!("outbox relay to JetStream, {rows} rows, 1 topic"),
        &relayed,
        &direct,
        "msgs/s",
        "printed, not asserted",
    );
    let mut sorted = pipelined.clone();
    sorted.sort_by(f64::total_cmp);
    report.note(format!(
        "outbox: ceiling = the same payloads published to JetStream directly, one at a time, each ack awaited (as the relay does, to keep a topic in order); relay batches of {} rows per transaction (claim, publish, mark, commit). Pipelined direct publishing (256 acks in flight, no order guarantee on failure): {:.0} msgs/s (median). A relay crash republishes at most one batch; the stream's Nats-Msg-Id window drops the copies.",
        RelayConfig::default().batch_size,
        sorted[sorted.len() / 2]
    ));
    Ok(())
}

/// Writes `rows` outbox rows (outside the measurement), then relays them all: rows per second.
async fn relay(
    fresh: &Fresh,
    jetstream: &Context,
    prefix: &str,
    rows: usize,
) -> Result<f64, Box<dyn std::error::Error>> {
    sqlx::query(
        "INSERT INTO jobs_outbox (topic, payload)
         SELECT 'orders.placed', jsonb_build_object('order_id', n) FROM generate_series(1, $1) AS n",
    )
    .bind(i64::try_from(rows)?)
    .execute(&fresh.pool)
    .await?;
    sqlx::query("VACUUM ANALYZE jobs_outbox")
        .execute(&fresh.pool)
        .await?;
    let publisher = NatsPublisher::new(jetstream.clone()).subject_prefix(prefix);
    let relay = Relay::new(fresh.pool.clone(), publisher, RelayConfig::default())?;
    let started = Instant::now();
    let mut published = 0;
    while published < rows {
        let report = relay.run_once().await?;
        if report.claimed == 0 {
            return Err(format!("relay stopped after {published} of {rows} rows").into());
        }
        published += report.published;
    }
    Ok(rows as f64 / started.elapsed().as_secs_f64())
}

/// Acknowledgements awaited at most at once when pipelining (the JetStream context stops
/// sending at its own limit of acks in flight).
const WINDOW: usize = 256;

/// Publishes `rows` payloads directly, with at most `window` sent before their acks are
/// awaited (1: one at a time, as the relay does to keep a topic in order): messages per second.
async fn publish_directly(
    jetstream: &Context,
    prefix: &str,
    rows: usize,
    window: usize,
) -> Result<f64, Box<dyn std::error::Error>> {
    let subject = format!("{prefix}orders.placed");
    let started = Instant::now();
    let mut acks = std::collections::VecDeque::with_capacity(window);
    for n in 0..rows {
        if acks.len() == window {
            if let Some(ack) = acks.pop_front() {
                ack.await?;
            }
        }
        let message = PublishMessage::build()
            .message_id(n.to_string())
            .payload(payload(n).into());
        acks.push_back(jetstream.send_publish(subject.clone(), message).await?);
    }
    for ack in acks {
        ack.await?;
    }
    Ok(rows as f64 / started.elapsed().as_secs_f64())
}
