//! `poolkeeper explain`: where may this Pod land, and why not there? The
//! Pod comes from a manifest or the cluster, the Nodes, NodePools and
//! placement ConfigMap from an objects file (as `admit`) or the cluster;
//! the answer is `poolkeeper_placement::explain`, printed for people or as
//! JSON.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::ValueEnum;
use poolkeeper_audit::{AuditError, cluster_index, cluster_pod};
use poolkeeper_config::Config;
use poolkeeper_index::Index;
use poolkeeper_placement::{
    BindingSource, Explanation, Manifest, NodeSet, PlacementError, PlacementPolicy, PolicySource,
    Verdict, count_nodes, explain_manifest,
};

use crate::input::{EXIT_INVALID_INPUT, InputError, load_config, offline_index, read};

/// Terminal width the text is wrapped to.
const WIDTH: usize = 100;
/// Where values start on a `Label:` line.
const VALUE_COLUMN: usize = 24;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ExplainOutput {
    /// `kubectl describe` style.
    Text,
    Json,
}

/// Which Pod to explain.
#[derive(Clone, Debug)]
pub enum PodInput {
    /// A Pod manifest; `namespace` overrides the manifest's.
    Manifest {
        file: PathBuf,
        namespace: Option<String>,
    },
    /// A Pod of the cluster.
    Cluster { namespace: String, name: String },
}

/// Where the Nodes, NodePools and placement ConfigMap come from.
#[derive(Clone, Debug)]
pub enum StateInput {
    /// An objects file, as `admit --objects`.
    Objects(PathBuf),
    /// The cluster (`--kubeconfig FILE`, or kubectl's usual lookup).
    Cluster(Option<PathBuf>),
}

/// Why `explain` could not answer.
#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    #[error(transparent)]
    Input(#[from] InputError),
    #[error("{}: {source}", file.display())]
    Pod {
        file: PathBuf,
        #[source]
        source: PlacementError,
    },
    #[error(
        "a Pod of the cluster (--name) needs the cluster's state: use --kubeconfig, not --objects"
    )]
    PodNeedsCluster,
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error(transparent)]
    Client(#[from] poolkeeper_kube::ClientError),
    #[error(transparent)]
    Cluster(#[from] AuditError),
    #[error("the placement policy is invalid: {0}")]
    Policy(#[source] PlacementError),
    #[error("cannot print the explanation: {0}")]
    Print(#[source] serde_json::Error),
}

/// The inputs the command line names (clap has checked that a Pod and a
/// state source are given, and that `--name` comes with `--namespace`
/// and `--kubeconfig`).
pub fn inputs(
    pod: Option<PathBuf>,
    namespace: Option<String>,
    name: Option<String>,
    objects: Option<PathBuf>,
    kubeconfig: Option<PathBuf>,
) -> (PodInput, StateInput) {
    let pod = match (pod, name) {
        (Some(file), _) => PodInput::Manifest { file, namespace },
        (None, name) => PodInput::Cluster {
            namespace: namespace.unwrap_or_default(),
            name: name.unwrap_or_default(),
        },
    };
    let state = match objects {
        Some(objects) => StateInput::Objects(objects),
        None => StateInput::Cluster(kubeconfig),
    };
    (pod, state)
}

/// Prints the explanation: exit 0 whatever the verdicts, 2 when the input
/// cannot be read.
pub fn execute(
    pod: PodInput,
    state: StateInput,
    config: Option<&Path>,
    output: ExplainOutput,
) -> ExitCode {
    let result = explanation(pod, state, config).and_then(|explained| match output {
        ExplainOutput::Text => Ok(text(&explained)),
        ExplainOutput::Json => serde_json::to_string_pretty(&explained)
            .map(|json| json + "\n")
            .map_err(ExplainError::Print),
    });
    match result {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!(
                "poolkeeper explain: {}",
                poolkeeper_supervisor::error_chain(&error)
            );
            ExitCode::from(EXIT_INVALID_INPUT)
        }
    }
}

/// The explanation of the Pod over the state, as `explain` computes it.
pub fn explanation(
    pod: PodInput,
    state: StateInput,
    config: Option<&Path>,
) -> Result<Explanation, ExplainError> {
    let config = load_config(config)?;
    let source = PolicySource::from(&config.placement);
    let (pod, namespace, index) = match state {
        StateInput::Objects(objects) => {
            let (pod, namespace) = match pod {
                PodInput::Manifest { file, namespace } => manifest(&file, namespace)?,
                PodInput::Cluster { .. } => return Err(ExplainError::PodNeedsCluster),
            };
            (pod, namespace, offline_index(&objects, &config, &source)?)
        }
        StateInput::Cluster(kubeconfig) => live(pod, kubeconfig.as_deref(), &config, &source)?,
    };
    let view = index.placement();
    let policy = PlacementPolicy::load(&view, &source).map_err(ExplainError::Policy)?;
    Ok(explain_manifest(&pod, &namespace, &view, &policy))
}

/// The Pod (or workload) of a manifest and its namespace: `--namespace`,
/// else the manifest's, else `default`.
fn manifest(file: &Path, namespace: Option<String>) -> Result<(Manifest, String), ExplainError> {
    let manifest = Manifest::from_yaml(&read(file)?).map_err(|source| ExplainError::Pod {
        file: file.to_owned(),
        source,
    })?;
    let namespace = namespace
        .or_else(|| Some(manifest.namespace().to_owned()).filter(|ns| !ns.is_empty()))
        .unwrap_or_else(|| "default".to_owned());
    Ok((manifest, namespace))
}

fn live(
    pod: PodInput,
    kubeconfig: Option<&Path>,
    config: &Config,
    source: &PolicySource,
) -> Result<(Manifest, String, Index), ExplainError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ExplainError::Runtime)?;
    runtime.block_on(async {
        let client = poolkeeper_kube::client(kubeconfig).await?;
        let (pod, namespace) = match pod {
            PodInput::Manifest { file, namespace } => manifest(&file, namespace)?,
            PodInput::Cluster { namespace, name } => (
                Manifest::Pod(cluster_pod(&client, &namespace, &name).await?),
                namespace,
            ),
        };
        let index = cluster_index(&client, &config.placement.pool_label, source).await?;
        Ok((pod, namespace, index))
    })
}

