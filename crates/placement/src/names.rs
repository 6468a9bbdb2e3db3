//! The name and value rules of `k8s.io/apimachinery/pkg/util/validation`
//! that label selectors apply: a selector requirement whose key or values
//! break them is rejected by `labels.NewRequirement`, and the scheduler then
//! treats the whole node selector term as matching nothing.

const QUALIFIED_NAME_MAX_LEN: usize = 63;
const LABEL_VALUE_MAX_LEN: usize = 63;
const DNS1123_SUBDOMAIN_MAX_LEN: usize = 253;
const DNS1123_LABEL_MAX_LEN: usize = 63;

/// `IsQualifiedName`: an optional DNS-1123 subdomain prefix and `/`, then a
/// name of at most 63 characters matching `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`.
pub(crate) fn qualified_name_errors(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errors.push("prefix part must be non-empty".to_owned());
            } else {
                errors.extend(
                    dns1123_subdomain_errors(prefix)
                        .into_iter()
                        .map(|e| format!("prefix part {e}")),
                );
            }
            *name
        }
        _ => {
            errors.push(
                "a qualified name must consist of alphanumeric characters, '-', '_' or '.', \
                 and must start and end with an alphanumeric character, with an optional \
                 DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
                    .to_owned(),
            );
            return errors;
        }
    };
    if name.is_empty() {
        errors.push("name part must be non-empty".to_owned());
    } else if name.len() > QUALIFIED_NAME_MAX_LEN {
        errors.push(format!(
            "name part must be no more than {QUALIFIED_NAME_MAX_LEN} characters"
        ));
    }
    if !is_qualified_name_part(name) {
        errors.push(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must \
             start and end with an alphanumeric character"
                .to_owned(),
        );
    }
    errors
}

/// `IsValidLabelValue`: empty, or at most 63 characters matching the
/// qualified-name pattern.
pub(crate) fn label_value_errors(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > LABEL_VALUE_MAX_LEN {
        errors.push(format!(
            "must be no more than {LABEL_VALUE_MAX_LEN} characters"
        ));
    }
    if !value.is_empty() && !is_qualified_name_part(value) {
        errors.push(
            "a valid label value must be an empty string or consist of alphanumeric \
             characters, '-', '_' or '.', and must start and end with an alphanumeric character"
                .to_owned(),
        );
    }
    errors
}

/// `IsDNS1123Label`, the rule for namespace names.
pub(crate) fn is_dns1123_label(value: &str) -> bool {
    !value.is_empty() && value.len() <= DNS1123_LABEL_MAX_LEN && dns_label_shape(value)
}

fn dns1123_subdomain_errors(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX_LEN {
        errors.push(format!(
            "must be no more than {DNS1123_SUBDOMAIN_MAX_LEN} characters"
        ));
    }
    if !value.split('.').all(dns_label_shape) {
        errors.push(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric \
             characters, '-' or '.', and must start and end with an alphanumeric character"
                .to_owned(),
        );
    }
    errors
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`
fn dns_label_shape(label: &str) -> bool {
    let bytes = label.as_bytes();
    let edge = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            edge(first) && edge(last) && bytes.iter().all(|b| edge(b) || *b == b'-')
        }
        _ => false,
    }
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`
fn is_qualified_name_part(value: &str) -> bool {
    let bytes = value.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qualified_names() {
        let valid = [
            "a",
            "A",
            "1",
            "abc",
            "a.b_c-d",
            "kubernetes.io/hostname",
            "apps.openyurt.io/nodepool",
            "node-role.kubernetes.io/edge",
            "example.com/MyName",
            &"a".repeat(63),
            &format!("{}/{}", "a".repeat(253), "b"),
        ];
        for name in valid {
            assert!(
                qualified_name_errors(name).is_empty(),
                "{name:?} should be valid"
            );
        }
        let invalid = [
            "",
            "-a",
            "a-",
            "a b",
            "a/b/c",
            "/a",
            "a/",
            "Example.com/a",
            "ex_ample.com/a",
            "é",
            &"a".repeat(64),
            &format!("{}/{}", "a".repeat(254), "b"),
        ];
        for name in invalid {
            assert!(
                !qualified_name_errors(name).is_empty(),
                "{name:?} should be invalid"
            );
        }
    }

    #[test]
    fn label_values() {
        for value in ["", "a", "5", "05", "My_Value.1", &"x".repeat(63)] {
            assert!(
                label_value_errors(value).is_empty(),
                "{value:?} should be valid"
            );
        }
        for value in ["-5", "+5", "a ", "a/b", "_a", "a.", &"x".repeat(64)] {
            assert!(
                !label_value_errors(value).is_empty(),
                "{value:?} should be invalid"
            );
        }
    }

    #[test]
    fn namespaces() {
        for ns in ["default", "kube-system", "a", "a1", &"a".repeat(63)] {
            assert!(is_dns1123_label(ns), "{ns:?}");
        }
        for ns in ["", "A", "a.b", "-a", "a-", "a_b", &"a".repeat(64)] {
            assert!(!is_dns1123_label(ns), "{ns:?}");
        }
    }
}
