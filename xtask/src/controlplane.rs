//! Building the Go programs xtask needs from the Go modules under xtask/controlplane/:
//! etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl, cached in target/control-plane/<kubernetes version>/,
//! kustomize (for `cargo xtask dist`), cached in target/control-plane/kustomize-<version>/,
//! kwok (for `cargo xtask bench-kwok`), cached in target/control-plane/kwok-<version>/,
//! and promtool (for the chart tests), cached in target/control-plane/promtool-<version>/
//! (Prometheus' module version, e.g. v0.316.0 for Prometheus 3.16).
//!
//! Each Go module has a stamp file next to the binaries holding a hash of its sources (go.mod,
//! go.sum, *.go) and of the build flags; binaries are rebuilt when the stamp differs.

use std::fs::File;
use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use poolkeeper_gomod::{CONTROL_PLANE_BINARIES, KUBEBUILDER_ASSETS, required_version};

use crate::run::{display, elapsed};
use crate::{Error, Result, target_dir, workspace_root};

/// Reproducible, static, stripped binaries; modules exactly as go.sum pins them.
const GOFLAGS: &str = "-buildvcs=false -mod=readonly";
const BUILD_ENV: [(&str, &str); 3] = [
    ("GOFLAGS", GOFLAGS),
    ("CGO_ENABLED", "0"),
    ("GOTOOLCHAIN", "local"),
];

struct GoModule {
    /// Directory below xtask/controlplane/.
    name: &'static str,
    packages: &'static [&'static str],
    binaries: &'static [&'static str],
    /// Package whose `gitVersion` variables the build sets, so that the
    /// binaries report the release (`/version`) instead of `v0.0.0-master`.
    version_package: Option<&'static str>,
}

impl GoModule {
    fn build_args(&self, kubernetes_version: &str) -> Vec<String> {
        let mut ldflags = "-s -w".to_owned();
        if let Some(package) = self.version_package {
            let mut parts = kubernetes_version.trim_start_matches('v').split('.');
            let major = parts.next().unwrap_or_default();
            let minor = parts.next().unwrap_or_default();
            for (variable, value) in [
                ("gitVersion", kubernetes_version),
                ("gitMajor", major),
                ("gitMinor", minor),
                ("gitTreeState", "clean"),
            ] {
                ldflags.push_str(&format!(" -X {package}.{variable}={value}"));
            }
        }
        vec![
            "-trimpath".to_owned(),
            format!("-ldflags={ldflags}"),
            "-v".to_owned(),
        ]
    }
}

/// Go modules built together into one cache directory, named after the version they pin.
struct Toolset {
    /// Named in progress messages.
    label: &'static str,
    modules: &'static [GoModule],
    /// The directory below xtask/controlplane/ whose go.mod pins the version, and the module.
    pinned_by: (&'static str, &'static str),
    /// The cache directory below target/control-plane/ is this followed by the version.
    dir_prefix: &'static str,
    /// The xtask command that builds it, for the hint after a failed build.
    command: &'static str,
    /// Said when Go is missing: another way to get the binaries.
    without_go: &'static str,
}

const CONTROL_PLANE: Toolset = Toolset {
    label: "control plane",
    modules: &CONTROL_PLANE_MODULES,
    pinned_by: ("kubernetes", "k8s.io/kubernetes"),
    dir_prefix: "",
    command: "cargo xtask control-plane",
    without_go: " (or set KUBEBUILDER_ASSETS to prebuilt ones)",
};

const KUSTOMIZE: Toolset = Toolset {
    label: "kustomize",
    modules: &[GoModule {
        name: "kustomize",
        packages: &["sigs.k8s.io/kustomize/kustomize/v5"],
        binaries: &["kustomize"],
        // kustomize reads its version from the build info of its module.
        version_package: None,
    }],
    pinned_by: ("kustomize", "sigs.k8s.io/kustomize/kustomize/v5"),
    dir_prefix: "kustomize-",
    command: "cargo xtask dist",
    without_go: "",
};

