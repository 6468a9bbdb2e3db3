//! The data the admission policies read, compiled from the loaded
//! placement policy and the NodePools: pure, no I/O.
//!
//! CEL cannot parse `placement.yaml`, so the policy is flattened into a map
//! of strings that CEL splits, the policies' variable `data` (see
//! `policies.rs` for why not a param object). The keys:
//!
//! | key | value |
//! |---|---|
//! | `poolLabel` | `placement.poolLabel` |
//! | `defaultMode`, `defaultConstraints` | `placement.defaultMode`, `.defaultConstraints` |
//! | `excluded` | the excluded namespaces, `,a,b,` |
//! | `namespaceLabels.pool`, `.mode`, `.constraints` | `placement.namespaceLabels.*`; absent when label bindings are off |
//! | `pools.edge`, `pools.cloud` | the existing NodePools of each type, `,a,b,` |
//! | `edgeTolerations` | `key,operator,value,effect,seconds` per toleration, joined by `;` (empty fields for absent ones) |
//! | `binding.<namespace>` | a ConfigMap binding: `mode;constraints;a,b` (its pools sorted) |
//!
//! Lists are wrapped in commas so that CEL tests membership with
//! `contains(',' + name + ',')`; a namespace, a pool and a label key hold
//! neither `,` nor `;`, and a label value holds neither. A label-bound
//! namespace is not listed: the policies read its binding from
//! `namespaceObject.metadata.labels`, so a label takes effect without the
//! leader. Whether a binding holds an Edge pool and which of its pools
//! exist is computed in CEL from `pools.edge` and `pools.cloud`, one rule
//! for ConfigMap, label and Pod-label bindings alike. Only pools that exist
//! are listed: a binding naming no existing pool is left unplaced with a
//! warning, as the webhook does.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Toleration;
use poolkeeper_config::NamespaceLabels;
use poolkeeper_index::{NodePool, PoolType};
use poolkeeper_placement::{BindingOrigin, PlacementPolicy};

/// The key prefix of a ConfigMap binding.
pub const BINDING_PREFIX: &str = "binding.";
/// `exceptions.<namespace>`: its binding allows PlacementExceptions, which
/// only the webhooks read: CEL decides none of its Pods.
pub const EXCEPTIONS_PREFIX: &str = "exceptions.";
/// The key prefix of the pools a changed ConfigMap binding had before.
pub const PREVIOUS_PREFIX: &str = "previous.";

/// The `data` of the params ConfigMap for `policy` over `pools` (the
/// NodePools that exist). `pool_label` is `placement.poolLabel`,
/// `namespace_labels` `placement.namespaceLabels` when enabled.
pub fn compile<'a>(
    policy: &PlacementPolicy,
    excluded: impl IntoIterator<Item = &'a String>,
    pools: impl IntoIterator<Item = &'a NodePool>,
    pool_label: &str,
    namespace_labels: Option<&NamespaceLabels>,
) -> BTreeMap<String, String> {
    let mut data = BTreeMap::new();
    let mut put = |key: &str, value: String| {
        data.insert(key.to_owned(), value);
    };
    put("poolLabel", pool_label.to_owned());
    put("defaultMode", policy.default_mode().as_str().to_owned());
    put(
        "defaultConstraints",
        policy.default_constraints().as_str().to_owned(),
    );
    put(
        "excluded",
        wrapped(excluded.into_iter().map(String::as_str)),
    );
    if let Some(labels) = namespace_labels {
        put("namespaceLabels.pool", labels.pool.clone());
        put("namespaceLabels.mode", labels.mode.clone());
        put("namespaceLabels.constraints", labels.constraints.clone());
    }
    let (edge, cloud): (Vec<&NodePool>, Vec<&NodePool>) = pools
        .into_iter()
        .partition(|pool| pool.pool_type == PoolType::Edge);
    put("pools.edge", wrapped(edge.iter().map(|p| p.name.as_str())));
    put(
        "pools.cloud",
        wrapped(cloud.iter().map(|p| p.name.as_str())),
    );
    put(
        "edgeTolerations",
        policy
            .edge_tolerations()
            .iter()
            .map(encode_toleration)
            .collect::<Vec<_>>()
            .join(";"),
    );
    for namespace in policy.exception_namespaces() {
        put(
            &format!("{EXCEPTIONS_PREFIX}{namespace}"),
            "allowed".to_owned(),
        );
    }
    for (namespace, binding) in policy.bindings() {
        if binding.origin != BindingOrigin::ConfigMap {
            continue;
        }
        put(
            &format!("{BINDING_PREFIX}{namespace}"),
            format!(
                "{};{};{}",
                binding.mode.as_str(),
                binding.constraints.as_str(),
                binding.pools.joined()
            ),
        );
    }
    data
}

