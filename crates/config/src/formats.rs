//! Field formats whose parse errors must say what is wrong, not just that
//! something is.

use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer};

/// A section left empty (`reconciler:` with every key commented out) is null
/// in YAML; it means "all defaults", like a missing section.
pub(crate) fn or_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// Deserializes a string with `parse`, whose message becomes the serde
/// error, so that it reaches the user next to the field's path.
struct ParseStrVisitor<T> {
    expecting: &'static str,
    parse: fn(&str) -> Result<T, String>,
}

impl<T> Visitor<'_> for ParseStrVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.expecting)
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<T, E> {
        (self.parse)(value).map_err(E::custom)
    }
}

/// Durations in humantime notation (`500ms`, `10m`, `1h 30m`).
///
/// Serialization is humantime-serde's; deserialization parses with humantime
/// directly because humantime-serde drops humantime's reason (unknown unit,
/// missing unit, overflow) from its error.
pub(crate) mod duration {
    use std::time::Duration;

    use serde::{Deserializer, Serializer};

    use super::ParseStrVisitor;

    pub(crate) fn serialize<S: Serializer>(
        value: &Duration,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        humantime_serde::serialize(value, serializer)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Duration, D::Error> {
        deserializer.deserialize_str(ParseStrVisitor {
            expecting: "a duration such as 500ms, 5s or 10m",
            parse,
        })
    }

    pub(crate) fn parse(value: &str) -> Result<Duration, String> {
        humantime::parse_duration(value.trim())
            .map_err(|err| format!("invalid duration {value:?}: {err}"))
    }
}

/// Listen addresses: `IP:PORT`, IPv6 in brackets (`[::]:9443`).
///
/// `SocketAddr`'s own error is only "invalid socket address syntax"; this
/// names the part that is wrong (port out of range, host not an IP, ...).
pub(crate) mod listen_addr {
    use std::net::{IpAddr, SocketAddr};

    use serde::{Deserializer, Serialize, Serializer};

    use super::ParseStrVisitor;

    pub(crate) fn serialize<S: Serializer>(
        value: &SocketAddr,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        value.serialize(serializer)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<SocketAddr, D::Error> {
        deserializer.deserialize_str(ParseStrVisitor {
            expecting: "a listen address IP:PORT such as 0.0.0.0:8081 or [::]:8081",
            parse: |value| {
                parse(value).map_err(|reason| format!("invalid listen address {value:?}: {reason}"))
            },
        })
    }

    pub(crate) fn parse(value: &str) -> Result<SocketAddr, String> {
        if let Ok(addr) = value.parse::<SocketAddr>() {
            return Ok(addr);
        }
        let Some((host, port)) = value.rsplit_once(':') else {
            return Err("expected IP:PORT, e.g. 0.0.0.0:8081".to_owned());
        };
        if host.is_empty() {
            return Err("missing IP before the port, e.g. 0.0.0.0:8081".to_owned());
        }
        let port: u16 = match port.parse::<u64>() {
            Ok(port) => {
                u16::try_from(port).map_err(|_| format!("port {port} is out of range (0-65535)"))?
            }
            Err(_) => return Err(format!("port {port:?} is not a number")),
        };
        let bracketed = host.strip_prefix('[').and_then(|h| h.strip_suffix(']'));
        match (bracketed, host.parse::<IpAddr>()) {
            (Some(inner), _) => match inner.parse::<IpAddr>() {
                Ok(ip) => Ok(SocketAddr::new(ip, port)),
                Err(_) => Err(format!("{inner:?} is not an IPv6 address")),
            },
            (None, Ok(IpAddr::V6(_))) => {
                Err(format!("an IPv6 address needs brackets: [{host}]:{port}"))
            }
            (None, Ok(ip)) => Ok(SocketAddr::new(ip, port)),
            (None, Err(_)) => Err(format!(
                "host {host:?} is not an IP address (use 0.0.0.0 or [::] for all interfaces)"
            )),
        }
    }

    #[cfg(test)]
    mod tests {
        use super::parse;

        #[test]
        fn accepts_ipv4_and_bracketed_ipv6() {
            assert_eq!(parse("0.0.0.0:8081").unwrap().port(), 8081);
            assert_eq!(parse("127.0.0.1:0").unwrap().port(), 0);
            assert!(parse("[::]:9443").unwrap().is_ipv6());
            assert!(parse("[::1]:9443").unwrap().ip().is_loopback());
        }

        #[test]
        fn explains_what_is_wrong() {
            let cases = [
                ("0.0.0.0:70000", "port 70000 is out of range (0-65535)"),
                ("0.0.0.0:http", "port \"http\" is not a number"),
                ("0.0.0.0:", "port \"\" is not a number"),
                ("0.0.0.0", "expected IP:PORT"),
                (":8081", "missing IP"),
                ("localhost:8081", "host \"localhost\" is not an IP address"),
                ("::1:8081", "needs brackets: [::1]:8081"),
                ("[nope]:8081", "\"nope\" is not an IPv6 address"),
            ];
            for (input, expected) in cases {
                let err = parse(input).unwrap_err();
                assert!(err.contains(expected), "{input}: {err}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::duration::parse;

    #[test]
    fn durations_parse_in_humantime_notation() {
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse("1h 30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse(" 2s "), Ok(Duration::from_secs(2)));
    }

    #[test]
    fn duration_errors_keep_humantimes_reason() {
        let err = parse("5 parsecs").unwrap_err();
        assert!(
            err.starts_with(r#"invalid duration "5 parsecs": unknown time unit "parsecs""#),
            "{err}"
        );
        let err = parse("5").unwrap_err();
        assert!(err.contains("time unit needed"), "{err}");
        assert!(parse("").unwrap_err().contains("value was empty"));
    }
}
