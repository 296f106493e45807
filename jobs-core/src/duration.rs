//! Human-readable durations such as `"30s"`, `"5m"`, `"1h30m"` or `"250ms"`.
//!
//! Used by `#[job(...)]` keys (checked at compile time) and by runtime configuration (checked
//! at startup), so both read the same way.

use std::time::Duration;

/// Why a duration string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// The string was empty.
    #[error("empty duration: expected a number followed by a unit, such as \"30s\" or \"5m\"")]
    Empty,
    /// A number was not followed by a unit.
    #[error("missing unit after `{0}`: use one of ms, s, m, h, d (for example \"{0}s\")")]
    MissingUnit(String),
    /// A unit was not one of the accepted ones.
    #[error("unknown unit `{0}`: use one of ms, s, m, h, d")]
    UnknownUnit(String),
    /// A unit came without a number in front of it.
    #[error("expected a number before `{0}`")]
    MissingNumber(String),
    /// The value does not fit in a [`Duration`].
    #[error("duration is too large")]
    Overflow,
}

/// Parses a duration made of one or more `<number><unit>` parts, units `ms`, `s`, `m`, `h`, `d`.
///
/// ```
/// use std::time::Duration;
/// use jobs_core::parse_duration;
/// assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
/// assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
/// assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
/// assert!(parse_duration("10").is_err());
/// ```
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(DurationError::Empty);
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits_end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (digits, after) = rest.split_at(digits_end);
        let unit_end = after
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_end);
        if digits.is_empty() {
            return Err(DurationError::MissingNumber(unit.to_string()));
        }
        if unit.is_empty() {
            return Err(DurationError::MissingUnit(digits.to_string()));
        }
        let amount: u64 = digits.parse().map_err(|_| DurationError::Overflow)?;
        let millis_per_unit: u64 = match unit {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            other => return Err(DurationError::UnknownUnit(other.to_string())),
        };
        let millis = amount
            .checked_mul(millis_per_unit)
            .ok_or(DurationError::Overflow)?;
        total = total
            .checked_add(Duration::from_millis(millis))
            .ok_or(DurationError::Overflow)?;
        rest = next;
    }
    Ok(total)
}

/// Writes a duration exactly, in the syntax [`parse_duration`] reads: `"1h30m"`, `"10s"`,
/// `"1s500ms"`, `"0ms"`.
///
/// ```
/// use std::time::Duration;
/// use jobs_core::{format_duration, parse_duration};
/// assert_eq!(format_duration(Duration::from_secs(5400)), "1h30m");
/// assert_eq!(parse_duration(&format_duration(Duration::from_millis(1500))), Ok(Duration::from_millis(1500)));
/// ```
pub fn format_duration(duration: Duration) -> String {
    let secs = duration.as_secs();
    let parts = [
        (secs / 86_400, "d"),
        (secs % 86_400 / 3_600, "h"),
        (secs % 3_600 / 60, "m"),
        (secs % 60, "s"),
        (u64::from(duration.subsec_millis()), "ms"),
    ];
    let text: String = parts
        .iter()
        .filter(|(amount, _)| *amount > 0)
        .map(|(amount, unit)| format!("{amount}{unit}"))
        .collect();
    if text.is_empty() {
        String::from("0ms")
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_compound_durations() {
        assert_eq!(parse_duration("2d"), Ok(Duration::from_secs(172_800)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration(" 5m "), Ok(Duration::from_secs(300)));
    }

    #[test]
    fn refuses_malformed_durations() {
        assert_eq!(parse_duration(""), Err(DurationError::Empty));
        assert_eq!(
            parse_duration("30"),
            Err(DurationError::MissingUnit("30".into()))
        );
        assert_eq!(
            parse_duration("3 weeks"),
            Err(DurationError::UnknownUnit(" weeks".into()))
        );
        assert_eq!(
            parse_duration("s"),
            Err(DurationError::MissingNumber("s".into()))
        );
        assert_eq!(
            parse_duration("99999999999999999999s"),
            Err(DurationError::Overflow)
        );
    }
}
