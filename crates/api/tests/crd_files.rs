//! The CRDs checked in under deploy/crds/ must be what `crds()` produces.

use std::path::PathBuf;

fn crd_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds")
}

#[test]
fn checked_in_crds_are_up_to_date() {
    if let Err(error) = poolkeeper_api::check_crd_files(&crd_dir()) {
        panic!("{error}");
    }
}
