//! Reading the versions a go.mod pins.
//!
//! Shared as a source file with poolkeeper-testenv (`#[path]` there): both
//! must read the pinned Kubernetes version the same way, since testenv finds
//! the binaries in the directory named after the version xtask built them
//! for. Sharing the file keeps xtask free of testenv's dependencies (kube,
//! tokio) and testenv free of a dependency on this binary crate, so it must
//! use nothing but std.

/// The version of `module` required by `go_mod`, inside or outside a
/// `require ( ... )` block.
pub(crate) fn required_version<'a>(go_mod: &'a str, module: &str) -> Option<&'a str> {
    go_mod.lines().find_map(|line| {
        let line = line.trim();
        let line = line.strip_prefix("require ").unwrap_or(line).trim_start();
        let mut words = line.split_whitespace();
        (words.next() == Some(module))
            .then(|| words.next())
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_require_lines_in_and_outside_blocks() {
        let cases = [
            ("require k8s.io/kubernetes v1.36.3\n", Some("v1.36.3")),
            (
                "require (\n\tk8s.io/kubernetes v1.2.3 // indirect\n)\n",
                Some("v1.2.3"),
            ),
            ("require (\n\tk8s.io/kubernetes v1.2.3\n)\n", Some("v1.2.3")),
            ("require k8s.io/kubernetes-extra v9\n", None),
            ("require k8s.io/kubernetes-x v1\n", None),
            ("module k8s.io/kubernetes\n", None),
            ("", None),
        ];
        for (go_mod, expected) in cases {
            assert_eq!(
                required_version(go_mod, "k8s.io/kubernetes"),
                expected,
                "{go_mod:?}"
            );
        }
    }
}
