//! A ustar archive of regular files, in memory: an image layer, or the OCI image layout.

use crate::{Error, Result};

const BLOCK: usize = 512;

/// One regular file of an archive, owned by root, dated at the epoch (reproducible).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Relative path, `/`-separated, at most 100 bytes.
    pub path: String,
    pub mode: u32,
    pub contents: Vec<u8>,
}

/// The archive's bytes: each entry's header and contents, then two zero blocks.
pub fn archive(entries: &[Entry]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for entry in entries {
        out.extend_from_slice(&header(entry)?);
        out.extend_from_slice(&entry.contents);
        out.resize(out.len().next_multiple_of(BLOCK), 0);
    }
    out.resize(out.len() + 2 * BLOCK, 0);
    Ok(out)
}

fn header(entry: &Entry) -> Result<[u8; BLOCK]> {
    let path = entry.path.as_bytes();
    if path.is_empty() || path.len() > 100 || entry.path.starts_with('/') {
        return Err(Error::Check(format!(
            "tar entry path {:?} must be relative and 1 to 100 bytes long",
            entry.path
        )));
    }
    let mut h = [0u8; BLOCK];
    h[..path.len()].copy_from_slice(path);
    octal(&mut h[100..108], u64::from(entry.mode & 0o7777));
    octal(&mut h[108..116], 0); // uid
    octal(&mut h[116..124], 0); // gid
    octal(&mut h[124..136], entry.contents.len() as u64);
    octal(&mut h[136..148], 0); // mtime
    h[156] = b'0'; // regular file
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    // The checksum is computed with its own field read as spaces.
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
    h[148..154].copy_from_slice(format!("{sum:06o}").as_bytes());
    h[154] = 0;
    h[155] = b' ';
    Ok(h)
}

/// Zero-padded octal filling the field but its last byte, which stays NUL.
fn octal(field: &mut [u8], value: u64) {
    let width = field.len() - 1;
    let text = format!("{value:0width$o}");
    field[..width].copy_from_slice(&text.as_bytes()[text.len() - width..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_follow_ustar() {
        let entry = Entry {
            path: "poolkeeper".to_owned(),
            mode: 0o755,
            contents: b"binary".to_vec(),
        };
        let bytes = archive(std::slice::from_ref(&entry)).unwrap();
        // Header, one block of contents, two zero blocks.
        assert_eq!(bytes.len(), 4 * BLOCK);
        assert_eq!(&bytes[..10], b"poolkeeper");
        assert_eq!(&bytes[100..108], b"0000755\0");
        assert_eq!(&bytes[124..136], b"00000000006\0");
        assert_eq!(&bytes[257..265], b"ustar\x0000");
        assert_eq!(&bytes[BLOCK..BLOCK + 6], b"binary");
        assert!(bytes[BLOCK + 6..].iter().all(|b| *b == 0));
        // The checksum: the sum of the header's bytes, its own field counted as spaces.
        let mut header = bytes[..BLOCK].to_vec();
        let recorded = u32::from_str_radix(std::str::from_utf8(&header[148..154]).unwrap(), 8);
        header[148..156].copy_from_slice(b"        ");
        let sum: u32 = header.iter().map(|b| u32::from(*b)).sum();
        assert_eq!(recorded.unwrap(), sum);
    }

    #[test]
    fn contents_are_padded_to_whole_blocks() {
        let entries = [
            Entry {
                path: "a".to_owned(),
                mode: 0o644,
                contents: vec![1; BLOCK],
            },
            Entry {
                path: "b/c".to_owned(),
                mode: 0o644,
                contents: vec![2; BLOCK + 1],
            },
        ];
        let bytes = archive(&entries).unwrap();
        assert_eq!(bytes.len(), (1 + 1 + 1 + 2 + 2) * BLOCK);
        assert_eq!(&bytes[2 * BLOCK..2 * BLOCK + 3], b"b/c");
    }

    #[test]
    fn bad_paths_are_refused() {
        for path in ["", "/abs", &"x".repeat(101)] {
            let entry = Entry {
                path: path.to_owned(),
                mode: 0o644,
                contents: Vec::new(),
            };
            let error = archive(&[entry]).unwrap_err().to_string();
            assert!(error.contains("tar entry path"), "{error}");
        }
    }
}
