//! The precompiled runner, loaded without a copy where the platform allows: its bytes are embedded in the
//! binary page-aligned, so they can be mapped from the executable file itself (read-only, then the code
//! section read-and-execute). Then only the pages a program touches are resident, and they are the page
//! cache's clean pages, shared and reclaimable; a copy would cost the whole 4 MB artifact twice over (the
//! copy, plus the embedded bytes it was read from). Elsewhere, or if anything about the mapping is not as
//! expected, the runner is copied as usual (`Module::deserialize`).
//!
//! The crate's unsafe code lives here, each use with its SAFETY note.

use std::ptr::NonNull;
use std::sync::Arc;

use wasmtime::{Engine, Module};

/// Page-aligned in the binary (64 KiB: every page size Linux uses), so its offset in the file is too.
#[repr(C, align(65536))]
struct Aligned<T: ?Sized>(T);

/// The runner as build.rs left it: initialised, and compiled for this crate's target by this wasmtime.
static PRECOMPILED: &Aligned<[u8]> = &Aligned(*include_bytes!(concat!(env!("OUT_DIR"), "/quickjs-runner.cwasm")));

/// The engine and the loaded runner, and how it was loaded (for the log).
/// Also makes the module's memory image (the initialised heap every instance maps copy-on-write), which
/// wasmtime would otherwise do at the first instance, and then lets go of the artifact's pages read so far
/// (its whole data section was copied into that image): they are file pages, read back if ever needed.
pub(crate) fn load() -> wasmtime::Result<(Engine, Module, &'static str)> {
    #[cfg(target_os = "linux")]
    match linux::load() {
        Ok((engine, module, mapped)) => {
            module.initialize_copy_on_write_image()?;
            linux::release(mapped);
            linux::release(NonNull::from(&PRECOMPILED.0)); // its two ends, compared with the mapping
            return Ok((engine, module, "mapped from the executable"));
        }
        Err(e) => tracing::debug!(error = %e, "code mode: the runner cannot be mapped from the executable; copying it"),
    }
    let engine = Engine::new(&crate::config::config())?;
    let module = copy(&engine)?;
    module.initialize_copy_on_write_image()?;
    #[cfg(target_os = "linux")]
    linux::release(NonNull::from(&PRECOMPILED.0));
    Ok((engine, module, "copied"))
}

/// The usual way: wasmtime copies the artifact into memory of its own.
#[allow(unsafe_code)]
fn copy(engine: &Engine) -> wasmtime::Result<Module> {
    // SAFETY: `Module::deserialize` runs the machine code it is given. These bytes are not input: build.rs
    // produced them with `Engine::precompile_module`, from the committed runner (checksum-tested), with this
    // same wasmtime version (pinned `=` in the workspace) and `config::config()` for this crate's target, and
    // they are embedded in the binary, so nothing can change them between build and load. wasmtime checks
    // its version and every setting that shapes code, and refuses a mismatch with an error.
    unsafe { Module::deserialize(engine, &PRECOMPILED.0) }
}

#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
mod linux {
    use std::fs::File;
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::io::AsRawFd;

    use super::*;

    /// The pages the mapping needs: wasmtime's code sections are aligned to 4 KiB.
    const PAGE: usize = 4096;

    /// Makes the code section executable in place (wasmtime's own path would need the memory to be its own
    /// anonymous mapping).
    struct InPlace;

    impl wasmtime::CustomCodeMemory for InPlace {
        fn required_alignment(&self) -> usize {
            PAGE
        }

        fn publish_executable(&self, ptr: *const u8, len: usize) -> wasmtime::Result<()> {
            // SAFETY: wasmtime passes the page-aligned code section of the artifact mapped by `map` below, a
            // private read-only file mapping that lives as long as the process; changing its protection
            // affects nothing else. x86_64 needs no instruction-cache maintenance, and the pages were never
            // written.
            protect(unsafe { libc::mprotect(ptr as *mut libc::c_void, len, libc::PROT_READ | libc::PROT_EXEC) })
        }

        fn unpublish_executable(&self, ptr: *const u8, len: usize) -> wasmtime::Result<()> {
            // SAFETY: as above; wasmtime guarantees no code runs from the region any more.
            protect(unsafe { libc::mprotect(ptr as *mut libc::c_void, len, libc::PROT_READ) })
        }
    }

    fn protect(rc: libc::c_int) -> wasmtime::Result<()> {
        match rc {
            0 => Ok(()),
            _ => Err(wasmtime::Error::msg(format!("mprotect: {}", std::io::Error::last_os_error()))),
        }
    }

