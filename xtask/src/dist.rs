//! `cargo xtask dist [--glibc]`: what a cluster runs, in target/dist/: `poolkeeper`, the release
//! binary linked statically (so the image needs no base), and `manifests.yaml`, deploy/ rendered
//! by kustomize (built from its Go module like the control-plane binaries).
//!
//! The binary links musl where the Rust target and a musl C compiler (for ring's C code) are
//! there; otherwise, or with `--glibc`, it links glibc statically (`crt-static`). A musl binary
//! resolves host names without glibc's NSS modules, which a `FROM scratch` image lacks.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::run::{cargo, display, elapsed, on_path};
use crate::{Error, Result, controlplane, target_dir, workspace_root};

const PACKAGE: &str = "poolkeeper";
const BINARY: &str = "poolkeeper";
const MANIFESTS: &str = "manifests.yaml";
/// Configurations the built binary must accept: the documented defaults and the deployed one.
const CONFIGS: [&str; 2] = ["config/poolkeeper.yaml", "deploy/poolkeeper.yaml"];

/// Which binary a build makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// The binary that ships, in target/dist/.
    Shipped,
    /// The chaos run's deliberately broken leader (poolkeeper-supervisor's feature
    /// `broken-leader-for-chaos`: it goes on writing 10 s after losing its Lease), in
    /// target/dist-broken-leader/ and its own image tag, so that the shipped binary and
    /// image are never it.
    BrokenLeader,
}

impl Variant {
    /// The cargo features of the `poolkeeper` package this variant is built with.
    fn features(self) -> Option<&'static str> {
        match self {
            Self::Shipped => None,
            Self::BrokenLeader => Some("broken-leader-for-chaos"),
        }
    }

    /// Appended to the dist directory's name and to the image's tag.
    pub fn suffix(self) -> &'static str {
        match self {
            Self::Shipped => "",
            Self::BrokenLeader => "-broken-leader",
        }
    }
}

pub fn command(args: &[String]) -> Result<()> {
    let mut glibc = false;
    for arg in args {
        match arg.as_str() {
            "--glibc" => glibc = true,
            other => return Err(Error::Usage(format!("dist: unknown option {other:?}"))),
        }
    }
    build(&workspace_root(), glibc, Variant::Shipped).map(drop)
}

/// Builds target/dist/ (or the variant's directory beside it) and returns its path.
pub fn build(root: &Path, force_glibc: bool, variant: Variant) -> Result<PathBuf> {
    let started = Instant::now();
    let dist = target_dir(root).join(format!("dist{}", variant.suffix()));
    std::fs::create_dir_all(&dist)
        .map_err(|e| Error::io(format!("creating {}", dist.display()), e))?;
    let linking = if force_glibc {
        Linking::Glibc
    } else {
        Linking::choose()
    };
    let manifests = render_manifests(root, &dist)?;
    let binary = build_binary(root, linking, variant, &dist)?;
    self_check(root, &binary)?;
    println!(
        "\ndist: {} ({}, {}) and {} ({}) in {}",
        relative(root, &binary),
        linking.describe(),
        size(&binary),
        relative(root, &manifests),
        size(&manifests),
        elapsed(started.elapsed())
    );
    Ok(dist)
}

/// How the binary gets its C library linked in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Linking {
    /// The musl target, static by default.
    Musl,
    /// The glibc target with `-C target-feature=+crt-static`.
    Glibc,
}

impl Linking {
    /// musl when it can be built here; otherwise glibc, saying why.
    fn choose() -> Self {
        match musl_unavailable() {
            None => Self::Musl,
            Some(why) => {
                eprintln!(
                    "dist: {why}; linking glibc statically instead (-C target-feature=+crt-static \
                     --target {})",
                    Self::Glibc.target()
                );
                Self::Glibc
            }
        }
    }

    fn target(self) -> String {
        let libc = match self {
            Self::Musl => "musl",
            Self::Glibc => "gnu",
        };
        format!("{}-unknown-linux-{libc}", std::env::consts::ARCH)
    }

    fn describe(self) -> String {
        match self {
            Self::Musl => format!("static, {}", self.target()),
            Self::Glibc => format!("static glibc, {}", self.target()),
        }
    }
}

