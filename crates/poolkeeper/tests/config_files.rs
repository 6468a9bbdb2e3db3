//! Every poolkeeper configuration the repository ships passes `poolkeeper check-config`: the
//! files under `config/` and `deploy/` (a document without `kind` is a configuration) and the
//! `poolkeeper.yaml` key of any ConfigMap there. A Helm chart's templates are not YAML until
//! rendered; the chart's own test checks the configuration it renders.

use std::path::{Path, PathBuf};
use std::process::Command;

use poolkeeper_testenv::{parse_yaml_documents, yaml_files};
use serde_json::Value;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// YAML files below `dir`, skipping Helm charts (directories with a `Chart.yaml`).
fn yaml_below(dir: &Path, out: &mut Vec<PathBuf>) {
    if dir.join("Chart.yaml").is_file() {
        return;
    }
    out.extend(yaml_files([dir]).unwrap());
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        if entry.path().is_dir() {
            yaml_below(&entry.path(), out);
        }
    }
}

/// (where, configuration text) of every configuration under `config/` and `deploy/`.
fn shipped_configurations() -> Vec<(String, String)> {
    let mut files = Vec::new();
    for dir in ["config", "deploy"] {
        yaml_below(&Path::new(ROOT).join(dir), &mut files);
    }
    let mut configurations = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let origin = file
            .strip_prefix(ROOT)
            .unwrap_or(&file)
            .display()
            .to_string();
        for doc in parse_yaml_documents(&text, &origin).unwrap() {
            match doc.get("kind").and_then(Value::as_str) {
                None => configurations.push((origin.clone(), text.clone())),
                Some("ConfigMap") => {
                    if let Some(embedded) =
                        doc.pointer("/data/poolkeeper.yaml").and_then(Value::as_str)
                    {
                        configurations
                            .push((format!("{origin} (ConfigMap data)"), embedded.to_owned()));
                    }
                }
                Some(_) => {}
            }
        }
    }
    configurations
}

#[test]
fn every_shipped_configuration_passes_check_config() {
    let configurations = shipped_configurations();
    let found: Vec<&str> = configurations
        .iter()
        .map(|(origin, _)| origin.as_str())
        .collect();
    for expected in [
        "config/poolkeeper.yaml",
        "config/dev.yaml",
        "deploy/poolkeeper.yaml",
    ] {
        assert!(
            found.iter().any(|f| f.ends_with(expected)),
            "{expected} is not among the configurations found: {found:?}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    for (origin, text) in &configurations {
        let file = dir.path().join("config.yaml");
        std::fs::write(&file, text).unwrap();
        let output = Command::new(env!("CARGO_BIN_EXE_poolkeeper"))
            .args(["check-config", file.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{origin}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
