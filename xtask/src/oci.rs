//! OCI image archives (the image layout of the OCI image spec, as one tar) written without a
//! daemon or a builder: one uncompressed layer of regular files and the image config. This is
//! what `ctr images import` loads into containerd, so the test cluster's node gets the pause
//! image and poolkeeper's image without pulling anything. poolkeeper's archive is read from
//! the Dockerfile itself (`dockerfile`), so it is the image `buildah bud` builds.

pub mod dockerfile;

use std::path::Path;

use sha2::{Digest, Sha256};

use crate::{Error, Result};

/// One regular file of an archive, owned by root, dated at the epoch (reproducible).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Relative path, `/`-separated.
    pub path: String,
    pub mode: u32,
    pub contents: Vec<u8>,
}

/// A ustar archive of `entries`, in memory: an image layer, or the OCI image layout.
pub fn archive(entries: &[Entry]) -> Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    for entry in entries {
        let mut header = tar::Header::new_ustar();
        header.set_entry_type(tar::EntryType::Regular);
        header.set_mode(entry.mode & 0o7777);
        header.set_uid(0);
        header.set_gid(0);
        header.set_mtime(0);
        header.set_size(entry.contents.len() as u64);
        builder
            .append_data(&mut header, &entry.path, entry.contents.as_slice())
            .map_err(|e| Error::io(format!("tar entry {:?}", entry.path), e))?;
    }
    builder
        .into_inner()
        .map_err(|e| Error::io("finishing a tar archive", e))
}

