//! Real-kernel half-open connections in a private network namespace.
//!
//! [`in_private_netns`] runs a closure on a thread that first moves itself into a fresh,
//! anonymous network namespace (`unshare(CLONE_NEWNET)`) and brings that namespace's own `lo`
//! up. Client and server run on `127.0.0.1` inside it; threads the closure spawns inherit the
//! namespace. [`Netns::set_loopback`] then takes `lo` down to blackhole every packet, so the
//! kernel's TCP_USER_TIMEOUT and keepalive really fire. Nothing outside the thread sees the
//! namespace, and it vanishes with the thread.
//!
//! When the kernel refuses the namespace, [`in_private_netns`] returns the reason: a test
//! must fail with it, never pass.

use std::ffi::c_char;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::thread;

use socket2::{Domain, Socket, Type};

/// A private network namespace, with a control socket inside it for interface flags.
#[derive(Debug)]
pub struct Netns {
    control: Socket,
}

/// Why a private network namespace could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    /// `unshare(CLONE_NEWNET)` failed (not root and not in a user namespace, or seccomp).
    #[error("unshare(CLONE_NEWNET) failed: {0} (run as root, or under `unshare -rn`)")]
    Unshare(io::Error),
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
        // SAFETY: unshare takes a flag word and touches no memory of ours; CLONE_NEWNET only
        // changes this thread's network namespace (Linux namespaces are per task), which is
        // exactly the isolation wanted. Its result is checked.
        let rc = unsafe { libc::unshare(libc::CLONE_NEWNET) };
        if rc != 0 {
            return Err(NetnsError::Unshare(io::Error::last_os_error()));
        }
        let control = Socket::new(Domain::IPV4, Type::DGRAM, None).map_err(NetnsError::Loopback)?;
        Ok(Self { control })
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
