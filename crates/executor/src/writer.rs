//! The write side of the executor: finalizer patches on MachineClasses and
//! on the Secrets they reference.

use std::future::Future;
use std::time::Duration;

use json_patch::Patch as JsonPatch;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::core::{PartialObjectMeta, Status};
use kube::{Api, Client};
use poolkeeper_bus::ObjectKey;
use poolkeeper_supervisor::NotLeader;

/// Why a write did not happen. The executor's only error type: everything
/// else it does is reading the index.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The object changed since the index saw it: a guard test of the patch
    /// failed (422) or another writer won the race (409).
    #[error("conflict: {}", status_message(.0))]
    Conflict(#[source] Box<Status>),
    /// The object is gone from the API server.
    #[error("not found")]
    NotFound,
    /// The request failed otherwise: transport, authorization, validation,
    /// server errors.
    #[error("API request failed: {0}")]
    Api(#[source] kube::Error),
    /// The API server did not answer within `executor.writeTimeout`.
    #[error("no answer within {}", humantime::format_duration(*.0))]
    Timeout(Duration),
    /// MachineClasses and Secrets are namespaced: a key without a namespace
    /// names none.
    #[error("{0} has no namespace")]
    NotNamespaced(ObjectKey),
    /// The leadership term ran out (or ended): the write was not sent.
    #[error(transparent)]
    NotLeader(#[from] NotLeader),
}

/// Applies finalizer patches. Implemented with kube for the cluster, and in
/// memory for tests.
pub trait ClassWriter: Send + Sync + 'static {
    /// Applies `patch`, a JSON patch of the MachineClass `key`.
    fn patch_finalizers(
        &self,
        key: &ObjectKey,
        patch: &JsonPatch,
    ) -> impl Future<Output = Result<(), WriteError>> + Send;

    /// Applies `patch`, a JSON patch of the finalizers of the Secret `key`.
    /// The answer must not bring the Secret's data into the process.
    fn patch_secret_finalizers(
        &self,
        key: &ObjectKey,
        patch: &JsonPatch,
    ) -> impl Future<Output = Result<(), WriteError>> + Send;
}

/// The field manager recorded for poolkeeper's writes.
pub(crate) const FIELD_MANAGER: &str = "poolkeeper";

/// [`ClassWriter`] talking to the Kubernetes API.
#[derive(Clone)]
pub struct KubeClassWriter {
    client: Client,
    resource: ApiResource,
    params: PatchParams,
}

impl std::fmt::Debug for KubeClassWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeClassWriter")
            .field("resource", &self.resource.plural)
            .finish_non_exhaustive()
    }
}

impl KubeClassWriter {
    pub fn new(client: Client) -> Self {
        Self {
            client,
            // Patches go through the dynamic API: the response is not needed,
            // and decoding it into the typed MachineClass could only fail.
            resource: ApiResource::erase::<poolkeeper_api::MachineClass>(&()),
            params: PatchParams {
                field_manager: Some(FIELD_MANAGER.to_owned()),
                ..PatchParams::default()
            },
        }
    }
}

impl ClassWriter for KubeClassWriter {
    async fn patch_finalizers(&self, key: &ObjectKey, patch: &JsonPatch) -> Result<(), WriteError> {
        let Some(namespace) = key.namespace.as_deref() else {
            return Err(WriteError::NotNamespaced(key.clone()));
        };
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, &self.resource);
        api.patch(&key.name, &self.params, &Patch::Json::<()>(patch.clone()))
            .await
            .map(drop)
            .map_err(classify)
    }

    /// Through the metadata API (`Accept: ...;as=PartialObjectMetadata`):
    /// the API server answers with the Secret's metadata, not its data.
    async fn patch_secret_finalizers(
        &self,
        key: &ObjectKey,
        patch: &JsonPatch,
    ) -> Result<(), WriteError> {
        let Some(namespace) = key.namespace.as_deref() else {
            return Err(WriteError::NotNamespaced(key.clone()));
        };
        let api: Api<PartialObjectMeta<Secret>> = Api::namespaced(self.client.clone(), namespace);
        api.patch(&key.name, &self.params, &Patch::Json::<()>(patch.clone()))
            .await
            .map(drop)
            .map_err(classify)
    }
}

fn classify(error: kube::Error) -> WriteError {
    match error {
        kube::Error::Api(status) => classify_status(status),
        other => WriteError::Api(other),
    }
}

/// Maps an API error status onto [`WriteError`].
///
/// A failed `test` operation comes back as 422 (the patch could not be
/// applied): kube-apiserver sends it bare, with only the generic 422
/// message and neither causes nor the object in the details; other servers
/// may carry the JSON patch library's message as the cause. A racing update
/// is a 409. Both mean the object moved on. Other 422s are genuine
/// validation errors, which name the object and the invalid field.
pub(crate) fn classify_status(status: Box<Status>) -> WriteError {
    match status.code {
        404 => WriteError::NotFound,
        409 => WriteError::Conflict(status),
        422 if is_failed_test(&status_message(&status)) || is_unapplicable_patch(&status) => {
            WriteError::Conflict(status)
        }
        _ => WriteError::Api(kube::Error::Api(status)),
    }
}

