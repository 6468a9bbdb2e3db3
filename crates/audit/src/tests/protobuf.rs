//! Decoding the protobuf encoding of a Pod LIST. `data/` holds what a
//! kube-apiserver v1.36 answered, in protobuf and in JSON, to the same LIST
//! (`?limit=6` over the Pods of `data/pods.yaml`, `b-generated-` created
//! twice) and to a GET of a missing Pod.

use kube::core::Status;

use crate::page::protobuf::{self, ProtobufError};
use crate::page::{PodPage, decode_page};

const PAGE_PROTOBUF: &[u8] = include_bytes!("data/pod-page.pb");
const PAGE_JSON: &[u8] = include_bytes!("data/pod-page.json");
const NOT_FOUND_PROTOBUF: &[u8] = include_bytes!("data/not-found.pb");
const NOT_FOUND_JSON: &[u8] = include_bytes!("data/not-found.json");

fn protobuf_page() -> PodPage {
    decode_page(PAGE_PROTOBUF.to_vec(), true).unwrap()
}

#[test]
fn both_encodings_of_a_page_project_the_same_pods() {
    let json = decode_page(PAGE_JSON.to_vec(), false).unwrap();
    let protobuf = protobuf_page();
    assert_eq!(protobuf, json);
    let names: Vec<&str> = protobuf.pods.iter().map(|pod| pod.name.as_str()).collect();
    assert_eq!(names.len(), 6);
    assert_eq!(names[0], "a-placed");
    assert_eq!(names[5], "e-preferred-only");
    assert!(protobuf.continue_token.is_some());
    assert!(
        protobuf.resource_version.is_some(),
        "ListMeta's resourceVersion"
    );
}

