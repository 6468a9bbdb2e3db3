//! Percentiles of measured samples, and Prometheus histograms read from a `/metrics` text:
//! the difference of two scrapes and its quantiles, as PromQL's `histogram_quantile`
//! estimates them.

use std::collections::BTreeMap;
use std::time::Duration;

/// The `q`-quantile (0..=1) of `samples` by nearest rank; `None` when there are none.
pub fn percentile(samples: &[Duration], q: f64) -> Option<Duration> {
    if samples.is_empty() {
        return None;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    let rank = (q * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// One histogram: cumulative bucket counts by upper bound (`+Inf` last), sum and count.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Histogram {
    pub buckets: Vec<(f64, f64)>,
    pub sum: f64,
    pub count: f64,
}

impl Histogram {
    /// What was observed between `before` and `self` (buckets matched by bound).
    pub fn since(&self, before: &Histogram) -> Histogram {
        let earlier: BTreeMap<u64, f64> = before
            .buckets
            .iter()
            .map(|(le, n)| (le.to_bits(), *n))
            .collect();
        Histogram {
            buckets: self
                .buckets
                .iter()
                .map(|(le, n)| (*le, n - earlier.get(&le.to_bits()).copied().unwrap_or(0.0)))
                .collect(),
            sum: self.sum - before.sum,
            count: self.count - before.count,
        }
    }

    pub fn mean(&self) -> Option<f64> {
        (self.count > 0.0).then(|| self.sum / self.count)
    }

    /// `histogram_quantile`: the bucket holding the rank, linear within it (from 0 for the
    /// first bucket); a rank in the `+Inf` bucket gives the largest finite bound.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.buckets.last()?.1;
        if total <= 0.0 {
            return None;
        }
        let rank = q * total;
        let mut lower = (0.0, 0.0);
        for &(le, cumulative) in &self.buckets {
            if cumulative >= rank {
                if le.is_infinite() {
                    return Some(lower.0);
                }
                let in_bucket = cumulative - lower.1;
                let fraction = if in_bucket > 0.0 {
                    (rank - lower.1) / in_bucket
                } else {
                    1.0
                };
                return Some(lower.0 + (le - lower.0) * fraction);
            }
            lower = (le, cumulative);
        }
        Some(lower.0)
    }

    /// The upper bound of the bucket holding the `q`-quantile: what the histogram can say
    /// for certain (the sample is at most this).
    pub fn bucket_bound(&self, q: f64) -> Option<f64> {
        let total = self.buckets.last()?.1;
        let rank = q * total;
        self.buckets
            .iter()
            .find(|(_, cumulative)| *cumulative >= rank && total > 0.0)
            .map(|(le, _)| *le)
    }
}

/// The histograms of `metric` in a Prometheus or OpenMetrics text, one per value of
/// `group_by` (series differing in other labels are added up).
pub fn histograms(text: &str, metric: &str, group_by: &str) -> BTreeMap<String, Histogram> {
    let mut buckets: BTreeMap<String, BTreeMap<u64, (f64, f64)>> = BTreeMap::new();
    let mut out: BTreeMap<String, Histogram> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some(sample) = Sample::parse(line) else {
            continue;
        };
        let Some(suffix) = sample.name.strip_prefix(metric) else {
            continue;
        };
        let group = sample.label(group_by).unwrap_or_default().to_owned();
        match suffix {
            "_bucket" => {
                let Some(le) = sample.label("le").and_then(parse_bound) else {
                    continue;
                };
                let entry = buckets.entry(group).or_default();
                entry.entry(le.to_bits()).or_insert((le, 0.0)).1 += sample.value;
            }
            "_sum" => out.entry(group).or_default().sum += sample.value,
            "_count" => out.entry(group).or_default().count += sample.value,
            _ => {}
        }
    }
    for (group, by_bound) in buckets {
        let mut list: Vec<(f64, f64)> = by_bound.into_values().collect();
        list.sort_by(|a, b| a.0.total_cmp(&b.0));
        out.entry(group).or_default().buckets = list;
    }
    out
}

fn parse_bound(le: &str) -> Option<f64> {
    match le {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        other => other.parse().ok(),
    }
}

/// One sample line: `name{a="b",c="d"} value [timestamp]`.
struct Sample<'a> {
    name: &'a str,
    labels: Vec<(&'a str, String)>,
    value: f64,
}

