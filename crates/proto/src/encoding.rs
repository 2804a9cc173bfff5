//! Percent-encoding, query strings and the three timestamp formats S3 speaks.
//!
//! Design note: everything here is a pure function over strings, shared by the
//! SigV4 canonicaliser, the XML listing writer (EncodingType=url) and the
//! request router. URI encoding follows the SigV4 rules
//! (<https://docs.aws.amazon.com/IAM/latest/UserGuide/create-signed-request.html#create-canonical-request>):
//! only `A-Za-z0-9-._~` are left alone, everything else becomes `%XX` with
//! upper-case hex per UTF-8 byte. Decoding is deliberately *not* form
//! decoding: `+` stays `+`, because S3 clients always percent-encode spaces
//! and SigV4 signs `+` as `%2B`.
//!
//! Timestamps:
//! - `amz_date`: ISO 8601 basic, `20130524T000000Z` (x-amz-date, SigV4 scope);
//! - `iso8601`: extended with milliseconds, `2013-05-24T00:00:00.000Z` (XML bodies);
//! - `http_date`: RFC 7231 IMF-fixdate, `Fri, 24 May 2013 00:00:00 GMT`
//!   (Last-Modified, Date); the parser also accepts the two obsolete forms
//!   RFC 9110 §5.6.7 says recipients must accept.

use std::time::SystemTime;

use time::{Date, Month, OffsetDateTime, PrimitiveDateTime, Time, UtcOffset};

/// Percent-decoding produced bytes that are not UTF-8.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("percent-decoded string is not valid UTF-8")]
    InvalidUtf8,
}

const HEX_UPPER: &[u8; 16] = b"0123456789ABCDEF";

#[inline]
fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// SigV4 URI encoding of a string; `/` is kept as-is when `encode_slash` is false.
pub fn uri_encode(s: &str, encode_slash: bool) -> String {
    uri_encode_bytes(s.as_bytes(), encode_slash)
}

/// SigV4 URI encoding of raw bytes (used when a path does not decode to UTF-8).
pub fn uri_encode_bytes(s: &[u8], encode_slash: bool) -> String {
    let mut out = String::with_capacity(s.len() + s.len() / 4);
    for &b in s {
        if is_unreserved(b) || (b == b'/' && !encode_slash) {
            out.push(b as char);
        } else {
            out.push('%');
            out.push(HEX_UPPER[(b >> 4) as usize] as char);
            out.push(HEX_UPPER[(b & 0xf) as usize] as char);
        }
    }
    out
}

#[inline]
fn hex_val(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Decodes `%XX` sequences to bytes. A `%` not followed by two hex digits is
/// kept literally; `+` is kept as `+`.
pub fn percent_decode_bytes(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex_val(b[i + 1]), hex_val(b[i + 2])) {
                out.push(h << 4 | l);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

/// Decodes `%XX` sequences; the result must be UTF-8.
pub fn percent_decode(s: &str) -> Result<String, DecodeError> {
    if !s.as_bytes().contains(&b'%') {
        return Ok(s.to_owned());
    }
    String::from_utf8(percent_decode_bytes(s)).map_err(|_| DecodeError::InvalidUtf8)
}

/// Splits a raw query string into decoded `(key, value)` pairs, in order.
///
/// Empty segments (`a&&b`) are skipped; a key without `=` gets value `""`.
/// Decoding is `%XX` only (see the module note); bytes that do not form UTF-8
/// are replaced with U+FFFD rather than dropping the parameter.
pub fn parse_query(raw: &str) -> Vec<(String, String)> {
    let raw = raw.strip_prefix('?').unwrap_or(raw);
    raw.split('&')
        .filter(|seg| !seg.is_empty())
        .map(|seg| {
            let (k, v) = seg.split_once('=').unwrap_or((seg, ""));
            (decode_lossy(k), decode_lossy(v))
        })
        .collect()
}

fn decode_lossy(s: &str) -> String {
    match percent_decode(s) {
        Ok(v) => v,
        Err(_) => String::from_utf8_lossy(&percent_decode_bytes(s)).into_owned(),
    }
}

fn to_utc(t: SystemTime) -> OffsetDateTime {
    OffsetDateTime::from(t).to_offset(UtcOffset::UTC)
}

fn month_num(m: Month) -> u8 {
    m as u8
}

/// `20130524T000000Z`
pub fn amz_date(t: SystemTime) -> String {
    let d = to_utc(t);
    format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
        d.year(),
        month_num(d.month()),
        d.day(),
        d.hour(),
        d.minute(),
        d.second()
    )
}

fn digits(s: &[u8]) -> Option<u32> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut v: u32 = 0;
    for &c in s {
        v = v.checked_mul(10)?.checked_add((c - b'0') as u32)?;
    }
    Some(v)
}

