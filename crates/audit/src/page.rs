//! A page of a Pod LIST: what a LIST's response body decodes into, from
//! protobuf ([`protobuf`]) or JSON, projected as placement reads a Pod.

pub mod protobuf;

use kube::core::{ObjectList, Status};
use poolkeeper_placement::PodPlacement;

/// One page of a LIST, already projected.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodPage {
    pub pods: Vec<PodPlacement>,
    /// Where the next page starts; `None` on the last page.
    pub continue_token: Option<String>,
    /// The list's `resourceVersion`: the API server's Pods were at least
    /// this recent when it answered.
    pub resource_version: Option<String>,
}

/// The page of Pods in the body of a LIST's response, `protobuf` when the
/// API server answered in protobuf and JSON otherwise. A body that does not
/// decode is a `kube::Error`, as kube reports its own JSON errors.
pub fn decode_page(body: Vec<u8>, protobuf: bool) -> Result<PodPage, kube::Error> {
    if protobuf {
        return protobuf::decode_pod_page(body.into())
            .map_err(|error| kube::Error::Service(Box::new(error)));
    }
    let list: ObjectList<PodPlacement> =
        serde_json::from_slice(&body).map_err(kube::Error::SerdeError)?;
    Ok(PodPage {
        continue_token: list.metadata.continue_.filter(|token| !token.is_empty()),
        resource_version: list
            .metadata
            .resource_version
            .filter(|version| !version.is_empty()),
        pods: list.items,
    })
}

/// The API server's `Status` of a failed request, as kube reports it; a
/// body that is no `Status` (a proxy's page) becomes its text.
pub(crate) fn api_error(code: u16, body: Vec<u8>, protobuf: bool) -> kube::Error {
    let body = bytes::Bytes::from(body);
    let status = if protobuf {
        protobuf::decode_status(body.clone(), code).ok()
    } else {
        serde_json::from_slice::<Status>(&body).ok()
    };
    let status = status.unwrap_or_else(|| {
        let text = String::from_utf8_lossy(&body);
        Status::failure(text.trim(), "Failed to parse error data").with_code(code)
    });
    kube::Error::Api(Box::new(status))
}

/// The body that arrived in `chunks`, in one buffer; each chunk is freed as
/// soon as it is copied. The buffer grows as the chunks are copied rather
/// than being sized for the whole body up front, so the chunks not yet
/// copied and the buffer together stay under two copies of the body.
pub fn join_chunks<B: AsRef<[u8]>>(chunks: impl IntoIterator<Item = B>) -> Vec<u8> {
    let mut body = Vec::new();
    for chunk in chunks {
        body.extend_from_slice(chunk.as_ref());
    }
    body
}