impl<'a> Sample<'a> {
    fn parse(line: &'a str) -> Option<Self> {
        let line = line.trim();
        let (name, labels, rest) = match line.find('{') {
            Some(open) => {
                let close = open + line[open..].find('}')?;
                (
                    &line[..open],
                    parse_labels(&line[open + 1..close])?,
                    &line[close + 1..],
                )
            }
            None => {
                let space = line.find(' ')?;
                (&line[..space], Vec::new(), &line[space..])
            }
        };
        let value = rest.split_whitespace().next()?.parse().ok()?;
        Some(Self {
            name,
            labels,
            value,
        })
    }

    fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| value.as_str())
    }
}

/// `a="b",c="d\"e"`: quoted values with backslash escapes.
fn parse_labels(text: &str) -> Option<Vec<(&str, String)>> {
    let mut labels = Vec::new();
    let mut rest = text.trim_start_matches(',');
    while !rest.trim().is_empty() {
        let eq = rest.find('=')?;
        let key = rest[..eq].trim().trim_start_matches(',').trim();
        let mut chars = rest[eq + 1..].char_indices();
        if chars.next()?.1 != '"' {
            return None;
        }
        let mut value = String::new();
        let mut escaped = false;
        let mut end = None;
        for (i, c) in chars {
            match (escaped, c) {
                (true, c) => {
                    value.push(if c == 'n' { '\n' } else { c });
                    escaped = false;
                }
                (false, '\\') => escaped = true,
                (false, '"') => {
                    end = Some(eq + 1 + i + 1);
                    break;
                }
                (false, c) => value.push(c),
            }
        }
        labels.push((key, value));
        rest = rest[end?..].trim_start_matches(',');
    }
    Some(labels)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let samples: Vec<Duration> = (1..=100).rev().map(ms).collect();
        let cases = [(0.5, 50), (0.99, 99), (1.0, 100), (0.0, 1), (0.001, 1)];
        for (q, expected) in cases {
            assert_eq!(percentile(&samples, q), Some(ms(expected)), "q={q}");
        }
        assert_eq!(percentile(&[], 0.5), None);
        assert_eq!(percentile(&[ms(7)], 0.99), Some(ms(7)));
    }

    const APISERVER: &str = r#"
