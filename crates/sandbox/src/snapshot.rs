//! Pre-initialisation, the module side: build.rs runs the runner's `sy_init` (which creates QuickJS's runtime
//! and context and evaluates the prelude) once, at build time; this file turns that instance's whole linear
//! memory into the data of a new module, so every execution starts from that image (mapped copy-on-write
//! by wasmtime) instead of paying ~0.5 ms to build the engine. Only memory changes: `sy_init` returns with
//! the stack pointer where it began, and C's globals live in memory.
//!
//! Shared with build.rs by `#[path]` (and compiled into the crate for its tests only): plain byte work, no
//! wasmtime and nothing of the crate.

const SECTION_MEMORY: u8 = 5;
const SECTION_DATA: u8 = 11;
const SECTION_DATA_COUNT: u8 = 12;
pub(crate) const PAGE: usize = 65536;
/// Zero runs shorter than this stay inside a data segment (fewer, larger segments).
const MERGE_GAP: usize = 4096;

/// What the wall clock answers while the image is made, in nanoseconds. QuickJS seeds `Math.random`'s
/// xorshift64* state (`ctx->random_state`, a u64) from the time of day in microseconds, so the image holds
/// that seed, or a few xorshift steps past it if initialisation drew numbers, where the state lies:
/// [`find_seed`] looks for it, and every execution writes a fresh seed there.
pub(crate) const CLOCK_AT_INIT_NS: u64 = 0x0015_eed5_eed5_eed5 * 1000;

/// Initialisation drawing more numbers than this is taken for a changed runner.
const MAX_DRAWS_AT_INIT: u32 = 64;

/// The seed QuickJS derives from [`CLOCK_AT_INIT_NS`] (wasi-libc's `gettimeofday` truncates to microseconds).
pub(crate) const fn seed_probe() -> u64 {
    CLOCK_AT_INIT_NS / 1000
}

/// One step of QuickJS's xorshift64* state.
const fn xorshift(mut x: u64) -> u64 {
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    x
}

/// Where `Math.random`'s state lies in `image`, and what it is: the one 8-byte-aligned word holding the
/// seed or a state a few steps past it. An error unless exactly one word does.
pub(crate) fn find_seed(image: &[u8]) -> Result<(usize, u64), String> {
    let mut state = seed_probe();
    let mut found = Vec::new();
    for _ in 0..=MAX_DRAWS_AT_INIT {
        let needle = state.to_le_bytes();
        let at = image.chunks_exact(8).enumerate().filter(|(_, word)| *word == needle).map(|(i, _)| i * 8);
        found.extend(at.map(|at| (at, state)));
        state = xorshift(state);
    }
    match found[..] {
        [one] => Ok(one),
        [] => Err(format!("no word holds the seed {:#x} or a state derived from it", seed_probe())),
        _ => Err(format!("{} words look like the seed's state: {found:x?}", found.len())),
    }
}

/// `wasm` with its memory's initial size and data replaced by `image`.
pub(crate) fn rewrite(wasm: &[u8], image: &[u8]) -> Result<Vec<u8>, String> {
    let bad = || "the runner module is malformed".to_owned();
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

    #[test]
    fn the_seed_is_found_once_aligned_and_a_few_draws_on() {
        let mut image = vec![0u8; PAGE];
        let drawn = xorshift(xorshift(seed_probe()));
        image[0x103..0x10b].copy_from_slice(&drawn.to_le_bytes()); // unaligned: not QuickJS's u64
        assert!(find_seed(&image).is_err());
        image[0x208..0x210].copy_from_slice(&drawn.to_le_bytes());
        assert_eq!(find_seed(&image), Ok((0x208, drawn)));
        image[0x400..0x408].copy_from_slice(&seed_probe().to_le_bytes());
        assert!(find_seed(&image).is_err(), "two candidates are ambiguous");
        assert_eq!(seed_probe() * 1000, CLOCK_AT_INIT_NS);
    }

    #[test]
    fn rewrite_replaces_memory_and_data() {
        // (module (memory 1 2) (data (i32.const 0) "a")) as bytes.
        let wasm = [
            0,
            0x61,
            0x73,
            0x6d,
            1,
            0,
            0,
            0, // header
            SECTION_MEMORY,
            4,
            1,
            1,
            1,
            2, // one memory, min 1, max 2
            SECTION_DATA,
            7,
            1,
            0,
            0x41,
            0,
            0x0b,
            1,
            b'a',
        ];
        let mut image = vec![0u8; 3 * PAGE];
        image[5] = 7;
        let out = rewrite(&wasm, &image).unwrap();
        let expected = [
            &wasm[..8],
            &[SECTION_MEMORY, 4, 1, 1, 3, 3][..], // min 3 pages, max raised to 3
            &[SECTION_DATA, 7, 1, 0, 0x41, 5, 0x0b, 1, 7][..],
        ]
        .concat();
        assert_eq!(out, expected);
        assert!(rewrite(&wasm[..12], &image).is_err());
    }
}
