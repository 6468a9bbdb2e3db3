//! The Dockerfile read as an image description, for the subset poolkeeper's Dockerfile uses:
//! `FROM scratch`, `ARG`, `LABEL`, `COPY` of single files, `USER`, `EXPOSE`, `ENTRYPOINT` and
//! `CMD` in their JSON form. Anything else is refused by name, so the daemonless archive never
//! silently differs from what `buildah bud` builds.

use std::collections::BTreeMap;
use std::path::Path;

use super::{Entry, Image};
use crate::{Error, Result};

/// The image the Dockerfile `text` describes, with `args` overriding `ARG` defaults and `COPY`
/// sources read below `context`.
pub fn image(text: &str, args: &[(&str, &str)], context: &Path, reference: &str) -> Result<Image> {
    let mut image = Image {
        reference: reference.to_owned(),
        ..Image::default()
    };
    let mut vars: BTreeMap<String, String> = BTreeMap::new();
    let mut from_seen = false;
    for (line_no, line) in logical_lines(text) {
        let fail = |why: String| Error::Check(format!("Dockerfile line {line_no}: {why}"));
        let (instruction, rest) = line.split_once(char::is_whitespace).unwrap_or((&line, ""));
        let rest = rest.trim();
        match instruction.to_ascii_uppercase().as_str() {
            "FROM" if rest == "scratch" => from_seen = true,
            "FROM" => {
                return Err(fail(format!(
                    "only `FROM scratch` is supported, not {rest:?}"
                )));
            }
            _ if !from_seen && !instruction.eq_ignore_ascii_case("ARG") => {
                return Err(fail("an instruction before FROM".to_owned()));
            }
            "ARG" => {
                let (name, default) = rest.split_once('=').unwrap_or((rest, ""));
                let given = args.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
                vars.insert(name.to_owned(), given.unwrap_or(default).to_owned());
            }
            "LABEL" => {
                for pair in words(rest).map_err(fail)? {
                    let (key, value) = pair
                        .split_once('=')
                        .ok_or_else(|| fail(format!("LABEL {pair:?} is not key=value")))?;
                    image
                        .labels
                        .push((key.to_owned(), substitute(value, &vars).map_err(fail)?));
                }
            }
            "COPY" => copy(&mut image, &substitute(rest, &vars).map_err(fail)?, context)
                .map_err(|e| fail(e.to_string()))?,
            "USER" => image.user = Some(rest.to_owned()),
            "EXPOSE" => image.exposed_ports.extend(rest.split_whitespace().map(|p| {
                if p.contains('/') {
                    p.to_owned()
                } else {
                    format!("{p}/tcp")
                }
            })),
            "ENTRYPOINT" => image.entrypoint = json_strings(rest).map_err(fail)?,
            "CMD" => image.cmd = json_strings(rest).map_err(fail)?,
            other => {
                return Err(fail(format!(
                    "{other} is not supported by the archive writer"
                )));
            }
        }
    }
    if !from_seen {
        return Err(Error::Check("Dockerfile: no `FROM scratch`".to_owned()));
    }
    Ok(image)
}

/// Lines without comments and blank lines, with `\` continuations joined; numbered from 1 by
/// their first physical line.
fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let mut lines = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (index, raw) in text.lines().enumerate() {
        let trimmed = raw.trim();
        if current.is_none() && (trimmed.is_empty() || trimmed.starts_with('#')) {
            continue;
        }
        let (number, mut line) = current.take().unwrap_or((index + 1, String::new()));
        match trimmed.strip_suffix('\\') {
            Some(start) => {
                line.push_str(start);
                line.push(' ');
                current = Some((number, line));
            }
            None => {
                line.push_str(trimmed);
                lines.push((number, line));
            }
        }
    }
    lines.extend(current);
    lines
}

/// Whitespace-separated words, double quotes grouping (and removed).
fn words(text: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    let mut in_word = false;
    for c in text.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                in_word = true;
            }
            c if c.is_whitespace() && !quoted => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if quoted {
        return Err(format!("unterminated quote in {text:?}"));
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

/// `${NAME}` and `$NAME` replaced by ARG values; an unknown name is an error.
fn substitute(text: &str, vars: &BTreeMap<String, String>) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (name, skip) = if let Some(braced) = after.strip_prefix('{') {
            let end = braced
                .find('}')
                .ok_or_else(|| format!("unterminated ${{ in {text:?}"))?;
            (&braced[..end], end + 2)
        } else {
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            (&after[..end], end)
        };
        let value = vars
            .get(name)
            .ok_or_else(|| format!("${name} is not declared with ARG"))?;
        out.push_str(value);
        rest = &after[skip..];
    }
    out.push_str(rest);
    Ok(out)
}

