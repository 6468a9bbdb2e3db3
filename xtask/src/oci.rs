//! OCI image archives (the image layout of the OCI image spec, as one tar) written without a
//! daemon or a builder: one uncompressed layer of regular files and the image config. This is
//! what `ctr images import` loads into containerd, so the test cluster's node gets the pause
//! image and poolkeeper's image without pulling anything. poolkeeper's archive is read from
//! the Dockerfile itself (`dockerfile`), so it is the image `buildah bud` builds.

pub mod dockerfile;
pub mod sha256;
pub mod tar;

use std::path::Path;

use crate::{Error, Result};

/// What an image holds and how it runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Image {
    /// The full reference containerd stores it under, e.g. `docker.io/library/poolkeeper:0.1.0`
    /// (what `poolkeeper:0.1.0` in a Pod spec resolves to).
    pub reference: String,
    pub files: Vec<tar::Entry>,
    pub user: Option<String>,
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    /// `9443/tcp`.
    pub exposed_ports: Vec<String>,
    pub labels: Vec<(String, String)>,
}

/// `poolkeeper:0.1.0` → `docker.io/library/poolkeeper:0.1.0`, as the container runtime
/// resolves an image name without a registry.
pub fn full_reference(name: &str) -> String {
    let (repository, _) = name.rsplit_once(':').unwrap_or((name, ""));
    let first = repository.split('/').next().unwrap_or_default();
    let has_registry =
        repository.contains('/') && (first.contains(['.', ':']) || first == "localhost");
    let name = if name.contains(':') || name.contains('@') {
        name.to_owned()
    } else {
        format!("{name}:latest")
    };
    if has_registry {
        name
    } else if repository.contains('/') {
        format!("docker.io/{name}")
    } else {
        format!("docker.io/library/{name}")
    }
}

/// Writes the archive and returns the digest of the image's manifest.
pub fn write_archive(image: &Image, path: &Path) -> Result<String> {
    let layer = tar::archive(&image.files)?;
    let layer_digest = format!("sha256:{}", sha256::hex_digest(&layer));
    let config = config_json(image, &layer_digest);
    let config_digest = format!("sha256:{}", sha256::hex_digest(config.as_bytes()));
    let manifest = format!(
        r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{},"layers":[{}]}}"#,
        descriptor(
            "application/vnd.oci.image.config.v1+json",
            &config_digest,
            config.len(),
            ""
        ),
        descriptor(
            "application/vnd.oci.image.layer.v1.tar",
            &layer_digest,
            layer.len(),
            ""
        ),
    );
    let manifest_digest = format!("sha256:{}", sha256::hex_digest(manifest.as_bytes()));
    let tag = image
        .reference
        .rsplit_once(':')
        .map_or("latest", |(_, t)| t);
    let annotations = format!(
        r#","annotations":{{"io.containerd.image.name":{},"org.opencontainers.image.ref.name":{}}}"#,
        json_string(&image.reference),
        json_string(tag)
    );
    let index = format!(
        r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{}]}}"#,
        descriptor(
            "application/vnd.oci.image.manifest.v1+json",
            &manifest_digest,
            manifest.len(),
            &annotations
        )
    );
    let blob = |digest: &str, contents: Vec<u8>| tar::Entry {
        path: format!("blobs/sha256/{}", digest.trim_start_matches("sha256:")),
        mode: 0o644,
        contents,
    };
    let layout = [
        tar::Entry {
            path: "oci-layout".to_owned(),
            mode: 0o644,
            contents: br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec(),
        },
        tar::Entry {
            path: "index.json".to_owned(),
            mode: 0o644,
            contents: index.into_bytes(),
        },
        blob(&manifest_digest, manifest.into_bytes()),
        blob(&config_digest, config.into_bytes()),
        blob(&layer_digest, layer),
    ];
    let bytes = tar::archive(&layout)?;
    std::fs::write(path, bytes).map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
    Ok(manifest_digest)
}

