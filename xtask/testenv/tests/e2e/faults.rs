//! Fault injection: killing and starting control-plane processes, compacting etcd, cutting
//! clients off through the proxy.

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, PostParams, WatchEvent, WatchParams};
use kube::{Api, Client};
use poolkeeper_testenv::{Process, TestEnv};
use serde_json::json;

use crate::TIMEOUT;

fn config_map(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}})).unwrap()
}

async fn create(client: &Client, name: &str) -> ConfigMap {
    Api::<ConfigMap>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &config_map(name))
        .await
        .unwrap_or_else(|e| panic!("creating {name}: {e}"))
}

fn alive(pid: u32) -> bool {
    std::path::Path::new("/proc").join(pid.to_string()).exists()
}

#[tokio::test]
async fn a_killed_apiserver_starts_again_with_its_objects() {
    let mut env = TestEnv::builder().start().await.unwrap();
    let client = env.client();
    let before = create(&client, "before").await;
    let first = env.pid(Process::ApiServer).unwrap();
    let url = env.server_url();

    env.kill(Process::ApiServer).unwrap();
    assert!(!alive(first), "the apiserver {first} is gone");
    assert_eq!(env.pid(Process::ApiServer), None);
    let configs: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let refused = configs.get("before").await.expect_err("nobody listens");
    assert!(!matches!(refused, kube::Error::Api(_)), "{refused}");
    assert!(env.kill(Process::ApiServer).is_err(), "killed twice");

    let ready_in = env.start(Process::ApiServer).await.unwrap();
    let second = env.pid(Process::ApiServer).unwrap();
    assert_ne!(first, second);
    assert_eq!(env.server_url(), url, "the same port");
    // The same etcd: the object and its resourceVersion survived.
    let after = configs.get("before").await.unwrap();
    assert_eq!(
        after.metadata.resource_version,
        before.metadata.resource_version
    );
    create(&client, "after").await;
    assert!(
        env.log_tail(Process::ApiServer, 100_000)
            .contains("kube-apiserver started again"),
        "one log for both runs"
    );
    println!("kube-apiserver ready {ready_in:?} after its start");

    let restarted_in = env.restart(Process::ApiServer).await.unwrap();
    configs.get("after").await.unwrap();
    println!("kube-apiserver killed and ready again in {restarted_in:?}");
}

#[tokio::test]
async fn a_restarted_etcd_keeps_its_data() {
    let mut env = TestEnv::builder().start().await.unwrap();
    let client = env.client();
    create(&client, "kept").await;
    let revision = env.etcd_revision().await.unwrap();
    let took = env.restart(Process::Etcd).await.unwrap();
    let configs: Api<ConfigMap> = Api::namespaced(client, "default");
    configs.get("kept").await.unwrap();
    assert!(env.etcd_revision().await.unwrap() >= revision);
    println!("etcd killed, and etcd and kube-apiserver ready again, in {took:?}");
}

/// Without the watch cache, a watch from before a compaction gets `410 Gone`.
#[tokio::test]
async fn a_watch_from_before_a_compaction_is_gone() {
    let env = TestEnv::builder().watch_cache(false).start().await.unwrap();
    let client = env.client();
    let configs: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let first = create(&client, "first").await;
    let old = first.metadata.resource_version.unwrap();
    configs
        .delete("first", &DeleteParams::default())
        .await
        .unwrap();
    create(&client, "second").await;

    let revision = env.compact_etcd().await.unwrap();
    assert!(
        revision > old.parse::<i64>().unwrap(),
        "{revision} vs {old}"
    );
    let stream = configs.watch(&WatchParams::default(), &old).await.unwrap();
    let event = tokio::time::timeout(TIMEOUT, stream.boxed().try_next())
        .await
        .expect("an answer to the watch")
        .unwrap();
    match event {
        Some(WatchEvent::Error(status)) => {
            assert_eq!(status.code, 410, "{status:?}");
            assert_eq!(status.reason, "Expired", "{status:?}");
        }
        other => panic!("expected 410 Gone, got {other:?}"),
    }
    // Compacting again is accepted, whatever was written meanwhile (the apiserver writes
    // its own leases).
    assert!(env.compact_etcd().await.unwrap() >= revision);
}

#[tokio::test]
async fn a_severed_proxy_cuts_its_clients_off_until_restored() {
    let env = TestEnv::builder().start().await.unwrap();
    let proxy = env.proxy().await.unwrap();
    assert_ne!(proxy.server_url(), env.server_url());
    let through: Api<ConfigMap> = Api::namespaced(proxy.client(), "default");
    let direct: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    create(&proxy.client(), "via-proxy").await;
    direct.get("via-proxy").await.unwrap();

    // An open watch through the proxy ends when the proxy is severed.
    let mut watch = through
        .watch(&WatchParams::default().timeout(280), "0")
        .await
        .unwrap()
        .boxed();
    let opened = tokio::time::timeout(TIMEOUT, watch.next())
        .await
        .expect("the watch replays the current objects");
    assert!(
        matches!(opened, Some(Ok(WatchEvent::Added(_)))),
        "{opened:?}"
    );
    proxy.sever().await;
    assert!(proxy.is_severed());
    let cut = Instant::now();
    let ended = tokio::time::timeout(TIMEOUT, async {
        loop {
            match watch.next().await {
                None | Some(Err(_)) => return,
                Some(Ok(_)) => {}
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the watch ends when the proxy is severed");
    println!(
        "watch through the proxy ended {:?} after the cut",
        cut.elapsed()
    );
    let refused = through.get("via-proxy").await.expect_err("severed");
    assert!(!matches!(refused, kube::Error::Api(_)), "{refused}");
    // The apiserver itself is fine.
    create(&env.client(), "while-severed").await;

    proxy.restore().await.unwrap();
    let accepted = proxy.accepted();
    let got = tokio::time::timeout(Duration::from_secs(10), through.get("while-severed"))
        .await
        .expect("an answer through the restored proxy");
    assert!(got.is_ok(), "{got:?}");
    assert!(proxy.accepted() > accepted, "a new connection");
}
