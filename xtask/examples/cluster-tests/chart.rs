//! deploy/chart without a cluster: `helm lint`, and `helm template` with the defaults and with
//! every value set, checked against what the values promise and against deploy/ (CRDs,
//! webhook rules); the configuration it renders is accepted by poolkeeper's `check-config`.

use std::path::PathBuf;
use std::process::{Command, Output};

use crate::support::{root, run};

fn helm(args: &[&str]) -> Output {
    let helm = std::env::var("POOLKEEPER_HELM").unwrap_or_else(|_| {
        panic!("POOLKEEPER_HELM is not set: `cargo xtask cluster test` builds helm and sets it")
    });
    run(Command::new(helm).current_dir(root()).args(args))
}

pub fn helm_ok(args: &[&str]) -> String {
    let out = helm(args);
    assert!(
        out.status.success(),
        "helm {} failed: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every value the chart documents, set to something other than its default.
const EVERY_OPTION: [&str; 25] = [
    "replicaCount=3",
    "image.repository=registry.example.com/poolkeeper",
    "image.tag=9.9.9",
    "resources.limits.memory=512Mi",
    "placement.defaultMode=warn",
    "placement.defaultConstraints=narrow",
    "placement.excludedNamespaces={kube-system,batch}",
    "placement.policy.bindings[0].namespace=shop",
    "placement.policy.bindings[0].nodePool=edge",
    "webhook.failurePolicy=Ignore",
    "webhook.timeoutSeconds=10",
    "certManager.enabled=true",
    "existingSecret=my-tls",
    "podDisruptionBudget.enabled=false",
    "serviceMonitor.enabled=true",
    "logging.level=debug",
    "config.audit.interval=5m",
    "priorityClassName=system-cluster-critical",
    "topologySpreadConstraints[0].maxSkew=2",
    "topologySpreadConstraints[0].topologyKey=kubernetes.io/hostname",
    "topologySpreadConstraints[0].whenUnsatisfiable=DoNotSchedule",
    "networkPolicy.enabled=true",
    "prometheusRule.enabled=true",
    "grafanaDashboard.enabled=true",
    "tests.boundNamespace=shop",
];

/// What an installation applies: `helm template` without the `helm test` hooks.
pub fn template(sets: &[&str]) -> String {
    let mut args = vec![
        "template",
        "poolkeeper",
        "deploy/chart",
        "--namespace",
        "poolkeeper-system",
        "--skip-tests",
    ];
    for set in sets {
        args.extend(["--set", set]);
    }
    helm_ok(&args)
}

fn kinds(rendered: &str) -> Vec<String> {
    let mut kinds: Vec<String> = rendered
        .lines()
        .filter_map(|l| l.strip_prefix("kind: "))
        .map(str::to_owned)
        .collect();
    kinds.sort();
    kinds
}

#[test]
fn the_chart_lints_with_the_defaults_and_every_option() {
    helm_ok(&["lint", "--strict", "deploy/chart"]);
    let mut args = vec!["lint", "--strict", "deploy/chart"];
    for set in EVERY_OPTION {
        args.extend(["--set", set]);
    }
    helm_ok(&args);
}

#[test]
fn the_defaults_render_deploy_s_installation_and_no_certificate() {
    let rendered = template(&[]);
    let expected = [
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "Deployment",
        "MutatingWebhookConfiguration",
        "PodDisruptionBudget",
        "Role",
        "Role",
        "RoleBinding",
        "RoleBinding",
        "Service",
        "Service",
        "ServiceAccount",
        "ValidatingWebhookConfiguration",
    ];
    assert_eq!(kinds(&rendered), expected);
    assert!(rendered.contains("image: poolkeeper:0.1.0"));
    assert!(rendered.contains("imagePullPolicy: IfNotPresent"));
    assert!(rendered.contains("replicas: 2"));
    assert!(rendered.contains("failurePolicy: Fail"));
    assert!(
        rendered.contains("topologyKey: topology.kubernetes.io/zone"),
        "spread across zones"
    );
    // The monitoring pack and the NetworkPolicy are off by default.
    for absent in ["PrometheusRule", "grafana_dashboard", "NetworkPolicy"] {
        assert!(!rendered.contains(absent), "{absent} is rendered");
    }
    for absent in ["caBundle", "kind: Secret", "PRIVATE KEY", "cert-manager.io"] {
        assert!(
            !rendered.contains(absent),
            "{absent:?} is rendered: the leader issues"
        );
    }
    assert!(
        rendered.contains("    source: self\n"),
        "webhook.certificate.source"
    );
    assert_eq!(
        rendered
            .matches(r#"expression: "!(request.namespace in ['kube-node-lease', 'kube-public', 'kube-system', 'poolkeeper-system'])""#)
            .count(),
        4,
        "every entry leaves out the excluded namespaces"
    );
    // The leader's fields: a re-apply of this render must never reset them.
    for field in ["namespaceSelector", "objectSelector"] {
        assert!(!rendered.contains(field), "{field} is rendered");
    }
}

#[test]
fn every_value_reaches_the_rendered_objects() {
    let rendered = template(&EVERY_OPTION);
    for expected in [
        "replicas: 3",
        "image: registry.example.com/poolkeeper:9.9.9",
        "memory: 512Mi",
        "defaultMode: warn",
        "defaultConstraints: narrow",
        // The configuration's exclusions and the selectors', from one value.
        "  - batch\n",
        "!(request.namespace in ['batch', 'kube-system', 'poolkeeper-system'])",
        "nodePool: edge",
        "failurePolicy: Ignore",
        "timeoutSeconds: 10",
        "kind: Certificate",
        "kind: Issuer",
        "cert-manager.io/inject-ca-from: poolkeeper-system/poolkeeper-webhook",
        "secretName: my-tls",
        "    source: secret\n",
        "resourceNames: [my-tls]",
        "kind: ServiceMonitor",
        "level: debug",
        "interval: 5m",
        "priorityClassName: system-cluster-critical",
        "maxSkew: 2",
        "whenUnsatisfiable: DoNotSchedule",
        "kind: NetworkPolicy",
        "kind: PrometheusRule",
        "grafana_dashboard: \"1\"",
    ] {
        assert!(rendered.contains(expected), "{expected:?} is not rendered");
    }
    for absent in [
        "kind: PodDisruptionBudget",
        "kind: Secret",
        "caBundle:",
        "topology.kubernetes.io/zone",
    ] {
        assert!(!rendered.contains(absent), "{absent:?} is rendered");
    }
}

/// The excluded namespaces are computed from the rendered configuration: an exclusion set
/// through `config` reaches the match conditions as one set through
/// `placement.excludedNamespaces` does.
#[test]
fn the_match_conditions_leave_out_the_configurations_excluded_namespaces() {
    let rendered = template(&["config.placement.excludedNamespaces={kube-system,jobs}"]);
    assert_eq!(
        rendered
            .matches("!(request.namespace in ['jobs', 'kube-system', 'poolkeeper-system'])")
            .count(),
        4,
        "every entry"
    );
}

/// The `poolkeeper.yaml` of the rendered ConfigMap, dedented.
fn rendered_config(rendered: &str) -> String {
    let start = rendered
        .find("  poolkeeper.yaml: |\n")
        .expect("the config ConfigMap")
        + "  poolkeeper.yaml: |\n".len();
    rendered[start..]
        .lines()
        .take_while(|l| l.starts_with("    ") || l.is_empty())
        .map(|l| format!("{}\n", l.get(4..).unwrap_or_default()))
        .collect()
}

#[test]
fn the_rendered_configuration_is_accepted_by_poolkeeper() {
    let binary = std::env::var("POOLKEEPER_BINARY")
        .expect("POOLKEEPER_BINARY: the poolkeeper binary `cargo xtask cluster test` builds");
    let dir = std::env::temp_dir().join(format!("chart-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, sets) in [("defaults", &[][..]), ("options", &EVERY_OPTION[..])] {
        let config = rendered_config(&template(sets));
        assert!(config.contains("leaseName: poolkeeper"), "{config}");
        assert!(config.contains("configurationName: poolkeeper"), "{config}");
        let path = dir.join(format!("{name}.yaml"));
        std::fs::write(&path, &config).unwrap();
        let out = run(Command::new(&binary).arg("check-config").arg(&path));
        assert!(
            out.status.success(),
            "check-config refused the chart's {name} configuration: {}\n{config}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_charts_crds_are_deploys() {
    let crds = |dir: &str| -> Vec<(String, String)> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(root().join(dir))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect();
        files.sort();
        files
            .iter()
            .map(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                (name, std::fs::read_to_string(p).unwrap())
            })
            .collect()
    };
    assert!(
        crds("deploy/chart/crds") == crds("deploy/crds"),
        "deploy/chart/crds/ differs from deploy/crds/: copy them (cp deploy/crds/*.yaml deploy/chart/crds/)"
    );
}

/// The `rules:` lists of a webhook configuration file, comments dropped.
fn rules_blocks(text: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed == "rules:" {
            current = Some(String::new());
        } else if let Some(block) = current.as_mut() {
            if trimmed.starts_with('#') {
                continue;
            }
            if trimmed.starts_with("- ") || line.starts_with("        ") {
                block.push_str(trimmed);
                block.push('\n');
            } else {
                blocks.push(current.take().unwrap());
            }
        }
    }
    blocks.extend(current);
    blocks
}

#[test]
fn the_charts_webhook_rules_are_deploys() {
    let rendered = template(&[]);
    for file in [
        "deploy/webhooks/mutating.yaml",
        "deploy/webhooks/validating.yaml",
    ] {
        let deploy = std::fs::read_to_string(root().join(file)).unwrap();
        let blocks = rules_blocks(&deploy);
        assert_eq!(blocks.len(), 2, "{file}: two entries");
        for block in blocks {
            assert!(
                rules_blocks(&rendered).contains(&block),
                "deploy/chart/templates/webhooks.yaml lacks these rules of {file}:\n{block}"
            );
        }
    }
}

/// values.schema.json refuses a misspelt key and a value out of its set, naming them.
#[test]
fn the_values_schema_refuses_unknown_keys_and_bad_values() {
    for (set, says) in [
        ("replicaCont=3", "replicaCont"),
        ("webhook.failurePolicy=fail", "/webhook/failurePolicy"),
        ("networkPolicy.enable=true", "enable"),
    ] {
        let out = helm(&["template", "poolkeeper", "deploy/chart", "--set", set]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{set} was accepted");
        assert!(stderr.contains(says), "{set}: {stderr}");
    }
}

/// The NetworkPolicy admits the webhook port from every source unless told otherwise, and the
/// admin port from the monitoring namespaces.
#[test]
fn the_network_policy_opens_the_webhook_and_the_admin_port() {
    let policy = |sets: &[&str]| {
        let mut all = vec!["networkPolicy.enabled=true"];
        all.extend_from_slice(sets);
        let rendered = template(&all);
        let start = rendered
            .find("kind: NetworkPolicy")
            .expect("a NetworkPolicy");
        rendered[start..].split("\n---").next().unwrap().to_owned()
    };
    let open = policy(&[]);
    let webhook = open
        .split_once("port: webhook}")
        .expect("the webhook port")
        .1;
    assert!(
        webhook.trim_start().starts_with("- ports:"),
        "the webhook port has no `from`: {open}"
    );
    assert!(open.contains("port: admin}"));
    assert!(open.contains("kubernetes.io/metadata.name: monitoring"));
    let narrowed = policy(&["networkPolicy.webhookFrom[0].ipBlock.cidr=10.0.0.0/24"]);
    assert!(narrowed.contains("cidr: 10.0.0.0/24"), "{narrowed}");
}

/// `helm test`: readiness, then a server-side dry-run Pod in the bound namespace (the first
/// binding of the policy, or tests.boundNamespace); with no namespace known, readiness alone.
#[test]
fn the_helm_test_waits_for_readiness_then_dry_runs_a_pod_in_a_bound_namespace() {
    let hooks = |sets: &[&str]| {
        let mut args = vec![
            "template",
            "poolkeeper",
            "deploy/chart",
            "--namespace",
            "poolkeeper-system",
            "--show-only",
            "templates/tests/admission.yaml",
        ];
        for set in sets {
            args.extend(["--set", set]);
        }
        helm_ok(&args)
    };
    let bound = hooks(&[
        "placement.policy.bindings[0].namespace=shop",
        "placement.policy.bindings[0].nodePool=edge",
    ]);
    assert_eq!(bound.matches("helm.sh/hook: test").count(), 6, "{bound}");
    for expected in [
        "initContainers:\n    - name: ready",
        "- --for=condition=Available\n      - deployment/poolkeeper",
        "- name: admission",
        "- --dry-run=server",
        "- --namespace\n      - shop",
        "namespace: shop",
        "verbs: [create]",
    ] {
        assert!(
            bound.contains(expected),
            "{expected:?} is not rendered:\n{bound}"
        );
    }
    let named = hooks(&["tests.boundNamespace=lab"]);
    assert!(named.contains("- --namespace\n      - lab"), "{named}");
    let unbound = hooks(&[]);
    assert!(unbound.contains("- name: ready"));
    assert!(!unbound.contains("--dry-run"), "{unbound}");
}

/// Template functions whose result depends on the cluster, the clock or chance: a chart using
/// one renders differently each time, and a GitOps tool (which renders without cluster access)
/// would replace what it made at every sync.
const NONDETERMINISTIC_FUNCTIONS: [&str; 12] = [
    "lookup",
    "genCA",
    "genCAWithKey",
    "genSelfSignedCert",
    "genSignedCert",
    "genPrivateKey",
    "randAlpha",
    "randAlphaNum",
    "randNumeric",
    "randAscii",
    "randBytes",
    "uuidv4",
];

/// `helm template` twice gives the same bytes, with no key material in them, with the
/// defaults and with every option; and no template calls a function that could make it
/// otherwise.
#[test]
fn the_chart_renders_deterministically_without_key_material() {
    for sets in [&[][..], &EVERY_OPTION[..]] {
        let first = template(sets);
        let second = template(sets);
        assert!(first == second, "two renders of {sets:?} differ");
        for material in ["PRIVATE KEY", "CERTIFICATE", "LS0t", "caBundle", "tls.key"] {
            assert!(
                !first.contains(material),
                "{material:?} is rendered with {sets:?}"
            );
        }
    }
    let templates = root().join("deploy/chart/templates");
    for entry in std::fs::read_dir(&templates).unwrap().flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        let words: Vec<&str> = text.split(|c: char| !c.is_ascii_alphanumeric()).collect();
        for function in NONDETERMINISTIC_FUNCTIONS {
            assert!(
                !words.contains(&function),
                "{} calls {function}",
                entry.path().display()
            );
        }
    }
}
