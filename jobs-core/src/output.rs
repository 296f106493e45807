//! A job's output: the value its handler returns (`JobResult<T>`), encoded as JSON to be stored
//! with the finished job and read back typed.
//!
//! Outputs are checked before they reach the database, as payloads are: an output that does not
//! serialize, is larger than [`MAX_OUTPUT_BYTES`] encoded, nests deeper than `serde_json` decodes
//! or holds U+0000 (which PostgreSQL's `jsonb` cannot store) is refused with an
//! [`OutputEncodeError`], a permanent error: the run ends dead with its message, and nothing is
//! ever truncated. An output that encodes as JSON `null` (`()`, `None`) is stored as NULL.

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::{ClassifyError, ErrorClass, ErrorClassifier};
use crate::payload::{check_payload, encode_payload, PayloadProblem, MAX_PAYLOAD_DEPTH};

/// The largest output stored, in bytes of encoded JSON: 256 KiB. Outputs live in the job's row,
/// which every claim, search and retention pass reads past; store large results elsewhere (a
/// table of your own, an object store) and return their key.
pub const MAX_OUTPUT_BYTES: usize = 256 * 1024;

/// A type that can be a job's output: stored as JSON with the finished job and read back typed.
///
/// Implemented for every `Serialize + DeserializeOwned + Send + 'static` type, which is what a
/// kind's [`Output`](crate::JobKind::Output) must be; there is no need to implement it. It is the
/// bound of `JobKind::Output` so that `#[job]` can say in one sentence, at the output type, what
/// a type lacks (bounds on serde's traits there would be one error per missing trait, in serde's
/// words), and so that code generic over kinds can store and read outputs with no more bounds.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a job's output: outputs are stored as JSON with the finished job and read back typed",
    label = "needs `Serialize`, `Deserialize` and `Send`",
    note = "derive `serde::Serialize` and `serde::Deserialize` for it, or return the id of a record the job wrote"
)]
pub trait JobOutput {
    /// The output encoded for storage, as [`encode_output`] does it.
    fn encode_output(&self) -> Result<Option<EncodedOutput>, OutputEncodeError>;

    /// A stored output (`None` for NULL) decoded, as [`decode_output`] does it.
    fn decode_output(json: Option<&str>) -> Result<Self, serde_json::Error>
    where
        Self: Sized;
}

// `do_not_recommend`: a type missing several of the bounds is one error in the words above.
#[diagnostic::do_not_recommend]
impl<T: Serialize + DeserializeOwned + Send + 'static> JobOutput for T {
    fn encode_output(&self) -> Result<Option<EncodedOutput>, OutputEncodeError> {
        encode_output(self)
    }

    fn decode_output(json: Option<&str>) -> Result<Self, serde_json::Error> {
        decode_output(json)
    }
}

/// An output encoded as JSON, checked to be storable: at most [`MAX_OUTPUT_BYTES`], nested no
/// deeper than `serde_json` decodes, without U+0000, and never JSON `null` (that is stored as
/// NULL, `None` where an `Option<EncodedOutput>` is expected).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedOutput(String);

impl EncodedOutput {
    /// The JSON text.
    pub fn as_json(&self) -> &str {
        &self.0
    }

    /// The JSON text, owned.
    pub fn into_json(self) -> String {
        self.0
    }
}

/// Why an output was refused. Classified permanent: a run returning it ends dead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OutputEncodeError {
    /// The output's `Serialize` implementation failed.
    #[error("the job's output does not serialize to JSON: {message}")]
    Serialize {
        /// serde's message.
        message: String,
    },
    /// The output is larger than [`MAX_OUTPUT_BYTES`] encoded.
    #[error("the job's output is {bytes} bytes of JSON, over the limit of {limit} bytes: outputs are stored with the job, so store large results elsewhere and return their key")]
    TooLarge {
        /// Its size, in bytes of JSON.
        bytes: usize,
        /// The limit, [`MAX_OUTPUT_BYTES`].
        limit: usize,
    },
    /// The output nests arrays and objects deeper than `serde_json` decodes.
    #[error("the job's output nests deeper than {limit} arrays or objects, more than it could be read back with")]
    TooDeep {
        /// The deepest nesting allowed.
        limit: usize,
    },
    /// A string or object key of the output holds U+0000, which PostgreSQL's `jsonb` cannot
    /// store.
    #[error(
        "the job's output holds the character U+0000 at {place}, which PostgreSQL cannot store"
    )]
    NulCharacter {
        /// Where, as `output.field[index]`.
        place: String,
    },
}

impl ClassifyError for OutputEncodeError {
    fn class(&self) -> ErrorClass {
        ErrorClass::Permanent
    }
}

