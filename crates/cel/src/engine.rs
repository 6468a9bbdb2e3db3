//! Which placement engine this process runs: `placement.engine`, with
//! `auto` resolved once at start from the API server's discovery. One owner
//! ([`EngineResolver`]) decides it; everyone else reads the [`EngineState`]
//! it fills.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::future::BoxFuture;
use kube::Client;
use poolkeeper_config::{Engine, EngineChoice};
use poolkeeper_kube::Backoff;
use poolkeeper_supervisor::{BoxError, Component, Context, error_chain};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::watch;

/// The API group version whose resources say whether MutatingAdmissionPolicies are served.
const ADMISSION_GROUP_VERSION: &str = "admissionregistration.k8s.io/v1";
const MUTATING_ADMISSION_POLICIES: &str = "mutatingadmissionpolicies";

/// The resolved engine and what the CEL engine last found wrong with its
/// objects, shared (clones share) between the resolver, which reports
/// both on `/readyz?verbose`, and its readers.
#[derive(Clone, Debug, Default)]
pub struct EngineState {
    resolved: Arc<OnceLock<Engine>>,
    problem: Arc<watch::Sender<Option<String>>>,
    evaluation_errors: Family<EvaluationErrorLabels, Counter>,
}

/// The labels of `poolkeeper_cel_policy_errors_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EvaluationErrorLabels {
    kind: String,
    name: String,
    error_type: String,
}

impl EngineState {
    /// The engine, once the resolver decided it (its stage precedes every
    /// reader's).
    pub fn engine(&self) -> Option<Engine> {
        self.resolved.get().copied()
    }

    /// The problem last reported.
    pub fn problem(&self) -> Option<String> {
        self.problem.borrow().clone()
    }

    /// What is wrong with the CEL engine's admission objects now (`None`:
    /// nothing), shown beside the engine on `/readyz?verbose`.
    pub fn report_problem(&self, problem: Option<String>) {
        self.problem.send_if_modified(|current| {
            let changed = *current != problem;
            *current = problem;
            changed
        });
    }

    /// Counts `count` new evaluation errors the API server counted for one
    /// of poolkeeper's admission objects.
    pub fn count_evaluation_errors(&self, kind: &str, name: &str, error_type: &str, count: u64) {
        self.evaluation_errors
            .get_or_create(&EvaluationErrorLabels {
                kind: kind.to_owned(),
                name: name.to_owned(),
                error_type: error_type.to_owned(),
            })
            .inc_by(count);
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EngineLabels {
    engine: &'static str,
}

/// The component `placement-engine`: resolves `placement.engine` at start
/// (asking the API server's discovery only for `auto`, retrying until it
/// answers), logs it, sets `poolkeeper_placement_engine{engine} 1` and
/// reports it on its `/readyz` check (`[+]placement-engine ok: cel`),
/// with the CEL engine's current problem when it has one.
pub struct EngineResolver {
    choice: EngineChoice,
    client: Client,
    state: EngineState,
    gauge: Family<EngineLabels, Gauge>,
    problem: Gauge,
}

impl std::fmt::Debug for EngineResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineResolver")
            .field("choice", &self.choice)
            .finish_non_exhaustive()
    }
}

impl EngineResolver {
    pub const NAME: &'static str = "placement-engine";

    /// Registers `poolkeeper_placement_engine` into `registry`.
    pub fn new(
        choice: EngineChoice,
        client: Client,
        state: EngineState,
        registry: &mut Registry,
    ) -> Self {
        let gauge = Family::<EngineLabels, Gauge>::default();
        registry.register(
            "placement_engine",
            "The placement engine this process runs (1 for the one in use)",
            gauge.clone(),
        );
        let problem = Gauge::default();
        registry.register(
            "placement_engine_problem",
            "1 while the CEL engine's admission objects cannot be written, do not type-check, or \
             fail while the API server evaluates them (the reason is on /readyz?verbose and in \
             the log)",
            problem.clone(),
        );
        registry.register(
            "cel_policy_errors",
            "Evaluation errors the API server counted for poolkeeper's admission policies and \
             the match conditions of its webhooks, as the CEL engine's leader reads them from the \
             API server's /metrics (kind, name, error_type: compile_error, invalid_error, \
             out_of_budget, match_condition_error)",
            state.evaluation_errors.clone(),
        );
        Self {
            choice,
            client,
            state,
            gauge,
            problem,
        }
    }

