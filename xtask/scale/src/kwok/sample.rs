//! Readings taken around a phase: a process's CPU time from /proc, counters from a
//! Prometheus text page.

use std::time::Duration;

/// Clock ticks per second of /proc's utime and stime (USER_HZ, 100 on Linux).
const TICKS_PER_SECOND: f64 = 100.0;

/// utime + stime of process `pid` so far; `None` once it is gone.
pub fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces; the fields after it do not.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat, 12 and 13 after `(comm)`.
    let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_secs_f64(ticks as f64 / TICKS_PER_SECOND))
}

/// The sum of the samples of `name` whose labels contain every one of `labels`
/// (`kind="Node"`, ...).
pub fn metric(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (metric, rest) = series.split_once('{').unwrap_or((series, ""));
            (metric == name && labels.iter().all(|l| rest.contains(l))).then_some(value)
        })
        .filter_map(|value| value.parse::<f64>().ok())
        .sum()
}

/// CPU share of one core: `cpu` spent over `wall`.
pub fn share(cpu: Duration, wall: Duration) -> f64 {
    cpu.as_secs_f64() / wall.as_secs_f64().max(1e-9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_summed_over_matching_series() {
        let text = "# TYPE x counter\n\
                    poolkeeper_watch_changes_total{kind=\"Node\",change=\"applied\"} 3\n\
                    poolkeeper_watch_changes_total{kind=\"Node\",change=\"deleted\"} 1\n\
                    poolkeeper_watch_changes_total{kind=\"Machine\",change=\"applied\"} 7\n\
                    apiserver_request_total{resource=\"nodes\",verb=\"PATCH\",code=\"200\"} 5\n";
        assert_eq!(
            metric(text, "poolkeeper_watch_changes_total", &["kind=\"Node\""]),
            4.0
        );
        assert_eq!(metric(text, "poolkeeper_watch_changes_total", &[]), 11.0);
        assert_eq!(
            metric(
                text,
                "apiserver_request_total",
                &["resource=\"nodes\"", "verb=\"PATCH\""]
            ),
            5.0
        );
    }

    #[test]
    fn this_process_has_a_cpu_time() {
        assert!(cpu_time(std::process::id()).is_some());
    }
}
