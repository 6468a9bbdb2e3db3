//! Health reports in the format of Kubernetes components' `/healthz`,
//! `/livez` and `/readyz`.

use std::fmt::Write as _;

use axum::http::StatusCode;
use poolkeeper_supervisor::CheckResult;

/// A rendered report: status code and plain-text body.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Report {
    pub(crate) status: StatusCode,
    pub(crate) body: String,
}

/// The report over every check of `endpoint` (`healthz`, `livez`,
/// `readyz`): `ok` when all pass, one line per check when `verbose` or when
/// any fails.
pub(crate) fn all(endpoint: &str, checks: &[CheckResult], verbose: bool) -> Report {
    let healthy = checks.iter().all(|c| c.status.is_ok());
    if healthy && !verbose {
        return Report {
            status: StatusCode::OK,
            body: "ok".to_string(),
        };
    }
    let mut body = String::new();
    for check in checks {
        line(&mut body, check);
    }
    let (status, verdict) = if healthy {
        (StatusCode::OK, "passed")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "failed")
    };
    let _ = writeln!(body, "{endpoint} check {verdict}");
    Report { status, body }
}

/// The report of the single check `name`, `None` if there is no such check.
pub(crate) fn one(checks: &[CheckResult], name: &str) -> Option<Report> {
    let check = checks.iter().find(|c| c.name == name)?;
    Some(match &check.status {
        Ok(()) => Report {
            status: StatusCode::OK,
            body: "ok".to_string(),
        },
        Err(_) => {
            let mut body = String::new();
            line(&mut body, check);
            Report {
                status: StatusCode::SERVICE_UNAVAILABLE,
                body,
            }
        }
    })
}

fn line(body: &mut String, check: &CheckResult) {
    let _ = match (&check.status, &check.detail) {
        (Ok(()), Some(detail)) => writeln!(body, "[+]{} ok: {detail}", check.name),
        (Ok(()), None) => writeln!(body, "[+]{} ok", check.name),
        (Err(reason), _) => writeln!(body, "[-]{} failed: {reason}", check.name),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pass(name: &str) -> CheckResult {
        CheckResult {
            name: name.to_string(),
            status: Ok(()),
            detail: None,
        }
    }

    fn fail(name: &str, reason: &str) -> CheckResult {
        CheckResult {
            name: name.to_string(),
            status: Err(reason.to_string()),
            detail: None,
        }
    }

    #[test]
    fn reports() {
        let healthy = [pass("index"), pass("shutdown")];
        let detailed = [CheckResult {
            detail: Some("serving CN=x".to_owned()),
            ..pass("webhook")
        }];
        let failing = [fail("index", "not synchronized"), pass("shutdown")];
        let cases: [(&[CheckResult], bool, StatusCode, &str); 8] = [
            (&detailed, false, StatusCode::OK, "ok"),
            (
                &detailed,
                true,
                StatusCode::OK,
                "[+]webhook ok: serving CN=x\nreadyz check passed\n",
            ),
            (&healthy, false, StatusCode::OK, "ok"),
            (
                &healthy,
                true,
                StatusCode::OK,
                "[+]index ok\n[+]shutdown ok\nreadyz check passed\n",
            ),
            (
                &failing,
                false,
                StatusCode::SERVICE_UNAVAILABLE,
                "[-]index failed: not synchronized\n[+]shutdown ok\nreadyz check failed\n",
            ),
            (
                &failing,
                true,
                StatusCode::SERVICE_UNAVAILABLE,
                "[-]index failed: not synchronized\n[+]shutdown ok\nreadyz check failed\n",
            ),
            (&[], false, StatusCode::OK, "ok"),
            (&[], true, StatusCode::OK, "readyz check passed\n"),
        ];
        for (checks, verbose, status, body) in cases {
            let report = all("readyz", checks, verbose);
            assert_eq!(report.status, status, "{checks:?} verbose={verbose}");
            assert_eq!(report.body, body, "{checks:?} verbose={verbose}");
        }
    }

    #[test]
    fn single_checks() {
        let checks = [fail("index", "not synchronized"), pass("shutdown")];
        assert_eq!(
            one(&checks, "shutdown"),
            Some(Report {
                status: StatusCode::OK,
                body: "ok".into()
            })
        );
        assert_eq!(
            one(&checks, "index"),
            Some(Report {
                status: StatusCode::SERVICE_UNAVAILABLE,
                body: "[-]index failed: not synchronized\n".into()
            })
        );
        assert_eq!(one(&checks, "webhook"), None);
    }
}
