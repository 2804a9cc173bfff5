//! `ferry perfdiag URL`: the lab's measurements against the user's own storage (the
//! sections and their design are in ferry-bench's perfdiag module; this file is the verb).
//!
//! ```text
//! args ─► one client per transport (Global::client: s3://, gs:// and az:// alike; one the
//!        provider's client refuses, like Azure's h2, is left out with the reason)
//!      ─► ferry_bench::perfdiag::run (progress on stderr through indicatif)
//!      ─► the document: tables on stdout, or one JSON document with --json
//!      ─► --plots DIR: the document as DIR/perfdiag.json, then bench/plot.py --perfdiag
//! ```
//!
//! Exit codes as every verb: 2 for bad flags or URL; 1 when the endpoint cannot be
//! reached, refuses the credentials, or a section failed (the scratch prefix is removed
//! either way); the plots failing after the measurement also exits 1, with the report
//! printed.

use crate::common::{parse_object, usage, Global, ModeArg};
use crate::units::{parse_bytes, parse_duration};
use anyhow::{Context, Result};
use clap::Args;
use ferry_bench::perfdiag::{self, Client, Params, Progress, Target};
use ferry_store::Mode;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Args, Debug, Clone)]
#[command(
    after_help = "Examples:\n  ferry perfdiag s3://bucket/                 # about 10 minutes at most: latency, throughput 16 KiB-32 MiB, listing, path\n  ferry perfdiag --quick s3://bucket/tmp/     # a few seconds: every section, few samples\n  ferry perfdiag --json s3://bucket/ > perfdiag.json\n  ferry perfdiag --plots plots/ s3://bucket/  # PNG percentile plots (needs matplotlib: scripts/bench-setup.sh)\n  ferry perfdiag --large --max-bytes 20GiB --duration 30m s3://bucket/\n\nEverything is written under URL/ferry-perfdiag-<random>/ and removed at the end; a\nprefix left by a killed run is removed by the next run (or listed, when its run may still\nbe going)."
)]
pub struct PerfdiagArgs {
    #[command(flatten)]
    pub g: Global,
    /// s3://bucket[/prefix], gs://bucket[/prefix] or az://container[/prefix]: the scratch
    /// prefix goes under it.
    pub url: String,
    /// A few samples of every section, for tests and a first look (seconds, not minutes).
    #[arg(long)]
    pub quick: bool,
    /// Also 128 MiB and 512 MiB objects in the throughput section.
    #[arg(long)]
    pub large: bool,
    /// Stop measuring after this long (cleanup still runs) [default: 10m; 2m with --quick].
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Stop measuring once this many bytes were moved up and down [default: 16GiB; 256MiB
    /// with --quick].
    #[arg(long, value_parser = parse_bytes)]
    pub max_bytes: Option<u64>,
    /// Repeats, each running every transport in turn [default: 3; 2 with --quick].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub repeats: Option<u64>,
    /// Transports to compare, comma-separated [default: h1-pool,h1-pipeline,h2,auto; h2
    /// only where the endpoint answers it and the provider's client speaks it].
    #[arg(long, value_delimiter = ',')]
    pub transports: Vec<String>,
    /// Write PNG percentile plots (and the JSON document) into this directory.
    #[arg(long, value_name = "DIR")]
    pub plots: Option<PathBuf>,
}

/// indicatif's bar on stderr, a section at a time.
struct Bar(ProgressBar);

impl Progress for Bar {
    fn section(&self, name: &str, steps: u64) {
        self.0.set_prefix(name.to_owned());
        self.0.set_length(steps);
        self.0.set_position(0);
    }

