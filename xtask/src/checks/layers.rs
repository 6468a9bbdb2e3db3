//! The layering rule of `crates/`. Foundation crates hold what the components share; a
//! component is one stage's piece of the pipeline and talks to the others only through the bus:
//!
//! - a foundation crate depends only on foundation crates;
//! - a component crate depends only on foundation crates, never on another component;
//! - only the binary ([`BINARY`]) wires components together.
//!
//! Dependencies of every kind count (`[dependencies]`, `[dev-dependencies]`,
//! `[build-dependencies]`): a component's tests that need another component are a sign that
//! what they share belongs in a foundation crate.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::Violation;
use crate::{Error, Result};

/// The crates, by directory name under `crates/`, that any crate may depend on.
pub(super) const FOUNDATION: [&str; 8] = [
    "api",
    "bus",
    "config",
    "index",
    "kube",
    "pki",
    "placement",
    "supervisor",
];
/// The crate that wires the components into the controller.
const BINARY: &str = "poolkeeper";

/// One crate under `crates/`: its directory, package name and manifest.
struct Manifest {
    dir: String,
    package: String,
    path: PathBuf,
    text: String,
}

/// The layering rule on the workspace at `root`.
pub(super) fn check(root: &Path) -> Result<Vec<Violation>> {
    let crates = root.join("crates");
    let entries = std::fs::read_dir(&crates)
        .map_err(|e| Error::io(format!("reading {}", crates.display()), e))?;
    let mut manifests = Vec::new();
    for dir in entries.filter_map(|entry| entry.ok().map(|e| e.path())) {
        let path = dir.join("Cargo.toml");
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let Some(package) = super::package_name(&text).map(str::to_owned) else {
            continue;
        };
        let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        manifests.push(Manifest {
            dir: name.to_owned(),
            package,
            path: path.strip_prefix(root).unwrap_or(&path).to_owned(),
            text,
        });
    }
    manifests.sort_by(|a, b| a.dir.cmp(&b.dir));
    Ok(violations(&manifests))
}

fn violations(manifests: &[Manifest]) -> Vec<Violation> {
    let dir_of: BTreeMap<&str, &str> = manifests
        .iter()
        .map(|m| (m.package.as_str(), m.dir.as_str()))
        .collect();
    let mut found = Vec::new();
    for manifest in manifests.iter().filter(|m| m.dir != BINARY) {
        for (line, package) in dependencies(&manifest.text) {
            let Some(&dependency) = dir_of.get(package) else {
                continue;
            };
            if FOUNDATION.contains(&dependency) {
                continue;
            }
            let role = if FOUNDATION.contains(&manifest.dir.as_str()) {
                "the foundation crate"
            } else {
                "the component crate"
            };
            found.push(Violation {
                path: manifest.path.clone(),
                line,
                message: format!(
                    "{role} `{}` depends on the component crate `{dependency}`: components talk \
                     through the bus and only crates/{BINARY} wires them; move what both need into \
                     a foundation crate ({})",
                    manifest.dir,
                    FOUNDATION.join(", ")
                ),
            });
        }
    }
    found
}

/// The package names a manifest depends on, with their lines, from every dependency table.
fn dependencies(manifest: &str) -> Vec<(usize, &str)> {
    let mut in_dependencies = false;
    let mut found = Vec::new();
    for (index, line) in manifest.lines().enumerate() {
        let line = line.trim();
        if line.starts_with('[') {
            in_dependencies = line.trim_matches(['[', ']']).ends_with("dependencies");
            continue;
        }
        if !in_dependencies || line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(name) = line.split(['=', '.', ' ']).next().filter(|n| !n.is_empty()) {
            found.push((index + 1, name));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(dir: &str, dependencies: &str) -> Manifest {
        Manifest {
            dir: dir.to_owned(),
            package: format!("poolkeeper-{dir}"),
            path: PathBuf::from(format!("crates/{dir}/Cargo.toml")),
            text: format!(
                "[package]\nname = \"poolkeeper-{dir}\"\n\n{dependencies}\n[lints]\nworkspace = true\n"
            ),
        }
    }

    fn workspace(webhook_dependencies: &str) -> Vec<Violation> {
        violations(&[
            manifest("bus", "[dependencies]\nserde.workspace = true\n"),
            manifest("index", "[dependencies]\npoolkeeper-bus.workspace = true\n"),
            manifest(
                "audit",
                "[dependencies]\npoolkeeper-index.workspace = true\n",
            ),
            manifest(
                "poolkeeper",
                "[dependencies]\npoolkeeper-audit.workspace = true\npoolkeeper-webhook.workspace = true\n",
            ),
            manifest("webhook", webhook_dependencies),
        ])
    }

    #[test]
    fn components_on_foundation_crates_and_the_binary_on_components_pass() {
        assert_eq!(
            workspace(
                "[dependencies]\npoolkeeper-bus.workspace = true\npoolkeeper-index = { workspace = true }\n"
            ),
            Vec::new()
        );
    }

    #[test]
    fn a_component_on_another_component_is_refused_in_any_dependency_table() {
        for table in [
            "dependencies",
            "dev-dependencies",
            "target.'cfg(unix)'.dependencies",
        ] {
            let found = workspace(&format!(
                "[{table}]\npoolkeeper-bus.workspace = true\npoolkeeper-audit = {{ workspace = true }}\n"
            ));
            assert_eq!(found.len(), 1, "{table}: {found:?}");
            assert_eq!(found[0].path, PathBuf::from("crates/webhook/Cargo.toml"));
            assert_eq!(found[0].line, 6, "{table}");
            assert!(
                found[0].message.starts_with(
                    "the component crate `webhook` depends on the component crate `audit`"
                ),
                "{}",
                found[0].message
            );
        }
    }

    #[test]
    fn a_foundation_crate_on_a_component_is_refused() {
        let found = violations(&[
            manifest(
                "index",
                "[dependencies]\npoolkeeper-audit.workspace = true\n",
            ),
            manifest(
                "audit",
                "[dependencies]\npoolkeeper-index.workspace = true\n",
            ),
        ]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0]
                .message
                .starts_with("the foundation crate `index` depends on the component crate `audit`"),
            "{}",
            found[0].message
        );
    }

    #[test]
    fn features_and_comments_are_not_dependencies() {
        assert_eq!(
            dependencies(
                "[package]\nname = \"x\"\n[features]\ntesting = [\"poolkeeper-audit/testing\"]\n\
                 [dependencies]\n# poolkeeper-audit is not needed\nkube.workspace = true\n"
            ),
            vec![(7, "kube")]
        );
    }
}