/// kubelet, kube-proxy and the pause process of the test cluster's node: a module of its own
/// (same Kubernetes release), so adding it leaves the control plane's stamp valid.
const NODE: Toolset = Toolset {
    label: "node",
    modules: &[GoModule {
        name: "node",
        packages: &[
            "k8s.io/kubernetes/cmd/kubelet",
            "k8s.io/kubernetes/cmd/kube-proxy",
            "./pause",
        ],
        binaries: &["kubelet", "kube-proxy", "pause"],
        version_package: Some("k8s.io/component-base/version"),
    }],
    pinned_by: ("node", "k8s.io/kubernetes"),
    dir_prefix: "",
    command: "cargo xtask cluster build",
    without_go: "",
};

const HELM: Toolset = Toolset {
    label: "helm",
    modules: &[GoModule {
        name: "helm",
        packages: &["helm.sh/helm/v4/cmd/helm"],
        binaries: &["helm"],
        version_package: None,
    }],
    pinned_by: ("helm", "helm.sh/helm/v4"),
    dir_prefix: "helm-",
    command: "cargo xtask cluster build",
    without_go: "",
};

/// promtool, which the chart tests run on the monitoring pack's alerting rules.
const PROMTOOL: Toolset = Toolset {
    label: "promtool",
    modules: &[GoModule {
        name: "promtool",
        packages: &["github.com/prometheus/prometheus/cmd/promtool"],
        binaries: &["promtool"],
        version_package: None,
    }],
    pinned_by: ("promtool", "github.com/prometheus/prometheus"),
    dir_prefix: "promtool-",
    command: "cargo xtask cluster build",
    without_go: "",
};

const KWOK: Toolset = Toolset {
    label: "kwok",
    modules: &[GoModule {
        name: "kwok",
        packages: &["sigs.k8s.io/kwok/cmd/kwok"],
        binaries: &["kwok"],
        version_package: None,
    }],
    pinned_by: ("kwok", "sigs.k8s.io/kwok"),
    dir_prefix: "kwok-",
    command: "cargo xtask bench-kwok",
    without_go: "",
};

const CONTROL_PLANE_MODULES: [GoModule; 2] = [
    GoModule {
        name: "etcd",
        packages: &["."],
        binaries: &["etcd"],
        version_package: None,
    },
    GoModule {
        name: "kubernetes",
        packages: &[
            "k8s.io/kubernetes/cmd/kube-apiserver",
            "k8s.io/kubernetes/cmd/kube-controller-manager",
            "k8s.io/kubernetes/cmd/kube-scheduler",
            "k8s.io/kubernetes/cmd/kubectl",
        ],
        binaries: &[
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "kubectl",
        ],
        version_package: Some("k8s.io/component-base/version"),
    },
];

pub fn command(args: &[String]) -> Result<()> {
    let mut force = false;
    for arg in args {
        match arg.as_str() {
            "--force" => force = true,
            other => {
                return Err(Error::Usage(format!(
                    "control-plane: unknown option {other:?}"
                )));
            }
        }
    }
    let root = workspace_root();
    let dir = ensure(&root, force)?;
    crate::openreports::ensure(&root)?;
    println!("{}", dir.display());
    Ok(())
}

/// The directory holding the control-plane binaries: KUBEBUILDER_ASSETS when set, otherwise the cache,
/// built first where missing or stale.
pub fn ensure(root: &Path, force: bool) -> Result<PathBuf> {
    if let Some(assets) = std::env::var_os(KUBEBUILDER_ASSETS).filter(|v| !v.is_empty()) {
        let dir = PathBuf::from(assets);
        let missing: Vec<_> = CONTROL_PLANE_BINARIES
            .iter()
            .filter(|b| !dir.join(b).is_file())
            .collect();
        if !missing.is_empty() {
            return Err(Error::ControlPlane(format!(
                "{KUBEBUILDER_ASSETS}={} lacks {missing:?}; unset it to build the binaries from source",
                dir.display()
            )));
        }
        eprintln!(
            "control plane: using {KUBEBUILDER_ASSETS}={}",
            dir.display()
        );
        return Ok(dir);
    }
    CONTROL_PLANE.ensure(root, force)
}

