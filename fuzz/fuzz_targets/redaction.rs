//! libFuzzer entry for `switchyard_fuzz::redaction` (its doc says what is checked).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| switchyard_fuzz::redaction(data));
