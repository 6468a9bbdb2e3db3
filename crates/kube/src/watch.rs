//! When a watch is retried after an error: the classification of kube's watch errors, the
//! backoff schedule and the wait that ends early once the API server is seen coming back.
//! Every watch of the process follows it: [`retrying`] wraps any watch stream, and a watcher
//! that reports each failure itself (the index's) drives [`RetryPolicy`] and [`wait_out`].
//!
//! - `410 Gone` (an expired resourceVersion) is kube's request to relist, not a failure: the
//!   relist starts at once, as client-go's reflector does. Only a 410 arriving within
//!   [`MIN_RELIST_INTERVAL`] of the previous immediate relist backs off, so a server that
//!   keeps answering 410 cannot make a watcher list in a loop.
//! - Every other error backs off exponentially, [`BACKOFF_INITIAL`] doubling up to
//!   [`BACKOFF_MAX`], up to [`JITTER`] shorter at random so that watchers do not retry in step;
//!   the next successful event resets it.
//! - While backing off, the watcher probes the API server's `/readyz`. Once a probe finds it
//!   down or not ready, the wait lasts until a probe finds it ready again, and then ends at
//!   once: the reconnect follows a restart within [`PROBE_INTERVAL`] instead of a backoff
//!   period that grew during the outage, and no watch request is sent to a server that is
//!   still starting (one that has bound its port but not started serving holds such a
//!   request for seconds past its readiness). When the probe finds the server ready from the
//!   start (the error was the request's own: 403, 404, 429, a dropped connection), the full
//!   backoff applies.

use std::time::Duration;

use futures::future::BoxFuture;
use futures::{Stream, StreamExt};
use kube::Client;
use kube::runtime::watcher;
use tokio::time::Instant;

use crate::backoff::Backoff;

/// The first backoff after an error.
pub const BACKOFF_INITIAL: Duration = Duration::from_secs(1);
/// The longest backoff: the doubling stops here.
pub const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// Each backoff is shortened by up to this fraction, at random.
pub const JITTER: f64 = 0.25;
/// A 410 within this long of the previous immediate relist backs off.
pub const MIN_RELIST_INTERVAL: Duration = Duration::from_secs(1);
/// Pause between two `/readyz` probes while backing off.
pub const PROBE_INTERVAL: Duration = Duration::from_millis(500);
/// A probe without an answer within this long counts as unreachable.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// What a watch error says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchFailure {
    /// 410 Gone: the resourceVersion is no longer served; relist.
    Expired,
    /// No HTTP answer: connection refused or reset, TLS, timeout.
    Unreachable,
    /// The API server answered with an error (403, 404, 429, 5xx), or with something
    /// unreadable.
    Rejected,
}

impl WatchFailure {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Expired => "resourceVersion expired",
            Self::Unreachable => "API server unreachable",
            Self::Rejected => "request rejected",
        }
    }
}

pub fn classify(error: &watcher::Error) -> WatchFailure {
    match error {
        watcher::Error::WatchError(status) if status.code == 410 => WatchFailure::Expired,
        watcher::Error::WatchError(_) | watcher::Error::NoResourceVersion => WatchFailure::Rejected,
        watcher::Error::InitialListFailed(error)
        | watcher::Error::WatchStartFailed(error)
        | watcher::Error::WatchFailed(error) => match error {
            kube::Error::Api(status) if status.code == 410 => WatchFailure::Expired,
            kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => {
                WatchFailure::Unreachable
            }
            _ => WatchFailure::Rejected,
        },
    }
}

/// Whether kube's watcher starts over with a fresh list after `error` by itself. It does for
/// a 410 inside the watch stream and after a failed list; after a failed watch start it
/// retries the same resourceVersion, which after a 410 would never succeed: the caller
/// builds a new watcher then.
pub fn relists_by_itself(error: &watcher::Error) -> bool {
    matches!(
        error,
        watcher::Error::WatchError(_)
            | watcher::Error::InitialListFailed(_)
            | watcher::Error::NoResourceVersion
    )
}

/// The backoff of watches: [`BACKOFF_INITIAL`] doubling up to [`BACKOFF_MAX`], shortened by
/// up to [`JITTER`] at random.
pub fn backoff() -> Backoff {
    Backoff::new(BACKOFF_INITIAL, BACKOFF_MAX).with_jitter(JITTER)
}

/// The retry decisions of one watcher.
#[derive(Debug)]
pub struct RetryPolicy {
    backoff: Backoff,
    /// When the last relist after a 410 started at once.
    last_relist: Option<Instant>,
}

impl RetryPolicy {
    pub fn new(backoff: Backoff) -> Self {
        Self {
            backoff,
            last_relist: None,
        }
    }