/// The explanation as `kubectl describe` would print it, wrapped to the
/// terminal.
pub fn text(explained: &Explanation) -> String {
    let mut out = String::new();
    field(&mut out, "Pod", &explained.pod);
    binding(&mut out, explained);
    field(
        &mut out,
        "Nodes",
        &format!("{} in the cluster", explained.nodes),
    );
    out.push_str("Node sets:\n");
    if explained.node_sets.is_empty() {
        out.push_str("  <no nodeName, nodeSelector or required node affinity>\n");
    }
    for set in &explained.node_sets {
        node_set(&mut out, set);
    }
    node_set(&mut out, &explained.intersection);
    if let Some(outside) = &explained.outside_pool {
        node_set(&mut out, outside);
    }
    out.push_str("Missing edge tolerations:\n");
    if explained.missing_tolerations.is_empty() {
        out.push_str("  <none>\n");
    }
    for toleration in &explained.missing_tolerations {
        wrapped(&mut out, 2, toleration);
    }
    verdict(&mut out, "Mutating webhook", &explained.mutate);
    verdict(&mut out, "Validating webhook", &explained.validate);
    out
}

fn binding(out: &mut String, explained: &Explanation) {
    let Some(binding) = &explained.binding else {
        field(
            out,
            "Node pool",
            "<none>: the pod is not bound to a node pool",
        );
        return;
    };
    let pool = if binding.pool_exists {
        let mut pool = format!(
            "{} ({}, {})",
            binding.pool,
            binding.pool_type.unwrap_or("?"),
            count_nodes(binding.pool_nodes)
        );
        if !binding.missing_pools.is_empty() {
            let _ = write!(pool, "; missing: {}", binding.missing_pools.join(", "));
        }
        pool
    } else {
        format!(
            "{} (does not exist: the pod is not restricted)",
            binding.pool
        )
    };
    field(out, "Node pool", &pool);
    let mut by = match binding.source {
        BindingSource::PodLabel => format!("the pod's label {}", binding.by),
        BindingSource::Namespace => format!("the binding of namespace {}", binding.by),
        BindingSource::NamespaceLabel => format!("the labels of namespace {}", binding.by),
    };
    if let Some(pools) = &binding.narrows {
        let _ = write!(
            by,
            ", one pool of the binding of namespace {} ({pools})",
            explained.namespace
        );
    }
    field(out, "Bound by", &by);
    if let Some(label) = &binding.refused_label {
        field(
            out,
            "Refused pool label",
            &format!("{label}: outside the namespace's binding"),
        );
    }
    field(out, "Mode", binding.mode.as_str());
    for exception in &binding.exceptions {
        field(out, "Exception", exception);
    }
    for exception in &binding.ignored_exceptions {
        field(
            out,
            "Ignored exception",
            &format!("{exception}: the namespace's binding does not allow exceptions"),
        );
    }
}

