//! Real-kernel half-open connections in a private network namespace.
//!
//! [`in_private_netns`] runs a closure on a thread that first moves itself into a fresh,
//! anonymous network namespace (`unshare(CLONE_NEWNET)`) and brings that namespace's own `lo`
//! up. Client and server run on `127.0.0.1` inside it; threads the closure spawns inherit the
//! namespace. [`Netns::set_loopback`] then takes `lo` down to blackhole every packet, so the
//! kernel's TCP_USER_TIMEOUT and keepalive really fire. Nothing outside the thread sees the
//! namespace, and it vanishes with the thread.
//!
//! [`Netns::block_port`] instead drops the packets of one TCP port with an nftables rule in
//! the namespace's own ruleset (the `nft` binary, Debian package `nftables`).
//!
//! When the kernel refuses the namespace, [`in_private_netns`] returns the reason: a test
//! must fail with it, never pass. So does every nftables helper.
//!
//! `nft` runs as a child process spawned from the namespace's thread: Linux creates a child
//! with the namespaces of the *calling thread* (namespaces are per task), not those of the
//! process's main thread. `nft_runs_in_the_private_namespace_only` in
//! `tests/real_kernel_faults.rs` checks that on this kernel, and [`Netns::nft`] refuses to run
//! from any thread whose network namespace is not this one (compared by nsfs inode with the
//! one recorded when the namespace was made, and with the host's), so no rule can ever land in
//! the host's namespace.

use std::ffi::c_char;
use std::fmt;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::thread;

use socket2::{Domain, Socket, Type};

/// A private network namespace, with a control socket inside it for interface flags.
#[derive(Debug)]
pub struct Netns {
    control: Socket,
    id: NsId,
    host: NsId,
}

/// A network namespace's identity: device and inode of its nsfs file
/// (`/proc/thread-self/ns/net`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NsId {
    dev: u64,
    ino: u64,
}

impl NsId {
    /// The network namespace of the calling thread.
    pub fn of_this_thread() -> io::Result<Self> {
        Self::of("/proc/thread-self/ns/net")
    }

    /// The network namespace of the process's main thread (the host's, for these tests).
    pub fn of_this_process() -> io::Result<Self> {
        Self::of("/proc/self/ns/net")
    }

    fn of(path: &str) -> io::Result<Self> {
        let meta = std::fs::metadata(path)?;
        Ok(Self {
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }

    /// The inode number (as `readlink /proc/PID/ns/net` shows it: `net:[INODE]`).
    pub fn inode(&self) -> u64 {
        self.ino
    }
}

impl fmt::Display for NsId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "net:[{}]", self.ino)
    }
}

/// Why an nftables command was not run or failed.
#[derive(Debug, thiserror::Error)]
pub enum NftError {
    /// No `nft` binary (install the Debian package `nftables`; `.ci/run` does).
    #[error("`nft` not found: install nftables (`apt-get install -y nftables`)")]
    NotInstalled,
    /// The calling thread is not in this private namespace: running `nft` there could touch
    /// another namespace's rules (the host's), so it was not run.
    #[error(
        "refusing to run nft: this thread is in {thread}, the private namespace is {private}, \
         the host's is {host}"
    )]
    WrongNamespace {
        /// The calling thread's namespace.
        thread: NsId,
        /// The private namespace.
        private: NsId,
        /// The namespace the private one was made from.
        host: NsId,
    },
    /// The namespace could not be identified (`/proc/thread-self/ns/net`).
    #[error("reading /proc/thread-self/ns/net failed: {0}")]
    Identify(io::Error),
    /// `nft` could not be started or fed.
    #[error("running nft failed: {0}")]
    Spawn(io::Error),
    /// `nft` refused the command (no nf_tables in the kernel, no CAP_NET_ADMIN, bad script).
    #[error("nft {args} exited with {status}: {stderr}")]
    Refused {
        /// The arguments.
        args: String,
        /// Its exit status.
        status: ExitStatus,
        /// What it printed on stderr.
        stderr: String,
    },
    /// The rules were applied but the listing does not show what was expected.
    #[error("nft rules not in effect: expected {expected:?} in the ruleset:\n{ruleset}")]
    NotInEffect {
        /// What was looked for.
        expected: String,
        /// The namespace's ruleset as listed.
        ruleset: String,
    },
}

