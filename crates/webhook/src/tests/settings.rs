//! Settings come from the configuration, and every path the configuration
//! accepts is one the router serves as written.

use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use http::StatusCode;
use poolkeeper_config::Config;
use serde_json::json;

use super::{admit, fixture_with, pod_review, post, settings};
use crate::settings::WebhookSettings;

#[test]
fn settings_are_taken_from_the_configuration() {
    let yaml = "
webhook:
  listen: 127.0.0.1:8443
  certDir: /etc/webhook/certs
  certReloadInterval: 1m
  shutdownTimeout: 7s
  mutatePath: /v1/mutate
  validatePath: /v1/validate
  maxBodyBytes: 4096
";
    let config = Config::from_yaml_str(yaml).unwrap();
    let settings = WebhookSettings::from(&config);
    assert_eq!(
        settings.listen,
        "127.0.0.1:8443".parse::<SocketAddr>().unwrap()
    );
    assert_eq!(
        settings.cert_dir,
        std::path::Path::new("/etc/webhook/certs")
    );
    assert_eq!(settings.cert_reload_interval, Duration::from_secs(60));
    assert_eq!(settings.shutdown_timeout, Duration::from_secs(7));
    assert_eq!(settings.mutate_path, "/v1/mutate");
    assert_eq!(settings.validate_path, "/v1/validate");
    assert_eq!(settings.max_body_bytes, 4096);
    assert_eq!(
        settings.certificate_source,
        poolkeeper_config::CertificateSource::Files
    );
    assert_eq!(settings.secret_name, "poolkeeper-webhook-tls");
    assert_eq!(settings.secret_namespace, "poolkeeper-system");
}

/// `webhook: {mutatePath: .., validatePath: ..}` as YAML; JSON strings are
/// YAML double-quoted scalars, so any path is written as it is.
fn paths_config(mutate: &str, validate: &str) -> Result<Config, String> {
    let yaml = format!(
        "webhook: {{mutatePath: {}, validatePath: {}}}",
        serde_json::to_string(mutate).unwrap(),
        serde_json::to_string(validate).unwrap()
    );
    Config::from_yaml_str(&yaml).map_err(|errors| errors.to_string())
}

/// What `check-config` accepts is what `run` serves: each pair of paths is
/// either refused by the configuration, naming the field, or built into a
/// router (no panic) that answers on exactly those paths.
#[tokio::test]
async fn the_configuration_admits_only_paths_the_router_serves() {
    let accepted = [
        ("/mutate-pods", "/validate-pods"),
        ("/v1/mutate_pods.json", "/v1/validate-pods~x"),
        ("/", "/validate"),
        ("/mutate/", "/mutate"),
        ("/a/b/c/d", "/a/b/c"),
        ("/.well-known/mutate", "/_/validate"),
        ("/MUTATE", "/mutate"),
    ];
    let refused = [
        ("mutate", "/validate", "webhook.mutatePath"),
        ("", "/validate", "webhook.mutatePath"),
        ("/mutate:pods", "/validate", "webhook.mutatePath"),
        ("/mutate/:pod", "/validate", "webhook.mutatePath"),
        ("/mutate/{pod}", "/validate", "webhook.mutatePath"),
        ("/mutate/{*rest}", "/validate", "webhook.mutatePath"),
        ("/mutate/*rest", "/validate", "webhook.mutatePath"),
        ("/mutate pods", "/validate", "webhook.mutatePath"),
        ("/mutate?pods", "/validate", "webhook.mutatePath"),
        ("/mutate#pods", "/validate", "webhook.mutatePath"),
        ("/mütate", "/validate", "webhook.mutatePath"),
        ("/mutate", "/validate%20pods", "webhook.validatePath"),
        ("/same", "/same", "webhook.validatePath"),
    ];
    for (mutate, validate, field) in refused {
        let errors = paths_config(mutate, validate).expect_err(mutate);
        assert!(
            errors.lines().any(|line| line.starts_with(field)),
            "{mutate:?} {validate:?}: {errors}"
        );
    }
    for (mutate, validate) in accepted {
        let config = paths_config(mutate, validate).unwrap();
        let settings = WebhookSettings {
            max_body_bytes: settings().max_body_bytes,
            ..WebhookSettings::from(&config)
        };
        let built = std::panic::catch_unwind(AssertUnwindSafe(|| fixture_with(settings)));
        let f = built.unwrap_or_else(|_| panic!("{mutate:?} {validate:?}: the router panicked"));
        let review = pod_review("shop-beijing", json!({}));
        let mutated = admit(&f.router, mutate, &review).await;
        assert_eq!(mutated["patchType"], "JSONPatch", "{mutate:?}");
        let validated = admit(&f.router, validate, &review).await;
        assert!(validated.get("patchType").is_none(), "{validate:?}");
        for other in [format!("{mutate}x"), format!("{validate}/x")] {
            let (status, _) = post(&f.router, &other, "{}").await;
            assert_eq!(status, StatusCode::NOT_FOUND, "{other:?} is not served");
        }
    }
}
