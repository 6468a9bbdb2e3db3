//! What a connection's watchdog looks at: whether a request is in flight,
//! when the connection last became idle, and whether bytes of a next
//! request have arrived since (and when the first one did).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// The limits the watchdog enforces on one connection.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConnectionLimits {
    pub(crate) header_read_timeout: Duration,
    pub(crate) idle_timeout: Duration,
}

/// What the watchdog should do now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Nothing to do before this instant.
    WaitUntil(Instant),
    /// A request started arriving longer than `header_read_timeout` ago and
    /// has not reached the handler.
    TooSlow,
    /// Nothing arrived and nothing was in flight for `idle_timeout`.
    Idle,
}

/// Shared by the connection's reader, its requests and its watchdog (HTTP/2
/// requests run on tasks of their own, hence the atomics).
#[derive(Debug)]
pub(crate) struct ConnectionActivity {
    origin: Instant,
    in_flight: AtomicUsize,
    /// Milliseconds since `origin` at which the connection last had nothing
    /// in flight.
    idle_since: AtomicU64,
    /// One more than the milliseconds since `origin` of the first byte read
    /// while idle; 0 when none was.
    first_byte: AtomicU64,
}

impl ConnectionActivity {
    pub(crate) fn new() -> Self {
        Self {
            origin: Instant::now(),
            in_flight: AtomicUsize::new(0),
            idle_since: AtomicU64::new(0),
            first_byte: AtomicU64::new(0),
        }
    }

    fn millis(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.origin).as_millis()).unwrap_or(u64::MAX)
    }

    fn instant(&self, millis: u64) -> Instant {
        self.origin + Duration::from_millis(millis)
    }

    fn received(&self) {
        if self.in_flight.load(Ordering::Relaxed) == 0
            && self.first_byte.load(Ordering::Relaxed) == 0
        {
            let now = self.millis(Instant::now()) + 1;
            let _ = self
                .first_byte
                .compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// A request reached the handler; it counts as in flight until the
    /// guard is dropped.
    pub(crate) fn request_started(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.first_byte.store(0, Ordering::Relaxed);
        InFlight(Arc::clone(self))
    }

    pub(crate) fn verdict(&self, now: Instant, limits: ConnectionLimits) -> Verdict {
        if self.in_flight.load(Ordering::Relaxed) > 0 {
            // The handler bounds the request's own time (body read timeout).
            return Verdict::WaitUntil(now + limits.header_read_timeout);
        }
        let first_byte = self.first_byte.load(Ordering::Relaxed);
        let (deadline, expired) = if first_byte > 0 {
            let at = self.instant(first_byte - 1) + limits.header_read_timeout;
            (at, Verdict::TooSlow)
        } else {
            let at = self.instant(self.idle_since.load(Ordering::Relaxed)) + limits.idle_timeout;
            (at, Verdict::Idle)
        };
        if now >= deadline {
            expired
        } else {
            Verdict::WaitUntil(deadline)
        }
    }
}

/// A request in flight on the connection.
#[derive(Debug)]
pub(crate) struct InFlight(Arc<ConnectionActivity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let activity = &self.0;
        if activity.in_flight.fetch_sub(1, Ordering::Relaxed) == 1 {
            let now = activity.millis(Instant::now());
            activity.idle_since.store(now, Ordering::Relaxed);
            activity.first_byte.store(0, Ordering::Relaxed);
        }
    }
}

/// An I/O stream that reports the bytes it reads to a [`ConnectionActivity`].
#[derive(Debug)]
pub(crate) struct Watched<T> {
    inner: T,
    activity: Arc<ConnectionActivity>,
}

impl<T> Watched<T> {
    pub(crate) fn new(inner: T, activity: Arc<ConnectionActivity>) -> Self {
        Self { inner, activity }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.received();
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: ConnectionLimits = ConnectionLimits {
        header_read_timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_secs(60),
    };

    #[tokio::test(start_paused = true)]
    async fn idle_partial_and_busy_connections() {
        let activity = Arc::new(ConnectionActivity::new());
        let start = Instant::now();
        // A fresh connection is idle from its start.
        assert_eq!(
            activity.verdict(start, LIMITS),
            Verdict::WaitUntil(start + LIMITS.idle_timeout)
        );
        assert_eq!(
            activity.verdict(start + LIMITS.idle_timeout, LIMITS),
            Verdict::Idle
        );

        // A byte arrives: the header deadline replaces the idle one.
        tokio::time::advance(Duration::from_secs(1)).await;
        activity.received();
        let first = Instant::now();
        assert_eq!(
            activity.verdict(first, LIMITS),
            Verdict::WaitUntil(first + LIMITS.header_read_timeout)
        );
        // Later bytes do not move it.
        tokio::time::advance(Duration::from_secs(3)).await;
        activity.received();
        assert_eq!(
            activity.verdict(first + LIMITS.header_read_timeout, LIMITS),
            Verdict::TooSlow
        );

        // The request reaches the handler: no deadline applies while it runs.
        let guard = activity.request_started();
        let later = first + Duration::from_secs(30);
        assert_eq!(
            activity.verdict(later, LIMITS),
            Verdict::WaitUntil(later + LIMITS.header_read_timeout)
        );
        activity.received();
        tokio::time::advance(Duration::from_secs(2)).await;
        drop(guard);
        // Idle again from when it ended; what arrived during it is forgotten.
        let ended = Instant::now();
        assert_eq!(
            activity.verdict(ended, LIMITS),
            Verdict::WaitUntil(ended + LIMITS.idle_timeout)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn two_requests_in_flight_end_idle_once_both_end() {
        let activity = Arc::new(ConnectionActivity::new());
        let one = activity.request_started();
        let two = activity.request_started();
        tokio::time::advance(Duration::from_secs(1)).await;
        drop(one);
        let now = Instant::now();
        assert_eq!(
            activity.verdict(now + LIMITS.idle_timeout * 2, LIMITS),
            Verdict::WaitUntil(now + LIMITS.idle_timeout * 2 + LIMITS.header_read_timeout)
        );
        drop(two);
        assert_eq!(
            activity.verdict(now, LIMITS),
            Verdict::WaitUntil(now + LIMITS.idle_timeout)
        );
    }
}
