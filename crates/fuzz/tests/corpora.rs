//! Replays every committed seed and crash-reproducer in `fuzz/corpus/<target>/` through its target,
//! so the test command keeps what fuzzing found fixed.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report
#![allow(clippy::too_many_lines)] // test scenarios read top to bottom; splitting them hides the story

#[test]
fn every_corpus_file_passes_its_target() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    for (name, target) in switchyard_fuzz::TARGETS {
        let dir = root.join(name);
        let mut files = 0;
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            let data = std::fs::read(&path).unwrap();
            let outcome = std::panic::catch_unwind(|| target(&data));
            assert!(outcome.is_ok(), "{name}: {} fails", path.display());
            files += 1;
        }
        assert!(files > 0, "{name}: an empty corpus");
    }
}