    /// How long to wait before polling the watch again after `failure` at `now`;
    /// zero means at once.
    pub fn on_failure(&mut self, failure: WatchFailure, now: Instant) -> Duration {
        if failure == WatchFailure::Expired {
            let recent = self
                .last_relist
                .is_some_and(|at| now.saturating_duration_since(at) < MIN_RELIST_INTERVAL);
            if !recent {
                self.last_relist = Some(now);
                return Duration::ZERO;
            }
        }
        self.backoff.next_delay()
    }

    /// The watch delivered something: the next failure starts the backoff over.
    pub fn on_success(&mut self) {
        self.backoff.reset();
    }
}

/// What a `/readyz` probe found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeAnswer {
    Ready,
    /// It answered, but is not ready (5xx, 429).
    NotReady,
    /// No answer within [`PROBE_TIMEOUT`].
    Unreachable,
    /// The probe itself is refused (401, 403, 404): it cannot tell.
    Unusable,
}

/// Asks the API server whether it is ready.
pub trait Probe: Send + Sync {
    fn probe(&self) -> BoxFuture<'_, ProbeAnswer>;
}

/// `GET /readyz` with the watcher's client (allowed to every user by the default
/// `system:public-info-viewer` role).
pub struct ReadyzProbe {
    client: Client,
}

impl ReadyzProbe {
    pub fn new(client: Client) -> Self {
        Self { client }
    }
}

impl Probe for ReadyzProbe {
    fn probe(&self) -> BoxFuture<'_, ProbeAnswer> {
        Box::pin(async move {
            let Ok(request) = http::Request::get("/readyz").body(Vec::new()) else {
                return ProbeAnswer::Unusable;
            };
            match tokio::time::timeout(PROBE_TIMEOUT, self.client.request_text(request)).await {
                Ok(Ok(_)) => ProbeAnswer::Ready,
                Ok(Err(kube::Error::Api(status))) => answer_of_status(status.code),
                Ok(Err(_)) | Err(_) => ProbeAnswer::Unreachable,
            }
        })
    }
}

fn answer_of_status(code: u16) -> ProbeAnswer {
    match code {
        401 | 403 | 404 => ProbeAnswer::Unusable,
        _ => ProbeAnswer::NotReady,
    }
}

/// How a [`wait_out`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waited {
    /// The backoff ran out.
    Elapsed,
    /// The API server was seen down or not ready, and then ready.
    Recovered,
}

impl Waited {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Elapsed => "backoff elapsed",
            Self::Recovered => "API server ready again",
        }
    }
}

/// Waits out `delay` while probing the API server: once a probe finds it down or not ready,
/// until a probe finds it ready again, however long or short that is compared with `delay`;
/// otherwise for `delay`.
pub async fn wait_out(delay: Duration, probe: &dyn Probe) -> Waited {
    let deadline = Instant::now() + delay;
    let mut seen_down = false;
    loop {
        match probe.probe().await {
            ProbeAnswer::Ready if seen_down => return Waited::Recovered,
            ProbeAnswer::Ready | ProbeAnswer::Unusable => {
                tokio::time::sleep_until(deadline).await;
                return Waited::Elapsed;
            }
            ProbeAnswer::NotReady | ProbeAnswer::Unreachable => seen_down = true,
        }
        tokio::time::sleep(PROBE_INTERVAL).await;
    }
}