#[test]
fn every_field_placement_reads_arrives() {
    let page = protobuf_page();
    let pod = |name: &str| page.pods.iter().find(|pod| pod.name == name).unwrap();

    let placed = pod("a-placed");
    assert_eq!(placed.namespace, "fixture");
    assert!(!placed.uid.is_empty());
    assert_eq!(placed.labels["apps.openyurt.io/nodepool"], "hangzhou");
    let annotations = placed.annotations.as_ref().unwrap();
    assert_eq!(
        annotations.placement.as_deref(),
        Some(r#"{"pool":"hangzhou"}"#)
    );
    assert!(!annotations.mirror);
    let spec = placed.spec.as_ref().unwrap();
    assert_eq!(placed.node_name(), Some("edge-hz-1"));
    assert_eq!(spec.node_selector.as_ref().unwrap()["zone"], "a");
    let required = placed.required_node_affinity().unwrap();
    assert_eq!(required.node_selector_terms.len(), 2);
    let first = &required.node_selector_terms[0];
    let expressions = first.match_expressions.as_ref().unwrap();
    assert_eq!(
        expressions[0].values.as_deref(),
        Some(&["hangzhou".to_owned(), "shanghai".to_owned()][..])
    );
    assert_eq!(expressions[1].operator, "Exists");
    assert_eq!(expressions[1].values, None);
    assert_eq!(first.match_fields.as_ref().unwrap()[0].key, "metadata.name");
    assert_eq!(required.node_selector_terms[1].match_fields, None);
    let tolerations = placed.tolerations();
    assert_eq!(tolerations.len(), 4);
    assert_eq!(tolerations[1].toleration_seconds, Some(300));
    assert_eq!(tolerations[0].toleration_seconds, None);
    assert_eq!(
        (
            tolerations[2].key.as_deref(),
            tolerations[2].operator.as_deref()
        ),
        (None, Some("Exists"))
    );
    assert_eq!(tolerations[3].value.as_deref(), Some("shop"));

    let generated = page
        .pods
        .iter()
        .find(|pod| pod.generate_name == "b-generated-")
        .unwrap();
    assert!(generated.labels.is_empty());
    assert_eq!(generated.annotations, None);
    assert_eq!(generated.node_name(), None);
    // The API server's DefaultTolerationSeconds admission adds two.
    assert_eq!(generated.tolerations().len(), 2);

    assert!(pod("c-mirror").is_mirror());
    let pod_affinity_only = pod("d-pod-affinity-only").spec.as_ref().unwrap();
    assert_eq!(
        pod_affinity_only.affinity.as_ref().unwrap().node_affinity,
        None
    );
    let preferred_only = pod("e-preferred-only");
    assert!(preferred_only.required_node_affinity().is_none());
    let affinity = preferred_only.spec.as_ref().unwrap().affinity.as_ref();
    assert!(affinity.unwrap().node_affinity.is_some());
}

/// A cut body decodes to an error, or, when only the envelope's trailing
/// fields were cut, to the whole page: never to a shorter page, never a panic.
#[test]
fn a_cut_body_is_an_error_or_the_whole_page() {
    let whole = protobuf_page();
    let mut whole_pages = 0;
    for length in 0..PAGE_PROTOBUF.len() {
        match decode_page(PAGE_PROTOBUF[..length].to_vec(), true) {
            Err(kube::Error::Service(error)) => {
                assert!(error.downcast_ref::<ProtobufError>().is_some(), "{error}");
            }
            Err(other) => panic!("cut at {length}: {other}"),
            Ok(page) => {
                assert_eq!(page, whole, "cut at {length}");
                whole_pages += 1;
            }
        }
    }
    // `contentEncoding` and `contentType` follow the list in the envelope.
    assert!(whole_pages < 32, "{whole_pages}");
}

#[test]
fn bodies_that_are_no_pod_list_say_what_they_are() {
    let error = |body: &[u8]| {
        protobuf::decode_pod_page(body.to_vec().into())
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        error(PAGE_JSON),
        "the response does not start with the Kubernetes protobuf prefix \"k8s\\0\""
    );
    assert_eq!(
        error(NOT_FOUND_PROTOBUF),
        "the response holds kind \"Status\", not PodList"
    );
    assert_eq!(error(b"k8s\0"), "the response holds kind \"\", not PodList");
    assert!(error(b"k8s\0\xff\xff").starts_with("the response is not valid protobuf: "));
    // An envelope holding an empty list is an empty page; one holding no
    // list at all (the page's envelope up to its kind) is an error.
    let empty =
        protobuf::decode_pod_page(b"k8s\0\x0a\x0d\x0a\x02v1\x12\x07PodList\x12\x00"[..].into());
    assert_eq!(empty.unwrap(), PodPage::default());
    assert_eq!(
        error(&PAGE_PROTOBUF[..19]),
        "the response's envelope holds no object"
    );
    let mut gzipped = PAGE_PROTOBUF.to_vec();
    // The envelope's last field: contentType, then contentEncoding appended.
    gzipped.extend_from_slice(b"\x1a\x04gzip");
    assert_eq!(
        error(&gzipped),
        "the response's content encoding \"gzip\" is not supported"
    );
}

#[test]
fn a_failed_request_in_either_encoding_is_the_same_status() {
    let status = |body: &[u8], protobuf: bool| -> Status {
        match crate::page::api_error(404, body.to_vec(), protobuf) {
            kube::Error::Api(status) => *status,
            other => panic!("{other}"),
        }
    };
    let from_protobuf = status(NOT_FOUND_PROTOBUF, true);
    let from_json = status(NOT_FOUND_JSON, false);
    for status in [&from_protobuf, &from_json] {
        assert_eq!(
            (status.code, status.reason.as_str(), status.message.as_str()),
            (404, "NotFound", "pods \"missing\" not found")
        );
    }
    // A proxy's page under the protobuf content type is still reported.
    let proxy = status(b"<html>bad gateway</html>", true);
    assert_eq!(
        (proxy.code, proxy.message.as_str()),
        (404, "<html>bad gateway</html>")
    );
}