# HELP apiserver_admission_webhook_admission_duration_seconds [STABLE] Admission webhook latency
# TYPE apiserver_admission_webhook_admission_duration_seconds histogram
apiserver_admission_webhook_admission_duration_seconds_bucket{name="mutate.x",operation="CREATE",rejected="false",type="admit",le="0.005"} 80
apiserver_admission_webhook_admission_duration_seconds_bucket{name="mutate.x",operation="CREATE",rejected="false",type="admit",le="0.025"} 98
apiserver_admission_webhook_admission_duration_seconds_bucket{name="mutate.x",operation="CREATE",rejected="false",type="admit",le="0.1"} 100
apiserver_admission_webhook_admission_duration_seconds_bucket{name="mutate.x",operation="CREATE",rejected="false",type="admit",le="+Inf"} 100
apiserver_admission_webhook_admission_duration_seconds_sum{name="mutate.x",operation="CREATE",rejected="false",type="admit"} 0.4
apiserver_admission_webhook_admission_duration_seconds_count{name="mutate.x",operation="CREATE",rejected="false",type="admit"} 100
apiserver_admission_webhook_admission_duration_seconds_bucket{name="mutate.x",operation="CREATE",rejected="true",type="admit",le="0.005"} 1
apiserver_admission_webhook_admission_duration_seconds_bucket{name="mutate.x",operation="CREATE",rejected="true",type="admit",le="0.025"} 2
apiserver_admission_webhook_admission_duration_seconds_bucket{name="mutate.x",operation="CREATE",rejected="true",type="admit",le="0.1"} 2
apiserver_admission_webhook_admission_duration_seconds_bucket{name="mutate.x",operation="CREATE",rejected="true",type="admit",le="+Inf"} 2
apiserver_admission_webhook_admission_duration_seconds_sum{name="mutate.x",operation="CREATE",rejected="true",type="admit"} 0.02
apiserver_admission_webhook_admission_duration_seconds_count{name="mutate.x",operation="CREATE",rejected="true",type="admit"} 2
apiserver_admission_webhook_admission_duration_seconds_bucket{name="validate.x",operation="CREATE",rejected="false",type="validating",le="0.005"} 5
apiserver_admission_webhook_admission_duration_seconds_bucket{name="validate.x",operation="CREATE",rejected="false",type="validating",le="+Inf"} 5
apiserver_admission_webhook_admission_duration_seconds_count{name="validate.x",operation="CREATE",rejected="false",type="validating"} 5
apiserver_admission_webhook_admission_duration_seconds_sum{name="validate.x",operation="CREATE",rejected="false",type="validating"} 0.01
apiserver_admission_webhook_rejection_count{error_type="no_error",name="mutate.x",operation="CREATE",rejection_code="400",type="admit"} 2
"#;

    #[test]
    fn histograms_are_grouped_by_a_label_and_summed_over_the_others() {
        let all = histograms(
            APISERVER,
            "apiserver_admission_webhook_admission_duration_seconds",
            "name",
        );
        assert_eq!(all.keys().collect::<Vec<_>>(), ["mutate.x", "validate.x"]);
        let mutate = &all["mutate.x"];
        assert_eq!(
            mutate.buckets,
            [
                (0.005, 81.0),
                (0.025, 100.0),
                (0.1, 102.0),
                (f64::INFINITY, 102.0)
            ]
        );
        assert_eq!(mutate.count, 102.0);
        assert!((mutate.sum - 0.42).abs() < 1e-9);
    }

    #[test]
    fn quantiles_interpolate_within_the_bucket() {
        let histogram = Histogram {
            buckets: vec![
                (0.005, 80.0),
                (0.025, 98.0),
                (0.1, 100.0),
                (f64::INFINITY, 100.0),
            ],
            sum: 0.4,
            count: 100.0,
        };
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(close(histogram.quantile(0.5).unwrap(), 0.005 * 50.0 / 80.0));
        assert!(close(
            histogram.quantile(0.9).unwrap(),
            0.005 + 0.02 * 10.0 / 18.0
        ));
        assert!(close(
            histogram.quantile(0.99).unwrap(),
            0.025 + 0.075 * 0.5
        ));
        assert_eq!(histogram.bucket_bound(0.5), Some(0.005));
        assert_eq!(histogram.bucket_bound(0.99), Some(0.1));
        assert_eq!(histogram.mean(), Some(0.004));
        let overflow = Histogram {
            buckets: vec![(0.1, 1.0), (f64::INFINITY, 10.0)],
            ..Histogram::default()
        };
        assert_eq!(overflow.quantile(0.99), Some(0.1));
        assert_eq!(Histogram::default().quantile(0.5), None);
    }

    #[test]
    fn the_difference_of_two_scrapes_is_what_happened_in_between() {
        let before = Histogram {
            buckets: vec![(0.005, 10.0), (f64::INFINITY, 12.0)],
            sum: 0.1,
            count: 12.0,
        };
        let after = Histogram {
            buckets: vec![(0.005, 15.0), (0.025, 3.0), (f64::INFINITY, 20.0)],
            sum: 0.3,
            count: 20.0,
        };
        let since = after.since(&before);
        assert_eq!(
            since.buckets,
            [(0.005, 5.0), (0.025, 3.0), (f64::INFINITY, 8.0)]
        );
        assert_eq!(since.count, 8.0);
        assert!((since.sum - 0.2).abs() < 1e-9);
    }

    #[test]
    fn openmetrics_lines_parse_too() {
        let text = "poolkeeper_webhook_admission_duration_seconds_bucket{le=\"5.0e-5\",webhook=\"mutate\"} 3\n\
                    poolkeeper_webhook_admission_duration_seconds_bucket{le=\"+Inf\",webhook=\"mutate\"} 4\n\
                    poolkeeper_webhook_admission_duration_seconds_sum{webhook=\"mutate\"} 0.0004\n\
                    poolkeeper_webhook_admission_duration_seconds_count{webhook=\"mutate\"} 4\n\
                    poolkeeper_webhook_admission_duration_seconds_created{webhook=\"mutate\"} 1.7e9\n\
                    # EOF\n";
        let all = histograms(
            text,
            "poolkeeper_webhook_admission_duration_seconds",
            "webhook",
        );
        let mutate = &all["mutate"];
        assert_eq!(mutate.buckets, [(5.0e-5, 3.0), (f64::INFINITY, 4.0)]);
        assert_eq!(mutate.count, 4.0);
    }

    #[test]
    fn label_values_may_hold_escapes_and_commas() {
        let sample = Sample::parse(r#"m{a="x,\"y\"",b="z"} 1.5 1700000000"#).unwrap();
        assert_eq!(sample.name, "m");
        assert_eq!(sample.label("a"), Some(r#"x,"y""#));
        assert_eq!(sample.label("b"), Some("z"));
        assert_eq!(sample.value, 1.5);
        assert!(Sample::parse("m{a=b} 1").is_none());
    }
}
