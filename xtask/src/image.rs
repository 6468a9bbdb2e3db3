//! `cargo xtask image [--glibc]`: the OCI image of the Dockerfile, tagged
//! `poolkeeper:<workspace version>`, built with buildah or podman (the first on the PATH) from
//! target/dist/, which `cargo xtask dist` refreshes first. The Dockerfile starts `FROM scratch`,
//! so no base image is pulled.

use std::process::Command;

use crate::run::{display, on_path};
use crate::{Error, Result, dist, workspace_root};

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
    for arg in args {
        match arg.as_str() {
            "--glibc" => glibc = true,
            other => return Err(Error::Usage(format!("image: unknown option {other:?}"))),
        }
    }
    // Before the build of the binary, so a missing builder fails at once.
    let builder = find_builder()?;
    let root = workspace_root();
    let dist = dist::build(&root, glibc)?;
    let tag = format!("{IMAGE}:{}", env!("CARGO_PKG_VERSION"));

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
