//! Exponential backoff: the one schedule of retries after a failure, for watches, the API
//! server startup check and the webhook selectors' updates.

use std::time::Duration;

/// A first delay, doubled after each further failure up to a cap, and optionally shortened
/// at random (jitter) so that many clients failing together do not retry in step.
#[derive(Clone, Debug)]
pub struct Backoff {
    first: Duration,
    max: Duration,
    /// Each delay is shortened by up to this fraction, in `[0, 1]`.
    jitter: f64,
    /// The jitter's random numbers, in `[0, 1)`.
    random: fn() -> f64,
    /// Delays handed out since the last reset.
    failures: u32,
}

impl Backoff {
    /// `first`, then twice as long each time, at most `max`; no jitter.
    pub fn new(first: Duration, max: Duration) -> Self {
        Self {
            first,
            max,
            jitter: 0.0,
            random: random_unit,
            failures: 0,
        }
    }

    /// Each delay shortened by up to `fraction` (of `[0, 1]`) at random: the cap stays a cap.
    pub fn with_jitter(self, fraction: f64) -> Self {
        Self {
            jitter: fraction.clamp(0.0, 1.0),
            ..self
        }
    }

    /// The jitter's random numbers (in `[0, 1)`) from `random`, so that a test can pin them.
    pub fn with_random(self, random: fn() -> f64) -> Self {
        Self { random, ..self }
    }

    /// The delay before the next attempt: `first * 2^n` after `n` earlier delays since the
    /// last reset, at most `max`, shortened by the jitter.
    pub fn next_delay(&mut self) -> Duration {
        let factor = 2_u32.saturating_pow(self.failures);
        let nominal = self.first.saturating_mul(factor).min(self.max);
        self.failures = self.failures.saturating_add(1);
        nominal.mul_f64(1.0 - self.jitter * (self.random)().clamp(0.0, 1.0))
    }

    /// An attempt succeeded: the next failure starts over at the first delay.
    pub fn reset(&mut self) {
        self.failures = 0;
    }

    /// The first delay, for a retry that should come soon whatever the streak.
    pub fn first(&self) -> Duration {
        self.first
    }
}

/// A number in `[0, 1)`, different at every call; enough for jitter.
fn random_unit() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    // Every RandomState gets fresh keys, so hashing the same value gives a new number.
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u8(0);
    (hasher.finish() >> 11) as f64 / (1_u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(delays: &[Duration]) -> Vec<u128> {
        delays.iter().map(Duration::as_millis).collect()
    }

    #[test]
    fn delays_double_up_to_the_cap_and_start_over_after_a_reset() {
        let ms_ = Duration::from_millis;
        // (first, max, delays after as many failures)
        let cases: [(Duration, Duration, Vec<u128>); 4] = [
            (
                ms_(1_000),
                ms_(30_000),
                vec![1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000, 30_000],
            ),
            (
                ms_(200),
                ms_(5_000),
                vec![200, 400, 800, 1_600, 3_200, 5_000, 5_000, 5_000],
            ),
            (ms_(200), ms_(2_000), vec![200, 400, 800, 1_600, 2_000]),
            // A cap below the first delay wins.
            (ms_(500), ms_(100), vec![100, 100]),
        ];
        for (first, max, want) in cases {
            let mut backoff = Backoff::new(first, max);
            let delays: Vec<Duration> = want.iter().map(|_| backoff.next_delay()).collect();
            assert_eq!(ms(&delays), want, "{first:?} up to {max:?}");
            backoff.reset();
            assert_eq!(backoff.next_delay(), first.min(max), "after a reset");
            assert_eq!(backoff.first(), first);
        }
    }

    #[test]
    fn a_long_streak_stays_at_the_cap() {
        let max = Duration::from_secs(30);
        let mut backoff = Backoff::new(Duration::from_secs(1), max);
        for _ in 0..100 {
            backoff.next_delay();
        }
        assert_eq!(backoff.next_delay(), max);
    }

    #[test]
    fn jitter_shortens_by_at_most_its_fraction() {
        let schedule =
            Backoff::new(Duration::from_secs(1), Duration::from_secs(30)).with_jitter(0.25);
        let mut longest = schedule.clone().with_random(|| 0.0);
        let mut shortest = schedule.clone().with_random(|| 1.0);
        let mut random = schedule;
        for _ in 0..12 {
            let (max, min) = (longest.next_delay(), shortest.next_delay());
            assert_eq!(min, max.mul_f64(0.75));
            let delay = random.next_delay();
            assert!(
                min <= delay && delay <= max,
                "{delay:?} not in {min:?}..={max:?}"
            );
            assert!(delay <= Duration::from_secs(30));
        }
        let samples: std::collections::HashSet<u64> =
            (0..16).map(|_| (random_unit() * 1e9) as u64).collect();
        assert!(samples.len() > 1, "the jitter varies");
    }

    #[test]
    fn without_jitter_the_random_numbers_do_not_matter() {
        let mut backoff =
            Backoff::new(Duration::from_millis(200), Duration::from_secs(5)).with_random(|| 0.9);
        assert_eq!(backoff.next_delay(), Duration::from_millis(200));
        assert_eq!(backoff.next_delay(), Duration::from_millis(400));
    }
}
