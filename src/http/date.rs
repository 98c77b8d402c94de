//! The HTTP `Date` header (RFC 9110 §5.6.7, IMF-fixdate: `Sun, 06 Nov 1994 08:49:37 GMT`):
//! read from response heads, written by the mock, and what [`super::date_check`] times.

use crate::sys::wall_start::days_from_civil;

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];
const WEEKDAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];

/// An IMF-fixdate as Unix seconds; None for any other form (the obsolete RFC 850 and asctime
/// forms are not sent by the servers this checks).
pub fn parse(text: &str) -> Option<u64> {
    let t = text.trim();
    let b = t.as_bytes();
    if b.len() != 29 || &t[3..5] != ", " || &t[25..] != " GMT" {
        return None;
    }
    let num = |from: usize, len: usize| -> Option<i64> {
        let s = t.get(from..from + len)?;
        s.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| s.parse().ok())?
    };
    let day = num(5, 2)?;
    let month = MONTHS.iter().position(|m| *m == &t[8..11])? as i64 + 1;
    let year = num(12, 4)?;
    if b[11] != b' ' || b[16] != b' ' || b[19] != b':' || b[22] != b':' {
        return None;
    }
    let (hour, minute, second) = (num(17, 2)?, num(20, 2)?, num(23, 2)?);
    if !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let secs = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second;
    u64::try_from(secs).ok()
}

/// Unix ns as an IMF-fixdate (the second it falls in).
pub fn format(unix_ns: u64) -> String {
    let secs = unix_ns / 1_000_000_000;
    let stamp = crate::sys::wall_start::utc_stamp(secs); // yyyymmdd-hhmmss
    let month: usize = stamp[4..6].parse().unwrap_or(1);
    format!(
        "{}, {} {} {} {}:{}:{} GMT",
        WEEKDAYS[(secs / 86_400 % 7) as usize],
        &stamp[6..8],
        MONTHS[month - 1],
        &stamp[0..4],
        &stamp[9..11],
        &stamp[11..13],
        &stamp[13..15]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::sys::wall_start::unix_ns_now;

    #[test]
    fn imf_fixdates_both_ways() {
        assert_eq!(parse("Sun, 06 Nov 1994 08:49:37 GMT"), Some(784_111_777));
        assert_eq!(
            format(784_111_777_250_000_000),
            "Sun, 06 Nov 1994 08:49:37 GMT"
        );
        let now = unix_ns_now();
        assert_eq!(parse(&format(now)), Some(now / 1_000_000_000));
        assert_eq!(format(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        for bad in [
            "",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
            "Sun, 06 Nov 1994 08:49:37 UTC",
            "Sun, 06 Foo 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 25:49:37 GMT",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }
}
