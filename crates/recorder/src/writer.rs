//! The I/O: looking up a MachineClass's UID and writing the Event through
//! kube's [`Recorder`], which keeps the Events it wrote (for six minutes
//! after their last repetition) and turns a repetition into a patch of the
//! same object's `series` instead of a new object.

use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Recorder, Reporter};
use kube::{Api, Client};
use poolkeeper_api::MachineClass;
use poolkeeper_bus::ObjectKey;

use crate::error::Error;
use crate::notice::class_reference;
use crate::queue::{Pending, Regarding};

/// How one write went.
#[derive(Debug)]
pub(crate) struct Written {
    pub(crate) pending: Pending,
    /// A UID looked up for it, and the [`crate::uids::Uids`] generation at
    /// the start of the lookup.
    pub(crate) learned: Option<(ObjectKey, String, u64)>,
    pub(crate) result: Result<(), Error>,
}

/// Writes Events as one reporter; cheap to clone (the clones share kube's
/// cache of written Events).
#[derive(Clone)]
pub(crate) struct Writer {
    client: Client,
    recorder: Recorder,
    timeout: Duration,
}

impl Writer {
    pub(crate) fn new(client: Client, reporter: Reporter, timeout: Duration) -> Self {
        Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            timeout,
        }
    }

    /// Writes `pending`, looking its MachineClass's UID up unless `known_uid`
    /// has it; all of it within the write timeout.
    pub(crate) async fn write(
        self,
        pending: Pending,
        known_uid: Option<String>,
        generation: u64,
    ) -> Written {
        let mut learned = None;
        let attempt = self.resolve_and_publish(&pending, known_uid, generation, &mut learned);
        let result = match tokio::time::timeout(self.timeout, attempt).await {
            Ok(result) => result,
            Err(_) => Err(Error::Timeout(self.timeout)),
        };
        Written {
            pending,
            learned,
            result,
        }
    }

    async fn resolve_and_publish(
        &self,
        pending: &Pending,
        known_uid: Option<String>,
        generation: u64,
        learned: &mut Option<(ObjectKey, String, u64)>,
    ) -> Result<(), Error> {
        let reference = match &pending.regarding {
            Regarding::Object(reference) => reference.clone(),
            Regarding::MachineClass(key) => {
                let uid = match known_uid {
                    Some(uid) => Some(uid),
                    None => self.class_uid(key).await?,
                };
                if let Some(uid) = &uid {
                    *learned = Some((key.clone(), uid.clone(), generation));
                }
                class_reference(key, uid)
            }
        };
        self.publish(pending, &reference).await
    }

    /// The class's UID; `None` when it is gone already (the finalizer just
    /// removed was the last one of a class being deleted).
    async fn class_uid(&self, key: &ObjectKey) -> Result<Option<String>, Error> {
        let Some(namespace) = key.namespace.as_deref() else {
            return Ok(None);
        };
        let classes: Api<MachineClass> = Api::namespaced(self.client.clone(), namespace);
        let meta = classes
            .get_metadata_opt(&key.name)
            .await
            .map_err(|source| Error::Lookup {
                key: key.clone(),
                source,
            })?;
        Ok(meta.and_then(|meta| meta.metadata.uid))
    }

    async fn publish(&self, pending: &Pending, reference: &ObjectReference) -> Result<(), Error> {
        self.recorder
            .publish(&pending.notice.to_kube(), reference)
            .await
            .map_err(Error::Write)
    }
}
