//! The OpenReports CRDs, test fixtures of poolkeeper's audit reports: the `config/crd` files of
//! the `github.com/openreports/reports-api` Go module, at the version
//! xtask/controlplane/openreports/go.mod pins (and go.sum verifies), copied into
//! target/control-plane/openreports-<version>/. The end-to-end tests install them into the test
//! API server (`POOLKEEPER_OPENREPORTS_CRDS`, set by `cargo xtask test`).

use std::path::{Path, PathBuf};
use std::process::Command;

use poolkeeper_gomod::required_version;

use crate::{Error, Result, target_dir};

const MODULE: &str = "github.com/openreports/reports-api";
/// The CRD files, below the module's root.
pub const CRD_FILES: [&str; 2] = [
    "config/crd/openreports.io_reports.yaml",
    "config/crd/openreports.io_clusterreports.yaml",
];
/// Where the end-to-end tests find the directory holding them.
pub use poolkeeper_gomod::POOLKEEPER_OPENREPORTS_CRDS;

/// The directory holding the CRD files, downloaded first where missing.
pub fn ensure(root: &Path) -> Result<PathBuf> {
    let source = root.join("xtask/controlplane/openreports");
    let go_mod_path = source.join("go.mod");
    let go_mod = std::fs::read_to_string(&go_mod_path)
        .map_err(|e| Error::io(format!("reading {}", go_mod_path.display()), e))?;
    let version = required_version(&go_mod, MODULE).ok_or_else(|| {
        Error::ControlPlane(format!(
            "{} does not require {MODULE}",
            go_mod_path.display()
        ))
    })?;
    let out = target_dir(root)
        .join("control-plane")
        .join(format!("openreports-{version}"));
    let present = |dir: &Path| CRD_FILES.iter().all(|f| dir.join(file_name(f)).is_file());
    if present(&out) {
        return Ok(out);
    }
    let module_dir = download(&source)?;
    std::fs::create_dir_all(&out)
        .map_err(|e| Error::io(format!("creating {}", out.display()), e))?;
    for file in CRD_FILES {
        let from = module_dir.join(file);
        let to = out.join(file_name(file));
        std::fs::copy(&from, &to)
            .map_err(|e| Error::io(format!("copying {} to {}", from.display(), to.display()), e))?;
    }
    eprintln!("OpenReports CRDs {version}: {}", out.display());
    Ok(out)
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// `go mod download` of the pinned version (verified against go.sum), and the module cache
/// directory it went to.
fn download(source: &Path) -> Result<PathBuf> {
    let mut command = Command::new("go");
    command
        .current_dir(source)
        .env("GOFLAGS", "-mod=readonly")
        .env("GOTOOLCHAIN", "local")
        .args(["mod", "download", "-json", MODULE]);
    let output = command
        .output()
        .map_err(|e| Error::io("running go mod download (is Go installed?)", e))?;
    if !output.status.success() {
        return Err(Error::ControlPlane(format!(
            "go mod download {MODULE} in {}: {}{}",
            source.display(),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )));
    }
    let listing = String::from_utf8_lossy(&output.stdout);
    module_dir(&listing).map(PathBuf::from).ok_or_else(|| {
        Error::ControlPlane(format!("go mod download {MODULE}: no Dir in {listing}"))
    })
}

/// The `"Dir"` of `go mod download -json`'s answer (one field a line; a module cache path
/// holds nothing JSON escapes).
fn module_dir(listing: &str) -> Option<&str> {
    listing.lines().find_map(|line| {
        let value = line.trim().strip_prefix("\"Dir\":")?.trim();
        value
            .trim_end_matches(',')
            .strip_prefix('"')?
            .strip_suffix('"')
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_module_directory_is_read_from_the_download_listing() {
        let listing = "{\n\t\"Path\": \"github.com/openreports/reports-api\",\n\t\"Version\": \"v0.2.1\",\n\t\"Dir\": \"/root/go/pkg/mod/github.com/openreports/reports-api@v0.2.1\",\n\t\"Sum\": \"h1:x\"\n}\n";
        assert_eq!(
            module_dir(listing),
            Some("/root/go/pkg/mod/github.com/openreports/reports-api@v0.2.1")
        );
        assert_eq!(module_dir("{\"Error\": \"not found\"}"), None);
    }
}
