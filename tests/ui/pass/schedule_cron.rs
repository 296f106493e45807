use jobs::{job, Cadence, JobContext, JobKind, JobResult, MissedTicks, ScheduleOptions, State};

struct Reports;

#[job(cron = "0 3 * * *", timezone = "Europe/Paris", queue = "reports")]
async fn nightly_report(ctx: JobContext, reports: State<Reports>) -> JobResult {
    let _ = (ctx, reports);
    Ok(())
}

#[job(cron = "*/30 * * * * *", missed = "skip")]
async fn every_half_minute(reports: State<Reports>) -> JobResult {
    let _ = reports;
    Ok(())
}

fn main() {
    assert_eq!(
        <nightly_report::Job as JobKind>::OPTIONS.schedule,
        Some(ScheduleOptions {
            cadence: Cadence::Cron {
                expression: "0 3 * * *",
                timezone: "Europe/Paris",
            },
            missed: MissedTicks::Latest,
        })
    );
    assert_eq!(<nightly_report::Job as JobKind>::OPTIONS.max_running, None);
    assert_eq!(
        <every_half_minute::Job as JobKind>::OPTIONS.schedule,
        Some(ScheduleOptions {
            cadence: Cadence::Cron {
                expression: "*/30 * * * * *",
                timezone: "UTC",
            },
            missed: MissedTicks::Skip,
        })
    );
    let _ = nightly_report::Args {};
}
