//! Throughput charts: one stacked bar per minute (done, retried, dead, cancelled), drawn as
//! inline SVG on the server, so that pages need no script.

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use maud::{html, Markup};

/// What ended in one minute.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct MinuteCounts {
    pub(crate) done: u64,
    pub(crate) retried: u64,
    pub(crate) dead: u64,
    pub(crate) cancelled: u64,
}

impl MinuteCounts {
    fn total(&self) -> u64 {
        self.done + self.retried + self.dead + self.cancelled
    }

    fn add(&mut self, other: &MinuteCounts) {
        self.done += other.done;
        self.retried += other.retried;
        self.dead += other.dead;
        self.cancelled += other.cancelled;
    }
}

/// The chart's size in SVG units.
const WIDTH: f64 = 360.0;
const HEIGHT: f64 = 48.0;

/// The colours of done, retried, dead and cancelled.
const COLOURS: [&str; 4] = ["#12b76a", "#f79009", "#d92d20", "#98a2b3"];

/// A chart of the `minutes` minutes up to `now`, from `points` (minute, counts; several points
/// of one minute add up; points outside the window are left out), with a title summing them.
pub(crate) fn minute_bars(
    points: impl IntoIterator<Item = (DateTime<Utc>, MinuteCounts)>,
    minutes: usize,
    now: DateTime<Utc>,
) -> Markup {
    let minutes = minutes.max(1);
    let last = now.duration_trunc(TimeDelta::minutes(1)).unwrap_or(now);
    let first = last - TimeDelta::minutes(i64::try_from(minutes).unwrap_or(60) - 1);
    let mut bars = vec![MinuteCounts::default(); minutes];
    for (minute, counts) in points {
        if minute < first || minute > last {
            continue;
        }
        let index = usize::try_from((minute - first).num_minutes()).unwrap_or(0);
        if let Some(bar) = bars.get_mut(index) {
            bar.add(&counts);
        }
    }
    let mut sum = MinuteCounts::default();
    for bar in &bars {
        sum.add(bar);
    }
    let highest = bars
        .iter()
        .map(MinuteCounts::total)
        .max()
        .unwrap_or(0)
        .max(1);
    let slot = WIDTH / minutes as f64;
    let title = format!(
        "last {minutes} min: {} done, {} retried, {} dead, {} cancelled; busiest minute {}",
        sum.done,
        sum.retried,
        sum.dead,
        sum.cancelled,
        bars.iter().map(MinuteCounts::total).max().unwrap_or(0)
    );
    html! {
        svg class="chart" viewBox=(format!("0 0 {WIDTH} {HEIGHT}")) width=(WIDTH) height=(HEIGHT)
            role="img" aria-label=(title) {
            title { (title) }
            line x1="0" y1=(HEIGHT - 0.5) x2=(WIDTH) y2=(HEIGHT - 0.5) stroke="#e4e7ec" {}
            @for (index, bar) in bars.iter().enumerate() {
                @let x = index as f64 * slot;
                @for (value, top) in stack(bar, highest) {
                    @if value.1 > 0.0 {
                        rect x=(format!("{x:.2}")) y=(format!("{:.2}", HEIGHT - top))
                            width=(format!("{:.2}", (slot - 1.0).max(0.5)))
                            height=(format!("{:.2}", value.1)) fill=(value.0) {}
                    }
                }
            }
        }
    }
}

/// Each part of `bar` as (colour, height), with the top of its stack, scaled so `highest` fills
/// the chart.
fn stack(bar: &MinuteCounts, highest: u64) -> Vec<((&'static str, f64), f64)> {
    let parts = [bar.done, bar.retried, bar.dead, bar.cancelled];
    let mut top = 0.0;
    parts
        .iter()
        .zip(COLOURS)
        .map(|(count, colour)| {
            let height = *count as f64 / highest as f64 * (HEIGHT - 2.0);
            top += height;
            ((colour, height), top)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minutes_are_summed_and_scaled_to_the_busiest() {
        let now = DateTime::parse_from_rfc3339("2026-12-01T10:30:20Z")
            .unwrap()
            .with_timezone(&Utc);
        let minute =
            |m: i64| now.duration_trunc(TimeDelta::minutes(1)).unwrap() - TimeDelta::minutes(m);
        let counts = |done, dead| MinuteCounts {
            done,
            dead,
            ..MinuteCounts::default()
        };
        let chart = minute_bars(
            [
                (minute(0), counts(10, 0)),
                (minute(0), counts(10, 2)),
                (minute(5), counts(4, 0)),
                (minute(90), counts(1_000, 0)),
            ],
            60,
            now,
        )
        .into_string();
        assert!(
            chart.contains(
                "last 60 min: 24 done, 0 retried, 2 dead, 0 cancelled; busiest minute 22"
            ),
            "{chart}"
        );
        // The busiest minute's done part fills 20/22 of the drawable height.
        assert!(
            chart.contains(r##"height="41.82" fill="#12b76a""##),
            "{chart}"
        );
        assert_eq!(chart.matches("<rect").count(), 3, "{chart}");
    }
}