fn descriptor(media_type: &str, digest: &str, size: usize, extra: &str) -> String {
    format!(r#"{{"mediaType":"{media_type}","digest":"{digest}","size":{size}{extra}}}"#)
}

/// The image config: the runtime settings and the layer's uncompressed digest.
fn config_json(image: &Image, layer_digest: &str) -> String {
    let strings = |items: &[String]| {
        let quoted: Vec<String> = items.iter().map(|s| json_string(s)).collect();
        format!("[{}]", quoted.join(","))
    };
    let mut config = Vec::new();
    if let Some(user) = &image.user {
        config.push(format!(r#""User":{}"#, json_string(user)));
    }
    if !image.exposed_ports.is_empty() {
        let ports: Vec<String> = image
            .exposed_ports
            .iter()
            .map(|p| format!("{}:{{}}", json_string(p)))
            .collect();
        config.push(format!(r#""ExposedPorts":{{{}}}"#, ports.join(",")));
    }
    if !image.entrypoint.is_empty() {
        config.push(format!(r#""Entrypoint":{}"#, strings(&image.entrypoint)));
    }
    if !image.cmd.is_empty() {
        config.push(format!(r#""Cmd":{}"#, strings(&image.cmd)));
    }
    if !image.labels.is_empty() {
        let labels: Vec<String> = image
            .labels
            .iter()
            .map(|(k, v)| format!("{}:{}", json_string(k), json_string(v)))
            .collect();
        config.push(format!(r#""Labels":{{{}}}"#, labels.join(",")));
    }
    format!(
        r#"{{"architecture":"{}","os":"linux","config":{{{}}},"rootfs":{{"type":"layers","diff_ids":["{layer_digest}"]}}}}"#,
        oci_architecture(),
        config.join(",")
    )
}

/// The GOARCH-style name the OCI spec uses for this machine.
pub fn oci_architecture() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

pub fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_resolve_as_the_runtime_resolves_them() {
        let cases = [
            ("poolkeeper:0.1.0", "docker.io/library/poolkeeper:0.1.0"),
            ("poolkeeper", "docker.io/library/poolkeeper:latest"),
            ("team/poolkeeper:1", "docker.io/team/poolkeeper:1"),
            (
                "registry.example.com/poolkeeper:0.1.0",
                "registry.example.com/poolkeeper:0.1.0",
            ),
            ("localhost/pause:3", "localhost/pause:3"),
            ("localhost:5000/pause:3", "localhost:5000/pause:3"),
        ];
        for (name, expected) in cases {
            assert_eq!(full_reference(name), expected, "{name}");
        }
    }

    #[test]
    fn strings_are_escaped() {
        assert_eq!(json_string("a\"b\\c\n\u{1}"), r#""a\"b\\c\n\u0001""#);
    }

    #[test]
    fn the_archive_holds_a_consistent_layout() {
        let image = Image {
            reference: "docker.io/library/demo:1".to_owned(),
            files: vec![tar::Entry {
                path: "demo".to_owned(),
                mode: 0o755,
                contents: b"#!demo".to_vec(),
            }],
            user: Some("65532:65532".to_owned()),
            entrypoint: vec!["/demo".to_owned()],
            cmd: vec!["run".to_owned()],
            exposed_ports: vec!["9443/tcp".to_owned()],
            labels: vec![("a".to_owned(), "b".to_owned())],
        };
        let dir = std::env::temp_dir().join(format!("xtask-oci-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("demo.tar");
        let digest = write_archive(&image, &path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        // Every blob is stored under its own digest, and the index names the manifest.
        assert!(text.contains(&format!("blobs/sha256/{}", &digest[7..])));
        assert!(text.contains(&format!(r#""digest":"{digest}""#)));
        assert!(text.contains(r#""io.containerd.image.name":"docker.io/library/demo:1""#));
        assert!(text.contains(r#""User":"65532:65532""#));
        assert!(text.contains(r#""ExposedPorts":{"9443/tcp":{}}"#));
        assert!(text.contains(r#""Entrypoint":["/demo"],"Cmd":["run"]"#));
        assert_eq!(write_twice_same_digest(&image), digest);
    }

    /// Reproducible: the same image gives the same manifest digest.
    fn write_twice_same_digest(image: &Image) -> String {
        let path = std::env::temp_dir().join(format!("xtask-oci-again-{}", std::process::id()));
        let digest = write_archive(image, &path).unwrap();
        std::fs::remove_file(&path).unwrap();
        digest
    }
}
