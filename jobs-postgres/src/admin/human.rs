//! Durations written the way `jobs` reads them (`"12m5s"`, `"7d"`, `"250ms"`).

use std::fmt;
use std::time::Duration;

/// Shows a duration in the syntax [`parse_duration`](jobs_core::parse_duration) reads, to the
/// second from one second up (`"3d4h"`, `"12m5s"`, `"42s"`), in milliseconds below (`"250ms"`).
///
/// ```
/// use std::time::Duration;
/// use jobs_postgres::admin::HumanDuration;
/// assert_eq!(HumanDuration(Duration::from_secs(754)).to_string(), "12m34s");
/// assert_eq!(HumanDuration(Duration::from_secs(7 * 86_400)).to_string(), "7d");
/// assert_eq!(HumanDuration(Duration::from_millis(250)).to_string(), "250ms");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HumanDuration(pub Duration);

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Whole seconds from one second up; below, whole milliseconds.
        let shown = match self.0.as_secs() {
            0 => Duration::from_millis(u64::try_from(self.0.as_millis()).unwrap_or(u64::MAX)),
            secs => Duration::from_secs(secs),
        };
        f.write_str(&jobs_core::format_duration(shown))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_back_as_written() {
        for secs in [1, 59, 60, 61, 3_600, 3_661, 86_400, 90_061, 604_800] {
            let shown = HumanDuration(Duration::from_secs(secs)).to_string();
            assert_eq!(
                jobs_core::parse_duration(&shown),
                Ok(Duration::from_secs(secs)),
                "{shown}"
            );
        }
        assert_eq!(HumanDuration(Duration::ZERO).to_string(), "0ms");
        assert_eq!(
            HumanDuration(Duration::from_millis(1_500)).to_string(),
            "1s"
        );
    }
}
