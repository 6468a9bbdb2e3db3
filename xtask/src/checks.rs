//! `cargo xtask checks`: rules of this code base that neither rustc nor clippy enforce, found by
//! scanning the sources as text (a small tokenizer that skips comments, strings and character
//! literals, and brace matching), so the step takes well under a second and needs no parser.
//!
//! - **Function length**: no `fn` in `crates/*/src`, `xtask/*/src` or `xtask/src` spans more than
//!   [`MAX_FUNCTION_LINES`] lines, counted from the line of `fn` to that of its closing brace.
//!   Longer ones mix several steps that deserve names of their own.
//! - **Tunable defaults**: outside `crates/config`, no `impl Default for X` and no
//!   `#[derive(Default)]` on a struct named `*Settings` or `Retries`. The config schema holds
//!   every tunable's default; a second default in a component crate drifts from it.
//! - **Event catalog**: every event of the bus has a row in the catalog (crates/bus/README.md)
//!   naming the crates that consume it, and each of them matches the event in its code
//!   ([`catalog`]). The catalog is how a reader learns who reacts to what; prose alone drifts.
//!   It is checked on every run, whatever the packages named: any crate can break it.
//! - **Layers**: a crate under `crates/` depends on foundation crates only, never on a
//!   component crate; only the binary wires components ([`layers`]). Checked on every run.
//!
//! Test code is not checked: files named `tests.rs`, directories named `tests`, and items under
//! `#[cfg(test)]` (a module's block, or the file of a `#[cfg(test)] mod name;`). Table tests are
//! long by nature, and test fixtures may build settings however they like.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::{Error, Result, workspace_root};

mod catalog;
mod layers;
mod rules;
mod tokens;

use rules::Source;

/// The longest a function may be, from the line of `fn` to that of its closing brace.
pub const MAX_FUNCTION_LINES: usize = 80;

/// The crate that owns the defaults of every tunable.
const CONFIG_CRATE: &str = "config";

/// `cargo xtask checks [-p PACKAGE]...`
pub fn command(args: &[String]) -> Result<()> {
    let mut packages = Vec::new();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "-p" | "--package" => match rest.next() {
                Some(name) => packages.push(name.clone()),
                None => return Err(Error::Usage(format!("checks: {arg} needs a package name"))),
            },
            other => return Err(Error::Usage(format!("checks: unknown option {other:?}"))),
        }
    }
    run(&workspace_root(), &packages)
}

/// Checks the sources of the named packages (all of them when `packages` is empty).
pub fn run(root: &Path, packages: &[String]) -> Result<()> {
    let mut violations = Vec::new();
    let mut files = 0;
    for tree in source_trees(root, packages)? {
        for file in tree.checked_files()? {
            let text = std::fs::read_to_string(&file)
                .map_err(|e| Error::io(format!("reading {}", file.display()), e))?;
            let relative = file.strip_prefix(root).unwrap_or(&file).to_owned();
            violations.extend(check_source(&relative, &text, tree.defaults_allowed));
            files += 1;
        }
    }
    violations.extend(catalog::check(root)?);
    violations.extend(layers::check(root)?);
    if violations.is_empty() {
        println!(
            "{files} files: no function over {MAX_FUNCTION_LINES} lines, no tunable default outside \
             crates/{CONFIG_CRATE}; every event consumed as {} says; no component crate \
             depends on another",
            catalog::CATALOG
        );
        return Ok(());
    }
    let list: Vec<String> = violations.iter().map(ToString::to_string).collect();
    Err(Error::Check(format!(
        "{} problems in the sources:\n  {}",
        violations.len(),
        list.join("\n  ")
    )))
}

/// One broken rule, at a line of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub path: PathBuf,
    pub line: usize,
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.path.display(), self.line, self.message)
    }
}