/// A watch that retries with this module's policy: the items of `connect()`'s stream, every
/// error passed on (for the caller to report) and followed by the policy's wait (a 410 relists
/// at once, other errors back off while `/readyz` is probed); after a 410 that kube's watcher
/// does not relist after by itself, `connect` starts a new watch.
pub fn retrying<K, S, F>(
    client: Client,
    connect: F,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send
where
    K: Send + 'static,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    F: FnMut() -> S + Send + 'static,
{
    retrying_with(
        ReadyzProbe::new(client),
        RetryPolicy::new(backoff()),
        connect,
    )
}

fn retrying_with<K, S, F, P>(
    probe: P,
    retry: RetryPolicy,
    mut connect: F,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send
where
    K: Send + 'static,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    F: FnMut() -> S + Send + 'static,
    P: Probe + 'static,
{
    let stream = Box::pin(connect());
    let state = Retrying {
        connect,
        stream,
        retry,
        probe,
        wait: Duration::ZERO,
    };
    futures::stream::unfold(state, |mut state| async move {
        if !state.wait.is_zero() {
            let waited = wait_out(std::mem::take(&mut state.wait), &state.probe).await;
            tracing::debug!(waited = waited.as_str(), "retrying the watch");
        }
        let next = state.stream.next().await?;
        match &next {
            Ok(event) => {
                if !matches!(event, watcher::Event::Init) {
                    state.retry.on_success();
                }
            }
            Err(error) => {
                let failure = classify(error);
                state.wait = state.retry.on_failure(failure, Instant::now());
                if failure == WatchFailure::Expired && !relists_by_itself(error) {
                    state.stream = Box::pin((state.connect)());
                }
            }
        }
        Some((next, state))
    })
}

struct Retrying<S, F, P> {
    connect: F,
    stream: std::pin::Pin<Box<S>>,
    retry: RetryPolicy,
    probe: P,
    /// How long to wait before the next poll.
    wait: Duration,
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Arc;

    use kube::core::Status;
    use parking_lot::Mutex;

    use super::*;

    fn status(code: u16) -> Box<Status> {
        Status::failure("failed", "Reason").with_code(code).boxed()
    }

    fn refused() -> kube::Error {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        kube::Error::Service(Box::new(io))
    }

    #[test]
    fn watch_errors_are_classified() {
        use WatchFailure::{Expired, Rejected, Unreachable};
        let read = || std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        let cases: Vec<(watcher::Error, WatchFailure, bool)> = vec![
            (watcher::Error::WatchError(status(410)), Expired, true),
            (watcher::Error::WatchError(status(500)), Rejected, true),
            (watcher::Error::WatchError(status(403)), Rejected, true),
            // An expired continue token of a paged list.
            (
                watcher::Error::InitialListFailed(kube::Error::Api(status(410))),
                Expired,
                true,
            ),
            (
                watcher::Error::InitialListFailed(kube::Error::Api(status(404))),
                Rejected,
                true,
            ),
            (
                watcher::Error::InitialListFailed(refused()),
                Unreachable,
                true,
            ),
            (
                watcher::Error::WatchStartFailed(refused()),
                Unreachable,
                false,
            ),
            (
                watcher::Error::WatchStartFailed(kube::Error::Api(status(410))),
                Expired,
                false,
            ),
            (
                watcher::Error::WatchStartFailed(kube::Error::Api(status(429))),
                Rejected,
                false,
            ),
            (
                watcher::Error::WatchFailed(kube::Error::ReadEvents(read())),
                Unreachable,
                false,
            ),
            (
                watcher::Error::WatchFailed(kube::Error::Api(status(410))),
                Expired,
                false,
            ),
            (watcher::Error::NoResourceVersion, Rejected, true),
        ];
        for (error, failure, by_itself) in cases {
            assert_eq!(classify(&error), failure, "{error:?}");
            assert_eq!(relists_by_itself(&error), by_itself, "{error:?}");
        }
    }

    fn secs(delays: &[Duration]) -> Vec<f64> {
        delays.iter().map(Duration::as_secs_f64).collect()
    }

    #[test]
    fn watches_back_off_from_one_second_to_thirty_shortened_by_up_to_a_quarter() {
        let mut longest = backoff().with_random(|| 0.0);
        let mut shortest = backoff().with_random(|| 1.0);
        let longest: Vec<Duration> = (0..8).map(|_| longest.next_delay()).collect();
        let shortest: Vec<Duration> = (0..8).map(|_| shortest.next_delay()).collect();
        assert_eq!(secs(&longest), [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]);
        assert_eq!(
            secs(&shortest),
            [0.75, 1.5, 3.0, 6.0, 12.0, 22.5, 22.5, 22.5]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_expired_watch_relists_at_once_but_not_in_a_loop() {
        use WatchFailure::{Expired, Unreachable};
        let mut policy = RetryPolicy::new(backoff().with_random(|| 0.0));
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let steps: [(u64, WatchFailure, f64); 9] = [
            // An outage: the backoff grows.
            (0, Unreachable, 1.0),
            (1_000, Unreachable, 2.0),
            (3_000, Unreachable, 4.0),
            // Back, and the resourceVersion expired: relist now.
            (7_000, Expired, 0.0),
            // Another 410 right after that relist: back off, from where the streak is.
            (7_200, Expired, 8.0),
            // A second later a 410 is immediate again.
            (8_100, Expired, 0.0),
            (8_200, Unreachable, 16.0),
            (30_000, Unreachable, 30.0),
            (60_000, Unreachable, 30.0),
        ];
        for (ms, failure, expected) in steps {
            let delay = policy.on_failure(failure, at(ms));
            assert_eq!(delay.as_secs_f64(), expected, "{failure:?} at {ms} ms");
        }
        policy.on_success();
        assert_eq!(policy.on_failure(Unreachable, at(90_000)), BACKOFF_INITIAL);
    }

    /// Answers from a script, then `Ready`; records when it was asked.
    struct ScriptedProbe {
        answers: Mutex<VecDeque<ProbeAnswer>>,
        asked: Arc<Mutex<Vec<Duration>>>,
        start: Instant,
    }

    impl ScriptedProbe {
        fn new(answers: &[ProbeAnswer]) -> Self {
            Self {
                answers: Mutex::new(answers.iter().copied().collect()),
                asked: Arc::default(),
                start: Instant::now(),
            }
        }
    }

    impl Probe for ScriptedProbe {
        fn probe(&self) -> BoxFuture<'_, ProbeAnswer> {
            self.asked.lock().push(self.start.elapsed());
            let answer = self
                .answers
                .lock()
                .pop_front()
                .unwrap_or(ProbeAnswer::Ready);
            Box::pin(async move { answer })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_wait_ends_when_the_api_server_is_back() {
        use ProbeAnswer::{NotReady, Ready, Unreachable, Unusable};
        let ms = Duration::from_millis;
        // (delay, probe answers, how it ends, after how long)
        let cases: [(Duration, &[ProbeAnswer], Waited, Duration); 6] = [
            // Down for three probes, ready at the fourth: long before the 30 s backoff.
            (
                ms(30_000),
                &[Unreachable, Unreachable, NotReady],
                Waited::Recovered,
                ms(1_500),
            ),
            // Down longer than the backoff: the wait lasts until it is ready.
            (
                ms(1_000),
                &[
                    Unreachable,
                    Unreachable,
                    Unreachable,
                    Unreachable,
                    Unreachable,
                ],
                Waited::Recovered,
                ms(2_500),
            ),
            // Ready all along: the error was the request's own, the full backoff applies.
            (ms(4_000), &[Ready], Waited::Elapsed, ms(4_000)),
            // The probe is forbidden: it cannot tell, the backoff applies.
            (ms(2_000), &[Unusable], Waited::Elapsed, ms(2_000)),
            (
                ms(2_000),
                &[Unreachable, Unusable],
                Waited::Elapsed,
                ms(2_000),
            ),
            // Forbidden only after the backoff ran out: at once.
            (
                ms(200),
                &[Unreachable, Unreachable, Unusable],
                Waited::Elapsed,
                ms(1_000),
            ),
        ];
        for (delay, answers, ends, after) in cases {
            let probe = ScriptedProbe::new(answers);
            let start = Instant::now();
            let waited = wait_out(delay, &probe).await;
            assert_eq!(
                (waited, start.elapsed()),
                (ends, after),
                "{delay:?} {answers:?}, probed at {:?}",
                probe.asked.lock()
            );
        }
    }
}

#[cfg(test)]
mod retrying_tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::core::Status;

    use super::*;

    struct AlwaysReady;

    impl Probe for AlwaysReady {
        fn probe(&self) -> BoxFuture<'_, ProbeAnswer> {
            Box::pin(async { ProbeAnswer::Ready })
        }
    }

    fn gone() -> kube::Error {
        kube::Error::Api(Status::failure("too old", "Expired").with_code(410).boxed())
    }

    fn refused() -> kube::Error {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        kube::Error::Service(Box::new(io))
    }

    /// The policy of the index's watchers, for any watch: connection failures back off
    /// (1 s, 2 s without jitter), the next event resets the backoff, a 410 relists at once,
    /// and a 410 on a watch start, after which kube's watcher would retry the expired
    /// resourceVersion, starts a new watch.
    #[tokio::test(start_paused = true)]
    async fn any_watch_retries_with_the_watchers_policy() {
        type Item = Result<watcher::Event<ConfigMap>, watcher::Error>;
        let connects = Arc::new(AtomicUsize::new(0));
        let counted = connects.clone();
        let connect = move || {
            let n = counted.fetch_add(1, Ordering::SeqCst);
            let items: Vec<Item> = if n == 0 {
                vec![
                    Err(watcher::Error::WatchStartFailed(refused())),
                    Err(watcher::Error::WatchStartFailed(refused())),
                    Ok(watcher::Event::Apply(ConfigMap::default())),
                    Err(watcher::Error::WatchStartFailed(refused())),
                    Err(watcher::Error::WatchStartFailed(gone())),
                ]
            } else {
                vec![Ok(watcher::Event::Init)]
            };
            futures::stream::iter(items)
        };
        let policy = RetryPolicy::new(backoff().with_random(|| 0.0));
        let start = Instant::now();
        let seen: Vec<(Duration, bool)> = retrying_with(AlwaysReady, policy, connect)
            .map(|item| (start.elapsed(), item.is_ok()))
            .collect()
            .await;
        let secs = |s: u64| Duration::from_secs(s);
        assert_eq!(
            seen,
            [
                (secs(0), false),
                (secs(1), false),
                (secs(3), true),
                (secs(3), false),
                // Backoff reset by the event: 1 s; then the 410 relists at once.
                (secs(4), false),
                (secs(4), true),
            ]
        );
        assert_eq!(connects.load(Ordering::SeqCst), 2);
    }
}
