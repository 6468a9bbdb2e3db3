//! Runs a local control plane until Ctrl-C, prepared for development: CRDs installed, sample
//! objects applied, webhooks registered against a local server, and optionally a command
//! (the controller) run against it. `cargo xtask dev` drives this.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser};
use k8s_openapi::api::core::v1::Taint;
use kube::api::DynamicObject;
use poolkeeper_testenv::{
    TestEnv, TestEnvError, WebhookCert, WebhookRegistration, parse_yaml_documents,
};
use serde_json::Value;
use tokio::process::{Child, Command};
use tokio::signal::unix::{SignalKind, signal};

/// Replaced by the kubeconfig path in the arguments of the command to run.
const KUBECONFIG_PLACEHOLDER: &str = "{kubeconfig}";
/// Where the design's default configuration expects webhook certificates.
const DEFAULT_WEBHOOK_PORT: u16 = 9443;
const DEFAULT_CERT_DIR: &str = "k8s-webhook-server/serving-certs";
/// The taint the apiserver's TaintNodesByCondition admission puts on every new Node.
const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";
/// How long the command gets to stop after the shutdown signal before it is killed.
const COMMAND_GRACE_PERIOD: Duration = Duration::from_secs(30);

#[derive(Parser)]
#[command(
    name = "poolkeeper-testenv",
    about = "Local Kubernetes control plane for development"
)]
enum Cli {
    /// Start a control plane and keep it running until Ctrl-C.
    Up(UpArgs),
}