/// The kustomize executable, built first where missing or stale.
pub fn kustomize(root: &Path) -> Result<PathBuf> {
    Ok(KUSTOMIZE.ensure(root, false)?.join("kustomize"))
}

/// The directory holding kubelet, kube-proxy and pause, built first where missing or stale.
pub fn node(root: &Path) -> Result<PathBuf> {
    NODE.ensure(root, false)
}

/// The helm executable, built first where missing or stale.
pub fn helm(root: &Path) -> Result<PathBuf> {
    Ok(HELM.ensure(root, false)?.join("helm"))
}

/// The promtool executable, built first where missing or stale.
pub fn promtool(root: &Path) -> Result<PathBuf> {
    Ok(PROMTOOL.ensure(root, false)?.join("promtool"))
}

/// The kwok executable, built first where missing or stale.
pub fn kwok(root: &Path) -> Result<PathBuf> {
    Ok(KWOK.ensure(root, false)?.join("kwok"))
}

impl Toolset {
    /// The version its go.mod pins, e.g. `v1.36.3`.
    fn version(&self, root: &Path) -> Result<String> {
        let (dir, module) = self.pinned_by;
        let path = root.join("xtask/controlplane").join(dir).join("go.mod");
        let go_mod = std::fs::read_to_string(&path)
            .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
        required_version(&go_mod, module)
            .map(str::to_owned)
            .ok_or_else(|| {
                Error::ControlPlane(format!("{} does not require {module}", path.display()))
            })
    }

    /// The cache directory with every binary current, building what is missing or stale.
    fn ensure(&self, root: &Path, force: bool) -> Result<PathBuf> {
        let version = self.version(root)?;
        let cache = target_dir(root).join("control-plane");
        let out = cache.join(format!("{}{version}", self.dir_prefix));
        std::fs::create_dir_all(&out)
            .map_err(|e| Error::io(format!("creating {}", out.display()), e))?;
        let lock = lock_cache(&cache)?;
        let started = Instant::now();
        let mut built = Vec::new();
        for module in self.modules {
            if self.ensure_module(root, module, &version, &out, force)? {
                built.extend(module.binaries.iter().copied());
            }
        }
        drop(lock);
        let label = self.label;
        if built.is_empty() {
            eprintln!("{label} {version}: up to date in {}", out.display());
        } else {
            eprintln!(
                "{label} {version}: built {} in {} into {}",
                built.join(", "),
                elapsed(started.elapsed()),
                out.display()
            );
        }
        Ok(out)
    }

    /// Builds one module's binaries into `out` unless its stamp says they are current; true
    /// when it built them.
    fn ensure_module(
        &self,
        root: &Path,
        module: &GoModule,
        version: &str,
        out: &Path,
        force: bool,
    ) -> Result<bool> {
        let source = root.join("xtask").join("controlplane").join(module.name);
        let stamp_path = out.join(format!(".stamp-{}", module.name));
        let args = module.build_args(version);
        // The build flags are part of the stamp: changing them rebuilds.
        let stamp = format!("{}\n{}", source_stamp(&source)?, args.join(" "));
        let current = std::fs::read_to_string(&stamp_path).is_ok_and(|s| s == stamp)
            && module.binaries.iter().all(|b| out.join(b).is_file());
        if current && !force {
            return Ok(false);
        }
        // A failed build must not leave a stamp that claims the old binaries are current.
        let _ = std::fs::remove_file(&stamp_path);
        build(root, self, module, &args, &source, out)?;
        std::fs::write(&stamp_path, &stamp)
            .map_err(|e| Error::io(format!("writing {}", stamp_path.display()), e))?;
        Ok(true)
    }
}

