//! Lowering the calling thread's CPU priority (Linux: `nice` is per thread), for work that must
//! never compete with request handling, such as the usage writer.

#![allow(unsafe_code)] // one libc call; see the SAFETY note.

/// The `nice` value background threads run at: the lowest priority short of SCHED_IDLE, so the
/// writer still progresses on a saturated CPU, just slowly.
const BACKGROUND_NICE: libc::c_int = 19;

/// Lower the calling thread's priority to [`BACKGROUND_NICE`]. Threads it starts afterwards
/// inherit it. A failure only costs the isolation, so it is logged, not returned.
pub fn lower_this_thread() {
    // SAFETY: setpriority takes plain integers and touches no memory of ours. With PRIO_PROCESS
    // and who = 0, Linux changes the calling thread only (nice values are per thread there).
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, BACKGROUND_NICE) };
    if rc != 0 {
        tracing::debug!(error = %std::io::Error::last_os_error(), "could not lower the usage writer's priority");
    }
}
