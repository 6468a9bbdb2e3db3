use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use poolkeeper_bus::WebhookKind;
use poolkeeper_config::Config;

use crate::input::EXIT_INVALID_INPUT;

#[derive(Debug, Parser)]
#[command(
    name = "poolkeeper",
    version,
    about = "NodePool placement webhooks and MachineClass finalizer protection"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the controller.
    Run {
        /// The YAML configuration file.
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// Kubeconfig to use instead of the in-cluster or $KUBECONFIG one.
        #[arg(long, value_name = "FILE")]
        kubeconfig: Option<PathBuf>,
    },
    /// Validate a configuration file: exit 0, or 2 listing every error.
    CheckConfig {
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
    /// Print the default configuration, every field documented.
    DefaultConfig,
    /// Evaluate an AdmissionReview offline and print the response.
    Admit {
        /// Multi-document YAML with the Nodes, NodePools and placement ConfigMap.
        #[arg(long, value_name = "FILE.yaml")]
        objects: PathBuf,
        /// The AdmissionReview request (JSON).
        #[arg(long, value_name = "REVIEW.json")]
        review: PathBuf,
        #[arg(long, value_enum)]
        webhook: WebhookArg,
        /// Configuration (pool label, placement ConfigMap); defaults otherwise.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Audit the Pods already running: every Pod of a bound namespace and
    /// every Pod with the pool label, against the cluster's Nodes and
    /// placement policy. Exit 0 when clean, 1 with violations, 2 on error.
    Audit {
        /// Kubeconfig to use instead of the in-cluster or $KUBECONFIG one.
        #[arg(long, value_name = "FILE")]
        kubeconfig: Option<PathBuf>,
        /// Configuration (pool label, placement ConfigMap, audit.pageSize); defaults otherwise.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
        output: crate::audit::AuditOutput,
    },
    /// Explain where a Pod may land and why: its pool and binding, the node
    /// set of each constraint, their intersection, the nodes outside the
    /// pool, the missing edge tolerations and both webhooks' verdicts.
    #[command(group(clap::ArgGroup::new("pod-input").required(true).args(["pod", "name"])))]
    #[command(group(clap::ArgGroup::new("state").required(true).args(["objects", "kubeconfig"])))]
    Explain {
        /// A Pod manifest (YAML or JSON).
        #[arg(long, value_name = "FILE")]
        pod: Option<PathBuf>,
        /// The Pod's namespace: with --name, the Pod of the cluster; with
        /// --pod, overrides the manifest's (default: "default").
        #[arg(long, short = 'n', value_name = "NS")]
        namespace: Option<String>,
        /// A Pod of the cluster (needs --namespace and --kubeconfig).
        #[arg(long, value_name = "NAME", requires_all = ["namespace", "kubeconfig"])]
        name: Option<String>,
        /// Multi-document YAML with the Nodes, NodePools and placement ConfigMap (as `admit`).
        #[arg(long, value_name = "FILE.yaml")]
        objects: Option<PathBuf>,
        /// Read the Nodes, NodePools and placement ConfigMap (and --name) from this cluster.
        #[arg(long, value_name = "FILE")]
        kubeconfig: Option<PathBuf>,
        /// Configuration (pool label, placement ConfigMap, default mode); defaults otherwise.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        #[arg(short = 'o', long = "output", value_enum, default_value = "text")]
        output: crate::explain::ExplainOutput,
    },
    /// Print the version.
    Version,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum WebhookArg {
    Mutate,
    Validate,
}

impl From<WebhookArg> for WebhookKind {
    fn from(arg: WebhookArg) -> Self {
        match arg {
            WebhookArg::Mutate => WebhookKind::Mutate,
            WebhookArg::Validate => WebhookKind::Validate,
        }
    }
}

pub fn execute(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Run { config, kubeconfig } => {
            let config = match Config::load(&config) {
                Ok(config) => config,
                Err(errors) => return invalid_config(&config, &errors),
            };
            crate::logging::init(&config.logging);
            let runtime = match tokio::runtime::Runtime::new() {
                Ok(runtime) => runtime,
                Err(error) => {
                    eprintln!("poolkeeper: cannot start the async runtime: {error}");
                    return ExitCode::FAILURE;
                }
            };
            let shutdown = poolkeeper_supervisor::shutdown_signal();
            match runtime.block_on(crate::controller::run(config, kubeconfig, shutdown)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    tracing::error!(%error, "poolkeeper stopped with an error");
                    eprintln!("poolkeeper: {error}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::CheckConfig { file } => match Config::load(&file) {
            Ok(_) => {
                println!("{}: ok", file.display());
                ExitCode::SUCCESS
            }
            Err(errors) => invalid_config(&file, &errors),
        },
        Command::DefaultConfig => {
            print!("{}", Config::default_yaml());
            ExitCode::SUCCESS
        }
        Command::Admit {
            objects,
            review,
            webhook,
            config,
        } => crate::admit::execute(&objects, &review, webhook.into(), config.as_deref()),
        Command::Audit {
            kubeconfig,
            config,
            output,
        } => crate::audit::execute(kubeconfig.as_deref(), config.as_deref(), output),
        Command::Explain {
            pod,
            namespace,
            name,
            objects,
            kubeconfig,
            config,
            output,
        } => {
            let (pod, state) = crate::explain::inputs(pod, namespace, name, objects, kubeconfig);
            crate::explain::execute(pod, state, config.as_deref(), output)
        }
        Command::Version => {
            println!("poolkeeper {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
    }
}

fn invalid_config(file: &std::path::Path, errors: &impl std::fmt::Display) -> ExitCode {
    eprintln!("{}: invalid configuration:\n{errors}", file.display());
    ExitCode::from(EXIT_INVALID_INPUT)
}