    fn step(&self, what: &str) {
        self.0.set_message(what.to_owned());
        self.0.inc(1);
    }
}

pub async fn run(a: PerfdiagArgs, g: &Global) -> Result<()> {
    let url = parse_object(&a.url)?;
    if url.key.contains(['*', '?', '[']) {
        return Err(usage(format!("{:?}: perfdiag takes a bucket and prefix, not a pattern", a.url)));
    }
    let mut params = if a.quick { Params::quick() } else { Params::full() };
    if a.large {
        params = params.with_large();
    }
    if let Some(d) = a.duration {
        params.duration = d;
    }
    if let Some(b) = a.max_bytes {
        params.max_bytes = b;
    }
    if let Some(r) = a.repeats {
        params.repeats = r as usize;
    }
    // auto does the setup and the cleanup, compared or not.
    let mut ga = g.clone();
    ga.transport = Some(ModeArg(Mode::Auto));
    let setup = ga.client(url.provider)?;
    let defaults = a.transports.is_empty();
    let names: Vec<String> = if defaults {
        ["h1-pool", "h1-pipeline", "h2", "auto"].map(String::from).to_vec()
    } else {
        a.transports.clone()
    };
    let mut clients = Vec::new();
    let mut skipped = Vec::new();
    for name in &names {
        let mode = Mode::parse(name)
            .ok_or_else(|| usage(format!("unknown transport {name:?} (h1-pool, h1-pipeline, h2, auto)")))?;
        let mut gm = g.clone();
        gm.transport = Some(ModeArg(mode));
        let canonical = match mode {
            Mode::Auto => "auto",
            Mode::H1Pool => "h1-pool",
            Mode::H1Pipeline => "h1-pipeline",
            Mode::H2 => "h2",
        };
        match gm.client(url.provider) {
            Ok(engine) => clients.push(Client { name: canonical.into(), engine }),
            // A transport the provider's client refuses (Azure's has no HTTP/2): left out
            // of the default comparison with the reason; named by the user, an error.
            Err(e) if defaults => skipped.push((canonical.to_owned(), format!("{e:#}"))),
            Err(e) => return Err(usage(format!("--transports {canonical}: {e:#}"))),
        }
    }
    let target = Target {
        url: format!("{}://{}/{}", url.provider, url.bucket, url.key),
        bucket: url.bucket.clone(),
        base: url.key.clone(),
        clients,
        setup,
        skipped,
        ca_file: g.ca_bundle.clone().or_else(|| std::env::var_os("AWS_CA_BUNDLE").map(PathBuf::from)),
    };
    let show = !g.json && !g.quiet && std::io::stderr().is_terminal();
    let bar =
        if show { ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr()) } else { ProgressBar::hidden() };
    if let Ok(style) = ProgressStyle::with_template("{prefix:>10} [{bar:30}] {pos}/{len} {elapsed:>4} {msg}") {
        bar.set_style(style.progress_chars("=> "));
    }
    let progress = Bar(bar.clone());
    let result = perfdiag::run(&target, &params, &progress).await;
    bar.finish_and_clear();
    let doc = result?;
    if g.json {
        println!("{doc}");
    } else {
        print!("{}", perfdiag::text::render(&doc));
    }
    if let Some(dir) = &a.plots {
        plots(dir, &doc).with_context(|| format!("plots into {}", dir.display()))?;
        if !g.json {
            println!("plots: {}", dir.display());
        }
    }
    if doc["cleanup"]["removed"].as_bool() != Some(true) {
        anyhow::bail!(
            "the scratch prefix {} was not removed: {}",
            doc["cleanup"]["prefix"].as_str().unwrap_or("?"),
            doc["cleanup"]["error"].as_str().unwrap_or("?")
        );
    }
    Ok(())
}

/// Writes DIR/perfdiag.json and runs the lab's plot script on it: bench/plot.py found
/// beside the working directory or the executable's checkout (`FERRY_PLOT_SCRIPT`
/// overrides), with the bench's virtualenv's Python when there is one (`FERRY_PLOT_PYTHON`
/// overrides), else `python3`.
fn plots(dir: &Path, doc: &serde_json::Value) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let json = dir.join("perfdiag.json");
    let tmp = dir.join(".perfdiag.json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(doc)?)?;
    std::fs::rename(&tmp, &json)?;
    let script = std::env::var_os("FERRY_PLOT_SCRIPT")
        .map(PathBuf::from)
        .or_else(|| find_up("bench/plot.py"))
        .ok_or_else(|| {
            anyhow::anyhow!(
                "bench/plot.py was not found (run from a ferry checkout, or set FERRY_PLOT_SCRIPT); the JSON is in {}",
                json.display()
            )
        })?;
    let root = script.parent().and_then(Path::parent).map(Path::to_path_buf).unwrap_or_default();
    let python = std::env::var_os("FERRY_PLOT_PYTHON")
        .map(PathBuf::from)
        .or_else(|| Some(root.join(".ferry-run/bench-venv/bin/python")).filter(|p| p.exists()))
        .unwrap_or_else(|| PathBuf::from("python3"));
    let out = std::process::Command::new(&python)
        .arg(&script)
        .arg("--perfdiag")
        .arg(&json)
        .arg("--out")
        .arg(dir)
        .output()
        .with_context(|| format!("running {}", python.display()))?;
    if !out.status.success() {
        anyhow::bail!(
            "{} {} failed: {}{}",
            python.display(),
            script.display(),
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// `rel` in the working directory or one above it, else beside the executable's checkout
/// (target/{debug,release}/ferry is three levels under the root).
fn find_up(rel: &str) -> Option<PathBuf> {
    let mut starts = Vec::new();
    if let Ok(d) = std::env::current_dir() {
        starts.push(d);
    }
    if let Ok(exe) = std::env::current_exe() {
        starts.extend(exe.parent().map(Path::to_path_buf));
    }
    for s in starts {
        for d in s.ancestors().take(4) {
            let p = d.join(rel);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    None
}
