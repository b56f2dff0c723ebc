//! libFuzzer entry for `switchyard_fuzz::stream_decoders` (its doc says what is checked).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| switchyard_fuzz::stream_decoders(data));