/// The nftables table the helpers own inside a private namespace.
pub const NFT_TABLE: &str = "keepwire_faults";

/// Why a private network namespace could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    /// `unshare(CLONE_NEWNET)` failed (not root and not in a user namespace, or seccomp).
    #[error("unshare(CLONE_NEWNET) failed: {0} (run as root, or under `unshare -rn`)")]
    Unshare(io::Error),
    /// The namespace could not be identified, or `unshare` left the thread in the host's.
    #[error("identifying the private namespace failed: {0}")]
    Identify(io::Error),
    /// `lo` could not be brought up inside the namespace.
    #[error("bringing lo up in the private namespace failed: {0}")]
    Loopback(io::Error),
    /// The closure panicked.
    #[error("the test body panicked: {0}")]
    Panicked(String),
}

/// Runs `body` on a thread inside a fresh private network namespace whose `lo` is up.
pub fn in_private_netns<R, F>(body: F) -> Result<R, NetnsError>
where
    R: Send + 'static,
    F: FnOnce(Arc<Netns>) -> R + Send + 'static,
{
    let thread = thread::Builder::new()
        .name("private-netns".into())
        .spawn(move || {
            let netns = Arc::new(Netns::enter()?);
            netns.set_loopback(true).map_err(NetnsError::Loopback)?;
            Ok(body(netns))
        });
    let joined = thread.map_err(NetnsError::Unshare)?.join();
    joined.unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| "non-string panic".to_owned());
        Err(NetnsError::Panicked(message))
    })
}

impl Netns {
    /// Moves the calling thread into a new network namespace.
    fn enter() -> Result<Self, NetnsError> {
        let host = NsId::of_this_thread().map_err(NetnsError::Identify)?;
        // SAFETY: unshare takes a flag word and touches no memory of ours; CLONE_NEWNET only
        // changes this thread's network namespace (Linux namespaces are per task), which is
        // exactly the isolation wanted. Its result is checked.
        let rc = unsafe { libc::unshare(libc::CLONE_NEWNET) };
        if rc != 0 {
            return Err(NetnsError::Unshare(io::Error::last_os_error()));
        }
        let id = NsId::of_this_thread().map_err(NetnsError::Identify)?;
        if id == host {
            return Err(NetnsError::Identify(io::Error::other(format!(
                "unshare(CLONE_NEWNET) succeeded but the thread is still in {host}"
            ))));
        }
        let control = Socket::new(Domain::IPV4, Type::DGRAM, None).map_err(NetnsError::Loopback)?;
        Ok(Self { control, id, host })
    }

    /// This namespace's identity.
    pub fn id(&self) -> NsId {
        self.id
    }

    /// The namespace this one was made from (the host's).
    pub fn host(&self) -> NsId {
        self.host
    }

    /// Drops every TCP packet to or from `port` as it arrives (an nftables `input` rule, both
    /// directions), so SYNs, data, ACKs, FINs and RSTs on that port vanish without an error
    /// to the sender: a blackhole. Checks by listing the ruleset that the rule is in effect.
    /// Call it from the namespace's thread (see [`Netns::nft`]).
    pub fn block_port(&self, port: u16) -> Result<(), NftError> {
        self.nft(&format!(
            "add table inet {NFT_TABLE}\n\
             add chain inet {NFT_TABLE} input \
             {{ type filter hook input priority filter; policy accept; }}\n\
             flush chain inet {NFT_TABLE} input\n\
             add rule inet {NFT_TABLE} input tcp dport {port} drop\n\
             add rule inet {NFT_TABLE} input tcp sport {port} drop\n"
        ))?;
        let ruleset = self.nft_ruleset()?;
        for expected in [
            format!("tcp dport {port} drop"),
            format!("tcp sport {port} drop"),
        ] {
            if !ruleset.contains(&expected) {
                return Err(NftError::NotInEffect { expected, ruleset });
            }
        }
        Ok(())
    }

    /// Removes what [`block_port`](Self::block_port) added: the path works again. Checks by
    /// listing the ruleset that no rule of ours is left.
    pub fn unblock(&self) -> Result<(), NftError> {
        self.nft(&format!("delete table inet {NFT_TABLE}\n"))?;
        let ruleset = self.nft_ruleset()?;
        if ruleset.contains(NFT_TABLE) {
            return Err(NftError::NotInEffect {
                expected: format!("no table {NFT_TABLE}"),
                ruleset,
            });
        }
        Ok(())
    }

