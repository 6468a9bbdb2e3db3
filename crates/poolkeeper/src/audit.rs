//! `poolkeeper audit`: one audit round against a cluster, printed. The
//! controller's leader runs the same round every `audit.interval`.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use clap::ValueEnum;
use poolkeeper_audit::{AuditError, AuditSettings, KubePods, Round, audit_round, cluster_index};
use poolkeeper_config::Config;
use poolkeeper_placement::PolicyCache;

use crate::input::{EXIT_INVALID_INPUT, InputError, load_config};

/// Exit code when the audit found violations.
pub const EXIT_VIOLATIONS: u8 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum AuditOutput {
    /// One line per violation, kubectl style, and a summary.
    Table,
    /// The `AuditCompleted` event, as `/debug/audit` serves it.
    Json,
}

/// Why `audit` could not finish.
#[derive(Debug, thiserror::Error)]
pub enum AuditCommandError {
    #[error(transparent)]
    Input(#[from] InputError),
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error(transparent)]
    Client(#[from] poolkeeper_kube::ClientError),
    #[error(transparent)]
    Audit(#[from] AuditError),
    #[error("cannot print the result: {0}")]
    Print(#[source] serde_json::Error),
}

/// Runs one round and prints it: exit 0 when clean, 1 with violations, 2
/// when the audit could not run.
pub fn execute(kubeconfig: Option<&Path>, config: Option<&Path>, output: AuditOutput) -> ExitCode {
    match run(kubeconfig, config) {
        Ok(round) => match render(&round, output) {
            Ok(text) => {
                print!("{text}");
                if round.violations() == 0 {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::from(EXIT_VIOLATIONS)
                }
            }
            Err(error) => fail(&error),
        },
        Err(error) => fail(&error),
    }
}

fn fail(error: &AuditCommandError) -> ExitCode {
    eprintln!(
        "poolkeeper audit: {}",
        poolkeeper_supervisor::error_chain(error)
    );
    ExitCode::from(EXIT_INVALID_INPUT)
}

/// The settings of a one-off round: every violation is detailed.
pub fn settings(config: &Config) -> AuditSettings {
    let mut settings = AuditSettings::from(config);
    settings.max_reported = usize::MAX;
    settings
}

fn run(kubeconfig: Option<&Path>, config: Option<&Path>) -> Result<Round, AuditCommandError> {
    let config = load_config(config)?;
    let settings = settings(&config);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(AuditCommandError::Runtime)?;
    runtime.block_on(async {
        let client = poolkeeper_kube::client(kubeconfig).await?;
        let policy = PolicyCache::from(&config.placement);
        let index = cluster_index(&client, &config.placement.pool_label, policy.source()).await?;
        let lister = KubePods::new(client);
        let round = audit_round(&lister, &index, &policy, &settings, &HashSet::new()).await?;
        Ok(round)
    })
}

/// The round as `output` asks.
pub fn render(round: &Round, output: AuditOutput) -> Result<String, AuditCommandError> {
    match output {
        AuditOutput::Json => {
            let mut text = serde_json::to_string_pretty(&round.to_event())
                .map_err(AuditCommandError::Print)?;
            text.push('\n');
            Ok(text)
        }
        AuditOutput::Table => Ok(table(round)),
    }
}

/// Columns padded to their widest cell; the message last, unpadded.
fn table(round: &Round) -> String {
    let mut rows: Vec<[String; 6]> = vec![[
        "NAMESPACE".into(),
        "POD".into(),
        "POOL".into(),
        "REASON".into(),
        "NODE".into(),
        "MESSAGE".into(),
    ]];
    for v in &round.findings {
        rows.push([
            v.namespace.clone(),
            v.pod.clone(),
            v.pool.clone(),
            v.reason.to_owned(),
            v.node.clone().unwrap_or_else(|| "<pending>".to_owned()),
            v.message.clone(),
        ]);
    }
    let mut widths = [0usize; 5];
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row.iter()) {
            *width = (*width).max(cell.len());
        }
    }
    let mut text = String::new();
    if !round.findings.is_empty() {
        for row in &rows {
            for (width, cell) in widths.iter().zip(row.iter()) {
                let _ = write!(text, "{cell:<width$}   ");
            }
            let _ = writeln!(text, "{}", row[5]);
        }
        text.push('\n');
    }
    let violations = round.violations();
    let _ = writeln!(
        text,
        "{} pods and {} workloads checked in {:.2}s (Pods on their pools' Nodes left out): {}",
        round.pods,
        round.workloads,
        round.duration.as_secs_f64(),
        match violations {
            0 => "no violations".to_owned(),
            1 => "1 violation".to_owned(),
            n => format!("{n} violations"),
        }
    );
    text
}