fn build(year: i32, month: u32, day: u32, h: u32, mi: u32, s: u32) -> Option<SystemTime> {
    let month = Month::try_from(u8::try_from(month).ok()?).ok()?;
    let date = Date::from_calendar_date(year, month, u8::try_from(day).ok()?).ok()?;
    // Leap seconds ("60") are folded into the following second's predecessor.
    let s = s.min(59);
    let time = Time::from_hms(u8::try_from(h).ok()?, u8::try_from(mi).ok()?, s as u8).ok()?;
    Some(PrimitiveDateTime::new(date, time).assume_utc().into())
}

/// Parses `20130524T000000Z`.
pub fn parse_amz_date(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return None;
    }
    build(
        digits(&b[0..4])? as i32,
        digits(&b[4..6])?,
        digits(&b[6..8])?,
        digits(&b[9..11])?,
        digits(&b[11..13])?,
        digits(&b[13..15])?,
    )
}

/// `2013-05-24T00:00:00.000Z`
pub fn iso8601(t: SystemTime) -> String {
    let d = to_utc(t);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        d.year(),
        month_num(d.month()),
        d.day(),
        d.hour(),
        d.minute(),
        d.second(),
        d.millisecond()
    )
}

/// Parses `2013-05-24T00:00:00Z` with optional fractional seconds.
pub fn parse_iso8601(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    if *b.last()? != b'Z' {
        return None;
    }
    let frac = &b[19..b.len() - 1];
    let nanos = if frac.is_empty() {
        0
    } else {
        if frac[0] != b'.' || frac.len() < 2 || frac.len() > 10 {
            return None;
        }
        let f = &frac[1..];
        let v = digits(f)?;
        v * 10u32.pow(9 - f.len() as u32)
    };
    let t = build(
        digits(&b[0..4])? as i32,
        digits(&b[5..7])?,
        digits(&b[8..10])?,
        digits(&b[11..13])?,
        digits(&b[14..16])?,
        digits(&b[17..19])?,
    )?;
    Some(t + std::time::Duration::from_nanos(nanos as u64))
}

const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

/// RFC 7231 IMF-fixdate: `Fri, 24 May 2013 00:00:00 GMT`.
pub fn http_date(t: SystemTime) -> String {
    let d = to_utc(t);
    format!(
        "{}, {:02} {} {:04} {:02}:{:02}:{:02} GMT",
        DAYS[d.weekday().number_days_from_monday() as usize],
        d.day(),
        MONTHS[month_num(d.month()) as usize - 1],
        d.year(),
        d.hour(),
        d.minute(),
        d.second()
    )
}

fn month_from_name(s: &str) -> Option<u32> {
    MONTHS.iter().position(|m| *m == s).map(|i| i as u32 + 1)
}

fn parse_hms(s: &str) -> Option<(u32, u32, u32)> {
    let b = s.as_bytes();
    if b.len() != 8 || b[2] != b':' || b[5] != b':' {
        return None;
    }
    Some((digits(&b[0..2])?, digits(&b[3..5])?, digits(&b[6..8])?))
}