/// Concurrent builds (two `cargo xtask` runs) would write the same files: the second waits.
fn lock_cache(cache: &Path) -> Result<File> {
    let lock_path = cache.join(".lock");
    let lock = File::create(&lock_path)
        .map_err(|e| Error::io(format!("creating {}", lock_path.display()), e))?;
    if lock.try_lock().is_err() {
        eprintln!(
            "{}: waiting for another build to finish",
            lock_path.display()
        );
        lock.lock()
            .map_err(|e| Error::io(format!("locking {}", lock_path.display()), e))?;
    }
    Ok(lock)
}

/// Hash of the module's go.mod, go.sum and Go sources, and of the build settings.
fn source_stamp(dir: &Path) -> Result<String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| Error::io(format!("reading {}", dir.display()), e))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            name == "go.mod" || name == "go.sum" || name.ends_with(".go")
        })
        .collect();
    files.sort();
    let mut hash = Fnv1a::new();
    hash.write(format!("{BUILD_ENV:?}").as_bytes());
    for file in &files {
        let contents =
            std::fs::read(file).map_err(|e| Error::io(format!("reading {}", file.display()), e))?;
        hash.write(file.file_name().unwrap_or_default().as_encoded_bytes());
        hash.write(&(contents.len() as u64).to_le_bytes());
        hash.write(&contents);
    }
    Ok(format!("{:016x}\n", hash.0))
}

/// 64-bit FNV-1a: stable across toolchains, unlike std's DefaultHasher.
struct Fnv1a(u64);

impl Fnv1a {
    fn new() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }

    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 ^= u64::from(*byte);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

fn go_command(source: &Path) -> Command {
    let mut command = Command::new("go");
    command.current_dir(source).envs(BUILD_ENV);
    command
}

fn build(
    root: &Path,
    toolset: &Toolset,
    module: &GoModule,
    args: &[String],
    source: &Path,
    out: &Path,
) -> Result<()> {
    let go_version = go_version(source, toolset, module)?;
    let staging = out.join(format!(".build-{}", module.name));
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::create_dir_all(&staging)
        .map_err(|e| Error::io(format!("creating {}", staging.display()), e))?;

    let mut build = go_command(source);
    build
        .arg("build")
        .args(args)
        .arg("-o")
        .arg(format!("{}/", staging.display()))
        .args(module.packages);
    let retry = retry_hint(root, toolset, source, module, args, out);

    eprintln!(
        "{}: building {} with {go_version} (the first build downloads Go modules and takes minutes)",
        toolset.label,
        module.binaries.join(", ")
    );
    let started = Instant::now();

    let mut list = go_command(source);
    list.args(["list", "-deps", "-f", "{{.ImportPath}}"])
        .args(module.packages);
    let listed = run_with_progress(&mut list, "resolving packages", None)?;
    if !listed.success {
        return Err(failure(
            "resolving the packages",
            &listed.diagnostics,
            &retry,
        ));
    }
    let total = listed.stdout_lines;
    eprintln!(
        "  resolved {total} packages in {} ({} modules downloaded)",
        elapsed(started.elapsed()),
        listed.downloads
    );

    let compiled = run_with_progress(&mut build, "compiling", Some(total))?;
    if !compiled.success {
        return Err(failure("go build", &compiled.diagnostics, &retry));
    }
    install(module, &staging, out)?;
    eprintln!(
        "{}: built {} in {} ({} packages compiled)",
        toolset.label,
        module.binaries.join(", "),
        elapsed(started.elapsed()),
        compiled.packages,
    );
    Ok(())
}