    /// This namespace's whole nftables ruleset, as `nft list ruleset` prints it.
    pub fn nft_ruleset(&self) -> Result<String, NftError> {
        self.run_nft(&["list", "ruleset"], None)
    }

    /// Runs an nftables script (`nft -f -`) in this namespace.
    ///
    /// Must be called on a thread inside this namespace (the one [`in_private_netns`] runs its
    /// body on, or one it spawned): `nft` is a child process, and a child gets the calling
    /// thread's namespaces. Before spawning it, this checks that the calling thread's network
    /// namespace is this one and is neither the host's nor the process's main thread's, and
    /// refuses otherwise.
    pub fn nft(&self, script: &str) -> Result<String, NftError> {
        self.run_nft(&["-f", "-"], Some(script))
    }

    fn run_nft(&self, args: &[&str], stdin: Option<&str>) -> Result<String, NftError> {
        self.check_thread()?;
        let mut command = Command::new(nft_binary());
        command
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => NftError::NotInstalled,
            _ => NftError::Spawn(e),
        })?;
        if let (Some(script), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(script.as_bytes()).map_err(NftError::Spawn)?;
        }
        let output = child.wait_with_output().map_err(NftError::Spawn)?;
        if !output.status.success() {
            return Err(NftError::Refused {
                args: args.join(" "),
                status: output.status,
                stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
            });
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// Refuses unless the calling thread is in this namespace and it is not the host's.
    fn check_thread(&self) -> Result<(), NftError> {
        let thread = NsId::of_this_thread().map_err(NftError::Identify)?;
        let process = NsId::of_this_process().map_err(NftError::Identify)?;
        if thread != self.id || thread == self.host || thread == process {
            return Err(NftError::WrongNamespace {
                thread,
                private: self.id,
                host: self.host,
            });
        }
        Ok(())
    }

    /// Brings this namespace's `lo` up or takes it down (every packet on it is then dropped).
    /// Callable from any thread: the control socket belongs to the namespace.
    pub fn set_loopback(&self, up: bool) -> io::Result<()> {
        // SAFETY: ifreq is plain old data (a name array and a union of integers, arrays and a
        // pointer), for which all-zero bytes are a valid value.
        let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
        for (slot, byte) in request.ifr_name.iter_mut().zip(b"lo\0") {
            *slot = *byte as c_char;
        }
        let fd = self.control.as_raw_fd();
        // SAFETY: SIOCGIFFLAGS reads the name and writes ifru_flags in the ifreq we own and
        // pass by valid pointer; the fd is a live socket owned by self.
        if unsafe { libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut request) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: SIOCGIFFLAGS just initialised ifru_flags, the union field read here.
        let flags = unsafe { request.ifr_ifru.ifru_flags };
        let up_flag = libc::IFF_UP as libc::c_short;
        request.ifr_ifru.ifru_flags = if up {
            flags | up_flag
        } else {
            flags & !up_flag
        };
        // SAFETY: as above; SIOCSIFFLAGS only reads the ifreq.
        if unsafe { libc::ioctl(fd, libc::SIOCSIFFLAGS, &request) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// `nft` lives in /usr/sbin on Debian, which a non-root PATH may lack.
fn nft_binary() -> &'static str {
    ["/usr/sbin/nft", "/sbin/nft"]
        .into_iter()
        .find(|path| Path::new(path).exists())
        .unwrap_or("nft")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::time::Duration;

    #[test]
    fn loopback_works_inside_and_can_be_blackholed() {
        let outcome = in_private_netns(|netns| {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            let (mut server, _) = listener.accept().unwrap();
            client.write_all(b"x").unwrap();
            let mut byte = [0];
            server.read_exact(&mut byte).unwrap();
            netns.set_loopback(false).unwrap();
            let blocked = TcpStream::connect_timeout(
                &listener.local_addr().unwrap(),
                Duration::from_millis(300),
            );
            blocked.is_err()
        });
        let blackholed =
            outcome.unwrap_or_else(|e| panic!("private network namespace unavailable: {e}"));
        assert!(blackholed, "with lo down, a connect must not succeed");
    }
}
