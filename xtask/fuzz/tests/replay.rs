//! Replays every input the fuzzers keep through its target: the seeds
//! (`fuzz/seeds/<target>/` and the repository files `fuzz/seeds.txt` lists),
//! the corpus `cargo xtask fuzz` minimised (`fuzz/corpus/<target>/`) and the
//! inputs of past crashes (`fuzz/regressions/<target>/`). A target panics on
//! a broken invariant, so any input that fails names itself here.

use std::path::{Path, PathBuf};
use std::time::Instant;

use poolkeeper_fuzz::TARGETS;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn files_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|entry| entry.expect("a readable directory entry").path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    files
}

/// The repository files `fuzz/seeds.txt` lists for `target`.
fn listed_seeds(root: &Path, target: &str) -> Vec<PathBuf> {
    let list = std::fs::read_to_string(root.join("fuzz/seeds.txt")).expect("fuzz/seeds.txt");
    list.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .filter_map(|line| {
            let (name, path) = line.split_once(char::is_whitespace)?;
            (name == target).then(|| root.join(path.trim()))
        })
        .collect()
}

fn inputs_of(root: &Path, target: &str) -> Vec<PathBuf> {
    let mut inputs = listed_seeds(root, target);
    for dir in ["fuzz/seeds", "fuzz/corpus", "fuzz/regressions"] {
        inputs.extend(files_in(&root.join(dir).join(target)));
    }
    inputs
}

fn replay(name: &str) {
    let (_, target) = TARGETS
        .iter()
        .find(|(target, _)| *target == name)
        .expect("a known target");
    let root = workspace_root();
    let inputs = inputs_of(&root, name);
    let corpus = root.join("fuzz/corpus");
    assert!(!inputs.is_empty(), "no input for {name}");
    let started = Instant::now();
    for input in &inputs {
        let data = match std::fs::read(input) {
            Ok(data) => data,
            // A running fuzzer replaces corpus files as it reduces them.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && input.starts_with(&corpus) => {
                continue;
            }
            Err(e) => panic!("{}: {e}", input.display()),
        };
        let outcome = std::panic::catch_unwind(|| target(&data));
        assert!(outcome.is_ok(), "{name} fails on {}", input.display());
    }
    println!(
        "{name}: {} inputs replayed in {:?}",
        inputs.len(),
        started.elapsed()
    );
}

#[test]
fn every_target_has_a_replay_test() {
    let names: Vec<&str> = TARGETS.iter().map(|(name, _)| *name).collect();
    assert_eq!(
        names,
        [
            "admission_review",
            "placement_policy",
            "config_yaml",
            "objects_file",
            "pod_list_protobuf"
        ]
    );
}

#[test]
fn seed_files_listed_exist() {
    let root = workspace_root();
    for (name, _) in TARGETS {
        for path in listed_seeds(&root, name) {
            assert!(path.is_file(), "fuzz/seeds.txt names {}", path.display());
        }
    }
}

#[test]
fn admission_review_inputs_replay() {
    replay("admission_review");
}

#[test]
fn placement_policy_inputs_replay() {
    replay("placement_policy");
}

#[test]
fn config_yaml_inputs_replay() {
    replay("config_yaml");
}

#[test]
fn objects_file_inputs_replay() {
    replay("objects_file");
}

#[test]
fn pod_list_protobuf_inputs_replay() {
    replay("pod_list_protobuf");
}
