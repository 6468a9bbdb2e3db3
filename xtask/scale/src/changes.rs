//! Which MachineClasses carry poolkeeper's finalizer, and since when, from a watch of our
//! own; and the change → finalizer latency of single changes measured with it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::PostParams;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use poolkeeper_api::{Machine, MachineClass};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::error::{Result, ScaleError};
use crate::objects::{self, Sizes};

#[derive(Debug, Default)]
struct Protected {
    /// Class name → when our watch first saw it with the finalizer.
    since: HashMap<String, Instant>,
    listed: bool,
}

/// A watch of the MachineClasses of one namespace.
pub struct ClassWatch {
    state: Arc<Mutex<Protected>>,
    changed: watch::Receiver<u64>,
    task: JoinHandle<()>,
}

impl ClassWatch {
    pub fn start(client: Client, namespace: &str, finalizer: &str) -> Self {
        let api: Api<MachineClass> = Api::namespaced(client, namespace);
        let state = Arc::new(Mutex::new(Protected::default()));
        let (notify, changed) = watch::channel(0_u64);
        let finalizer = finalizer.to_owned();
        let task = tokio::spawn({
            let state = state.clone();
            async move {
                let mut stream =
                    std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
                while let Some(event) = stream.next().await {
                    let Ok(event) = event else { continue };
                    record(&state, event, &finalizer);
                    notify.send_modify(|n| *n += 1);
                }
            }
        });
        Self {
            state,
            changed,
            task,
        }
    }

    /// Waits until `check` on the state gives a value.
    async fn wait<T>(
        &self,
        what: &str,
        timeout: Duration,
        check: impl Fn(&Protected) -> Option<T>,
    ) -> Result<T> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut changed = self.changed.clone();
        loop {
            changed.borrow_and_update();
            if let Some(value) = check(&self.state.lock().expect("state lock")) {
                return Ok(value);
            }
            match tokio::time::timeout_at(deadline, changed.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Err(ScaleError::Unexpected("the class watch ended".into())),
                Err(_) => return Err(ScaleError::timeout(what, timeout)),
            }
        }
    }

    /// Waits for the watch's first list.
    pub async fn wait_listed(&self, timeout: Duration) -> Result<()> {
        self.wait("the MachineClass watch's first list", timeout, |s| {
            s.listed.then_some(())
        })
        .await
    }

    /// Waits until `count` classes carry the finalizer.
    pub async fn wait_protected_count(&self, count: usize, timeout: Duration) -> Result<()> {
        let what = format!("{count} MachineClasses with the finalizer");
        self.wait(&what, timeout, |s| (s.since.len() >= count).then_some(()))
            .await
    }

    /// When the watch first saw `name` with the finalizer.
    pub async fn wait_protected(&self, name: &str, timeout: Duration) -> Result<Instant> {
        let what = format!("MachineClass {name} with the finalizer");
        self.wait(&what, timeout, |s| s.since.get(name).copied())
            .await
    }
}

impl Drop for ClassWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn record(state: &Mutex<Protected>, event: watcher::Event<MachineClass>, finalizer: &str) {
    let mut state = state.lock().expect("state lock");
    match event {
        watcher::Event::Apply(class) | watcher::Event::InitApply(class) => {
            let name = class.metadata.name.clone().unwrap_or_default();
            let has = class
                .metadata
                .finalizers
                .as_ref()
                .is_some_and(|f| f.iter().any(|f| f == finalizer));
            if has {
                state.since.entry(name).or_insert_with(Instant::now);
            } else {
                state.since.remove(&name);
            }
        }
        watcher::Event::Delete(class) => {
            state.since.remove(&class.metadata.name.unwrap_or_default());
        }
        watcher::Event::Init => {}
        watcher::Event::InitDone => state.listed = true,
    }
}

/// One at a time: a Machine for a class no Machine used yet, created; the time until the
/// watch sees that class with the finalizer. `gap` separates the changes, so each is a
/// change on its own for the debouncer.
pub async fn measure(
    client: &Client,
    namespace: &str,
    sizes: &Sizes,
    count: usize,
    gap: Duration,
    classes: &ClassWatch,
) -> Result<Vec<Duration>> {
    let api: Api<Machine> = Api::namespaced(client.clone(), namespace);
    let mut latencies = Vec::with_capacity(count);
    for change in 0..count.min(sizes.unused_classes) {
        let class = sizes.used_classes() + change;
        let machine: Machine =
            serde_json::from_value(objects::machine(sizes.machines + change, class, namespace))
                .map_err(|e| ScaleError::json("building a Machine", e))?;
        let started = Instant::now();
        api.create(&PostParams::default(), &machine)
            .await
            .map_err(|e| ScaleError::kube("creating a Machine for an unused class", e))?;
        let seen = classes
            .wait_protected(&objects::class_name(class), Duration::from_secs(60))
            .await?;
        latencies.push(seen.saturating_duration_since(started));
        if (change + 1) % 20 == 0 {
            println!("  {} changes done", change + 1);
        }
        tokio::time::sleep(gap).await;
    }
    Ok(latencies)
}
