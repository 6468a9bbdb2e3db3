//! Fuzz targets over poolkeeper's untrusted inputs, through public APIs only.
//!
//! Each target takes raw bytes, feeds them to one parser (and, where the
//! input can carry a Pod, to both admission decisions) and panics when an
//! invariant breaks. The same functions run under libFuzzer (`fuzz/`,
//! `cargo xtask fuzz`) and replay the committed corpus and regressions in
//! the normal test suite (`tests/replay.rs`).

mod fixture;
mod targets;

pub use fixture::{Fixture, POOL_LABEL, fixture};
pub use targets::{
    admission_review, config_yaml, objects_file, placement_policy, pod_list_protobuf,
};

/// A fuzz target: its name (the directory of its corpus) and its function.
pub type Target = (&'static str, fn(&[u8]));

/// Every target, by name.
pub const TARGETS: &[Target] = &[
    ("admission_review", admission_review),
    ("placement_policy", placement_policy),
    ("config_yaml", config_yaml),
    ("objects_file", objects_file),
    ("pod_list_protobuf", pod_list_protobuf),
];
