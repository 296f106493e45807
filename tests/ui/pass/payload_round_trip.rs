//! The payload type `Args` reads and writes JSON as serde's derive would: keys are the argument
//! names (raw identifiers without `r#`), an absent `Option` is `None`, unknown keys are skipped.

use jobs::{job, JobContext, JobResult};
use serde_json::json;

#[job(dedupe = "import:<type>:<batch>")]
async fn import(
    ctx: JobContext,
    r#type: String,
    batch: u32,
    ids: Vec<i64>,
    note: Option<String>,
) -> JobResult {
    let _ = (ctx, r#type, batch, ids, note);
    Ok(())
}

#[job]
async fn no_arguments() -> JobResult {
    Ok(())
}

/// The message of decoding `json` as `import`'s arguments, which must fail.
fn error(json: &str) -> String {
    match serde_json::from_str::<import::Args>(json) {
        Ok(_) => panic!("{json} decoded"),
        Err(error) => error.to_string(),
    }
}

fn main() {
    let args = import::Args {
        r#type: String::from("users"),
        batch: 7,
        ids: vec![1, 2],
        note: None,
    };
    let encoded = serde_json::to_value(&args).unwrap();
    assert_eq!(
        encoded,
        json!({"type": "users", "batch": 7, "ids": [1, 2], "note": null})
    );

    let decoded: import::Args = serde_json::from_value(encoded).unwrap();
    assert_eq!(
        (
            decoded.r#type.as_str(),
            decoded.batch,
            decoded.ids,
            decoded.note
        ),
        ("users", 7, vec![1, 2], None)
    );

    let decoded: import::Args = serde_json::from_str(
        r#"{"ids": [3], "extra": {"a": 1}, "batch": 1, "type": "x", "note": "hi"}"#,
    )
    .unwrap();
    assert_eq!(decoded.note.as_deref(), Some("hi"));

    let decoded: import::Args =
        serde_json::from_str(r#"{"type": "x", "batch": 1, "ids": []}"#).unwrap();
    assert_eq!(decoded.note, None);

    let missing = error(r#"{"type": "x", "ids": []}"#);
    assert!(missing.starts_with("missing field `batch`"), "{missing}");

    let twice = error(r#"{"type": "x", "type": "y"}"#);
    assert!(twice.starts_with("duplicate field `type`"), "{twice}");

    let wrong = error(r#"{"type": 5}"#);
    assert!(wrong.starts_with("invalid type: integer `5`"), "{wrong}");

    let not_an_object = error("[]");
    assert!(
        not_an_object.contains("expected the arguments of job `import`"),
        "{not_an_object}"
    );

    assert_eq!(
        serde_json::to_value(no_arguments::Args {}).unwrap(),
        json!({})
    );
    let _: no_arguments::Args = serde_json::from_str(r#"{"ignored": true}"#).unwrap();
}
