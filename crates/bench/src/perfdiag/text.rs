//! The perfdiag document (mod.rs) as tables for people: one per section, the same
//! figures the JSON holds, times in milliseconds, medians with their min-max spread.

use super::human;
use serde_json::Value;
use std::fmt::Write;

fn ms(v: &Value) -> String {
    v.as_f64().map(|s| format!("{:.1}", s * 1e3)).unwrap_or_else(|| "-".into())
}

fn num(v: &Value) -> String {
    v.as_f64().map(|x| if x >= 100.0 { format!("{x:.0}") } else { format!("{x:.1}") }).unwrap_or_else(|| "-".into())
}

/// `median (min-max)` of a spread object.
fn spread(v: &Value) -> String {
    if v.is_null() {
        return "-".into();
    }
    format!("{} ({}-{})", num(&v["median"]), num(&v["min"]), num(&v["max"]))
}

fn table(out: &mut String, head: &[&str], rows: Vec<Vec<String>>) {
    let _ = writeln!(out, "| {} |", head.join(" | "));
    let _ = writeln!(out, "|{}", head.iter().map(|_| "---|").collect::<String>());
    for r in rows {
        let _ = writeln!(out, "| {} |", r.join(" | "));
    }
    out.push('\n');
}

fn arr(doc: &Value, key: &str) -> Vec<Value> {
    doc[key].as_array().cloned().unwrap_or_default()
}

fn errors(r: &Value) -> String {
    match r["errors"].as_u64() {
        Some(0) | None => String::new(),
        Some(n) => format!(" ({n} errors: {})", r["error_samples"][0].as_str().unwrap_or("")),
    }
}

