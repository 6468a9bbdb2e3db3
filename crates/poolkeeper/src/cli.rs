use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use poolkeeper_bus::WebhookKind;
use poolkeeper_config::Config;

/// Exit code for invalid configuration or unreadable input.
pub const EXIT_INVALID_INPUT: u8 = 2;

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
