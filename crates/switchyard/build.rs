//! Link settings for the shipped binaries (issue 29: a release binary ≤ 25 MB, idle memory ≤ 8 MiB).

fn main() {
    // Identical code folding: LLD (Rust's default linker on x86-64 Linux) merges functions whose
    // machine code is the same — generic code monomorphized to identical instructions for
    // different types is common. `safe` leaves alone any function whose address is taken.
    println!("cargo:rustc-link-arg-bins=-Wl,--icf=all");
    // Tail-merged strings in the read-only data (the linker's own optimisation level).
    println!("cargo:rustc-link-arg-bins=-Wl,-O2");
    // Optimised builds place the functions a running gateway executes side by side, hottest first
    // (`layout.txt`, made by scripts/layout): the kernel maps code 64 KiB around each page fault,
    // so code spread over the binary was resident many times over. Names the linker no longer
    // finds (the code changed since) are skipped quietly; test builds' names differ and are not
    // ordered.
    println!("cargo:rerun-if-changed=layout.txt");
    println!("cargo:rerun-if-changed=build.rs");
    let release = std::env::var("PROFILE").is_ok_and(|p| p == "release");
    let layout = std::path::Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default()).join("layout.txt");
    if release && layout.exists() {
        println!("cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}", layout.display());
        println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    }
}