fn node_set(out: &mut String, set: &NodeSet) {
    wrapped(out, 2, &format!("{}:", capitalized(&set.constraint)));
    let mut line = count_nodes(set.count);
    if !set.names.is_empty() {
        let _ = write!(line, ": {}", set.names.join(", "));
        if set.count > set.names.len() {
            let _ = write!(line, " and {} more", set.count - set.names.len());
        }
    }
    wrapped(out, 4, &line);
    for problem in &set.problems {
        wrapped(
            out,
            4,
            &format!("matches nothing: {}", within_term(problem)),
        );
    }
}

fn verdict(out: &mut String, title: &str, verdict: &Verdict) {
    let answer = match (verdict.allowed, verdict.patch.is_some()) {
        (false, _) => "denied",
        (true, true) => "allowed, patched",
        (true, false) => "allowed",
    };
    field(
        out,
        title,
        &format!(
            "{answer} (reason {}, mode {})",
            verdict.reason, verdict.mode
        ),
    );
    if let Some(message) = &verdict.message {
        labelled(out, "Message", message);
    }
    let json = serde_json::to_value(verdict).unwrap_or_default();
    if verdict.patch.is_some() {
        labelled(out, "Patch", &describe_patch(&json["patch"]));
    }
    for warning in &verdict.warnings {
        labelled(out, "Warning", warning);
    }
    // In warn mode the warning already carries the denial.
    if let Some(denial) = &verdict.withheld_denial
        && !verdict.warnings.iter().any(|w| w.contains(denial.as_str()))
    {
        labelled(out, "Enforce would deny", denial);
    }
    if verdict.withheld_patch.is_some() {
        labelled(
            out,
            "Enforce would patch",
            &describe_patch(&json["withheldPatch"]),
        );
    }
}

/// `add /spec/affinity, add /spec/tolerations/-`, from the patch's JSON.
fn describe_patch(ops: &serde_json::Value) -> String {
    ops.as_array()
        .into_iter()
        .flatten()
        .map(|op| {
            format!(
                "{} {}",
                op["op"].as_str().unwrap_or_default(),
                op["path"].as_str().unwrap_or_default()
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A term's problem without the path to the term, which its heading names:
/// `matchExpressions[0].values[0]: Invalid value: ...`.
fn within_term(problem: &str) -> &str {
    problem
        .split_once("nodeSelectorTerms[")
        .and_then(|(_, rest)| rest.split_once("]."))
        .map_or(problem, |(_, within)| within)
}

fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) if first.is_ascii_lowercase() && !text.starts_with("node") => {
            first.to_ascii_uppercase().to_string() + chars.as_str()
        }
        _ => text.to_owned(),
    }
}

/// `Label:` padded to the value column, then the value wrapped under it.
fn field(out: &mut String, label: &str, value: &str) {
    let head = format!("{label}:");
    let lines = wrap(value, WIDTH - VALUE_COLUMN);
    for (i, line) in lines.iter().enumerate() {
        let lead = if i == 0 { head.as_str() } else { "" };
        let _ = writeln!(out, "{lead:<VALUE_COLUMN$}{line}");
    }
}

/// An indented `Label:` line under a verdict, the value wrapped under it.
fn labelled(out: &mut String, label: &str, value: &str) {
    field(out, &format!("  {label}"), value);
}

fn wrapped(out: &mut String, indent: usize, text: &str) {
    for line in wrap(text, WIDTH - indent) {
        let _ = writeln!(out, "{:indent$}{line}", "");
    }
}

/// `text` in lines of at most `width` characters, broken at spaces (a
/// longer word gets a line of its own).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split(' ') {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    lines.push(line);
    lines
}
