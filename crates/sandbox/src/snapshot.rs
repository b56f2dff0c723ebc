//! Pre-initialisation: the runner's `sy_init` creates QuickJS's runtime and context and evaluates the prelude
//! once, at start-up; its whole linear memory then becomes the data of a new module, so every execution
//! starts from that image (mapped copy-on-write by wasmtime) instead of paying ~0.5 ms to build the engine.
//! Only memory changes: `sy_init` returns with the stack pointer where it began, and C's globals live in memory.

use wasmtime::{Engine, Linker, Module, Store};

use crate::host::{clock_time_get, WASI};

const SECTION_MEMORY: u8 = 5;
const SECTION_DATA: u8 = 11;
const SECTION_DATA_COUNT: u8 = 12;
const PAGE: usize = 65536;
/// Zero runs shorter than this stay inside a data segment (fewer, larger segments).
const MERGE_GAP: usize = 4096;

/// The runner with its engine already initialised.
pub(crate) fn build(engine: &Engine, runner: &[u8]) -> wasmtime::Result<Vec<u8>> {
    let base = Module::new(engine, runner)?;
    let mut linker: Linker<()> = Linker::new(engine);
    // Initialisation reads the clock (QuickJS seeds Math.random); nothing else may be called.
    linker.func_wrap(WASI, "clock_time_get", clock_time_get::<()>)?;
    linker.define_unknown_imports_as_traps(&base)?;
    let mut store = Store::new(engine, ());
    store.set_epoch_deadline(u64::MAX / 2);
    let instance = linker.instantiate(&mut store, &base)?;
    let init = instance.get_typed_func::<(), i32>(&mut store, "sy_init")?;
    if init.call(&mut store, ())? != 0 {
        return Err(wasmtime::Error::msg("the runner could not initialise QuickJS"));
    }
    let memory = instance
        .get_memory(&mut store, "memory")
        .ok_or_else(|| wasmtime::Error::msg("the runner exports no memory"))?;
    rewrite(runner, memory.data(&store))
}

/// `wasm` with its memory's initial size and data replaced by `image`.
fn rewrite(wasm: &[u8], image: &[u8]) -> wasmtime::Result<Vec<u8>> {
    let bad = || wasmtime::Error::msg("the runner module is malformed");
    let segments = segments(image);
    let mut out = wasm.get(..8).ok_or_else(bad)?.to_vec();
    let mut at = 8;
    while at < wasm.len() {
        let id = wasm[at];
        let (size, n) = read_leb(wasm.get(at + 1..).ok_or_else(bad)?).ok_or_else(bad)?;
        let start = at + 1 + n;
        let body = wasm.get(start..start + size as usize).ok_or_else(bad)?;
        at = start + size as usize;
        let new_body = match id {
            SECTION_MEMORY => memory_section(body, (image.len() / PAGE) as u64).ok_or_else(bad)?,
            SECTION_DATA => data_section(image, &segments),
            SECTION_DATA_COUNT => leb(segments.len() as u64),
            _ => body.to_vec(),
        };
        out.push(id);
        out.extend(leb(new_body.len() as u64));
        out.extend(new_body);
    }
    Ok(out)
}

/// (offset, length) of the image's non-zero stretches.
fn segments(image: &[u8]) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    let mut i = 0;
    while i < image.len() {
        if image[i] == 0 {
            i += 1;
            continue;
        }
        let start = i;
        while i < image.len() && image[i] != 0 {
            i += 1;
        }
        match out.last_mut() {
            Some((s, len)) if start - (*s + *len) < MERGE_GAP => *len = i - *s,
            _ => out.push((start, i - start)),
        }
    }
    out
}

fn memory_section(body: &[u8], pages: u64) -> Option<Vec<u8>> {
    let (count, n) = read_leb(body)?;
    let flags = *body.get(n)?;
    if count != 1 || flags > 1 {
        return None;
    }
    let mut out = leb(1);
    out.push(flags);
    out.extend(leb(pages));
    if flags == 1 {
        let (_min, m) = read_leb(body.get(n + 1..)?)?;
        let (max, _) = read_leb(body.get(n + 1 + m..)?)?;
        out.extend(leb(max.max(pages)));
    }
    Some(out)
}

fn data_section(image: &[u8], segments: &[(usize, usize)]) -> Vec<u8> {
    let mut out = leb(segments.len() as u64);
    for &(offset, len) in segments {
        out.push(0); // active, memory 0
        out.push(0x41); // i32.const
        out.extend(sleb(offset as i64));
        out.push(0x0b); // end
        out.extend(leb(len as u64));
        out.extend_from_slice(&image[offset..offset + len]);
    }
    out
}

fn read_leb(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for (i, b) in bytes.iter().enumerate().take(10) {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

fn leb(mut value: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

fn sleb(mut value: i64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        let done = (value == 0 && byte & 0x40 == 0) || (value == -1 && byte & 0x40 != 0);
        out.push(if done { byte } else { byte | 0x80 });
        if done {
            return out;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leb_round_trips_and_segments_merge_small_gaps() {
        for v in [0u64, 1, 127, 128, 65536, u32::MAX as u64] {
            assert_eq!(read_leb(&leb(v)), Some((v, leb(v).len())));
        }
        assert_eq!(sleb(-1), [0x7f]);
        assert_eq!(sleb(64), [0xc0, 0x00]);
        let mut image = vec![0u8; 3 * PAGE];
        image[10] = 1;
        image[20] = 2; // within MERGE_GAP of the first
        image[2 * PAGE] = 3;
        assert_eq!(segments(&image), [(10, 11), (2 * PAGE, 1)]);
    }
}
