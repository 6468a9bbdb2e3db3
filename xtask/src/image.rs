//! `cargo xtask image [--glibc] [--oci-archive]`: the OCI image of the Dockerfile, tagged
//! `poolkeeper:<workspace version>`, built with buildah or podman (the first on the PATH) from
//! target/dist/, which `cargo xtask dist` refreshes first. The Dockerfile starts `FROM scratch`,
//! so no base image is pulled. With `--oci-archive` no builder is needed: the same image is
//! written as an OCI archive (target/dist/poolkeeper-<version>.oci.tar) from the Dockerfile,
//! for `ctr images import`, `skopeo copy oci-archive:...` or `podman load`.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::dist::Variant;
use crate::run::{display, on_path};
use crate::{Error, Result, dist, oci, workspace_root};

const IMAGE: &str = "poolkeeper";

/// An OCI image builder and its subcommand that builds a Dockerfile.
struct Builder {
    program: &'static str,
    build: &'static str,
}

/// In order of preference: buildah needs no daemon and no service; podman builds with it.
const BUILDERS: [Builder; 2] = [
    Builder {
        program: "buildah",
        build: "bud",
    },
    Builder {
        program: "podman",
        build: "build",
    },
];

pub fn command(args: &[String]) -> Result<()> {
    let mut glibc = false;
    let mut archive = false;
    for arg in args {
        match arg.as_str() {
            "--glibc" => glibc = true,
            "--oci-archive" => archive = true,
            other => return Err(Error::Usage(format!("image: unknown option {other:?}"))),
        }
    }
    if archive {
        let root = workspace_root();
        let dist = dist::build(&root, glibc, Variant::Shipped)?;
        let path = write_archive(&root, &dist, Variant::Shipped)?;
        println!("wrote {}", path.display());
        return Ok(());
    }
    // Before the build of the binary, so a missing builder fails at once.
    let builder = find_builder()?;
    let root = workspace_root();
    let dist = dist::build(&root, glibc, Variant::Shipped)?;
    let tag = tag(Variant::Shipped);

    let mut build = Command::new(builder.program);
    build
        .arg(builder.build)
        .args(["--tag", &tag, "--file"])
        .arg(root.join("Dockerfile"))
        // The context is target/dist itself, wherever CARGO_TARGET_DIR puts it.
        .arg("--build-arg=DIST=.")
        .arg(format!("--build-arg=VERSION={}", env!("CARGO_PKG_VERSION")))
        .arg(&dist);
    println!("$ {}", display(&build));
    crate::run::status(&mut build)?;

    let mut list = Command::new(builder.program);
    list.args(["images", &tag]);
    println!("$ {}", display(&list));
    crate::run::status(&mut list)?;
    println!(
        "built {tag}; push it with `{} push {tag} docker://REGISTRY/{tag}`",
        builder.program
    );
    Ok(())
}

/// The name the image of `variant` is tagged with, as a Pod spec names it.
pub fn tag(variant: Variant) -> String {
    format!("{IMAGE}:{}{}", env!("CARGO_PKG_VERSION"), variant.suffix())
}

/// The Dockerfile's image as an OCI archive in `dist`, from the binary of `variant` already
/// there.
pub fn write_archive(root: &Path, dist: &Path, variant: Variant) -> Result<PathBuf> {
    let dockerfile = root.join("Dockerfile");
    let text = std::fs::read_to_string(&dockerfile)
        .map_err(|e| Error::io(format!("reading {}", dockerfile.display()), e))?;
    let args = [("DIST", "."), ("VERSION", env!("CARGO_PKG_VERSION"))];
    let image = oci::dockerfile::image(&text, &args, dist, &oci::full_reference(&tag(variant)))?;
    let path = dist.join(format!(
        "{IMAGE}-{}{}.oci.tar",
        env!("CARGO_PKG_VERSION"),
        variant.suffix()
    ));
    let digest = oci::write_archive(&image, &path)?;
    eprintln!(
        "image: {} ({digest}) in {}",
        image.reference,
        path.display()
    );
    Ok(path)
}

fn find_builder() -> Result<&'static Builder> {
    BUILDERS.iter().find(|b| on_path(b.program)).ok_or_else(|| {
        let names: Vec<&str> = BUILDERS.iter().map(|b| b.program).collect();
        Error::Usage(format!(
            "no OCI image builder found: looked for {} on the PATH. Install one \
             (`apt-get install buildah` or `apt-get install podman` on Debian/Ubuntu, \
             `dnf install buildah` on Fedora), or run `cargo xtask dist` and build the \
             Dockerfile with any other builder",
            names.join(" and ")
        ))
    })
}
