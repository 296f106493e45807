use jobs::{job, JobContext, JobKind, JobResult, State};

struct Mailer;

struct Templates;

#[job]
async fn context_first(ctx: JobContext, mailer: State<Mailer>, order_id: i64) -> JobResult {
    let _ = (ctx, mailer, order_id);
    Ok(())
}

#[job]
async fn data_first(order_id: i64, mailer: State<Mailer>, ctx: JobContext) -> JobResult {
    let _ = (ctx, mailer, order_id);
    Ok(())
}

#[job]
async fn interleaved(
    email: String,
    templates: State<Templates>,
    ctx: JobContext,
    order_id: i64,
    mailer: jobs::State<Mailer>,
) -> JobResult {
    let _ = (email, templates, ctx, order_id, mailer);
    Ok(())
}

#[job]
async fn only_worker_params(mailer: State<Mailer>, ctx: JobContext) -> JobResult {
    let _ = (ctx, mailer);
    Ok(())
}

fn main() {
    let _ = context_first::Args { order_id: 1 };
    let _ = data_first::Args { order_id: 1 };
    let _ = interleaved::Args {
        email: String::new(),
        order_id: 1,
    };
    let _ = only_worker_params::Args {};
    assert_eq!(<interleaved::Job as JobKind>::NAME, "interleaved");
}
