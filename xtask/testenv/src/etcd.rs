//! etcd's HTTP/JSON gateway (the gRPC gateway on its client port, `/v3/...`): the current
//! revision, compaction and health, without an `etcdctl` binary.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::TestEnvError;

/// One request to the gateway may take this long.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The revision of the whole key space now (every write to etcd increments it).
pub(crate) async fn revision(addr: SocketAddr) -> Result<i64, TestEnvError> {
    // A range over a key that never exists: the answer carries only the header.
    let key = crate::kubeconfig::base64(b"/poolkeeper-testenv/revision-probe");
    let answer = post(
        addr,
        "/v3/kv/range",
        &json!({"key": key, "count_only": true}),
    )
    .await?;
    header_revision(&answer).ok_or_else(|| TestEnvError::Etcd {
        request: "range",
        message: format!("no header.revision in {answer}"),
    })
}

/// etcd's answer when the history up to the revision is compacted already.
const ALREADY_COMPACTED: &str = "required revision has been compacted";

/// Compacts the key space up to `revision` and waits until the compaction is applied to the
/// backend (`physical`): a watch from an older revision then fails with "compacted". History
/// compacted already up to `revision` is no error.
pub(crate) async fn compact(addr: SocketAddr, revision: i64) -> Result<(), TestEnvError> {
    let body = json!({"revision": revision.to_string(), "physical": true});
    match post(addr, "/v3/kv/compaction", &body).await {
        Ok(_) => Ok(()),
        Err(TestEnvError::Etcd { message, .. }) if message.contains(ALREADY_COMPACTED) => Ok(()),
        Err(error) => Err(error),
    }
}

/// etcd's `/health` says `"health": "true"`.
pub(crate) async fn healthy(addr: SocketAddr) -> bool {
    match request(addr, "GET", "/health", None).await {
        Ok((200, body)) => {
            serde_json::from_str::<Value>(&body).is_ok_and(|health| health["health"] == "true")
        }
        _ => false,
    }
}

fn header_revision(answer: &Value) -> Option<i64> {
    // int64 fields are JSON strings in the gateway's encoding.
    match &answer["header"]["revision"] {
        Value::String(text) => text.parse().ok(),
        Value::Number(number) => number.as_i64(),
        _ => None,
    }
}

async fn post(addr: SocketAddr, path: &'static str, body: &Value) -> Result<Value, TestEnvError> {
    let request_name = path.rsplit('/').next().unwrap_or(path);
    let (status, text) = request(addr, "POST", path, Some(body)).await?;
    let answer: Value = serde_json::from_str(&text).map_err(|e| TestEnvError::Etcd {
        request: request_name,
        message: format!("status {status}, unreadable answer ({e}): {text}"),
    })?;
    if status != 200 {
        return Err(TestEnvError::Etcd {
            request: request_name,
            message: format!("status {status}: {answer}"),
        });
    }
    Ok(answer)
}

/// One HTTP/1.0 request (no chunked answers, the connection closes after it): status and body.
async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Result<(u16, String), TestEnvError> {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await?;
        let body = body.map(Value::to_string).unwrap_or_default();
        let head = format!(
            "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await?;
        Ok::<_, std::io::Error>(response)
    };
    let context = || format!("{method} {path} on etcd at {addr}");
    let response = tokio::time::timeout(REQUEST_TIMEOUT, exchange)
        .await
        .map_err(|_| TestEnvError::Timeout {
            what: context(),
            timeout: REQUEST_TIMEOUT,
            details: String::new(),
        })?
        .map_err(|e| TestEnvError::io(context(), e))?;
    parse_response(&response).ok_or_else(|| TestEnvError::Etcd {
        request: "http",
        message: format!(
            "{}: not an HTTP answer: {}",
            context(),
            String::from_utf8_lossy(&response)
        ),
    })
}

fn parse_response(response: &[u8]) -> Option<(u16, String)> {
    let text = String::from_utf8_lossy(response);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revisions_are_read_from_strings_or_numbers() {
        let cases = [
            (
                json!({"header": {"revision": "42", "raft_term": "2"}}),
                Some(42),
            ),
            (json!({"header": {"revision": 7}}), Some(7)),
            (json!({"header": {}}), None),
            (
                json!({"error": "etcdserver: mvcc: required revision has been compacted"}),
                None,
            ),
        ];
        for (answer, expected) in cases {
            assert_eq!(header_revision(&answer), expected, "{answer}");
        }
    }

    #[test]
    fn answers_are_split_into_status_and_body() {
        type Case<'a> = (&'a [u8], Option<(u16, &'a str)>);
        let cases: [Case; 3] = [
            (
                b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{\"header\":{}}",
                Some((200, "{\"header\":{}}")),
            ),
            (b"HTTP/1.1 400 Bad Request\r\n\r\n", Some((400, ""))),
            (b"garbage", None),
        ];
        for (response, expected) in cases {
            assert_eq!(
                parse_response(response),
                expected.map(|(status, body)| (status, body.to_owned())),
                "{}",
                String::from_utf8_lossy(response)
            );
        }
    }
}
