//! Fuzz target: the bootstrap protocol parser (see `rankwire::fuzz_entry::bootstrap_parser`).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| rankwire::fuzz_entry::bootstrap_parser(data));
