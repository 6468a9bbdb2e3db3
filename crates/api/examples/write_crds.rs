//! Writes the CRD files: `cargo run -p poolkeeper-api --example write_crds [DIR]`
//! (default: deploy/crds of this workspace). `cargo xtask crds` does the same.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let dir = std::env::args_os().nth(1).map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds"),
        PathBuf::from,
    );
    match poolkeeper_api::write_crd_files(&dir) {
        Ok(paths) => {
            for path in paths {
                println!("wrote {}", path.display());
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("{error}");
            ExitCode::FAILURE
        }
    }
}
