//! A job may take, and return errors of, the application's own types called `Job` or `Args`:
//! inside the generated module those names belong to it, and the user's are still reached.

use jobs::{job, JobKind};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    pub id: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Args(Vec<String>);

#[derive(Debug)]
pub struct Error;

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("failed")
    }
}

impl std::error::Error for Error {}

#[job]
async fn process(job: Job, args: Option<Args>, jobs: Vec<Job>) -> Result<(), Error> {
    let _ = (job, args, jobs);
    Ok(())
}

fn main() {
    let args = process::Args {
        job: Job { id: 1 },
        args: Some(Args(vec![String::from("x")])),
        jobs: vec![Job { id: 2 }],
    };
    let encoded = serde_json::to_value(&args).unwrap();
    assert_eq!(encoded["job"]["id"], 1);
    let _ = process::builder(Job { id: 3 }, None, Vec::new());
    assert_eq!(<process::Job as JobKind>::NAME, "process");
}