#[derive(Args)]
struct UpArgs {
    /// Do not run kube-scheduler.
    #[arg(long)]
    no_scheduler: bool,
    /// Do not run kube-controller-manager (no Pods from Deployments, DaemonSets, Jobs ...).
    #[arg(long)]
    no_controller_manager: bool,
    /// CRD manifests to install (files or directories of YAML files).
    #[arg(long = "crds", value_name = "PATH")]
    crds: Vec<PathBuf>,
    /// Objects to apply after the CRDs (files or directories of YAML files), in dependency
    /// order (Namespaces first); their Nodes are made Ready with allocatable resources.
    #[arg(long = "objects", value_name = "PATH")]
    objects: Vec<PathBuf>,
    /// Mutating/ValidatingWebhookConfigurations to register, pointed at https://127.0.0.1:PORT.
    #[arg(long = "webhooks", value_name = "PATH")]
    webhooks: Vec<PathBuf>,
    /// poolkeeper configuration whose webhook.listen and webhook.certDir give the port and
    /// certificate directory of the local webhook server.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Port of the local webhook server (overrides --config).
    #[arg(long, value_name = "PORT")]
    webhook_port: Option<u16>,
    /// Directory to write tls.crt, tls.key and ca.crt into (overrides --config).
    #[arg(long, value_name = "DIR")]
    cert_dir: Option<PathBuf>,
    /// Also write the admin kubeconfig here.
    #[arg(long, value_name = "FILE")]
    kubeconfig_out: Option<PathBuf>,
    /// Command to run against the control plane; `{kubeconfig}` in its arguments is replaced
    /// by the kubeconfig path.
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
enum UpError {
    #[error(transparent)]
    TestEnv(#[from] TestEnvError),
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Config(String),
}

#[tokio::main]
async fn main() -> ExitCode {
    let Cli::Up(args) = Cli::parse();
    match up(args).await {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn up(args: UpArgs) -> Result<ExitCode, UpError> {
    // Listening before the start: a Ctrl-C during the start is handled once it is done, so
    // what was started is stopped and removed instead of left behind.
    let mut terminate =
        signal(SignalKind::terminate()).map_err(|e| io("listening for SIGTERM", e))?;
    let mut interrupt =
        signal(SignalKind::interrupt()).map_err(|e| io("listening for SIGINT", e))?;

    let env = start_control_plane(!args.no_scheduler, !args.no_controller_manager).await?;
    install_manifests(&env, &args).await?;
    let webhook = prepare_webhooks(&env, &args).await?;
    let kubeconfig = publish_kubeconfig(&env, args.kubeconfig_out.as_deref())?;
    println!();
    println!("  export KUBECONFIG={}", kubeconfig.display());
    println!("  webhook certificates: {}", webhook.cert_dir.display());
    println!("  control-plane logs:   {}", env.dir().display());
    println!();

    let mut command = spawn_command(&args.command, &kubeconfig)?;
    println!("Ctrl-C stops everything.");
    loop {
        tokio::select! {
            _ = interrupt.recv() => break,
            _ = terminate.recv() => break,
            status = wait(&mut command) => {
                println!("the command exited ({status}); the control plane keeps running, Ctrl-C stops it");
                command = None;
            }
        }
    }

    println!("stopping ...");
    if let Some(child) = command.take() {
        stop_command(child, &mut interrupt).await;
    }
    drop(env);
    println!("control plane stopped");
    Ok(ExitCode::SUCCESS)
}

async fn start_control_plane(
    scheduler: bool,
    controller_manager: bool,
) -> Result<TestEnv, UpError> {
    let mut names = vec!["etcd", "kube-apiserver"];
    if controller_manager {
        names.push("kube-controller-manager");
    }
    if scheduler {
        names.push("kube-scheduler");
    }
    println!("starting {} ...", names.join(", "));
    let env = TestEnv::builder()
        .scheduler(scheduler)
        .controller_manager(controller_manager)
        .start()
        .await?;
    println!(
        "control plane ready in {:.1?} at {}",
        env.startup_duration(),
        env.server_url()
    );
    Ok(env)
}

/// The CRDs first: the objects may be custom resources.
async fn install_manifests(env: &TestEnv, args: &UpArgs) -> Result<(), UpError> {
    if !args.crds.is_empty() {
        env.install_crd_files(&args.crds).await?;
        println!("installed the CRDs of {}", display_paths(&args.crds));
    }
    if !args.objects.is_empty() {
        let applied = env.apply_files(&args.objects).await?;
        println!(
            "applied {} objects from {}",
            applied.len(),
            display_paths(&args.objects)
        );
        make_nodes_ready(env, &applied).await?;
    }
    Ok(())
}

/// Nodes of a manifest have no status, and no kubelet here gives them one: without a Ready
/// condition and allocatable resources the scheduler would leave every Pod Pending.
async fn make_nodes_ready(env: &TestEnv, applied: &[DynamicObject]) -> Result<(), UpError> {
    let nodes: Vec<&DynamicObject> = applied
        .iter()
        .filter(|o| o.types.as_ref().is_some_and(|t| t.kind == "Node"))
        .collect();
    for node in &nodes {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        env.make_node_ready(name, intended_taints(node)).await?;
    }
    if !nodes.is_empty() {
        println!("made {} Nodes Ready", nodes.len());
    }
    Ok(())
}

/// The taints the manifest gave the Node, without the one admission adds to a new Node.
fn intended_taints(node: &DynamicObject) -> Vec<Taint> {
    let taints = node
        .data
        .pointer("/spec/taints")
        .cloned()
        .and_then(|t| serde_json::from_value::<Vec<Taint>>(t).ok())
        .unwrap_or_default();
    taints
        .into_iter()
        .filter(|t| t.key != NOT_READY_TAINT)
        .collect()
}

/// Writes a serving certificate where the controller will look for it and registers the
/// webhook configurations with its CA, pointed at the local port.
async fn prepare_webhooks(env: &TestEnv, args: &UpArgs) -> Result<WebhookServer, UpError> {
    let webhook = WebhookServer::resolve(args)?;
    let cert = WebhookCert::generate()?;
    cert.write_to_dir(&webhook.cert_dir)?;
    if !args.webhooks.is_empty() {
        let registration = WebhookRegistration::new(webhook.port, cert.ca_pem.clone())
            .with_files(&args.webhooks)?;
        env.register_webhooks(registration).await?;
        println!(
            "registered the webhooks of {} at https://127.0.0.1:{}",
            display_paths(&args.webhooks),
            webhook.port
        );
    }
    Ok(webhook)
}

/// The kubeconfig to hand out: a copy at `out` (which outlives the control plane's temporary
/// directory, so a shell can keep exporting it), else the control plane's own.
fn publish_kubeconfig(env: &TestEnv, out: Option<&Path>) -> Result<PathBuf, UpError> {
    let Some(path) = out else {
        return Ok(env.kubeconfig_path().to_owned());
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| io(format!("creating {}", parent.display()), e))?;
    }
    std::fs::copy(env.kubeconfig_path(), path)
        .map_err(|e| io(format!("writing {}", path.display()), e))?;
    Ok(path.to_owned())
}

/// Starts the command after `--`, if any, with `{kubeconfig}` in its arguments replaced.
fn spawn_command(command: &[String], kubeconfig: &Path) -> Result<Option<Child>, UpError> {
    let Some((program, rest)) = command.split_first() else {
        return Ok(None);
    };
    let rest: Vec<String> = rest
        .iter()
        .map(|arg| arg.replace(KUBECONFIG_PLACEHOLDER, &kubeconfig.to_string_lossy()))
        .collect();
    println!("running {program} {}", rest.join(" "));
    // A process group of its own: a terminal's Ctrl-C reaches only this process, which then
    // asks the command once to stop (a second signal would make it skip its graceful stop).
    let child = Command::new(program)
        .args(&rest)
        .env("KUBECONFIG", kubeconfig)
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| io(format!("starting {program}"), e))?;
    Ok(Some(child))
}

/// Waits for the command to exit; never resolves when there is none.
async fn wait(command: &mut Option<Child>) -> String {
    match command {
        Some(child) => match child.wait().await {
            Ok(status) => status.to_string(),
            Err(error) => error.to_string(),
        },
        None => std::future::pending().await,
    }
}

/// SIGTERM, then SIGKILL after the grace period or on a second Ctrl-C.
async fn stop_command(mut child: Child, interrupt: &mut tokio::signal::unix::Signal) {
    if let Some(pid) = child.id() {
        // std offers no SIGTERM; the kill utility does, and a failure just leads to SIGKILL below.
        let _ = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .await;
    }
    tokio::select! {
        _ = child.wait() => {}
        _ = tokio::time::sleep(COMMAND_GRACE_PERIOD) => {
            println!("the command did not stop within {COMMAND_GRACE_PERIOD:?}, killing it");
        }
        _ = interrupt.recv() => {}
    }
    let _ = child.kill().await;
}

struct WebhookServer {
    port: u16,
    cert_dir: PathBuf,
}

impl WebhookServer {
    /// Flags first, then the poolkeeper configuration, then the design's defaults.
    fn resolve(args: &UpArgs) -> Result<Self, UpError> {
        let config = match &args.config {
            Some(path) => read_config(path)?,
            None => Value::Null,
        };
        let from_config_port = config
            .pointer("/webhook/listen")
            .and_then(Value::as_str)
            .map(|listen| {
                listen
                    .rsplit(':')
                    .next()
                    .and_then(|port| port.parse::<u16>().ok())
                    .ok_or_else(|| {
                        UpError::Config(format!("webhook.listen {listen:?} has no port"))
                    })
            })
            .transpose()?;
        let from_config_dir = config
            .pointer("/webhook/certDir")
            .and_then(Value::as_str)
            .map(PathBuf::from);
        Ok(Self {
            port: args
                .webhook_port
                .or(from_config_port)
                .unwrap_or(DEFAULT_WEBHOOK_PORT),
            cert_dir: args
                .cert_dir
                .clone()
                .or(from_config_dir)
                .unwrap_or_else(|| std::env::temp_dir().join(DEFAULT_CERT_DIR)),
        })
    }
}

fn read_config(path: &Path) -> Result<Value, UpError> {
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| io(format!("reading {origin}"), e))?;
    Ok(parse_yaml_documents(&text, &origin)?
        .into_iter()
        .next()
        .unwrap_or(Value::Null))
}

fn display_paths(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn io(context: impl Into<String>, source: std::io::Error) -> UpError {
    UpError::Io {
        context: context.into(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up_args(extra: &[&str]) -> UpArgs {
        let Cli::Up(args) = Cli::parse_from(["poolkeeper-testenv", "up"].iter().chain(extra));
        args
    }

    #[test]
    fn webhook_server_comes_from_flags_then_config_then_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("dev.yaml");
        std::fs::write(
            &config,
            "webhook: {listen: \"0.0.0.0:10443\", certDir: /tmp/dev-certs}\n",
        )
        .unwrap();
        let config = config.to_str().unwrap();

        let defaults = WebhookServer::resolve(&up_args(&[])).unwrap();
        assert_eq!(defaults.port, DEFAULT_WEBHOOK_PORT);
        assert_eq!(
            defaults.cert_dir,
            std::env::temp_dir().join(DEFAULT_CERT_DIR)
        );

        let from_config = WebhookServer::resolve(&up_args(&["--config", config])).unwrap();
        assert_eq!(from_config.port, 10443);
        assert_eq!(from_config.cert_dir, PathBuf::from("/tmp/dev-certs"));

        let from_flags = WebhookServer::resolve(&up_args(&[
            "--config",
            config,
            "--webhook-port",
            "8443",
            "--cert-dir",
            "/elsewhere",
        ]))
        .unwrap();
        assert_eq!(from_flags.port, 8443);
        assert_eq!(from_flags.cert_dir, PathBuf::from("/elsewhere"));
    }

    #[test]
    fn a_listen_address_without_port_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("dev.yaml");
        std::fs::write(&config, "webhook: {listen: \"0.0.0.0:https\"}\n").unwrap();
        let error = WebhookServer::resolve(&up_args(&["--config", config.to_str().unwrap()]));
        assert!(error.is_err());
    }

    #[test]
    fn the_command_follows_a_double_dash() {
        let args = up_args(&[
            "--crds",
            "deploy/crds",
            "--",
            "poolkeeper",
            "run",
            "--kubeconfig",
            "{kubeconfig}",
        ]);
        assert_eq!(args.crds, [PathBuf::from("deploy/crds")]);
        assert_eq!(
            args.command,
            ["poolkeeper", "run", "--kubeconfig", KUBECONFIG_PLACEHOLDER]
        );
    }
}