    async fn resolve(&self, ctx: &Context) -> Option<Engine> {
        if self.choice != EngineChoice::Auto {
            return Some(self.choice.resolve(false));
        }
        let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
        loop {
            match serves_mutating_admission_policies(&self.client).await {
                Ok(serves) => return Some(self.choice.resolve(serves)),
                Err(error) => {
                    let reason = format!(
                        "asking the API server whether it serves {ADMISSION_GROUP_VERSION} \
                         MutatingAdmissionPolicies: {}",
                        error_chain(&error)
                    );
                    ctx.waiting_for(reason);
                    tokio::select! {
                        () = ctx.cancelled() => return None,
                        () = tokio::time::sleep(backoff.next_delay()) => {}
                    }
                }
            }
        }
    }

    async fn run_loop(self, ctx: Context) -> Result<(), BoxError> {
        let Some(engine) = self.resolve(&ctx).await else {
            return Ok(());
        };
        let _ = self.state.resolved.set(engine);
        tracing::info!(
            choice = self.choice.as_str(),
            %engine,
            "placement engine resolved"
        );
        for other in [Engine::Cel, Engine::Webhook] {
            self.gauge
                .get_or_create(&EngineLabels {
                    engine: other.as_str(),
                })
                .set(i64::from(other == engine));
        }
        let mut problems = self.state.problem.subscribe();
        self.report(&ctx, engine, problems.borrow_and_update().as_deref());
        ctx.mark_ready();
        loop {
            tokio::select! {
                () = ctx.cancelled() => return Ok(()),
                changed = problems.changed() => {
                    if changed.is_err() {
                        return Ok(());
                    }
                    self.report(&ctx, engine, problems.borrow_and_update().as_deref());
                }
            }
        }
    }

    fn report(&self, ctx: &Context, engine: Engine, problem: Option<&str>) {
        self.problem.set(i64::from(problem.is_some()));
        ctx.ready_detail(note(engine, problem));
    }
}

/// The `/readyz` note: the engine, and the CEL engine's problem.
fn note(engine: Engine, problem: Option<&str>) -> String {
    match problem {
        Some(problem) => format!("{engine} ({problem})"),
        None => engine.to_string(),
    }
}

/// Whether the API server serves `admissionregistration.k8s.io/v1`
/// MutatingAdmissionPolicies (Kubernetes 1.36 and later, unless disabled
/// with `--runtime-config`).
pub async fn serves_mutating_admission_policies(client: &Client) -> Result<bool, kube::Error> {
    match client
        .list_api_group_resources(ADMISSION_GROUP_VERSION)
        .await
    {
        Ok(list) => Ok(list
            .resources
            .iter()
            .any(|resource| resource.name == MUTATING_ADMISSION_POLICIES)),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
        Err(error) => Err(error),
    }
}

impl Component for EngineResolver {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn run(self: Box<Self>, ctx: Context) -> BoxFuture<'static, Result<(), BoxError>> {
        Box::pin((*self).run_loop(ctx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_note_names_the_engine_and_the_problem() {
        assert_eq!(note(Engine::Cel, None), "cel");
        assert_eq!(note(Engine::Webhook, None), "webhook");
        assert_eq!(
            note(Engine::Cel, Some("policy x: type checking failed")),
            "cel (policy x: type checking failed)"
        );
    }

    #[test]
    fn a_problem_is_reported_once_per_change() {
        let state = EngineState::default();
        let mut problems = state.problem.subscribe();
        state.report_problem(None);
        assert!(!problems.has_changed().unwrap());
        state.report_problem(Some("broken".to_owned()));
        assert!(problems.has_changed().unwrap());
        assert_eq!(problems.borrow_and_update().as_deref(), Some("broken"));
        state.report_problem(Some("broken".to_owned()));
        assert!(!problems.has_changed().unwrap());
    }
}
