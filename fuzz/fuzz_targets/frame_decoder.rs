//! Fuzz target: the wire frame decoder (see `rankwire::fuzz_entry::frame_decoder`).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| rankwire::fuzz_entry::frame_decoder(data));
