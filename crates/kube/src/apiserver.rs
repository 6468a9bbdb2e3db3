//! The startup check of the API server connection.

use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::apimachinery::pkg::version::Info;
use kube::Client;
use poolkeeper_supervisor::{BoxError, Component, Context, error_chain, format_duration};
use tokio::time::Instant;

use crate::backoff::Backoff;

/// Name of the readiness check of the API server connection.
pub const APISERVER_CHECK: &str = "apiserver";

/// The first retry after an unanswered version request.
const FIRST_RETRY: Duration = Duration::from_millis(200);
/// The longest pause between two version requests.
const MAX_RETRY: Duration = Duration::from_secs(2);

/// Why the API server check gave up.
#[derive(Debug, thiserror::Error)]
#[error("the Kubernetes API server could not be reached within {}: {last_error}", format_duration(*timeout))]
pub struct ApiServerUnreachable {
    pub timeout: Duration,
    pub last_error: String,
}

/// Asks the API server for its version, the one request every identity may make.
trait VersionEndpoint: Send + Sync + 'static {
    /// The version, or why there is none (the error's whole chain).
    fn version(&self) -> BoxFuture<'_, Result<Info, String>>;
}

impl VersionEndpoint for Client {
    fn version(&self) -> BoxFuture<'_, Result<Info, String>> {
        Box::pin(async move {
            self.apiserver_version()
                .await
                .map_err(|error| error_chain(&error))
        })
    }
}

/// Fails startup with a clear error when the API server cannot be reached within the
/// timeout, instead of watchers retrying forever behind a `/readyz` that never turns
/// green. Asks for the server's version until it answers, backing off from 200 ms to 2 s;
/// ready once it answered (its readiness check is [`APISERVER_CHECK`]).
pub struct ApiServerCheck {
    server: Box<dyn VersionEndpoint>,
    timeout: Duration,
}

impl std::fmt::Debug for ApiServerCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiServerCheck")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl ApiServerCheck {
    /// `timeout`: `apiServer.startupTimeout`.
    pub fn new(client: Client, timeout: Duration) -> Self {
        Self {
            server: Box::new(client),
            timeout,
        }
    }

    async fn check(self: Box<Self>, ctx: Context) -> Result<(), BoxError> {
        let deadline = Instant::now() + self.timeout;
        let mut backoff = Backoff::new(FIRST_RETRY, MAX_RETRY);
        let version = loop {
            let attempt = tokio::time::timeout_at(deadline, self.server.version());
            let error = tokio::select! {
                () = ctx.cancelled() => return Ok(()),
                result = attempt => match result {
                    Ok(Ok(version)) => break version,
                    Ok(Err(error)) => error,
                    Err(_) => "no answer".to_owned(),
                },
            };
            ctx.waiting_for(format!("API server unreachable: {error}"));
            let delay = backoff.next_delay();
            if Instant::now() + delay >= deadline {
                let timeout = self.timeout;
                return Err(ApiServerUnreachable {
                    timeout,
                    last_error: error,
                }
                .into());
            }
            tracing::warn!(%error, retry_in = %format_duration(delay), "API server not reachable yet, retrying");
            tokio::select! {
                () = ctx.cancelled() => return Ok(()),
                () = tokio::time::sleep(delay) => {}
            }
        };
        tracing::info!(
            version = %version.git_version,
            platform = %version.platform,
            "connected to the Kubernetes API server"
        );
        ctx.mark_ready();
        ctx.cancelled().await;
        Ok(())
    }
}

impl Component for ApiServerCheck {
    fn name(&self) -> &'static str {
        "apiserver-check"
    }

    fn readiness_check(&self) -> Option<&'static str> {
        Some(APISERVER_CHECK)
    }

    fn run(self: Box<Self>, ctx: Context) -> BoxFuture<'static, Result<(), BoxError>> {
        Box::pin(self.check(ctx))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use parking_lot::Mutex;
    use poolkeeper_supervisor::testing::spawn;

    use super::*;

    /// One answer of the scripted API server.
    #[derive(Clone, Copy, Debug)]
    enum Answer {
        Refused,
        /// No answer at all.
        Silent,
        Version,
    }

    /// Answers from a script, then `Refused` for ever.
    struct Scripted(Mutex<VecDeque<Answer>>);

    impl VersionEndpoint for Scripted {
        fn version(&self) -> BoxFuture<'_, Result<Info, String>> {
            let answer = self.0.lock().pop_front().unwrap_or(Answer::Refused);
            Box::pin(async move {
                match answer {
                    Answer::Refused => Err("connection refused".to_owned()),
                    Answer::Silent => std::future::pending().await,
                    Answer::Version => Ok(Info {
                        git_version: "v1.36.3".to_owned(),
                        ..Info::default()
                    }),
                }
            })
        }
    }

    fn check(answers: &[Answer], timeout: Duration) -> ApiServerCheck {
        ApiServerCheck {
            server: Box::new(Scripted(Mutex::new(answers.iter().copied().collect()))),
            timeout,
        }
    }

    /// How the check ended, and when.
    #[derive(Debug, PartialEq, Eq)]
    enum Outcome {
        Ready(Duration),
        Failed(Duration, String),
    }

    /// Runs the check until it is ready or ends.
    async fn outcome(check: ApiServerCheck) -> Outcome {
        let start = Instant::now();
        let running = spawn(Box::new(check));
        let ready = running.ready_or_ended().await;
        let at = start.elapsed();
        if ready {
            running.stop().await.expect("stops cleanly");
            return Outcome::Ready(at);
        }
        let error = running
            .join()
            .await
            .expect_err("only a failure ends the check");
        Outcome::Failed(at, error.to_string())
    }

    #[tokio::test(start_paused = true)]
    async fn waits_for_the_api_server_backing_off_until_the_timeout() {
        use Answer::{Refused, Silent, Version};
        let ms = Duration::from_millis;
        let secs = Duration::from_secs;
        let unreachable = |within: &str, error: &str| {
            format!("the Kubernetes API server could not be reached within {within}: {error}")
        };
        // (answers, timeout, outcome)
        let cases: Vec<(Vec<Answer>, Duration, Outcome)> = vec![
            (vec![Version], secs(30), Outcome::Ready(ms(0))),
            // Retries after 200 ms, then 400 ms.
            (
                vec![Refused, Refused, Version],
                secs(30),
                Outcome::Ready(ms(600)),
            ),
            // 200, 400, 800, 1600, then 2 s between the attempts.
            (
                vec![Refused; 7].into_iter().chain([Version]).collect(),
                secs(30),
                Outcome::Ready(ms(9_000)),
            ),
            // Gives up at once when the next attempt would come after the timeout:
            // attempts at 0, 200 and 600 ms; the next would be at 1.4 s.
            (
                vec![],
                secs(1),
                Outcome::Failed(ms(600), unreachable("1s", "connection refused")),
            ),
            // A request without an answer ends at the timeout.
            (
                vec![Refused, Silent],
                secs(5),
                Outcome::Failed(secs(5), unreachable("5s", "no answer")),
            ),
        ];
        for (answers, timeout, want) in cases {
            let got = outcome(check(&answers, timeout)).await;
            assert_eq!(got, want, "{answers:?} within {timeout:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn says_what_it_waits_for_and_stops_when_asked() {
        let running = spawn(Box::new(check(&[], Duration::from_secs(60))));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            running.waiting_reason().as_deref(),
            Some("API server unreachable: connection refused")
        );
        running
            .stop()
            .await
            .expect("a stopped check is not a failure");
    }
}