/// `COPY SRC DEST` of one regular file, kept executable when it is.
fn copy(image: &mut Image, args: &str, context: &Path) -> Result<()> {
    let parts: Vec<&str> = args.split_whitespace().collect();
    let [source, dest] = parts[..] else {
        return Err(Error::Check(format!(
            "COPY takes one source and one destination, not {args:?}"
        )));
    };
    if source.starts_with("--") || !dest.starts_with('/') || dest.ends_with('/') {
        return Err(Error::Check(format!(
            "COPY {args:?}: only a file copied to an absolute file path is supported"
        )));
    }
    let path = context.join(source);
    let contents =
        std::fs::read(&path).map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
    let executable = is_executable(&path);
    image.files.push(Entry {
        path: dest.trim_start_matches('/').to_owned(),
        mode: if executable { 0o755 } else { 0o644 },
        contents,
    });
    Ok(())
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o111 != 0)
}

/// `["a", "b"]`: a JSON array of strings (the exec form).
fn json_strings(text: &str) -> Result<Vec<String>, String> {
    let inner = text
        .trim()
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .ok_or_else(|| format!("only the JSON (exec) form is supported, not {text:?}"))?;
    let mut items = Vec::new();
    let mut chars = inner.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return Ok(items);
        }
        if chars.next() != Some('"') {
            return Err(format!("expected a string in {text:?}"));
        }
        let mut item = String::new();
        loop {
            match chars.next() {
                Some('"') => break,
                Some('\\') => item.extend(chars.next()),
                Some(c) => item.push(c),
                None => return Err(format!("unterminated string in {text:?}")),
            }
        }
        items.push(item);
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        match chars.next() {
            Some(',') | None => {}
            Some(c) => return Err(format!("unexpected {c:?} in {text:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A build context of its own per test (tests run in parallel).
    fn context(test: &str) -> std::path::PathBuf {
        let pid = std::process::id();
        let dir = std::env::temp_dir().join(format!("xtask-dockerfile-{test}-{pid}"));
        std::fs::create_dir_all(dir.join("dist")).unwrap();
        std::fs::write(dir.join("dist/tool"), b"tool").unwrap();
        dir
    }

    #[test]
    fn the_supported_subset_is_read() {
        let text = "# comment\nFROM scratch\nARG DIST=target/dist\nARG VERSION=unknown\n\
                    LABEL a=\"x\" \\\n      b=\"${VERSION}\"\nCOPY ${DIST}/tool /tool\n\
                    USER 65532:65532\nEXPOSE 9443 8081/udp\n\
                    ENTRYPOINT [\"/tool\"]\nCMD [\"run\", \"--config\", \"/etc/a b.yaml\"]\n";
        let dir = context("subset");
        let image = image(text, &[("DIST", "dist"), ("VERSION", "1.2.3")], &dir, "r:1").unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(image.reference, "r:1");
        assert_eq!(image.files.len(), 1);
        assert_eq!(image.files[0].path, "tool");
        assert_eq!(image.files[0].contents, b"tool");
        assert_eq!(image.user.as_deref(), Some("65532:65532"));
        assert_eq!(image.exposed_ports, ["9443/tcp", "8081/udp"]);
        assert_eq!(image.entrypoint, ["/tool"]);
        assert_eq!(image.cmd, ["run", "--config", "/etc/a b.yaml"]);
        let labels = [
            ("a".to_owned(), "x".to_owned()),
            ("b".to_owned(), "1.2.3".to_owned()),
        ];
        assert_eq!(image.labels, labels);
    }

    #[test]
    fn unsupported_instructions_are_named() {
        let dir = context("unsupported");
        let cases = [
            ("FROM debian\n", "only `FROM scratch`"),
            ("FROM scratch\nRUN true\n", "RUN is not supported"),
            ("FROM scratch\nCMD run\n", "JSON (exec) form"),
            ("FROM scratch\nCOPY a b c /x\n", "one source"),
            ("FROM scratch\nLABEL a=\"$NOPE\"\n", "$NOPE is not declared"),
            ("USER 1\n", "before FROM"),
            ("ARG A=1\n", "no `FROM scratch`"),
        ];
        for (text, expected) in cases {
            let error = image(text, &[], &dir, "r").unwrap_err().to_string();
            assert!(error.contains(expected), "{text:?}: {error}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_projects_dockerfile_is_within_the_subset() {
        let root = crate::workspace_root();
        let text = std::fs::read_to_string(root.join("Dockerfile")).unwrap();
        let dir = context("project");
        std::fs::write(dir.join("dist/poolkeeper"), b"binary").unwrap();
        let image = image(&text, &[("DIST", "dist")], &dir, "poolkeeper:0").unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(image.files[0].path, "poolkeeper");
        assert_eq!(image.entrypoint, ["/poolkeeper"]);
        assert_eq!(image.user.as_deref(), Some("65532:65532"));
    }
}
