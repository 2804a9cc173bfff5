//! The words every workload and the runner share about a run: [`RunOptions`] (how a
//! workload is run: the server command, where JSON lines go, time-outs, the link, the
//! peers asked for) and [`Outcome`] (what it produced: records, the Markdown report, wall
//! time). A bottom module: it names no workload and no runner.

use crate::process::ServerCommand;
use crate::record::RunRecord;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// How a workload is run (not what it measures).
#[derive(Clone, Debug)]
pub struct RunOptions {
    pub server: ServerCommand,
    /// JSON lines are appended here; `None` writes none.
    pub out: Option<PathBuf>,
    /// Where the servers' stderr logs go.
    pub log_dir: PathBuf,
    /// Live progress on stderr.
    pub progress: bool,
    /// One run (one variant, one repeat) is cut off after this long and recorded as
    /// "timeout".
    pub run_timeout: Duration,
    /// Servers are killed after this long whatever happens.
    pub server_lifetime: Duration,
    /// The emulated link (ferry-link): servers in its server namespace, the client in its
    /// client namespace, `params.link` in every record. Set it with [`RunOptions::set_link`],
    /// which also hands it to `server`.
    pub link: Option<Arc<ferry_link::Link>>,
    /// Peers to run beside ferry where a workload has peer rows (`ferry bench all`).
    pub peers: Vec<crate::peers::Peer>,
    /// An S3-compatible server we did not write, used instead of every `ferry serve` the
    /// workload would start (`ferry bench --endpoint-url`): the emulation profile does
    /// not apply, rows that need ferry serve's own features are skipped (runner.rs).
    pub external: Option<ExternalServer>,
    /// The MinIO the bench started for `--minio` (minio.rs), `external`'s server: kept
    /// running as long as these options live.
    pub minio: Option<Arc<crate::minio::MinioServer>>,
    /// The emulation profile every `ferry serve` of the workload runs instead of its own
    /// (`ferry bench WORKLOAD --profile NAME`, one of [`crate::workload::PROFILES`]):
    /// the same rows against another store's shape (runner.rs, [`crate::Workload::on_profile`]).
    pub profile: Option<&'static str>,
}

/// An external S3-compatible endpoint and its credentials.
#[derive(Clone, Debug)]
pub struct ExternalServer {
    pub url: String,
    pub access_key: String,
    pub secret_key: String,
    pub region: String,
    /// Its process on this machine where the bench knows it (a MinIO it started:
    /// minio.rs), for its CPU per row; else it is looked up by its listening socket.
    pub pid: Option<u32>,
}

impl RunOptions {
    pub fn new(server: ServerCommand) -> RunOptions {
        RunOptions {
            server,
            out: None,
            log_dir: std::env::temp_dir(),
            progress: true,
            run_timeout: Duration::from_secs(300),
            server_lifetime: Duration::from_secs(3600),
            link: None,
            peers: Vec::new(),
            external: None,
            minio: None,
            profile: None,
        }
    }

    pub fn set_link(&mut self, link: Option<Arc<ferry_link::Link>>) {
        self.server.link = link.clone();
        self.link = link;
    }

    /// The link preset's name, or "none": `params.link` of every record.
    pub fn link_name(&self) -> &'static str {
        self.link.as_ref().map(|l| l.preset().name).unwrap_or("none")
    }
}

/// What a workload produced.
pub struct Outcome {
    pub records: Vec<RunRecord>,
    /// The Markdown report (table, claims, notes).
    pub report: String,
    pub wall: Duration,
}
