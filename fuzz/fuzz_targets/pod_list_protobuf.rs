#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| poolkeeper_fuzz::pod_list_protobuf(data));
