//! Named network namespaces (`ip netns add`, so they show in `ip netns list` and can be
//! entered with `ip netns exec`), entering one from a thread (setns), and removing the
//! ones a killed run left behind.
//!
//! Names are `ferrylink-<pid>-<seq>-<role>`: the pid of the process that owns them, so a
//! later run can tell a stale namespace (its pid is gone) from one that another live
//! process (or another test thread of this one) is using.

use crate::{command, LinkError};
use std::fs::File;
use std::marker::PhantomData;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where `ip netns add` bind-mounts named namespaces.
pub const NETNS_DIR: &str = "/run/netns";
/// The prefix of every namespace this crate creates.
pub const PREFIX: &str = "ferrylink-";

/// A named namespace, deleted (`ip netns del`) on drop.
#[derive(Debug)]
pub struct Namespace {
    name: String,
    /// Open handle on the namespace (for setns), shared with spawned children's pre_exec.
    file: Arc<File>,
}

impl Namespace {
    /// `ip netns add NAME`, then opens it.
    pub fn create(name: &str) -> Result<Namespace, LinkError> {
        command("ip", &["netns", "add", name])?;
        let path = Path::new(NETNS_DIR).join(name);
        match File::open(&path) {
            Ok(f) => Ok(Namespace { name: name.to_owned(), file: Arc::new(f) }),
            Err(e) => {
                let _ = command("ip", &["netns", "del", name]);
                Err(LinkError::io(format!("opening {}", path.display()), e))
            }
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn file(&self) -> &Arc<File> {
        &self.file
    }

    /// Moves the calling thread into this namespace until the guard is dropped.
    pub fn enter(&self) -> Result<NsGuard, LinkError> {
        NsGuard::enter(&self.file)
    }

    /// Runs `f` on a new thread inside this namespace and returns its result. Sockets
    /// and devices created by `f` stay in the namespace after it returns.
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T, LinkError> {
        std::thread::scope(|s| {
            s.spawn(|| {
                let _g = self.enter()?;
                Ok(f())
            })
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
        })
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        if let Err(e) = command("ip", &["netns", "del", &self.name]) {
            eprintln!("ferry-link: could not delete network namespace {}: {e}", self.name);
        }
    }
}

/// The calling thread inside another network namespace; dropping it moves the thread
/// back. Threads and processes the thread creates meanwhile start in that namespace (and
/// stay there). Not `Send`: it belongs to the thread that entered.
pub struct NsGuard {
    previous: File,
    _thread_bound: PhantomData<*const ()>,
}

impl NsGuard {
    fn enter(target: &File) -> Result<NsGuard, LinkError> {
        let previous =
            File::open("/proc/thread-self/ns/net").map_err(|e| LinkError::io("opening /proc/thread-self/ns/net", e))?;
        setns(target).map_err(|e| LinkError::io("setns into the network namespace", e))?;
        Ok(NsGuard { previous, _thread_bound: PhantomData })
    }
}

impl Drop for NsGuard {
    fn drop(&mut self) {
        if let Err(e) = setns(&self.previous) {
            // The thread would keep running in the link's namespace: better to stop here.
            panic!("ferry-link: could not return the thread to its network namespace: {e}");
        }
    }
}

impl std::fmt::Debug for NsGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NsGuard")
    }
}

pub(crate) fn setns(ns: &File) -> std::io::Result<()> {
    // SAFETY: setns(2) on a descriptor we own; CLONE_NEWNET only changes this thread.
    if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The pid in a `ferrylink-<pid>-...` name.
pub fn owner_pid(name: &str) -> Option<u32> {
    name.strip_prefix(PREFIX)?.split('-').next()?.parse().ok()
}

fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Deletes every `ferrylink-*` namespace whose owning process is gone (a run that was
/// killed before it could tear its link down). Returns the names deleted.
pub fn cleanup_stale() -> Vec<String> {
    let mut removed = Vec::new();
    let Ok(dir) = std::fs::read_dir(NETNS_DIR) else { return removed };
    for entry in dir.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = owner_pid(&name) else { continue };
        if pid_alive(pid) {
            continue;
        }
        match command("ip", &["netns", "del", &name]) {
            Ok(_) => removed.push(name),
            Err(e) => eprintln!("ferry-link: could not delete stale namespace {name}: {e}"),
        }
    }
    removed
}

/// Whether a named namespace exists.
pub fn exists(name: &str) -> bool {
    PathBuf::from(NETNS_DIR).join(name).exists()
}
