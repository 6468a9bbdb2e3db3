//! Reading the versions a go.mod requires.
//!
//! xtask builds the control-plane binaries into a directory named after the
//! Kubernetes version that `xtask/controlplane/kubernetes/go.mod` pins, and
//! poolkeeper-testenv looks for them there: both must read that version the
//! same way, so both call this crate. The other terms of that agreement live
//! here too: the environment variables naming a directory of binaries and the
//! executables such a directory holds. It uses nothing but std.

/// A directory of control-plane binaries, as controller-runtime's envtest names it: when set,
/// xtask builds nothing and testenv looks nowhere else.
pub const KUBEBUILDER_ASSETS: &str = "KUBEBUILDER_ASSETS";
/// The directory `cargo xtask control-plane` built into, exported by `cargo xtask test` for
/// the end-to-end tests.
pub const POOLKEEPER_CONTROL_PLANE: &str = "POOLKEEPER_CONTROL_PLANE";
/// The directory holding the OpenReports CRD files, set by `cargo xtask test`.
pub const POOLKEEPER_OPENREPORTS_CRDS: &str = "POOLKEEPER_OPENREPORTS_CRDS";
/// Every executable a directory of control-plane binaries holds.
pub const CONTROL_PLANE_BINARIES: [&str; 5] = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
];

/// The version of `module` required by `go_mod`, on a `require` line of its own or inside a
/// `require ( ... )` block; `None` when `go_mod` does not require it.
///
/// ```
/// let go_mod = "module example\n\nrequire (\n\tk8s.io/kubernetes v1.36.3\n)\n";
/// assert_eq!(poolkeeper_gomod::required_version(go_mod, "k8s.io/kubernetes"), Some("v1.36.3"));
/// ```
pub fn required_version<'a>(go_mod: &'a str, module: &str) -> Option<&'a str> {
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
            ("// require k8s.io/kubernetes v1\n", None),
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
