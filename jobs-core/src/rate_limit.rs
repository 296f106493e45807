//! Rate limits such as `"100/1s"`: at most so many jobs of a kind start in any window of that
//! length, across every worker.
//!
//! Used by `#[job(rate_limit = "...")]` (checked at compile time) and by the worker's runtime
//! settings (checked at startup), so both read the same way.

use std::fmt;
use std::time::Duration;

use crate::duration::{format_duration, parse_duration, DurationError};

/// At most `jobs` starts in any window of length `per`.
///
/// The window slides: whatever instant a window of length `per` begins at, no more than `jobs`
/// jobs of the kind start in it, counting every attempt (a retry starts again).
///
/// ```
/// use std::time::Duration;
/// use jobs_core::RateLimit;
/// let limit: RateLimit = "100/1s".parse().unwrap();
/// assert_eq!(limit, RateLimit::new(100, Duration::from_secs(1)).unwrap());
/// assert_eq!("10/m".parse::<RateLimit>().unwrap().per(), Duration::from_secs(60));
/// assert_eq!(limit.to_string(), "100/1s");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RateLimit {
    jobs: u32,
    per: Duration,
}

/// Why a rate limit was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RateLimitError {
    /// There was no `/` between the count and the window.
    #[error("expected `<jobs>/<window>`, such as \"100/1s\" or \"10/m\"")]
    MissingSlash,
    /// The count of jobs was not a whole number.
    #[error("{} is not a whole number of jobs: write it like \"100/1s\"", quoted_count(.0))]
    BadCount(String),
    /// The count of jobs was zero.
    #[error("the number of jobs must be at least 1: a limit of 0 would never start a job")]
    ZeroJobs,
    /// The count of jobs was above [`RateLimit::MAX_JOBS`].
    #[error("the number of jobs must be at most {}", RateLimit::MAX_JOBS)]
    TooManyJobs,
    /// The window was not a whole number of milliseconds.
    #[error("the window must be a whole number of milliseconds")]
    PartialMillisecond,
    /// The window did not read as a duration.
    #[error("invalid window: {0}")]
    BadWindow(DurationError),
    /// The window was shorter than [`RateLimit::MIN_WINDOW`].
    #[error("the window must be at least {}: for a higher rate, count more jobs in a longer window (\"1000/1s\", not \"1/1ms\")", format_duration(RateLimit::MIN_WINDOW))]
    WindowTooShort,
    /// The window was longer than [`RateLimit::MAX_WINDOW`].
    #[error(
        "the window must be at most {}",
        format_duration(RateLimit::MAX_WINDOW)
    )]
    WindowTooLong,
}

/// The bound a rate limit's parts break (the errors of [`RateLimit::new`], as a constant
/// function can return them).
#[derive(Debug, Clone, Copy)]
enum OutOfBounds {
    ZeroJobs,
    TooManyJobs,
    WindowTooShort,
    WindowTooLong,
    PartialMillisecond,
}

impl RateLimit {
    /// The shortest window accepted.
    pub const MIN_WINDOW: Duration = Duration::from_millis(10);
    /// The longest window accepted: a day.
    pub const MAX_WINDOW: Duration = Duration::from_secs(86_400);
    /// The most jobs one window may allow (what the database stores as an `integer`).
    pub const MAX_JOBS: u32 = i32::MAX as u32;

    /// At most `jobs` starts in any window of length `per`, checked: at least one job and at
    /// most [`MAX_JOBS`](Self::MAX_JOBS), a window from [`MIN_WINDOW`](Self::MIN_WINDOW) to
    /// [`MAX_WINDOW`](Self::MAX_WINDOW) in whole milliseconds (so that the limit reads back as
    /// it is written).
    pub fn new(jobs: u32, per: Duration) -> Result<Self, RateLimitError> {
        match Self::out_of_bounds(jobs, per) {
            None => Ok(Self { jobs, per }),
            Some(OutOfBounds::ZeroJobs) => Err(RateLimitError::ZeroJobs),
            Some(OutOfBounds::TooManyJobs) => Err(RateLimitError::TooManyJobs),
            Some(OutOfBounds::WindowTooShort) => Err(RateLimitError::WindowTooShort),
            Some(OutOfBounds::WindowTooLong) => Err(RateLimitError::WindowTooLong),
            Some(OutOfBounds::PartialMillisecond) => Err(RateLimitError::PartialMillisecond),
        }
    }

    /// A limit whose parts `#[job]` has checked already, for the constant it generates; parts
    /// out of bounds fail the constant's evaluation, at compile time.
    #[doc(hidden)]
    pub const fn from_checked_parts(jobs: u32, per: Duration) -> Self {
        assert!(
            Self::out_of_bounds(jobs, per).is_none(),
            "a rate limit out of bounds"
        );
        Self { jobs, per }
    }

