//! The chart with its default values installs what deploy/ does: both renderings, passed
//! through the same kustomize so that they are serialized alike, hold the same objects with
//! the same content, but for labels, annotations, the `caBundle` and the release's instance
//! label in selectors.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use crate::chart::template;
use crate::support::{root, run};

/// (kind, namespace, name) of an object.
type Key = (String, String, String);

/// Only deploy/ has them: the namespace (Helm's `--create-namespace` makes it), the CRDs (the
/// chart's crds/, which `helm template` leaves out, are compared file by file).
const DEPLOY_ONLY: [&str; 2] = ["CustomResourceDefinition", "Namespace"];
/// Only the chart has them: none (neither renders a serving certificate).
const CHART_ONLY: [&str; 0] = [];
/// The chart writes every setting it has a value for; deploy/ leaves defaults out. Both are
/// checked by `check-config` (chart.rs) instead.
const NOT_COMPARED: [&str; 1] = ["ConfigMap"];

fn kustomize(dir: &Path) -> String {
    let kustomize = std::env::var("POOLKEEPER_KUSTOMIZE").unwrap_or_else(|_| {
        panic!("POOLKEEPER_KUSTOMIZE is not set: `cargo xtask cluster test` builds it")
    });
    let out = run(Command::new(kustomize).arg("build").arg(dir));
    assert!(
        out.status.success(),
        "kustomize build {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A top-level `  field: value` of the object's metadata.
fn metadata_field(object: &str, field: &str) -> String {
    let prefix = format!("  {field}: ");
    object
        .split_once("\nmetadata:\n")
        .map(|(_, metadata)| metadata)
        .into_iter()
        .flat_map(str::lines)
        .take_while(|l| l.starts_with(' '))
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_default()
        .to_owned()
}

/// The object without its labels and annotations blocks, `caBundle` lines and the instance
/// label the chart adds to selectors.
fn comparable(object: &str) -> String {
    let mut kept = Vec::new();
    let mut skipping_below: Option<usize> = None;
    for line in object.lines() {
        let indent = line.len() - line.trim_start().len();
        if let Some(depth) = skipping_below {
            if indent > depth {
                continue;
            }
            skipping_below = None;
        }
        let trimmed = line.trim();
        if trimmed == "labels:" || trimmed == "annotations:" {
            skipping_below = Some(indent);
        } else if !trimmed.starts_with("caBundle:")
            && !trimmed.starts_with("app.kubernetes.io/instance:")
        {
            kept.push(line);
        }
    }
    kept.join("\n")
}

fn objects(rendered: &str) -> BTreeMap<Key, String> {
    rendered
        .split("\n---\n")
        .filter(|o| !o.trim().is_empty())
        .map(|object| {
            let kind = object
                .lines()
                .find_map(|l| l.strip_prefix("kind: "))
                .unwrap_or_default()
                .to_owned();
            let key = (
                kind,
                metadata_field(object, "namespace"),
                metadata_field(object, "name"),
            );
            (key, comparable(object))
        })
        .collect()
}

#[test]
fn the_charts_defaults_install_the_objects_of_deploy() {
    let dir = std::env::temp_dir().join(format!("chart-objects-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("chart.yaml"), template(&[])).unwrap();
    std::fs::write(
        dir.join("kustomization.yaml"),
        "resources:\n  - chart.yaml\n",
    )
    .unwrap();
    let chart = objects(&kustomize(&dir));
    let deploy = objects(&kustomize(&root().join("deploy")));
    std::fs::remove_dir_all(&dir).unwrap();
    let only = |a: &BTreeMap<Key, String>, b: &BTreeMap<Key, String>| -> Vec<String> {
        a.keys()
            .filter(|k| !b.contains_key(*k))
            .map(|k| k.0.clone())
            .collect()
    };
    let mut deploy_only = only(&deploy, &chart);
    deploy_only.dedup();
    assert_eq!(deploy_only, DEPLOY_ONLY, "objects only deploy/ has");
    assert_eq!(
        only(&chart, &deploy),
        CHART_ONLY,
        "objects only the chart has"
    );
    let mut compared = 0;
    for (key, object) in &deploy {
        let Some(charts) = chart.get(key) else {
            continue;
        };
        if NOT_COMPARED.contains(&key.0.as_str()) {
            continue;
        }
        assert_eq!(
            charts, object,
            "{key:?}: the chart's (left) differs from deploy/'s (right)"
        );
        compared += 1;
    }
    // ServiceAccount, ClusterRole(Binding), two Roles and RoleBindings, Deployment, two
    // Services, PodDisruptionBudget, both webhook configurations.
    assert_eq!(compared, 13);
}
