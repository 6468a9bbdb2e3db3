use std::collections::BTreeMap;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ObjectMeta, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::{Api, ResourceExt};
use poolkeeper_testenv::TestEnv;

use crate::TIMEOUT;

#[tokio::test]
async fn config_map_create_get_and_watch() {
    let env = TestEnv::builder().start().await.unwrap();
    eprintln!("control plane started in {:?}", env.startup_duration());
    env.create_namespace("configmaps").await.unwrap();
    let api = Api::<ConfigMap>::namespaced(env.client(), "configmaps");

    let mut events = watcher::watcher(api.clone(), watcher::Config::default()).boxed();
    let init_done = tokio::time::timeout(TIMEOUT, async {
        while let Some(event) = events.next().await {
            if matches!(event.unwrap(), Event::InitDone) {
                return;
            }
        }
        panic!("watch stream ended before its initial list");
    });
    init_done.await.expect("initial list of the watcher");

    let config_map = ConfigMap {
        metadata: ObjectMeta {
            name: Some("settings".to_owned()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([("mode".to_owned(), "fast".to_owned())])),
        ..ConfigMap::default()
    };
    let created = api
        .create(&PostParams::default(), &config_map)
        .await
        .unwrap();
    assert!(created.resource_version().is_some());

    let fetched = api.get("settings").await.unwrap();
    assert_eq!(fetched.data, config_map.data);
    assert_eq!(fetched.uid(), created.uid());

    let seen = tokio::time::timeout(TIMEOUT, async {
        while let Some(event) = events.next().await {
            if let Event::Apply(object) = event.unwrap() {
                return object;
            }
        }
        panic!("watch stream ended before the add");
    })
    .await
    .expect("the watcher sees the created ConfigMap");
    assert_eq!(seen.name_any(), "settings");
    assert_eq!(seen.uid(), created.uid());
    assert_eq!(seen.data, config_map.data);
}
