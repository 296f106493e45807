use jobs::{job, JobResult};

#[job(lease = "10s", heartbeat = "10s")]
async fn render_video(video_id: i64) -> JobResult {
    let _ = video_id;
    Ok(())
}

fn main() {}
