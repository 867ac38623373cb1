//! CPU time as `getrusage` reports it, for this package's benches.

use std::time::Duration;

/// User and system time so far of `who`: `libc::RUSAGE_SELF` for the whole process,
/// `libc::RUSAGE_THREAD` for the calling thread.
pub(crate) fn cpu_time(who: libc::c_int) -> Duration {
    // SAFETY: `getrusage` fills the struct it is given; an all-zero `rusage` is valid.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(who, &mut usage);
        usage
    };
    let time = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    time(usage.ru_utime) + time(usage.ru_stime)
}