/// Why a musl build can't be done here (after trying to add the Rust target), or None.
fn musl_unavailable() -> Option<String> {
    let target = Linking::Musl.target();
    if !rust_target_installed(&target) {
        eprintln!(
            "dist: the Rust target {target} is not installed; running `rustup target add {target}`"
        );
        match Command::new("rustup")
            .args(["target", "add", &target])
            .output()
        {
            Err(e) => return Some(format!("rustup could not be started ({e})")),
            Ok(out) if !out.status.success() => {
                return Some(format!(
                    "`rustup target add {target}` failed: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
            Ok(_) => {}
        }
    }
    // cc (ring's build script) looks for these names when cross-compiling to musl.
    let compilers = [
        format!("{}-linux-musl-gcc", std::env::consts::ARCH),
        "musl-gcc".to_owned(),
    ];
    if !compilers.iter().any(|c| on_path(c)) {
        return Some(format!(
            "no musl C compiler ({}) for ring's C code: `apt-get install musl-tools` provides it",
            compilers.join(" or ")
        ));
    }
    None
}

/// The toolchain cargo uses has a `lib/rustlib/<target>/lib` directory per installed target.
fn rust_target_installed(target: &str) -> bool {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    Command::new(rustc)
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
        .is_some_and(|sysroot| {
            sysroot
                .join("lib/rustlib")
                .join(target)
                .join("lib")
                .is_dir()
        })
}

/// `cargo build --release --target ...` and a copy to dist/.
fn build_binary(root: &Path, linking: Linking, variant: Variant, dist: &Path) -> Result<PathBuf> {
    let target = linking.target();
    let mut build = cargo(root);
    build
        .args(["build", "--release", "-j2", "--locked", "-p", PACKAGE])
        .args(["--bin", BINARY, "--target", &target]);
    if let Some(features) = variant.features() {
        build.args(["--features", features]);
    }
    if linking == Linking::Glibc {
        // With --target, RUSTFLAGS reach the target's crates only, not build scripts.
        let mut flags = std::env::var("RUSTFLAGS").unwrap_or_default();
        flags.push_str(" -C target-feature=+crt-static");
        build.env("RUSTFLAGS", flags.trim_start());
    }
    println!("$ {}", display(&build));
    crate::run::status(&mut build)?;
    let built = target_dir(root).join(&target).join("release").join(BINARY);
    let copy = dist.join(BINARY);
    std::fs::copy(&built, &copy).map_err(|e| {
        Error::io(
            format!("copying {} to {}", built.display(), copy.display()),
            e,
        )
    })?;
    Ok(copy)
}

/// `kustomize build deploy/` into dist/manifests.yaml.
fn render_manifests(root: &Path, dist: &Path) -> Result<PathBuf> {
    let kustomize = controlplane::kustomize(root)?;
    let mut render = Command::new(&kustomize);
    render.current_dir(root).args(["build", "deploy"]);
    let shown = display(&render);
    println!("$ {shown}");
    let out = render
        .output()
        .map_err(|e| Error::io(format!("starting `{shown}`"), e))?;
    if !out.status.success() {
        return Err(Error::Check(format!(
            "`{shown}` failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let path = dist.join(MANIFESTS);
    std::fs::write(&path, &out.stdout)
        .map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
    Ok(path)
}

/// The binary runs, accepts the shipped configurations, and needs no shared library.
fn self_check(root: &Path, binary: &Path) -> Result<()> {
    for config in CONFIGS {
        let mut check = Command::new(binary);
        check.current_dir(root).args(["check-config", config]);
        println!("$ {}", display(&check));
        crate::run::status(&mut check)?;
    }
    let mut ldd = Command::new("ldd");
    ldd.arg(binary);
    println!("$ {}", display(&ldd));
    let out = ldd
        .output()
        .map_err(|e| Error::io("starting `ldd` (glibc's libc-bin) to check the linking", e))?;
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    print!("{said}");
    if !ldd_says_static(&said) {
        return Err(Error::Check(format!(
            "{} is dynamically linked; ldd says:\n{}",
            binary.display(),
            said.trim_end()
        )));
    }
    Ok(())
}

/// ldd's words for an executable without an interpreter: "not a dynamic executable" (static)
/// or "statically linked" (static-pie).
fn ldd_says_static(output: &str) -> bool {
    output.contains("not a dynamic executable") || output.contains("statically linked")
}

fn relative(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .display()
        .to_string()
}

/// `21.4 MiB`, `12.0 KiB`.
fn size(path: &Path) -> String {
    let bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    human_size(bytes)
}

fn human_size(bytes: u64) -> String {
    const KIB: f64 = 1024.0;
    let bytes = bytes as f64;
    if bytes >= KIB * KIB {
        format!("{:.1} MiB", bytes / KIB / KIB)
    } else {
        format!("{:.1} KiB", bytes / KIB)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_output_tells_static_from_dynamic() {
        let cases = [
            ("\tnot a dynamic executable\n", true),
            ("\tstatically linked\n", true),
            (
                "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x7f)\n",
                false,
            ),
            ("", false),
        ];
        for (output, expected) in cases {
            assert_eq!(ldd_says_static(output), expected, "{output:?}");
        }
    }

    #[test]
    fn only_the_broken_leader_is_built_with_a_feature_and_apart() {
        assert_eq!(Variant::Shipped.features(), None);
        assert_eq!(Variant::Shipped.suffix(), "");
        assert_eq!(
            Variant::BrokenLeader.features(),
            Some("broken-leader-for-chaos")
        );
        assert_eq!(Variant::BrokenLeader.suffix(), "-broken-leader");
    }

    #[test]
    fn targets_follow_the_host_architecture() {
        let arch = std::env::consts::ARCH;
        assert_eq!(Linking::Musl.target(), format!("{arch}-unknown-linux-musl"));
        assert_eq!(Linking::Glibc.target(), format!("{arch}-unknown-linux-gnu"));
    }

    #[test]
    fn sizes_are_short() {
        let cases = [
            (0, "0.0 KiB"),
            (12 * 1024, "12.0 KiB"),
            (21 * 1024 * 1024 + 400 * 1024, "21.4 MiB"),
        ];
        for (bytes, expected) in cases {
            assert_eq!(human_size(bytes), expected);
        }
    }
}
