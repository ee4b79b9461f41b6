#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| native_host::fuzz::ptx(data));