inventory::submit!(ErrorClassifier::of::<OutputEncodeError>());

/// Encodes an output for storage: `None` for a value that serializes as JSON `null` (`()`,
/// `None`), else its checked JSON; see [`OutputEncodeError`] for what is refused.
pub fn encode_output<T: Serialize + ?Sized>(
    output: &T,
) -> Result<Option<EncodedOutput>, OutputEncodeError> {
    let value = encode_payload(output).map_err(|problem| match problem {
        Ok(PayloadProblem::TooDeep) => OutputEncodeError::TooDeep {
            limit: MAX_PAYLOAD_DEPTH,
        },
        Ok(PayloadProblem::NulCharacter(place)) => OutputEncodeError::NulCharacter {
            place: output_place(place),
        },
        Err(error) => OutputEncodeError::Serialize {
            message: error.to_string(),
        },
    })?;
    if value.is_null() {
        return Ok(None);
    }
    check_payload(&value).map_err(|problem| match problem {
        PayloadProblem::TooDeep => OutputEncodeError::TooDeep {
            limit: MAX_PAYLOAD_DEPTH,
        },
        PayloadProblem::NulCharacter(place) => OutputEncodeError::NulCharacter {
            place: output_place(place),
        },
    })?;
    let json = value.to_string();
    if json.len() > MAX_OUTPUT_BYTES {
        return Err(OutputEncodeError::TooLarge {
            bytes: json.len(),
            limit: MAX_OUTPUT_BYTES,
        });
    }
    Ok(Some(EncodedOutput(json)))
}

/// A place found by the payload checks (`payload.field`), named as part of the output.
fn output_place(place: String) -> String {
    match place.strip_prefix("payload") {
        Some(rest) => format!("output{rest}"),
        None => place,
    }
}

/// Decodes a stored output (`None` for NULL, read as JSON `null`) into `T`.
pub fn decode_output<T: DeserializeOwned>(json: Option<&str>) -> Result<T, serde_json::Error> {
    serde_json::from_str(json.unwrap_or("null"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{Disposition, JobError};

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Receipt {
        number: String,
        cents: i64,
    }

    #[test]
    fn outputs_round_trip_and_null_is_none() {
        let receipt = Receipt {
            number: "R-1".into(),
            cents: 1250,
        };
        let encoded = encode_output(&receipt).unwrap().unwrap();
        assert_eq!(encoded.as_json(), r#"{"cents":1250,"number":"R-1"}"#);
        let decoded: Receipt = decode_output(Some(encoded.as_json())).unwrap();
        assert_eq!(decoded, receipt);
        assert_eq!(encode_output(&()).unwrap(), None);
        assert_eq!(encode_output(&None::<i64>).unwrap(), None);
        decode_output::<()>(None).unwrap();
        assert_eq!(decode_output::<Option<i64>>(None).unwrap(), None);
    }

    #[test]
    fn an_output_over_the_limit_is_refused_naming_its_size() {
        let fits = "x".repeat(MAX_OUTPUT_BYTES - 2);
        assert!(encode_output(&fits).unwrap().is_some());
        let over = "x".repeat(MAX_OUTPUT_BYTES - 1);
        let error = encode_output(&over).unwrap_err();
        assert_eq!(
            error,
            OutputEncodeError::TooLarge {
                bytes: MAX_OUTPUT_BYTES + 1,
                limit: MAX_OUTPUT_BYTES
            }
        );
        assert!(error.to_string().contains("262145 bytes"), "{error}");
        assert!(error.to_string().contains("262144 bytes"), "{error}");
    }

    #[test]
    fn unstorable_outputs_are_refused_permanently() {
        struct Failing;
        impl Serialize for Failing {
            fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
                Err(serde::ser::Error::custom("no receipt number yet"))
            }
        }
        let error = encode_output(&Failing).unwrap_err();
        assert_eq!(
            error.to_string(),
            "the job's output does not serialize to JSON: no receipt number yet"
        );
        let job_error = JobError::from(error);
        assert_eq!(job_error.disposition(), &Disposition::Fail);

        let nul = encode_output(&vec!["a", "b\0"]).unwrap_err();
        assert_eq!(
            nul,
            OutputEncodeError::NulCharacter {
                place: "output[1]".into()
            }
        );
        let mut deep = serde_json::Value::Null;
        for _ in 0..=MAX_PAYLOAD_DEPTH {
            deep = serde_json::Value::Array(vec![deep]);
        }
        assert!(matches!(
            encode_output(&deep).unwrap_err(),
            OutputEncodeError::TooDeep { .. }
        ));
    }
}