/// The lowercase hex SHA-256 of `data`: the content digest of an OCI blob.
pub fn sha256_hex(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// What an image holds and how it runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Image {
    /// The full reference containerd stores it under, e.g. `docker.io/library/poolkeeper:0.1.0`
    /// (what `poolkeeper:0.1.0` in a Pod spec resolves to).
    pub reference: String,
    pub files: Vec<Entry>,
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
    let layer = archive(&image.files)?;
    let layer_digest = format!("sha256:{}", sha256_hex(&layer));
    let config = config_json(image, &layer_digest);
    let config_digest = format!("sha256:{}", sha256_hex(config.as_bytes()));
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
    let manifest_digest = format!("sha256:{}", sha256_hex(manifest.as_bytes()));
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
    let blob = |digest: &str, contents: Vec<u8>| Entry {
        path: format!("blobs/sha256/{}", digest.trim_start_matches("sha256:")),
        mode: 0o644,
        contents,
    };
    let layout = [
        Entry {
            path: "oci-layout".to_owned(),
            mode: 0o644,
            contents: br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec(),
        },
        Entry {
            path: "index.json".to_owned(),
            mode: 0o644,
            contents: index.into_bytes(),
        },
        blob(&manifest_digest, manifest.into_bytes()),
        blob(&config_digest, config.into_bytes()),
        blob(&layer_digest, layer),
    ];
    let bytes = archive(&layout)?;
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
            files: vec![Entry {
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

    #[test]
    fn digests_are_sha256() {
        let cases: [(&[u8], &str); 3] = [
            (
                b"",
                "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            ),
            (
                b"abc",
                "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
            ),
            (
                b"The quick brown fox jumps over the lazy dog",
                "d7a8fbb307d7809469ca9abcb0082e4f8d5651e46d3cdb762d02d0bf37c9e592",
            ),
        ];
        for (input, expected) in cases {
            assert_eq!(sha256_hex(input), expected, "{input:?}");
        }
    }

    /// Each entry of an archive as a tar reader sees it: path, mode, owner, mtime, contents.
    fn read_back(bytes: &[u8]) -> Vec<(String, u32, u64, u64, u64, Vec<u8>)> {
        let mut archive = tar::Archive::new(bytes);
        archive
            .entries()
            .unwrap()
            .map(|entry| {
                let mut entry = entry.unwrap();
                let header = entry.header();
                assert_eq!(header.entry_type(), tar::EntryType::Regular);
                assert!(header.as_ustar().is_some(), "a ustar header");
                let fields = (
                    entry.path().unwrap().to_string_lossy().into_owned(),
                    header.mode().unwrap(),
                    header.uid().unwrap(),
                    header.gid().unwrap(),
                    header.mtime().unwrap(),
                );
                let mut contents = Vec::new();
                std::io::Read::read_to_end(&mut entry, &mut contents).unwrap();
                (fields.0, fields.1, fields.2, fields.3, fields.4, contents)
            })
            .collect()
    }

    #[test]
    fn a_layer_reads_back_as_written() {
        let entries = [
            Entry {
                path: "poolkeeper".to_owned(),
                mode: 0o755,
                contents: b"binary".to_vec(),
            },
            Entry {
                path: "etc/poolkeeper/poolkeeper.yaml".to_owned(),
                mode: 0o644,
                contents: vec![7; 513],
            },
            Entry {
                path: "empty".to_owned(),
                mode: 0o600,
                contents: Vec::new(),
            },
        ];
        let bytes = archive(&entries).unwrap();
        // Whole 512-byte blocks, ending in the two zero blocks of the end of the archive.
        assert_eq!(bytes.len() % 512, 0);
        assert!(bytes[bytes.len() - 1024..].iter().all(|b| *b == 0));
        let read: Vec<_> = read_back(&bytes);
        let written: Vec<_> = entries
            .iter()
            .map(|e| (e.path.clone(), e.mode, 0, 0, 0, e.contents.clone()))
            .collect();
        assert_eq!(read, written);
        assert_eq!(archive(&entries).unwrap(), bytes, "reproducible");
    }

    #[test]
    fn paths_outside_the_archive_are_refused() {
        for path in ["", "/abs", "../up", "a/../../up"] {
            let entry = Entry {
                path: path.to_owned(),
                mode: 0o644,
                contents: Vec::new(),
            };
            let error = archive(&[entry]).unwrap_err().to_string();
            assert!(error.contains("tar entry"), "{path:?}: {error}");
        }
    }

    #[test]
    fn every_blob_is_stored_under_its_digest_and_referenced_with_its_size() {
        let image = Image {
            reference: "docker.io/library/demo:1".to_owned(),
            files: vec![Entry {
                path: "demo".to_owned(),
                mode: 0o755,
                contents: b"#!demo".to_vec(),
            }],
            entrypoint: vec!["/demo".to_owned()],
            ..Image::default()
        };
        let path = std::env::temp_dir().join(format!("xtask-oci-blobs-{}", std::process::id()));
        let manifest_digest = write_archive(&image, &path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let entries = read_back(&bytes);
        let names: Vec<&str> = entries.iter().map(|e| e.0.as_str()).collect();
        assert_eq!(names[..2], ["oci-layout", "index.json"]);
        let text = |name: &str| {
            let entry = entries.iter().find(|e| e.0 == name).unwrap();
            String::from_utf8(entry.5.clone()).unwrap()
        };
        let blobs: Vec<_> = entries
            .iter()
            .filter_map(|e| Some((e.0.strip_prefix("blobs/sha256/")?, &e.5)))
            .collect();
        assert_eq!(blobs.len(), 3, "manifest, config, layer");
        for (digest, contents) in &blobs {
            assert_eq!(*digest, sha256_hex(contents));
            let descriptor = format!(r#""digest":"sha256:{digest}","size":{}"#, contents.len());
            let referenced = text("index.json").contains(&descriptor)
                || blobs
                    .iter()
                    .any(|(_, other)| String::from_utf8_lossy(other).contains(&descriptor));
            assert!(referenced, "blob {digest} is referenced with its size");
        }
        assert!(text("index.json").contains(&manifest_digest));
        // The layer (the one blob that is not JSON) holds the image's files, and the config
        // names it by its digest.
        let (layer_digest, layer) = blobs
            .iter()
            .find(|(_, contents)| !contents.starts_with(b"{"))
            .unwrap();
        assert_eq!(read_back(layer)[0].5, b"#!demo");
        let config = blobs
            .iter()
            .find_map(|(_, c)| {
                String::from_utf8(c.to_vec())
                    .ok()
                    .filter(|t| t.contains("rootfs"))
            })
            .unwrap();
        assert!(config.contains(&format!(r#""diff_ids":["sha256:{layer_digest}"]"#)));
    }

    /// Reproducible: the same image gives the same manifest digest.
    fn write_twice_same_digest(image: &Image) -> String {
        let path = std::env::temp_dir().join(format!("xtask-oci-again-{}", std::process::id()));
        let digest = write_archive(image, &path).unwrap();
        std::fs::remove_file(&path).unwrap();
        digest
    }
}
