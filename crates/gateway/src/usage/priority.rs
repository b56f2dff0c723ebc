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

/// Run the calling thread under SCHED_IDLE: it gets the CPU only when nothing else wants it (for
/// work that may be dropped, such as exporting traces, which at saturation should yield the
/// core entirely rather than take even a niced thread's share). Falls back to
/// [`lower_this_thread`] where the policy is refused.
pub fn idle_this_thread() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: sched_setscheduler reads the one `sched_param` we pass by reference for the
    // duration of the call; pid 0 is the calling thread.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
    if rc != 0 {
        tracing::debug!(error = %std::io::Error::last_os_error(), "SCHED_IDLE refused; lowering the priority instead");
        lower_this_thread();
    }
}
