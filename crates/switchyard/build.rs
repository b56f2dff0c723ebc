//! Link settings for the shipped binaries (issue 29: a release binary ≤ 25 MB).

fn main() {
    // Identical code folding: LLD (Rust's default linker on x86-64 Linux) merges functions whose
    // machine code is the same — generic code monomorphized to identical instructions for
    // different types is common. `safe` leaves alone any function whose address is taken.
    println!("cargo:rustc-link-arg-bins=-Wl,--icf=all");
    // Tail-merged strings in the read-only data (the linker's own optimisation level).
    println!("cargo:rustc-link-arg-bins=-Wl,-O2");
}