/// Both rules on one file's text (`defaults_allowed` only for crates/config).
fn check_source(path: &Path, text: &str, defaults_allowed: bool) -> Vec<Violation> {
    let source = Source::new(text);
    let violation = |line, message| Violation {
        path: path.to_owned(),
        line,
        message,
    };
    let mut found: Vec<Violation> = source
        .long_functions(MAX_FUNCTION_LINES)
        .into_iter()
        .map(|f| {
            violation(
                f.line,
                format!(
                    "fn `{}` is {} lines long (from `fn` to its closing brace), over the limit of \
                     {MAX_FUNCTION_LINES}: split it into named steps",
                    f.name, f.lines
                ),
            )
        })
        .collect();
    if !defaults_allowed {
        found.extend(source.tunable_defaults().into_iter().map(|d| {
            violation(
                d.line,
                format!(
                    "{} gives the tunable `{}` a default outside crates/{CONFIG_CRATE}: defaults \
                     belong to the config schema only, so build it from the loaded config",
                    d.how, d.name
                ),
            )
        }));
    }
    found.sort_by_key(|v| v.line);
    found
}

/// A `src` directory and whether its crate may define tunable defaults.
#[derive(Debug, PartialEq, Eq)]
struct SourceTree {
    src: PathBuf,
    defaults_allowed: bool,
}

/// `xtask/src`, every `crates/*/src` (the product) and `xtask/*/src` (the tooling crates), or
/// those of the named packages.
fn source_trees(root: &Path, packages: &[String]) -> Result<Vec<SourceTree>> {
    let mut trees = vec![(
        "xtask".to_owned(),
        SourceTree {
            src: root.join("xtask").join("src"),
            defaults_allowed: true,
        },
    )];
    let mut dirs: Vec<PathBuf> = Vec::new();
    for parent in [root.join("crates"), root.join("xtask")] {
        let entries = std::fs::read_dir(&parent)
            .map_err(|e| Error::io(format!("reading {}", parent.display()), e))?;
        dirs.extend(
            entries
                .filter_map(|entry| entry.ok().map(|e| e.path()))
                .filter(|dir| dir.join("Cargo.toml").is_file()),
        );
    }
    dirs.sort();
    for dir in dirs {
        let manifest_path = dir.join("Cargo.toml");
        let manifest = std::fs::read_to_string(&manifest_path)
            .map_err(|e| Error::io(format!("reading {}", manifest_path.display()), e))?;
        let name = package_name(&manifest).unwrap_or_default().to_owned();
        let defaults_allowed = dir.file_name().is_some_and(|n| n == CONFIG_CRATE);
        trees.push((
            name,
            SourceTree {
                src: dir.join("src"),
                defaults_allowed,
            },
        ));
    }
    if let Some(unknown) = packages
        .iter()
        .find(|package| !trees.iter().any(|(name, _)| name == *package))
    {
        return Err(Error::Usage(format!(
            "checks: no package {unknown:?} under xtask/ or crates/"
        )));
    }
    Ok(trees
        .into_iter()
        .filter(|(name, _)| packages.is_empty() || packages.contains(name))
        .map(|(_, tree)| tree)
        .collect())
}

/// The `name` of a Cargo.toml's `[package]` table.
fn package_name(manifest: &str) -> Option<&str> {
    let mut in_package = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_package = line == "[package]";
            continue;
        }
        if !in_package {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        if key.trim() == "name" {
            return Some(value.trim().trim_matches('"'));
        }
    }
    None
}

impl SourceTree {
    /// The `.rs` files of the tree, in name order, without test code.
    fn checked_files(&self) -> Result<Vec<PathBuf>> {
        let mut files = Vec::new();
        collect_rust_files(&self.src, &mut files)?;
        files.sort();
        // Modules declared `#[cfg(test)] mod name;` live in files of their own.
        let mut test_paths = Vec::new();
        for file in &files {
            let text = std::fs::read_to_string(file)
                .map_err(|e| Error::io(format!("reading {}", file.display()), e))?;
            let dir = module_dir(file);
            for module in Source::new(&text).test_modules {
                test_paths.push(dir.join(format!("{module}.rs")));
                test_paths.push(dir.join(module));
            }
        }
        files.retain(|file| {
            !is_test_path(file.strip_prefix(&self.src).unwrap_or(file))
                && !test_paths.iter().any(|test| file.starts_with(test))
        });
        Ok(files)
    }
}

