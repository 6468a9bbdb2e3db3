//! The startup timeline, from poolkeeper's own log lines (stamped as they arrived) and the
//! moment `/readyz` first answered 200.
//!
//! The LIST phase runs from the `watchers` stage starting to `index synchronized` (every
//! kind's first list applied): the watchers list all kinds at once, so it is the longest
//! kind's list plus applying it to the index. Everything else is "the rest".

use std::time::Duration;

use crate::process::LogLine;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Startup {
    /// Process start until `/readyz` answered 200.
    pub ready: Duration,
    /// The `watchers` stage started (the API server had answered).
    pub watchers_started: Option<Duration>,
    /// Each kind's first list applied: kind, objects, when.
    pub lists: Vec<(String, u64, Duration)>,
    /// Every kind listed.
    pub synchronized: Option<Duration>,
    /// The last stage (webhook, leader election) ready.
    pub serving: Option<Duration>,
    /// The lease acquired.
    pub leader: Option<Duration>,
}

impl Startup {
    pub fn from_log(log: &[LogLine], ready: Duration) -> Self {
        let mut startup = Startup {
            ready,
            ..Startup::default()
        };
        for line in log {
            let Some(json) = line.json() else { continue };
            let message = json["message"].as_str().unwrap_or_default();
            let stage = json["stage"].as_str().unwrap_or_default();
            match message {
                "starting stage" if stage == "watchers" => {
                    startup.watchers_started.get_or_insert(line.at);
                }
                "initial list applied" => {
                    let kind = json["kind"].as_str().unwrap_or("?").to_owned();
                    let objects = json["objects"].as_u64().unwrap_or_default();
                    startup.lists.push((kind, objects, line.at));
                }
                "index synchronized" => {
                    startup.synchronized.get_or_insert(line.at);
                }
                "stage is ready" if stage == "serve" => {
                    startup.serving.get_or_insert(line.at);
                }
                m if m.contains("now the leader") => {
                    startup.leader.get_or_insert(line.at);
                }
                _ => {}
            }
        }
        startup
    }

    /// From the watchers' start until every kind was listed and applied.
    pub fn list_phase(&self) -> Option<Duration> {
        Some(self.synchronized?.saturating_sub(self.watchers_started?))
    }

    /// `ready` without the LIST phase.
    pub fn rest(&self) -> Option<Duration> {
        Some(self.ready.saturating_sub(self.list_phase()?))
    }

    /// From every kind listed to `/readyz` 200.
    pub fn after_lists(&self) -> Option<Duration> {
        Some(self.ready.saturating_sub(self.synchronized?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(ms: u64, text: &str) -> LogLine {
        LogLine {
            at: Duration::from_millis(ms),
            text: text.to_owned(),
        }
    }

    #[test]
    fn the_timeline_comes_from_the_log_messages() {
        let log = [
            line(
                5,
                r#"{"level":"INFO","message":"starting stage","stage":"admin"}"#,
            ),
            line(
                40,
                r#"{"level":"INFO","message":"starting stage","stage":"watchers"}"#,
            ),
            line(41, "not json: a panic message"),
            line(
                300,
                r#"{"message":"initial list applied","kind":"NodePool","objects":500}"#,
            ),
            line(
                2400,
                r#"{"message":"initial list applied","kind":"Node","objects":5000}"#,
            ),
            line(2410, r#"{"message":"index synchronized","kinds":"[..]"}"#),
            line(2420, r#"{"message":"starting stage","stage":"serve"}"#),
            line(
                2450,
                r#"{"message":"acquired the lease: now the leader","lease":"x"}"#,
            ),
            line(2460, r#"{"message":"stage is ready","stage":"serve"}"#),
        ];
        let startup = Startup::from_log(&log, Duration::from_millis(2470));
        let ms = Duration::from_millis;
        assert_eq!(startup.watchers_started, Some(ms(40)));
        assert_eq!(
            startup.lists,
            [
                ("NodePool".to_owned(), 500, ms(300)),
                ("Node".to_owned(), 5000, ms(2400))
            ]
        );
        assert_eq!(startup.synchronized, Some(ms(2410)));
        assert_eq!(startup.serving, Some(ms(2460)));
        assert_eq!(startup.leader, Some(ms(2450)));
        assert_eq!(startup.list_phase(), Some(ms(2370)));
        assert_eq!(startup.rest(), Some(ms(100)));
        assert_eq!(startup.after_lists(), Some(ms(60)));
    }

    #[test]
    fn missing_messages_leave_the_split_unknown() {
        let startup = Startup::from_log(&[], Duration::from_secs(1));
        assert_eq!(startup.list_phase(), None);
        assert_eq!(startup.rest(), None);
    }
}