/// The message of kube-apiserver's generic 422 (`NewGenericServerResponse`),
/// which it answers a JSON patch it cannot apply with.
const GENERIC_UNPROCESSABLE: &str =
    "the server rejected our request due to an error in our request";

/// kube-apiserver's answer to a JSON patch it could not apply (a failed
/// `test`, a removed path): the generic message, no causes.
fn is_unapplicable_patch(status: &Status) -> bool {
    status.message == GENERIC_UNPROCESSABLE
        && status
            .details
            .as_ref()
            .is_none_or(|details| details.causes.is_empty())
}

fn status_message(status: &Status) -> String {
    let causes = status
        .details
        .iter()
        .flat_map(|details| &details.causes)
        .map(|cause| cause.message.as_str())
        .filter(|message| !message.is_empty());
    let mut message = format!("{} ({})", status.message, status.code);
    for cause in causes {
        message.push_str(": ");
        message.push_str(cause);
    }
    message
}

fn is_failed_test(message: &str) -> bool {
    const MARKERS: [&str; 4] = [
        "testing value",
        "test operation",
        "error in test for path",
        "test failed",
    ];
    let message = message.to_ascii_lowercase();
    MARKERS.iter().any(|marker| message.contains(marker))
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;
    use crate::fake::{REJECTED, bare_unprocessable, status, status_with_cause};

    #[test]
    fn statuses_map_to_write_errors() {
        let cases = [
            (
                "a failed resourceVersion test is a conflict",
                status_with_cause(
                    422,
                    "Invalid",
                    REJECTED,
                    "testing value /metadata/resourceVersion failed: test failed",
                ),
                "conflict",
            ),
            (
                "a missing tested path is a conflict",
                status_with_cause(
                    422,
                    "Invalid",
                    REJECTED,
                    "test operation does not apply: is missing path: /metadata/finalizers",
                ),
                "conflict",
            ),
            (
                "a failed test as kube-apiserver answers it (bare 422) is a conflict",
                bare_unprocessable(),
                "conflict",
            ),
            (
                "a racing update is a conflict",
                status(
                    409,
                    "Conflict",
                    "Operation cannot be fulfilled on machineclasses \"a\": the object has been modified",
                ),
                "conflict",
            ),
            (
                "a validation error is an API error",
                status(
                    422,
                    "Invalid",
                    "MachineClass \"a\" is invalid: metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted",
                ),
                "api",
            ),
            (
                "a missing object is not found",
                status(404, "NotFound", "machineclasses \"a\" not found"),
                "not_found",
            ),
            (
                "forbidden is an API error",
                status(403, "Forbidden", "cannot patch machineclasses"),
                "api",
            ),
            (
                "a server error is an API error",
                status(500, "InternalError", "etcd unavailable"),
                "api",
            ),
        ];
        for (name, status, expected) in cases {
            let got = match classify_status(status) {
                WriteError::Conflict(_) => "conflict",
                WriteError::NotFound => "not_found",
                WriteError::Api(_) => "api",
                other => panic!("{name}: a status became {other:?}"),
            };
            assert_eq!(got, expected, "{name}");
        }
    }

    #[test]
    fn the_status_is_kept_as_the_source() {
        let error = classify_status(status_with_cause(
            422,
            "Invalid",
            REJECTED,
            "testing value /metadata/resourceVersion failed: test failed",
        ));
        assert!(
            error.to_string().contains("/metadata/resourceVersion"),
            "the message names the cause: {error}"
        );
        let source = error.source().expect("a conflict has its status as source");
        let source = source
            .downcast_ref::<Box<Status>>()
            .expect("the source is the status");
        assert_eq!(source.code, 422);

        let error = classify_status(status(500, "InternalError", "etcd unavailable"));
        assert!(
            matches!(&error, WriteError::Api(kube::Error::Api(status)) if status.code == 500),
            "{error:?}"
        );
        assert!(error.to_string().contains("etcd unavailable"), "{error}");
    }

    #[test]
    fn transport_errors_are_api_errors() {
        let error = classify(kube::Error::LinesCodecMaxLineLengthExceeded);
        assert!(matches!(
            error,
            WriteError::Api(kube::Error::LinesCodecMaxLineLengthExceeded)
        ));
    }

    #[test]
    fn a_timeout_names_its_duration() {
        let error = WriteError::Timeout(Duration::from_secs(30));
        assert_eq!(error.to_string(), "no answer within 30s");
    }
}
