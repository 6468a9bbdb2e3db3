//! Decoding a LIST page from the chunks of a response body.

use serde_json::json;

use crate::page::{decode_page, join_chunks};

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
    let whole = decode_page(bytes.clone(), false).unwrap();
    assert_eq!(whole.pods.len(), 2);
    assert_eq!(whole.pods[0].name, "é-pod");
    assert_eq!(whole.continue_token.as_deref(), Some("next-page"));
    // Every split point, mid-character ones included, and tiny chunks.
    for at in 0..=bytes.len() {
        let (a, b) = bytes.split_at(at);
        let page = decode_page(join_chunks([a, b]), false).unwrap();
        assert_eq!(page, whole, "split at {at}");
    }
    let tiny = join_chunks(bytes.chunks(3));
    assert_eq!(decode_page(tiny, false).unwrap(), whole);
    let empty_chunks = join_chunks([Vec::new(), bytes.clone(), Vec::new()]);
    assert_eq!(decode_page(empty_chunks, false).unwrap(), whole);
}

#[test]
fn broken_bodies_are_errors() {
    let bytes = page_json();
    let cut = decode_page(bytes[..bytes.len() / 2].to_vec(), false);
    assert!(matches!(cut, Err(kube::Error::SerdeError(_))));
    let none = decode_page(Vec::new(), false);
    assert!(matches!(none, Err(kube::Error::SerdeError(_))));
}

#[test]
fn failed_requests_carry_the_api_servers_status() {
    let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": "pods is forbidden: User \"x\" cannot list resource \"pods\"", "reason": "Forbidden", "code": 403});
    let body = serde_json::to_vec(&status).unwrap();
    match crate::page::api_error(403, body, false) {
        kube::Error::Api(status) => {
            assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
            assert!(status.message.starts_with("pods is forbidden"));
        }
        other => panic!("{other}"),
    }
    match crate::page::api_error(502, b"<html>bad gateway</html>\n".to_vec(), false) {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 502);
            assert_eq!(status.message, "<html>bad gateway</html>");
        }
        other => panic!("{other}"),
    }
}