fn collect_rust_files(dir: &Path, files: &mut Vec<PathBuf>) -> Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        // A crate without src/ (being created, say) has nothing to check.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io(format!("reading {}", dir.display()), e)),
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_rust_files(&path, files)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    Ok(())
}

/// `tests.rs`, or anything below a directory named `tests`.
fn is_test_path(relative: &Path) -> bool {
    relative.file_name().is_some_and(|n| n == "tests.rs")
        || relative
            .parent()
            .is_some_and(|dir| dir.components().any(|c| c.as_os_str() == "tests"))
}

/// The directory where the modules a file declares (`mod name;`) live: a crate root's
/// (`lib.rs`, `main.rs`, `src/bin/*.rs`) and a `mod.rs`'s own directory, else `<dir>/<stem>/`.
fn module_dir(file: &Path) -> PathBuf {
    let dir = file.parent().unwrap_or(Path::new("")).to_owned();
    let name = file
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let in_bin = dir.file_name().is_some_and(|n| n == "bin");
    if matches!(name, "lib.rs" | "main.rs" | "mod.rs") || in_bin {
        dir
    } else {
        dir.join(name.trim_end_matches(".rs"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn violations_name_file_and_line() {
        // 81 lines of function, then a derive on line 82.
        let body = "    step();\n".repeat(MAX_FUNCTION_LINES - 1);
        let text =
            format!("fn long() {{\n{body}}}\n#[derive(Default)]\npub struct ReconcilerSettings;\n");
        let path = Path::new("crates/reconciler/src/lib.rs");
        let found: Vec<String> = check_source(path, &text, false)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(
            found[0].starts_with("crates/reconciler/src/lib.rs:1: fn `long` is 81 lines long"),
            "{}",
            found[0]
        );
        assert!(
            found[1].starts_with(
                "crates/reconciler/src/lib.rs:82: `#[derive(Default)]` gives the tunable `ReconcilerSettings` a default"
            ),
            "{}",
            found[1]
        );
        assert_eq!(check_source(path, &text, true).len(), 1);
    }

    #[test]
    fn package_names_are_read_from_the_package_table() {
        let cases = [
            (
                "[package]\nname = \"poolkeeper-bus\"\n",
                Some("poolkeeper-bus"),
            ),
            (
                "[lib]\nname = \"other\"\n[package]\nversion = \"1\"\nname=\"a\"\n",
                Some("a"),
            ),
            ("[dependencies]\nname = \"x\"\n", None),
        ];
        for (manifest, expected) in cases {
            assert_eq!(package_name(manifest), expected, "{manifest}");
        }
    }

    #[test]
    fn module_files_and_test_paths() {
        let cases = [
            ("crates/a/src/lib.rs", "crates/a/src"),
            ("crates/a/src/main.rs", "crates/a/src"),
            ("crates/a/src/bin/tool.rs", "crates/a/src/bin"),
            ("crates/a/src/server/mod.rs", "crates/a/src/server"),
            ("crates/a/src/server.rs", "crates/a/src/server"),
        ];
        for (file, dir) in cases {
            assert_eq!(module_dir(Path::new(file)), Path::new(dir), "{file}");
        }
        let tests = [
            ("tests.rs", true),
            ("tests/server.rs", true),
            ("placement/tests/mod.rs", true),
            ("tests_support.rs", false),
            ("server.rs", false),
        ];
        for (relative, expected) in tests {
            assert_eq!(is_test_path(Path::new(relative)), expected, "{relative}");
        }
    }

    #[test]
    fn the_workspace_trees_are_listed() {
        let root = workspace_root();
        let all = source_trees(&root, &[]).unwrap();
        assert!(all.contains(&SourceTree {
            src: root.join("xtask/src"),
            defaults_allowed: true,
        }));
        assert!(all.contains(&SourceTree {
            src: root.join("crates/config/src"),
            defaults_allowed: true,
        }));
        assert!(all.contains(&SourceTree {
            src: root.join("xtask/testenv/src"),
            defaults_allowed: false,
        }));
        let one = source_trees(&root, &["poolkeeper-testenv".to_owned()]).unwrap();
        assert_eq!(one.len(), 1);
        assert!(source_trees(&root, &["no-such-package".to_owned()]).is_err());
    }
}