    /// Drops the resident pages of `region`, a read-only file-backed mapping (the artifact mapped by `map`, or
    /// the embedded bytes themselves): the kernel reads them back from the file if they are touched again.
    pub(super) fn release(region: NonNull<[u8]>) {
        let (ptr, len) = (region.as_ptr() as *mut u8 as usize, region.len());
        let start = ptr.next_multiple_of(PAGE);
        let end = (ptr + len) / PAGE * PAGE;
        if end > start {
            // SAFETY: the range lies within a mapping that is read-only and backed by the executable file (the
            // embedded bytes, or `map`'s mapping of them), so no data can be lost: after MADV_DONTNEED the same
            // bytes are read back from the file on the next access.
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
        }
    }

    pub(super) fn load() -> wasmtime::Result<(Engine, Module, NonNull<[u8]>)> {
        // SAFETY: sysconf reads a constant of the system.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if !cfg!(target_arch = "x86_64") || page != PAGE as libc::c_long {
            return Err(wasmtime::Error::msg("only on x86_64 with 4 KiB pages"));
        }
        let memory = map()?;
        let mut config = crate::config::config();
        config.with_custom_code_memory(Some(Arc::new(InPlace)));
        let engine = Engine::new(&config)?;
        // SAFETY: as `super::copy`, for the same bytes: `memory` holds the embedded artifact, read back from
        // the executable file (the kernel refuses to let anyone write to a running executable), checked
        // against the embedded copy at both ends, mapped read-only and never unmapped, so it outlives the
        // module and nothing changes it.
        let module = unsafe { Module::deserialize_raw(&engine, memory) }?;
        Ok((engine, module, memory))
    }

    /// Maps the embedded artifact's pages from the executable file: where it lies in the file is where the
    /// loader mapped it from, as /proc/self/maps says.
    fn map() -> wasmtime::Result<NonNull<[u8]>> {
        let bytes: &'static [u8] = &PRECOMPILED.0;
        let addr = bytes.as_ptr() as usize;
        let (offset, inode) = file_offset(addr)?;
        let exe = File::open("/proc/self/exe")?;
        if exe.metadata()?.ino() != inode {
            return Err(wasmtime::Error::msg("the mapping is not the executable's"));
        }
        // SAFETY: a new private read-only mapping of a file we opened, at an address of the kernel's choosing:
        // it aliases nothing. It is never unmapped (the module uses it for the rest of the process).
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes.len(),
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                exe.as_raw_fd(),
                offset as libc::off_t,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(wasmtime::Error::msg(format!("mmap: {}", std::io::Error::last_os_error())));
        }
        // SAFETY: the kernel mapped `bytes.len()` readable bytes at `ptr`, and nothing writes to them.
        let mapped: &'static [u8] = unsafe { std::slice::from_raw_parts(ptr as *const u8, bytes.len()) };
        let ends = |b: &[u8]| (b[..PAGE.min(b.len())].to_vec(), b[b.len().saturating_sub(PAGE)..].to_vec());
        if ends(mapped) != ends(bytes) {
            return Err(wasmtime::Error::msg("the mapped bytes are not the embedded ones"));
        }
        Ok(NonNull::from(mapped))
    }

    /// The file offset and inode behind `addr`, from the line of /proc/self/maps that contains it
    /// (`start-end perms offset dev inode path`).
    fn file_offset(addr: usize) -> wasmtime::Result<(u64, u64)> {
        let maps = std::fs::read_to_string("/proc/self/maps")?;
        let bad = || wasmtime::Error::msg("unreadable /proc/self/maps");
        for line in maps.lines() {
            let mut fields = line.split_ascii_whitespace();
            let (range, _perms, offset, _dev, inode) =
                (fields.next(), fields.next(), fields.next(), fields.next(), fields.next());
            let (Some(range), Some(offset), Some(inode)) = (range, offset, inode) else { continue };
            let (start, end) = range.split_once('-').ok_or_else(bad)?;
            let start = usize::from_str_radix(start, 16).map_err(|_| bad())?;
            let end = usize::from_str_radix(end, 16).map_err(|_| bad())?;
            if (start..end).contains(&addr) {
                let offset = u64::from_str_radix(offset, 16).map_err(|_| bad())?;
                let inode: u64 = inode.parse().map_err(|_| bad())?;
                if inode == 0 {
                    return Err(wasmtime::Error::msg("the embedded runner is not mapped from a file"));
                }
                return Ok((offset + (addr - start) as u64, inode));
            }
        }
        Err(bad())
    }
}

#[cfg(all(test, target_os = "linux", target_arch = "x86_64"))]
mod tests {
    #[test]
    fn the_runner_is_mapped_from_the_executable_not_copied() {
        if let Err(e) = super::linux::load() {
            panic!("{e}");
        }
    }
}