    /// Which bound `jobs` and `per` break, if any.
    const fn out_of_bounds(jobs: u32, per: Duration) -> Option<OutOfBounds> {
        if jobs == 0 {
            Some(OutOfBounds::ZeroJobs)
        } else if jobs > Self::MAX_JOBS {
            Some(OutOfBounds::TooManyJobs)
        } else if per.as_nanos() < Self::MIN_WINDOW.as_nanos() {
            Some(OutOfBounds::WindowTooShort)
        } else if per.as_nanos() > Self::MAX_WINDOW.as_nanos() {
            Some(OutOfBounds::WindowTooLong)
        } else if per.subsec_nanos() % 1_000_000 != 0 {
            Some(OutOfBounds::PartialMillisecond)
        } else {
            None
        }
    }

    /// Parses `<jobs>/<window>`: a whole number, then a duration in the syntax of
    /// [`parse_duration`], whose number may be left out when it is 1 (`"10/s"` is `"10/1s"`).
    pub fn parse(text: &str) -> Result<Self, RateLimitError> {
        let (jobs, window) = text.split_once('/').ok_or(RateLimitError::MissingSlash)?;
        let jobs = jobs.trim();
        let jobs: u32 = match jobs.parse::<u64>() {
            Ok(jobs) => u32::try_from(jobs).map_err(|_| RateLimitError::TooManyJobs)?,
            Err(_) => return Err(RateLimitError::BadCount(jobs.to_string())),
        };
        let window = window.trim();
        let window = if window.starts_with(|c: char| c.is_ascii_alphabetic()) {
            parse_duration(&format!("1{window}"))
        } else {
            parse_duration(window)
        }
        .map_err(RateLimitError::BadWindow)?;
        Self::new(jobs, window)
    }

    /// Most jobs started in one window.
    pub fn jobs(&self) -> u32 {
        self.jobs
    }

    /// The window's length.
    pub fn per(&self) -> Duration {
        self.per
    }

    /// The long-run rate the limit allows, in jobs per second.
    pub fn jobs_per_second(&self) -> f64 {
        f64::from(self.jobs) / self.per.as_secs_f64()
    }
}

/// `` `text` ``, or "nothing" for an empty count.
fn quoted_count(text: &str) -> String {
    if text.is_empty() {
        String::from("nothing")
    } else {
        format!("`{text}`")
    }
}

impl std::str::FromStr for RateLimit {
    type Err = RateLimitError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

impl fmt::Display for RateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.jobs, format_duration(self.per))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_count_and_a_window() {
        let limit = RateLimit::parse("100/1s").unwrap();
        assert_eq!((limit.jobs(), limit.per()), (100, Duration::from_secs(1)));
        let limit = RateLimit::parse(" 5 / 250ms ").unwrap();
        assert_eq!((limit.jobs(), limit.per()), (5, Duration::from_millis(250)));
        assert_eq!(
            RateLimit::parse("3/1h30m").unwrap().per(),
            Duration::from_secs(5400)
        );
    }

    #[test]
    fn a_window_without_a_number_is_one_unit() {
        assert_eq!(
            RateLimit::parse("10/s").unwrap().per(),
            Duration::from_secs(1)
        );
        assert_eq!(
            RateLimit::parse("10/h").unwrap().per(),
            Duration::from_secs(3600)
        );
    }

    #[test]
    fn refuses_what_cannot_be_a_limit() {
        assert_eq!(RateLimit::parse("100"), Err(RateLimitError::MissingSlash));
        assert_eq!(
            RateLimit::parse("ten/1s"),
            Err(RateLimitError::BadCount("ten".into()))
        );
        assert_eq!(
            RateLimit::parse("-1/1s"),
            Err(RateLimitError::BadCount("-1".into()))
        );
        assert_eq!(RateLimit::parse("0/1s"), Err(RateLimitError::ZeroJobs));
        assert_eq!(
            RateLimit::parse("1/5ms"),
            Err(RateLimitError::WindowTooShort)
        );
        assert_eq!(
            RateLimit::parse("1/0s"),
            Err(RateLimitError::WindowTooShort)
        );
        assert_eq!(RateLimit::parse("1/2d"), Err(RateLimitError::WindowTooLong));
        assert_eq!(
            RateLimit::parse("1/10"),
            Err(RateLimitError::BadWindow(DurationError::MissingUnit(
                "10".into()
            )))
        );
        assert_eq!(
            RateLimit::parse("3000000000/1s"),
            Err(RateLimitError::TooManyJobs)
        );
        assert_eq!(
            RateLimit::parse("99999999999999/1s"),
            Err(RateLimitError::TooManyJobs)
        );
        assert_eq!(
            RateLimit::parse("/1s").unwrap_err().to_string(),
            "nothing is not a whole number of jobs: write it like \"100/1s\""
        );
        assert_eq!(
            RateLimit::new(1, Duration::from_micros(10_500)),
            Err(RateLimitError::PartialMillisecond)
        );
    }

    #[test]
    fn writes_what_it_reads() {
        for text in ["100/1s", "1/250ms", "7/1h30m"] {
            assert_eq!(RateLimit::parse(text).unwrap().to_string(), text);
        }
    }
}
