use std::time::Duration;

use jobs::{job, Cadence, JobKind, JobResult, MissedTicks, ScheduleOptions};

#[job(every = "10s", missed = "all", max_missed = 3)]
async fn poll_inbox() -> JobResult {
    Ok(())
}

#[job(every = "1h30m", missed = "all")]
async fn refresh_rates() -> JobResult {
    Ok(())
}

fn main() {
    assert_eq!(
        <poll_inbox::Job as JobKind>::OPTIONS.schedule,
        Some(ScheduleOptions {
            cadence: Cadence::Every(Duration::from_secs(10)),
            missed: MissedTicks::All { max: 3 },
        })
    );
    assert_eq!(
        <refresh_rates::Job as JobKind>::OPTIONS.schedule,
        Some(ScheduleOptions {
            cadence: Cadence::Every(Duration::from_secs(5400)),
            missed: MissedTicks::All {
                max: MissedTicks::DEFAULT_MAX,
            },
        })
    );
}
