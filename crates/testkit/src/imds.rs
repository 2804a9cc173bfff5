//! AWS's own EC2 instance metadata emulator, `ec2-metadata-mock` (amazon-ec2-metadata-mock),
//! for the client's instance metadata credentials.
//!
//! `FERRY_EC2_METADATA_MOCK` names the binary (`scripts/setup.sh` builds it at a pinned
//! version; `scripts/test.sh` sets the variable). Tests that use it are
//! `#[ignore = "needs ec2-metadata-mock ..."]`; run without it, [`Ec2MetadataMock::start`]
//! panics, so such a test fails instead of passing.
//!
//! One process per call, since each test hands out keys of its own: they go into the
//! mock's JSON configuration (`metadata.values.iam-security-credentials`, and the role's
//! name in both the role listing and the credentials path), written to a temporary
//! directory that is also the process's HOME. The process dies with the thread that
//! started it and is killed when the value is dropped.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// How long the mock may take to answer its first request (it starts in milliseconds; a
/// busy machine is slower).
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// The keys the mock hands out for its instance's role.
pub struct ImdsKeys<'a> {
    pub role: &'a str,
    pub access_key_id: &'a str,
    pub secret_access_key: &'a str,
    pub token: &'a str,
    /// RFC 3339, `2030-01-01T00:00:00Z`.
    pub expiration: &'a str,
}

/// A running `ec2-metadata-mock`.
pub struct Ec2MetadataMock {
    pub addr: SocketAddr,
    child: std::process::Child,
    _dir: tempfile::TempDir,
}

impl Ec2MetadataMock {
    /// Starts the mock handing out `keys`; `imdsv2_only`: requests without a session
    /// token are refused 401 (its `--imdsv2`). Panics when `FERRY_EC2_METADATA_MOCK` is not set.
    pub fn start(keys: &ImdsKeys, imdsv2_only: bool) -> Ec2MetadataMock {
        let bin = std::env::var("FERRY_EC2_METADATA_MOCK").unwrap_or_else(|_| {
            panic!(
                "FERRY_EC2_METADATA_MOCK is not set: this test needs ec2-metadata-mock (scripts/setup.sh builds it; \
                 scripts/test.sh sets FERRY_EC2_METADATA_MOCK)"
            )
        });
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let config = config_json(keys, port);
        let config_path: PathBuf = dir.path().join("aemm-config.json");
        std::fs::write(&config_path, config).unwrap();
        let log = std::fs::File::create(dir.path().join("aemm.log")).unwrap();
        let mut cmd = std::process::Command::new(&bin);
        cmd.arg("-c").arg(&config_path).env("HOME", dir.path());
        if imdsv2_only {
            cmd.arg("--imdsv2");
        }
        cmd.stdin(std::process::Stdio::null()).stdout(log.try_clone().unwrap()).stderr(log);
        crate::serve::die_with_parent(&mut cmd);
        let child = cmd.spawn().unwrap_or_else(|e| panic!("starting ec2-metadata-mock ({bin}): {e}"));
        let mut mock = Ec2MetadataMock { addr, child, _dir: dir };
        let deadline = std::time::Instant::now() + READY_TIMEOUT;
        while !mock.answers() {
            if let Ok(Some(status)) = mock.child.try_wait() {
                let log = std::fs::read_to_string(mock._dir.path().join("aemm.log")).unwrap_or_default();
                panic!("ec2-metadata-mock exited ({status}):\n{log}");
            }
            assert!(std::time::Instant::now() < deadline, "ec2-metadata-mock did not answer at {addr}");
            std::thread::sleep(Duration::from_millis(50));
        }
        mock
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Whether a session token request is answered 200.
    fn answers(&self) -> bool {
        use std::io::{Read, Write};
        let Ok(mut s) = std::net::TcpStream::connect(self.addr) else { return false };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let head = format!(
            "PUT /latest/api/token HTTP/1.1\r\nHost: {}\r\nX-aws-ec2-metadata-token-ttl-seconds: 60\r\n\
             Content-Length: 0\r\nConnection: close\r\n\r\n",
            self.addr
        );
        let mut buf = [0u8; 12];
        s.write_all(head.as_bytes()).is_ok() && s.read_exact(&mut buf).is_ok() && &buf[9..12] == b"200"
    }
}

impl Drop for Ec2MetadataMock {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The mock's configuration: its address, and the role and keys it answers.
fn config_json(k: &ImdsKeys, port: u16) -> String {
    let q = |s: &str| format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""));
    format!(
        r#"{{
  "server": {{ "hostname": "127.0.0.1", "port": {port} }},
  "metadata": {{
    "paths": {{ "iam-security-credentials": {path} }},
    "values": {{
      "iam-security-credentials-role": {role},
      "iam-security-credentials": {{
        "Code": "Success", "LastUpdated": "2026-01-01T00:00:00Z", "Type": "AWS-HMAC",
        "AccessKeyId": {id}, "SecretAccessKey": {secret}, "Token": {token}, "Expiration": {exp}
      }}
    }}
  }}
}}"#,
        port = q(&port.to_string()),
        path = q(&format!("/latest/meta-data/iam/security-credentials/{}", k.role)),
        role = q(k.role),
        id = q(k.access_key_id),
        secret = q(k.secret_access_key),
        token = q(k.token),
        exp = q(k.expiration),
    )
}