/// Renders every section of `doc`.
pub fn render(doc: &Value) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "ferry perfdiag {}  (endpoint {}, scratch {})\n",
        doc["url"].as_str().unwrap_or(""),
        doc["endpoint"].as_str().unwrap_or(""),
        doc["scratch"].as_str().unwrap_or("")
    );
    for l in arr(doc, "leftovers") {
        let _ = writeln!(
            out,
            "earlier scratch {}: {} ({})",
            l["prefix"].as_str().unwrap_or(""),
            l["action"].as_str().unwrap_or(""),
            l["reason"].as_str().unwrap_or("")
        );
    }
    let m = &doc["machine"];
    let nics: Vec<String> = m["nics"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|n| match n["speed_mbit_s"].as_u64() {
                    Some(s) => format!("{} {s} Mbit/s", n["name"].as_str().unwrap_or("?")),
                    None => format!("{} (speed not reported)", n["name"].as_str().unwrap_or("?")),
                })
                .collect()
        })
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "## Client\n\n{} cores, kernel {}; NICs: {}\n",
        m["cores"],
        m["kernel"].as_str().unwrap_or("?"),
        if nics.is_empty() { "none listed".into() } else { nics.join(", ") }
    );

    let p = &doc["path"];
    let _ = writeln!(out, "## Path\n");
    let dns = &p["dns"];
    let answers: Vec<String> = dns["answers"]
        .as_array()
        .map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_owned)).collect())
        .unwrap_or_default();
    let mut rows = vec![
        vec!["DNS".into(), format!("{} ms: {}", ms(&dns["s"]), answers.join(", "))],
        vec![
            "TCP connect".into(),
            format!(
                "p50 {} ms (min {}, max {}, {} samples)",
                ms(&p["tcp_connect"]["p50_s"]),
                ms(&p["tcp_connect"]["min_s"]),
                ms(&p["tcp_connect"]["max_s"]),
                p["tcp_connect"]["samples"]
            ),
        ],
    ];
    if let Some(t) = p.get("tls_handshake") {
        rows.push(vec![
            "TLS handshake".into(),
            format!(
                "p50 {} ms, {}; ALPN offered h2, http/1.1: chose {}",
                ms(&t["stats"]["p50_s"]),
                t["version"].as_str().unwrap_or("?"),
                t["alpn_chosen"].as_str().unwrap_or("?")
            ),
        ]);
    }
    rows.push(vec![
        "HTTP versions".into(),
        p["http_versions"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", "))
            .unwrap_or_default(),
    ]);
    let pl = &p["pipelining"];
    rows.push(vec![
        "HTTP/1.1 pipelining".into(),
        if pl["verified"].as_bool() == Some(true) {
            format!(
                "answered correctly ({} requests in flight on {} connection)",
                pl["requests"], pl["connections_opened"]
            )
        } else if pl["observed"].as_bool() == Some(false) {
            format!(
                "not measured: every response was right, but in {} rounds of {} the requests never were in flight together",
                pl["rounds"], pl["requests"]
            )
        } else {
            format!("NOT answered correctly: statuses {}, errors {}", pl["statuses"], pl["errors"])
        },
    ]);
    let w = &p["receive_window"];
    if let Some(h1) = w.get("http1") {
        rows.push(vec![
            "receive buffer, HTTP/1.1".into(),
            match h1["so_rcvbuf_bytes"].as_u64() {
                Some(b) => format!(
                    "{} after a {} GET in {} ms (TCP RTT {} µs)",
                    human_size(b),
                    human(h1["object_bytes"].as_u64().unwrap_or(0)),
                    ms(&h1["s"]),
                    h1["tcp_rtt_us"]
                ),
                None => format!("not known ({})", h1["error"].as_str().unwrap_or("not reported")),
            },
        ]);
    }
    if let Some(h2) = w.get("h2") {
        rows.push(vec![
            "receive window, HTTP/2".into(),
            match h2["largest_stream_window_bytes"].as_u64() {
                Some(b) => format!(
                    "{} largest stream window after a {} GET in {} ms",
                    human_size(b),
                    human(h2["object_bytes"].as_u64().unwrap_or(0)),
                    ms(&h2["s"])
                ),
                None => format!("not known ({})", h2["error"].as_str().unwrap_or("not reported")),
            },
        ]);
    }
    rows.push(vec![
        "kernel limits".into(),
        format!("net.core.rmem_max {}, tcp_rmem {}", w["rmem_max_bytes"], w["tcp_rmem"]),
    ]);
    table(&mut out, &["", "measured"], rows);

    let _ = writeln!(
        out,
        "## Latency: sequential requests of a {} object (ms; p50 per repeat as median (min-max))\n",
        human(doc["params"]["latency_object_bytes"].as_u64().unwrap_or(0))
    );
    let rows = arr(doc, "latency")
        .iter()
        .map(|r| {
            vec![
                r["op"].as_str().unwrap_or("").into(),
                r["transport"].as_str().unwrap_or("").into(),
                format!(
                    "{} / {} / {}",
                    ms(&r["first_byte_s"]["p50"]),
                    ms(&r["first_byte_s"]["p90"]),
                    ms(&r["first_byte_s"]["p99"])
                ),
                format!("{} / {} / {}", ms(&r["whole_s"]["p50"]), ms(&r["whole_s"]["p90"]), ms(&r["whole_s"]["p99"])),
                format!("{}{}", spread_ms(&r["p50_by_repeat_s"]), errors(r)),
            ]
        })
        .collect();
    table(&mut out, &["op", "transport", "first byte p50/p90/p99", "whole p50/p90/p99", "p50 by repeat"], rows);

    let _ = writeln!(out, "## Throughput (median (min-max) over repeats; request times in ms)\n");
    let rows = arr(doc, "throughput")
        .iter()
        .map(|r| {
            vec![
                human(r["object_bytes"].as_u64().unwrap_or(0)),
                format!("{} x{}", r["op"].as_str().unwrap_or(""), r["streams"]),
                r["transport"].as_str().unwrap_or("").into(),
                spread(&r["objects_per_s"]),
                spread(&r["mb_per_s"]),
                format!(
                    "{} / {} / {}{}",
                    ms(&r["request_s"]["p50"]),
                    ms(&r["request_s"]["p90"]),
                    ms(&r["request_s"]["p99"]),
                    errors(r)
                ),
            ]
        })
        .collect();
    table(&mut out, &["size", "op x streams", "transport", "objects/s", "MB/s", "request p50/p90/p99"], rows);

    let prm = &doc["params"];
    let _ = writeln!(
        out,
        "## Listing: {} keys in {} directories, {} keys per page\n",
        prm["list_dirs"].as_u64().unwrap_or(0) * prm["list_files"].as_u64().unwrap_or(0),
        prm["list_dirs"],
        prm["list_page"]
    );
    let rows = arr(doc, "listing")
        .iter()
        .map(|r| {
            vec![
                r["how"].as_str().unwrap_or("").into(),
                r["transport"].as_str().unwrap_or("").into(),
                format!("{}", r["pages"]),
                spread(&r["pages_per_s"]),
                format!("{}{}", spread(&r["keys_per_s"]), errors(r)),
            ]
        })
        .collect();
    table(&mut out, &["listing", "transport", "LIST calls", "pages/s", "keys/s"], rows);

    for s in arr(doc, "transports_skipped") {
        let _ = writeln!(
            out,
            "{} not measured: {}",
            s["transport"].as_str().unwrap_or(""),
            s["reason"].as_str().unwrap_or("")
        );
    }
    let recs = arr(doc, "recommendations");
    let repeats = doc["params"]["repeats"].as_u64().unwrap_or(0);
    if recs.is_empty() && repeats < super::MIN_REPEATS_TO_RECOMMEND {
        let _ = writeln!(
            out,
            "No recommendation: {repeats} repeats; one needs at least {} (--repeats).",
            super::MIN_REPEATS_TO_RECOMMEND
        );
    } else if recs.is_empty() {
        let _ =
            writeln!(out, "No recommendation: no transport is ahead of the others beyond the spread of the repeats.");
    } else {
        let _ = writeln!(out, "## Recommendations (where one transport is ahead in every repeat)\n");
        for r in recs {
            let _ = writeln!(out, "- {}", r.as_str().unwrap_or(""));
        }
    }
    let b = &doc["bounds"];
    let _ = writeln!(
        out,
        "\n{} moved in {:.1} s{}; scratch {}",
        human_size(b["bytes_moved"].as_u64().unwrap_or(0)),
        b["wall_s"].as_f64().unwrap_or(0.0),
        match b["cut_by"].as_str() {
            Some("max-bytes") => ", CUT SHORT by --max-bytes: the steps that move bytes after it were skipped".into(),
            Some(c) => format!(", CUT SHORT by --{c}: later steps were skipped"),
            None => String::new(),
        },
        if doc["cleanup"]["removed"].as_bool() == Some(true) {
            format!("removed ({} keys)", doc["cleanup"]["keys_deleted"])
        } else {
            format!("NOT removed: {}", doc["cleanup"]["error"].as_str().unwrap_or("?"))
        }
    );
    out
}

fn spread_ms(v: &Value) -> String {
    if v.is_null() {
        return "-".into();
    }
    format!("{} ({}-{})", ms(&v["median"]), ms(&v["min"]), ms(&v["max"]))
}

fn human_size(n: u64) -> String {
    match n {
        n if n >= 10 << 20 => format!("{:.0} MiB", n as f64 / (1 << 20) as f64),
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / (1 << 20) as f64),
        n if n >= 10 << 10 => format!("{:.0} KiB", n as f64 / 1024.0),
        n => format!("{n} B"),
    }
}
