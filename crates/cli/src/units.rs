//! Parsing of human units on the command line: durations ("30ms", "1.5s", "2m") and byte
//! sizes or rates ("90MB", "64MiB", "1G").

use std::time::Duration;

pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num.parse().map_err(|_| format!("'{s}' is not a duration like 30ms, 1.5s or 2m"))?;
    let secs = match unit.trim() {
        "ns" => n / 1e9,
        "us" | "µs" => n / 1e6,
        "ms" => n / 1e3,
        "" | "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("'{s}': unknown duration unit '{unit}' (use ns, us, ms, s, m or h)")),
    };
    Ok(Duration::from_secs_f64(secs))
}

pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim().trim_end_matches("/s");
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| format!("'{s}' is not a size like 90MB, 64MiB or 12345"))?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "m" | "mb" => 1e6,
        "g" | "gb" => 1e9,
        "t" | "tb" => 1e12,
        "ki" | "kib" => 1024.0,
        "mi" | "mib" => 1024.0 * 1024.0,
        "gi" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "ti" | "tib" => 1024.0f64.powi(4),
        _ => return Err(format!("'{s}': unknown size unit '{unit}' (use B, KB, MB, GB, KiB, MiB, GiB)")),
    };
    Ok((n * mult) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30ms").unwrap(), Duration::from_millis(30));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        assert!(parse_duration("fast").is_err());
        assert!(parse_duration("3 weeks").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("90MB").unwrap(), 90_000_000);
        assert_eq!(parse_bytes("90MB/s").unwrap(), 90_000_000);
        assert_eq!(parse_bytes("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_bytes("12345").unwrap(), 12345);
        assert!(parse_bytes("lots").is_err());
    }
}
