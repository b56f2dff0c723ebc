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

/// Let go of the file pages that start-up touched: the executable's read-only and code segments
/// (a 25 MB binary leaves ~12 MB of them resident after parsing config, opening the database and
/// probing backends, mostly code that will not run again) and the shared libraries' (libm's half
/// megabyte, for one, serves start-up alone). They stay in the page cache: a page the request path
/// needs comes back on its first use (a minor fault, once). Only mappings that hold a file's bytes
/// as they are qualify: not writable, and no page of them copied on write (relocated read-only
/// data is, and is left alone), so nothing is lost.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub fn release_startup_pages() {
    let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else { return };
    for (start, end) in pristine_mappings(&smaps) {
        // SAFETY: the range is a whole read-only mapping of a file with no private (copied) page
        // (from /proc/self/smaps); MADV_DONTNEED on it drops page-table entries only, and the
        // next access reads the same bytes back from the file.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED);
        }
    }
}

/// The mappings of files in `smaps` that are read-only and hold no anonymous (copied) page.
#[cfg(target_os = "linux")]
fn pristine_mappings(smaps: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut current: Option<(usize, usize)> = None;
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        let first = fields.next().unwrap_or_default();
        if let Some((start, end)) = first.split_once('-').filter(|_| !first.ends_with(':')) {
            let perms = fields.next().unwrap_or_default();
            let parsed = (usize::from_str_radix(start, 16), usize::from_str_radix(end, 16));
            current = match parsed {
                // A file's mapping names it by its absolute path ([heap], [vdso] and anonymous
                // memory do not).
                (Ok(start), Ok(end)) if fields.nth(3).is_some_and(|p| p.starts_with('/')) && !perms.contains('w') => {
                    Some((start, end))
                }
                _ => None,
            };
        } else if first == "Anonymous:" {
            if let Some(range) = current.take().filter(|_| fields.next() == Some("0")) {
                out.push(range);
            }
        }
    }
    out
}

#[cfg(not(target_os = "linux"))]
pub fn release_startup_pages() {}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn limit_arenas() {}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn trim() -> bool {
    false
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    #[test]
    fn only_read_only_mappings_of_files_with_no_copied_page_are_released() {
        let smaps = "\
555500000000-555500001000 r--p 00000000 fd:01 7 /bin/gw
Anonymous:             0 kB
555500001000-555500003000 r-xp 00001000 fd:01 7 /bin/gw
Rss:                   8 kB
Anonymous:             0 kB
555500003000-555500004000 r--p 00003000 fd:01 7 /bin/gw
Anonymous:             4 kB
555500004000-555500005000 rw-p 00004000 fd:01 7 /bin/gw
Anonymous:             0 kB
7f0000000000-7f0000001000 r-xp 00000000 fd:01 9 /lib/libc.so.6
Anonymous:             0 kB
7f0000002000-7f0000003000 r--p 00000000 00:00 0 
Anonymous:             0 kB
7ffff7fc1000-7ffff7fc3000 r-xp 00000000 00:00 0                          [vdso]
Anonymous:             0 kB
";
        let found = super::pristine_mappings(smaps);
        let gw = [(0x5555_0000_0000, 0x5555_0000_1000), (0x5555_0000_1000, 0x5555_0000_3000)];
        assert_eq!(found, [gw[0], gw[1], (0x7f00_0000_0000, 0x7f00_0000_1000)]);
    }

    #[test]
    fn the_executables_pages_can_be_released_and_run_on() {
        super::release_startup_pages();
        // Code and read-only data come back from the file as they were.
        assert_eq!(format!("{}", 6 * 7), "42");
    }

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