/// Parses an HTTP date: IMF-fixdate, RFC 850 (`Friday, 24-May-13 00:00:00 GMT`)
/// or asctime (`Fri May 24 00:00:00 2013`). The weekday is not cross-checked.
pub fn parse_http_date(s: &str) -> Option<SystemTime> {
    let s = s.trim();
    let parts: Vec<&str> = s.split_ascii_whitespace().collect();
    match parts.as_slice() {
        // IMF-fixdate
        [wd, day, mon, year, hms, "GMT"] if wd.ends_with(',') => {
            let (h, mi, se) = parse_hms(hms)?;
            if day.len() != 2 || year.len() != 4 {
                return None;
            }
            build(digits(year.as_bytes())? as i32, month_from_name(mon)?, digits(day.as_bytes())?, h, mi, se)
        }
        // RFC 850
        [wd, dmy, hms, "GMT"] if wd.ends_with(',') => {
            let mut it = dmy.split('-');
            let (day, mon, yy) = (it.next()?, it.next()?, it.next()?);
            if it.next().is_some() || yy.len() != 2 {
                return None;
            }
            let yy = digits(yy.as_bytes())? as i32;
            // RFC 9110 §5.6.7: two-digit years more than 50 years in the future are in the past.
            let year = if yy < 70 { 2000 + yy } else { 1900 + yy };
            let (h, mi, se) = parse_hms(hms)?;
            build(year, month_from_name(mon)?, digits(day.as_bytes())?, h, mi, se)
        }
        // asctime
        [_wd, mon, day, hms, year] => {
            let (h, mi, se) = parse_hms(hms)?;
            build(digits(year.as_bytes())? as i32, month_from_name(mon)?, digits(day.as_bytes())?, h, mi, se)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::{Duration, UNIX_EPOCH};

    const T_2013: u64 = 1_369_353_600; // 2013-05-24T00:00:00Z

    #[test]
    fn uri_encode_rules() {
        assert_eq!(uri_encode("a b/c~d-e.f_g", false), "a%20b/c~d-e.f_g");
        assert_eq!(uri_encode("a b/c", true), "a%20b%2Fc");
        assert_eq!(uri_encode("é+%*", true), "%C3%A9%2B%25%2A");
        assert_eq!(uri_encode("test$file.text", false), "test%24file.text");
    }

    #[test]
    fn percent_decode_rules() {
        assert_eq!(percent_decode("a%20b+c").unwrap(), "a b+c");
        assert_eq!(percent_decode("%C3%a9").unwrap(), "é");
        assert_eq!(percent_decode("100%").unwrap(), "100%");
        assert_eq!(percent_decode("%zz%4").unwrap(), "%zz%4");
        assert_eq!(percent_decode("%FF"), Err(DecodeError::InvalidUtf8));
        assert_eq!(percent_decode_bytes("%FF%00"), vec![0xff, 0]);
    }

    #[test]
    fn parse_query_rules() {
        assert_eq!(
            parse_query("a=1&b&&c=x%20y+z&d=e=f"),
            vec![
                ("a".into(), "1".into()),
                ("b".into(), "".into()),
                ("c".into(), "x y+z".into()),
                ("d".into(), "e=f".into())
            ]
        );
        assert!(parse_query("").is_empty());
    }

    #[test]
    fn dates() {
        let t = UNIX_EPOCH + Duration::from_secs(T_2013);
        assert_eq!(amz_date(t), "20130524T000000Z");
        assert_eq!(parse_amz_date("20130524T000000Z"), Some(t));
        assert_eq!(iso8601(t + Duration::from_millis(12)), "2013-05-24T00:00:00.012Z");
        assert_eq!(parse_iso8601("2013-05-24T00:00:00.012Z"), Some(t + Duration::from_millis(12)));
        assert_eq!(parse_iso8601("2013-05-24T00:00:00Z"), Some(t));
        assert_eq!(http_date(t), "Fri, 24 May 2013 00:00:00 GMT");
        assert_eq!(parse_http_date("Fri, 24 May 2013 00:00:00 GMT"), Some(t));
        assert_eq!(parse_http_date("Friday, 24-May-13 00:00:00 GMT"), Some(t));
        assert_eq!(parse_http_date("Fri May 24 00:00:00 2013"), Some(t));
        assert_eq!(parse_http_date("Fri May 24 00:00:00"), None);
        assert_eq!(parse_amz_date("20131324T000000Z"), None);
        assert_eq!(parse_amz_date("2013052AT000000Z"), None);
        assert_eq!(parse_amz_date("20130524T000000"), None);
    }

    proptest! {
        #[test]
        fn encode_decode_roundtrip(s in "\\PC*", slash in any::<bool>()) {
            let e = uri_encode(&s, slash);
            prop_assert!(e.bytes().all(|b| is_unreserved(b) || b == b'%' || b == b'/'));
            prop_assert_eq!(percent_decode(&e).unwrap(), s);
        }

        #[test]
        fn query_roundtrip(pairs in proptest::collection::vec(("\\PC{1,8}", "\\PC{0,8}"), 0..5)) {
            let raw: Vec<String> = pairs.iter().map(|(k, v)| format!("{}={}", uri_encode(k, true), uri_encode(v, true))).collect();
            prop_assert_eq!(parse_query(&raw.join("&")), pairs);
        }

        #[test]
        fn date_roundtrips(secs in 0u64..8_000_000_000) {
            let t = UNIX_EPOCH + Duration::from_secs(secs);
            prop_assert_eq!(parse_amz_date(&amz_date(t)), Some(t));
            prop_assert_eq!(parse_http_date(&http_date(t)), Some(t));
            prop_assert_eq!(parse_iso8601(&iso8601(t)), Some(t));
        }

        #[test]
        fn date_parsers_never_panic(s in "\\PC{0,40}") {
            let _ = parse_amz_date(&s);
            let _ = parse_http_date(&s);
            let _ = parse_iso8601(&s);
        }
    }
}