/// The pools each ConfigMap binding of `before` had where `now` binds the
/// namespace differently (or not at all), as `previous.<namespace>` = `a,b`.
///
/// The API server reloads each admission policy on its own, so for a moment
/// after a change a Pod placed by the new mutating policy may meet the old
/// validating policy, or the other way round. The validating policies
/// accept a pool requirement naming the previous pools too while these keys
/// are present; the leader drops them once every policy has had time to
/// reload.
pub fn previous_bindings(
    before: &BTreeMap<String, String>,
    now: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    before
        .iter()
        .filter_map(|(key, value)| {
            let namespace = key.strip_prefix(BINDING_PREFIX)?;
            if now.get(key) == Some(value) {
                return None;
            }
            let pools = value.rsplit(';').next()?;
            Some((format!("{PREVIOUS_PREFIX}{namespace}"), pools.to_owned()))
        })
        .collect()
}

/// `,a,b,`: membership is `contains(',' + name + ',')`; `,` for none.
fn wrapped<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    let mut text = String::from(",");
    for name in names {
        text.push_str(name);
        text.push(',');
    }
    text
}

fn encode_toleration(toleration: &Toleration) -> String {
    let field = |value: &Option<String>| value.clone().unwrap_or_default();
    format!(
        "{},{},{},{},{}",
        field(&toleration.key),
        field(&toleration.operator),
        field(&toleration.value),
        field(&toleration.effect),
        toleration
            .toleration_seconds
            .map_or_else(String::new, |seconds| seconds.to_string())
    )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use poolkeeper_config::{Mode, PlacementConfig};
    use poolkeeper_index::Namespace;
    use poolkeeper_placement::PolicySource;

    use super::*;

    fn pool(name: &str, pool_type: PoolType) -> NodePool {
        NodePool {
            name: name.to_owned(),
            pool_type,
            labels: BTreeMap::new(),
            taints: Vec::new(),
        }
    }

    fn policy(
        yaml: &str,
        placement: &PlacementConfig,
        labelled: &[(&str, &str)],
    ) -> PlacementPolicy {
        let source = PolicySource::from(placement);
        let data = BTreeMap::from([(source.key.clone(), yaml.to_owned())]);
        let namespaces: Vec<Namespace> = labelled
            .iter()
            .map(|(name, pools)| Namespace {
                name: (*name).to_owned(),
                uid: format!("uid-{name}"),
                labels: BTreeMap::from([(
                    placement.namespace_labels.pool.clone(),
                    (*pools).to_owned(),
                )]),
            })
            .collect();
        PlacementPolicy::from_config_map_data(Some(&data), &source)
            .unwrap()
            .with_namespace_labels(&namespaces, &placement.namespace_labels)
    }

    fn compiled(
        yaml: &str,
        placement: &PlacementConfig,
        labelled: &[(&str, &str)],
        pools: &[NodePool],
    ) -> BTreeMap<String, String> {
        let excluded: BTreeSet<String> = PolicySource::from(placement).excluded_namespaces;
        compile(
            &policy(yaml, placement, labelled),
            &excluded,
            pools,
            &placement.pool_label,
            placement
                .namespace_labels
                .enabled
                .then_some(&placement.namespace_labels),
        )
    }

    fn entries(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    /// The keys every compilation carries, with the default configuration.
    fn base<'a>(edge: &'a str, cloud: &'a str, tolerations: &'a str) -> Vec<(&'a str, &'a str)> {
        vec![
            ("poolLabel", "apps.openyurt.io/nodepool"),
            ("defaultMode", "enforce"),
            ("defaultConstraints", "judge"),
            (
                "excluded",
                ",kube-node-lease,kube-public,kube-system,poolkeeper-system,",
            ),
            ("namespaceLabels.pool", "apps.openyurt.io/nodepool"),
            ("namespaceLabels.mode", "poolkeeper.io/mode"),
            ("namespaceLabels.constraints", "poolkeeper.io/constraints"),
            ("pools.edge", edge),
            ("pools.cloud", cloud),
            ("edgeTolerations", tolerations),
        ]
    }

    /// (policy document, labelled namespaces, pools, expected keys).
    type Case<'a> = (
        String,
        Vec<(&'a str, &'a str)>,
        &'a [NodePool],
        Vec<(&'a str, &'a str)>,
    );

    #[test]
    fn each_config_map_binding_becomes_one_key_and_label_bindings_none() {
        let placement = PlacementConfig::default();
        let pools = [
            pool("hangzhou", PoolType::Edge),
            pool("shanghai", PoolType::Edge),
            pool("cloud", PoolType::Cloud),
        ];
        let tolerations = "edgeTolerations:\n  - {key: node-role.kubernetes.io/edge, operator: Exists, effect: NoSchedule}\n  - {key: dedicated, value: edge, effect: NoExecute, tolerationSeconds: 30}\n  - {operator: Exists}\n";
        let cases: Vec<Case<'_>> = vec![
            (String::new(), vec![], &[], base(",", ",", "")),
            (
                "bindings: [{namespace: shop, nodePool: hangzhou}]".to_owned(),
                vec![],
                &pools,
                [
                    base(",hangzhou,shanghai,", ",cloud,", ""),
                    vec![("binding.shop", "enforce;judge;hangzhou")],
                ]
                .concat(),
            ),
            (
                format!(
                    "bindings:\n  - {{namespace: east, nodePools: [shanghai, hangzhou, missing], mode: warn, constraints: narrow}}\n  - {{namespace: lab, nodePool: cloud, mode: dryrun}}\n{tolerations}"
                ),
                // A label binding is read by the policies from the Namespace.
                vec![("team", "cloud"), ("east", "cloud")],
                &pools,
                [
                    base(
                        ",hangzhou,shanghai,",
                        ",cloud,",
                        "node-role.kubernetes.io/edge,Exists,,NoSchedule,;dedicated,,edge,NoExecute,30;,Exists,,,",
                    ),
                    vec![
                        ("binding.east", "warn;narrow;hangzhou,missing,shanghai"),
                        ("binding.lab", "dryrun;judge;cloud"),
                    ],
                ]
                .concat(),
            ),
            (
                // PlacementExceptions are the webhooks' to read.
                "bindings: [{namespace: open, nodePool: cloud, exceptions: allowed}]".to_owned(),
                vec![],
                &pools,
                [
                    base(",hangzhou,shanghai,", ",cloud,", ""),
                    vec![
                        ("binding.open", "enforce;judge;cloud"),
                        ("exceptions.open", "allowed"),
                    ],
                ]
                .concat(),
            ),
        ];
        for (yaml, labelled, pools, expected) in cases {
            assert_eq!(
                compiled(&yaml, &placement, &labelled, pools),
                entries(&expected),
                "{yaml}"
            );
        }
    }

    #[test]
    fn the_defaults_and_labels_come_from_the_configuration() {
        let mut placement = PlacementConfig {
            pool_label: "example.com/pool".to_owned(),
            default_mode: Mode::Warn,
            default_constraints: poolkeeper_config::Constraints::Narrow,
            excluded_namespaces: vec!["batch".to_owned()],
            ..PlacementConfig::default()
        };
        placement.policy_config_map.namespace = "pk".to_owned();
        placement.namespace_labels.enabled = false;
        let data = compiled(
            "bindings: [{namespace: shop, nodePool: a}]",
            &placement,
            &[],
            &[],
        );
        assert_eq!(
            data,
            entries(&[
                ("poolLabel", "example.com/pool"),
                ("defaultMode", "warn"),
                ("defaultConstraints", "narrow"),
                ("excluded", ",batch,pk,"),
                ("pools.edge", ","),
                ("pools.cloud", ","),
                ("edgeTolerations", ""),
                ("binding.shop", "warn;narrow;a"),
            ])
        );
    }

    #[test]
    fn a_changed_or_removed_binding_keeps_its_previous_pools() {
        let before = entries(&[
            ("binding.shop", "enforce;judge;hangzhou"),
            ("binding.east", "warn;judge;a,b"),
            ("binding.lab", "dryrun;judge;cloud"),
            ("binding.same", "enforce;judge;cloud"),
            ("poolLabel", "apps.openyurt.io/nodepool"),
        ]);
        let now = entries(&[
            ("binding.shop", "enforce;judge;cloud"),
            // Only the mode changed: the pools are the same, kept all the same.
            ("binding.east", "enforce;judge;a,b"),
            ("binding.same", "enforce;judge;cloud"),
            ("binding.new", "enforce;judge;cloud"),
            ("poolLabel", "example.com/pool"),
        ]);
        assert_eq!(
            previous_bindings(&before, &now),
            entries(&[
                ("previous.east", "a,b"),
                ("previous.lab", "cloud"),
                ("previous.shop", "hangzhou"),
            ])
        );
        assert_eq!(previous_bindings(&now, &now), BTreeMap::new());
    }

    /// Every key is a valid ConfigMap key and no value breaks the
    /// separators CEL splits on.
    #[test]
    fn keys_are_config_map_keys() {
        let placement = PlacementConfig::default();
        let data = compiled(
            "bindings: [{namespace: shop-1, nodePools: [a.b, c-d]}]",
            &placement,
            &[],
            &[pool("a.b", PoolType::Edge)],
        );
        for key in data.keys() {
            assert!(
                key.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')),
                "{key}"
            );
        }
        assert_eq!(data["binding.shop-1"], "enforce;judge;a.b,c-d");
    }
}