/// The installed Go's version, e.g. `go1.26.0`; an error saying what it is needed for when
/// there is none.
fn go_version(source: &Path, toolset: &Toolset, module: &GoModule) -> Result<String> {
    go_command(source)
        .args(["env", "GOVERSION"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .ok_or_else(|| {
            Error::ControlPlane(format!(
                "the Go toolchain (`go`) was not found on PATH; it is needed once to build {}{}",
                module.binaries.join(", "),
                toolset.without_go
            ))
        })
}

/// Moves the module's binaries from the staging directory they were built in into the cache,
/// so the cache never holds a half-written binary.
fn install(module: &GoModule, staging: &Path, out: &Path) -> Result<()> {
    for binary in module.binaries {
        let from = staging.join(binary);
        let to = out.join(binary);
        std::fs::rename(&from, &to)
            .map_err(|e| Error::io(format!("moving {} to {}", from.display(), to.display()), e))?;
    }
    let _ = std::fs::remove_dir_all(staging);
    Ok(())
}

/// The build as a user would type it, writing straight into the cache directory.
fn retry_hint(
    root: &Path,
    toolset: &Toolset,
    source: &Path,
    module: &GoModule,
    args: &[String],
    out: &Path,
) -> String {
    let relative = source.strip_prefix(root).unwrap_or(source);
    let mut by_hand = Command::new("go");
    by_hand
        .arg("build")
        .args(args)
        .arg("-o")
        .arg(format!("{}/", out.display()))
        .args(module.packages);
    let env: Vec<String> = BUILD_ENV
        .iter()
        .map(|(k, v)| format!("{k}='{v}'"))
        .collect();
    format!(
        "retry with `{}`, or by hand:\n  cd {} && {} {}",
        toolset.command,
        relative.display(),
        env.join(" "),
        display(&by_hand)
    )
}

fn failure(what: &str, diagnostics: &[String], retry: &str) -> Error {
    const SHOWN: usize = 80;
    let skipped = diagnostics.len().saturating_sub(SHOWN);
    let mut message = format!("{what} failed; Go reported:\n");
    if skipped > 0 {
        message.push_str(&format!("  ... ({skipped} earlier lines)\n"));
    }
    for line in &diagnostics[skipped..] {
        message.push_str("  ");
        message.push_str(line);
        message.push('\n');
    }
    message.push_str(retry);
    Error::ControlPlane(message)
}

struct GoRun {
    success: bool,
    stdout_lines: usize,
    packages: usize,
    downloads: usize,
    diagnostics: Vec<String>,
}

/// What a line of `go build -v` / `go list` stderr says.
#[derive(Debug, PartialEq, Eq)]
enum GoLine<'a> {
    Download(&'a str),
    Package(&'a str),
    Diagnostic,
}

fn classify(line: &str) -> GoLine<'_> {
    if let Some(module) = line.strip_prefix("go: downloading ") {
        GoLine::Download(module)
    } else if !line.is_empty() && !line.starts_with('#') && !line.contains([' ', '\t', ':']) {
        GoLine::Package(line)
    } else {
        GoLine::Diagnostic
    }
}

/// Runs go, showing one progress line (rewritten in place on a terminal, every 15 s otherwise).
/// Errors and warnings from go are printed as they come.
fn run_with_progress(command: &mut Command, what: &str, total: Option<usize>) -> Result<GoRun> {
    let shown = display(command);
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::io(format!("starting `{shown}`"), e))?;
    let stdout = child.stdout.take().expect("stdout is piped");
    let counter =
        std::thread::spawn(move || BufReader::new(stdout).lines().map_while(Result::ok).count());

    let terminal = std::io::stderr().is_terminal();
    let started = Instant::now();
    let mut last_report = Instant::now();
    let mut run = GoRun {
        success: false,
        stdout_lines: 0,
        packages: 0,
        downloads: 0,
        diagnostics: Vec::new(),
    };
    let stderr = child.stderr.take().expect("stderr is piped");
    for line in BufReader::new(stderr).lines().map_while(Result::ok) {
        let current = match classify(&line) {
            GoLine::Download(module) => {
                run.downloads += 1;
                format!("downloading {module}")
            }
            GoLine::Package(package) => {
                run.packages += 1;
                package.to_owned()
            }
            GoLine::Diagnostic => {
                if terminal {
                    eprint!("\r\x1b[2K");
                }
                eprintln!("  go: {line}");
                run.diagnostics.push(line);
                continue;
            }
        };
        let progress = match total {
            Some(total) => format!("{}/{total} packages", run.packages),
            None => format!("{} modules downloaded", run.downloads),
        };
        if terminal && last_report.elapsed() >= Duration::from_millis(100) {
            let mut current = current;
            current.truncate(60);
            eprint!(
                "\r\x1b[2K  {what}: {progress}, {} ({current})",
                elapsed(started.elapsed())
            );
            let _ = std::io::stderr().flush();
            last_report = Instant::now();
        } else if !terminal && last_report.elapsed() >= Duration::from_secs(15) {
            eprintln!("  {what}: {progress}, {}", elapsed(started.elapsed()));
            last_report = Instant::now();
        }
    }
    if terminal {
        eprint!("\r\x1b[2K");
    }
    let status = child
        .wait()
        .map_err(|e| Error::io(format!("waiting for `{shown}`"), e))?;
    run.stdout_lines = counter.join().unwrap_or(0);
    run.success = status.success();
    if !run.success {
        run.diagnostics
            .push(format!("`{shown}` exited with {status}"));
    }
    Ok(run)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_output_lines_are_classified() {
        let cases = [
            (
                "go: downloading k8s.io/api v0.36.3",
                GoLine::Download("k8s.io/api v0.36.3"),
            ),
            (
                "k8s.io/kubernetes/pkg/apis/core",
                GoLine::Package("k8s.io/kubernetes/pkg/apis/core"),
            ),
            (
                "runtime/internal/sys",
                GoLine::Package("runtime/internal/sys"),
            ),
            ("# k8s.io/kubernetes/cmd/kube-apiserver", GoLine::Diagnostic),
            ("./main.go:12:2: undefined: etcdmain", GoLine::Diagnostic),
            ("go: updates to go.mod needed", GoLine::Diagnostic),
            ("", GoLine::Diagnostic),
        ];
        for (line, expected) in cases {
            assert_eq!(classify(line), expected, "{line:?}");
        }
    }

    #[test]
    fn pinned_versions_are_read() {
        let root = workspace_root();
        let kubernetes = CONTROL_PLANE.version(&root).unwrap();
        assert!(kubernetes.starts_with("v1."), "{kubernetes}");
        let kustomize = KUSTOMIZE.version(&root).unwrap();
        assert!(kustomize.starts_with("v5."), "{kustomize}");
        let kwok = KWOK.version(&root).unwrap();
        assert!(kwok.starts_with("v0."), "{kwok}");
        let prometheus = PROMTOOL.version(&root).unwrap();
        assert!(prometheus.starts_with("v0.3"), "{prometheus}");
    }

    #[test]
    fn stamp_changes_with_the_sources() {
        let dir = std::env::temp_dir().join(format!("xtask-stamp-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("go.mod"), "module a\n").unwrap();
        std::fs::write(dir.join("README.md"), "ignored").unwrap();
        let first = source_stamp(&dir).unwrap();
        std::fs::write(dir.join("README.md"), "still ignored").unwrap();
        assert_eq!(source_stamp(&dir).unwrap(), first);
        std::fs::write(dir.join("go.sum"), "x v1 h1:abc\n").unwrap();
        let second = source_stamp(&dir).unwrap();
        assert_ne!(second, first);
        std::fs::write(dir.join("main.go"), "package main\n").unwrap();
        assert_ne!(source_stamp(&dir).unwrap(), second);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn fnv1a_matches_reference_values() {
        let hash = |bytes: &[u8]| {
            let mut h = Fnv1a::new();
            h.write(bytes);
            h.0
        };
        assert_eq!(hash(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(hash(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(hash(b"foobar"), 0x8594_4171_f739_67e8);
    }
}
