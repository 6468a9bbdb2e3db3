//! Decoding a LIST page from the chunks of a response body.

use kube::core::ObjectList;
use poolkeeper_placement::PodPlacement;
use serde_json::json;

use crate::decode_chunks;

fn page_json() -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "v1", "kind": "PodList",
        "metadata": {"resourceVersion": "7", "continue": "next-page"},
        "items": [
            {"metadata": {"name": "é-pod", "namespace": "shop", "uid": "u1", "labels": {"app": "ünïcode"}},
             "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
             "status": {"phase": "Running"}},
            {"metadata": {"name": "b", "namespace": "shop"}, "spec": {"nodeSelector": {"zone": "a"}}},
        ],
    }))
    .unwrap()
}

#[test]
fn chunks_split_anywhere_decode_like_one_buffer() {
    let bytes = page_json();
    let whole: ObjectList<PodPlacement> = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(whole.items.len(), 2);
    assert_eq!(whole.metadata.continue_.as_deref(), Some("next-page"));
    // Every split point, mid-character ones included, and tiny chunks.
    for at in 0..=bytes.len() {
        let (a, b) = bytes.split_at(at);
        let list: ObjectList<PodPlacement> = decode_chunks([a.to_vec(), b.to_vec()]).unwrap();
        assert_eq!(list.items, whole.items, "split at {at}");
    }
    let tiny: Vec<Vec<u8>> = bytes.chunks(3).map(<[u8]>::to_vec).collect();
    let list: ObjectList<PodPlacement> = decode_chunks(tiny).unwrap();
    assert_eq!(list.items, whole.items);
    let empty_chunks = vec![Vec::new(), bytes.clone(), Vec::new()];
    let list: ObjectList<PodPlacement> = decode_chunks(empty_chunks).unwrap();
    assert_eq!(list.items, whole.items);
}

#[test]
fn broken_bodies_are_errors() {
    let bytes = page_json();
    let cut = decode_chunks::<ObjectList<PodPlacement>, _>([bytes[..bytes.len() / 2].to_vec()]);
    assert!(cut.is_err());
    let none = decode_chunks::<ObjectList<PodPlacement>, Vec<u8>>([]);
    assert!(none.is_err());
}

#[test]
fn failed_requests_carry_the_api_servers_status() {
    let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": "pods is forbidden: User \"x\" cannot list resource \"pods\"", "reason": "Forbidden", "code": 403});
    let body = serde_json::to_vec(&status).unwrap();
    let (a, b) = body.split_at(10);
    match crate::lister::api_error(403, &[a.to_vec(), b.to_vec()]) {
        kube::Error::Api(status) => {
            assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
            assert!(status.message.starts_with("pods is forbidden"));
        }
        other => panic!("{other}"),
    }
    match crate::lister::api_error(502, &[b"<html>bad gateway</html>\n".to_vec()]) {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 502);
            assert_eq!(status.message, "<html>bad gateway</html>");
        }
        other => panic!("{other}"),
    }
}
