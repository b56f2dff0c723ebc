//! Memory that comes back: glibc malloc tuned for a long-running server. glibc gives each thread
//! that allocates under contention an arena of its own (up to eight per core) and keeps freed
//! chunks in them; after a burst (thousands of connections, a blocking-thread pool grown and
//! shrunk) resident memory stays up while the heap in use is back down, which looks like a leak.
//! So the gateway caps the arenas at start-up and, on a timer, hands free pages back to the
//! kernel once the free bytes held are worth it. The bottom of the pipeline: imports nothing.

/// Arenas when the operator did not choose (`MALLOC_ARENA_MAX`): enough that the runtime's
/// worker threads rarely contend, few enough that free chunks are not spread over dozens.
const ARENAS: i32 = 2;

/// Free bytes held by malloc past which a trim is worth its arena walk.
const TRIM_ABOVE: usize = 2 << 20;

/// Cap glibc's arenas unless `MALLOC_ARENA_MAX` says otherwise. Call first thing in `main`,
/// before threads start.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub fn limit_arenas() {
    if std::env::var_os("MALLOC_ARENA_MAX").is_some() {
        return;
    }
    // SAFETY: mallopt takes two integers and changes a malloc parameter; M_ARENA_MAX (-8) is a
    // documented glibc parameter. Called before other threads allocate.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, ARENAS);
    }
}

/// Hand free pages back to the kernel when malloc holds more than `TRIM_ABOVE` free (freed
/// chunks inside its heaps, which `free` itself never returns); whether it did.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub fn trim() -> bool {
    // SAFETY: mallinfo2 takes no arguments and returns a plain struct; it locks each arena as
    // it reads.
    let free = unsafe { libc::mallinfo2() }.fordblks;
    if free < TRIM_ABOVE {
        return false;
    }
    // SAFETY: malloc_trim takes the pad to keep at the top of the main heap; it locks each arena
    // while it gives that arena's free pages back (madvise), which takes microseconds here.
    unsafe {
        libc::malloc_trim(0);
    }
    true
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn limit_arenas() {}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn trim() -> bool {
    false
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    fn resident_bytes() -> Option<usize> {
        let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
        Some(statm.split_whitespace().nth(1)?.parse::<usize>().ok()? * 4096)
    }

    #[test]
    fn freed_chunks_below_a_live_one_go_back_to_the_kernel_on_a_trim() {
        // 64 MiB in small blocks (from a heap, not mmap), then one block after them that stays:
        // the freed ones sit below it, where `free` never gives memory back.
        let blocks: Vec<Vec<u8>> = (0..16384).map(|i| vec![i as u8; 4000]).collect();
        let kept = vec![1u8; 4000];
        drop(blocks);
        let before = resident_bytes().unwrap();
        assert!(super::trim(), "64 MiB freed is worth a trim");
        let after = resident_bytes().unwrap();
        assert!(before.saturating_sub(after) > 32 << 20, "resident {before} → {after}");
        drop(kept);
    }
}
