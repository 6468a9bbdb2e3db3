//! YAML -> [`Config`], reporting every problem at once.
//!
//! Serde stops at the first error. To still report every bad field in one
//! go, a failed parse is followed by a diagnosis:
//! 1. the document is checked for well-formedness (a syntax error is the
//!    only thing worth reporting then);
//! 2. all keys are compared with the schema, so every unknown key is found;
//! 3. each leaf field of the schema is parsed on its own (the parser sees
//!    only the keys on that field's path), so one bad value cannot hide
//!    another;
//! 4. the fields that did parse are assembled into a best-effort `Config`
//!    and validated, skipping rules that involve a field that failed.
//!
//! Every pass runs serde-saphyr on the original text, so values are read
//! exactly as in the real parse and errors keep their line and column.

use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, IgnoredAny, IntoDeserializer, MapAccess,
    SeqAccess, VariantAccess, Visitor,
};
use serde_json::Value;
use serde_saphyr::{MessageFormatter, Spanned, UserMessageFormatter};

use crate::derived;
use crate::error::{ConfigError, Location};
use crate::schema::Config;
use crate::validate::{self, Violation};

/// A dotted path split into its keys.
type KeyPath = Vec<String>;

pub(crate) fn parse(text: &str) -> Result<Config, Vec<ConfigError>> {
    let failure = match parse_tracked(text, PhantomData::<Option<Config>>) {
        Ok(config) => {
            let mut config = config.unwrap_or_default();
            let keys = KeyTree::parse(text);
            derived::apply(&mut config, |dotted| {
                let path: KeyPath = dotted.split('.').map(str::to_owned).collect();
                keys.as_ref().is_some_and(|keys| keys.contains(&path))
            });
            let violations = validate::validate(&config);
            if violations.is_empty() {
                return Ok(config);
            }
            return Err(violations
                .into_iter()
                .map(|v| invalid(v, keys.as_ref()))
                .collect());
        }
        Err(failure) => failure,
    };
    if let Err(err) = serde_saphyr::from_str_with_options::<IgnoredAny>(text, options()) {
        return Err(vec![syntax_error(&err, text)]);
    }
    if failure.path.is_empty() {
        // The document itself has the wrong shape (not a mapping): nothing below it can be read.
        return Err(vec![failure.into_error()]);
    }
    Err(diagnose(text, failure))
}

fn diagnose(text: &str, first: Failure) -> Vec<ConfigError> {
    let defaults = match serde_json::to_value(Config::default()) {
        Ok(value) => value,
        Err(_) => return vec![first.into_error()],
    };
    let mut failures = Vec::new();
    let keys = KeyTree::parse(text);
    if let Some(keys) = &keys {
        unknown_keys(keys, &defaults, &mut Vec::new(), &mut failures);
    }
    failures.push(first);

    let mut merged = defaults.clone();
    for leaf in leaves(&defaults) {
        match parse_tracked(
            text,
            Focus {
                seed: PhantomData::<Config>,
                path: &leaf,
            },
        ) {
            Ok(config) => copy_leaf(&config, &leaf, &mut merged),
            Err(failure) => failures.push(failure),
        }
    }

    let mut seen = std::collections::HashSet::new();
    failures.retain(|failure| seen.insert(failure.path.clone()));
    failures.sort_by_key(|failure| {
        failure
            .location
            .map_or((u64::MAX, u64::MAX), |l| (l.line, l.column))
    });

    let violations = match serde_json::from_value::<Config>(merged) {
        Ok(config) => validate::validate(&config),
        Err(_) => Vec::new(),
    };
    let failed: Vec<&KeyPath> = failures.iter().map(|failure| &failure.path).collect();
    let mut errors: Vec<ConfigError> = failures.iter().map(Failure::to_error).collect();
    errors.extend(
        violations
            .into_iter()
            .filter(|violation| {
                !violation
                    .paths()
                    .any(|path| failed.iter().any(|f| overlaps(path, f)))
            })
            .map(|violation| invalid(violation, keys.as_ref())),
    );
    errors
}

/// A rule violation, located at its key when the document spells it out.
fn invalid(violation: Violation, keys: Option<&KeyTree>) -> ConfigError {
    let path: KeyPath = violation.path.split('.').map(str::to_owned).collect();
    ConfigError::Invalid {
        location: keys.and_then(|keys| keys.location(&path)),
        path: violation.path.to_owned(),
        reason: violation.reason,
    }
}

/// Whether `dotted` names `path` or something inside or above it.
fn overlaps(dotted: &str, path: &[String]) -> bool {
    let mut keys = dotted.split('.');
    path.iter().zip(keys.by_ref()).all(|(a, b)| a == b)
}

fn options() -> serde_saphyr::Options {
    serde_saphyr::options! { with_snippet: false }
}

/// A failed parse: the serde error and the path of keys leading to it.
struct Failure {
    path: KeyPath,
    reason: String,
    location: Option<Location>,
}

impl Failure {
    fn to_error(&self) -> ConfigError {
        ConfigError::Schema {
            path: self.path.join("."),
            reason: self.reason.clone(),
            location: self.location,
        }
    }

    fn into_error(self) -> ConfigError {
        self.to_error()
    }
}

/// Parses `text` with `seed`, remembering the key path of the error if it fails.
fn parse_tracked<T, S>(text: &str, seed: S) -> Result<T, Failure>
where
    S: for<'de> DeserializeSeed<'de, Value = T>,
{
    let mut path = None;
    let result = serde_saphyr::with_deserializer_from_str_with_options(text, options(), |de| {
        let mut track = serde_path_to_error::Track::new();
        let result = seed.deserialize(serde_path_to_error::Deserializer::new(de, &mut track));
        if result.is_err() {
            path = Some(track.path());
        }
        result
    });
    result.map_err(|err| Failure {
        path: path
            .map(|path| path.iter().map(segment_key).collect())
            .unwrap_or_default(),
        reason: message(&err, text),
        location: location(&err),
    })
}

fn segment_key(segment: &serde_path_to_error::Segment) -> String {
    use serde_path_to_error::Segment;
    match segment {
        Segment::Map { key } => key.clone(),
        Segment::Seq { index } => index.to_string(),
        Segment::Enum { variant } => variant.clone(),
        Segment::Unknown => "?".to_owned(),
    }
}

fn syntax_error(err: &serde_saphyr::Error, text: &str) -> ConfigError {
    ConfigError::Syntax {
        location: location(err),
        reason: message(err, text),
    }
}

/// The error text on one line, without the location (reported separately).
/// serde-saphyr's terse messages for scalars of the wrong type are reworded
/// to say what was expected and quote what was found.
fn message(err: &serde_saphyr::Error, text: &str) -> String {
    use serde_saphyr::Error;
    let err = err.without_snippet();
    let found = || match err
        .location()
        .and_then(|location| scalar_text(text, location))
    {
        Some(found) => format!(", got {found:?}"),
        None => String::new(),
    };
    let reason = match err {
        Error::InvalidScalar { ty, .. } => {
            let expected = match *ty {
                "boolean" | "bool" => "true or false",
                "u8" | "u16" | "u32" | "u64" | "u128" | "usize" => "a non-negative integer",
                "i8" | "i16" | "i32" | "i64" | "i128" | "isize" => "an integer",
                "f32" | "f64" => "a number",
                other => other,
            };
            format!("expected {expected}{}", found())
        }
        Error::Unexpected {
            expected: "mapping start",
            ..
        } => "expected a mapping (key: value pairs)".to_owned(),
        Error::Unexpected {
            expected: "string scalar" | "scalar",
            ..
        } => "expected a single value, not a mapping or a list".to_owned(),
        Error::NullIntoString { .. } => "expected a value, found nothing (null)".to_owned(),
        _ => UserMessageFormatter.format_message(err).into_owned(),
    };
    let mut line = String::with_capacity(reason.len());
    for c in reason.chars() {
        if c.is_control() {
            line.extend(c.escape_default());
        } else {
            line.push(c);
        }
    }
    line
}

/// The source text of the scalar at `location`, when it is short enough to quote.
fn scalar_text(text: &str, location: serde_saphyr::Location) -> Option<&str> {
    let span = location.span();
    let start = usize::try_from(span.byte_offset()?).ok()?;
    let len = usize::try_from(span.byte_len()?).ok()?;
    let found = text.get(start..start.checked_add(len)?)?;
    (!found.is_empty() && found.len() <= 80 && !found.contains('\n')).then_some(found)
}

fn location(err: &serde_saphyr::Error) -> Option<Location> {
    err.location().and_then(convert_location)
}

fn convert_location(location: serde_saphyr::Location) -> Option<Location> {
    (location.line() > 0).then(|| Location {
        line: location.line(),
        column: location.column(),
    })
}

// ---------------------------------------------------------------------------
// Focused parsing: only the keys along one path reach the target type.

/// Deserializes with `seed`, letting through only the entries on `path`;
/// every other key of the maps along the path is skipped unread.
struct Focus<'p, S> {
    seed: S,
    path: &'p [String],
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Focus<'_, S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<S::Value, D::Error> {
        match self.path.split_first() {
            None => self.seed.deserialize(deserializer),
            // Sections are read as `Option`s (null = defaults), so read them the same way here.
            Some((key, rest)) => deserializer.deserialize_option(FocusVisitor {
                seed: self.seed,
                key,
                rest,
            }),
        }
    }
}

struct FocusVisitor<'p, S> {
    seed: S,
    key: &'p str,
    rest: &'p [String],
}

impl<'de, S: DeserializeSeed<'de>> Visitor<'de> for FocusVisitor<'_, S> {
    type Value = S::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a mapping")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<S::Value, A::Error> {
        self.seed.deserialize(FocusedMap {
            map: Some(OnlyKey {
                map,
                key: self.key,
                rest: self.rest,
            }),
        })
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<S::Value, D::Error> {
        deserializer.deserialize_map(self)
    }

    fn visit_none<E: de::Error>(self) -> Result<S::Value, E> {
        self.seed
            .deserialize(FocusedMap::<NoEntries<E>> { map: None })
    }
}

/// Hands the filtered mapping to the type being built; `None` stands for a
/// null value, which reads as `None` for an `Option` and as an empty mapping
/// for anything else.
struct FocusedMap<M> {
    map: Option<M>,
}

impl<'de, M: MapAccess<'de>> Deserializer<'de> for FocusedMap<M> {
    type Error = M::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, M::Error> {
        match self.map {
            Some(map) => visitor.visit_map(map),
            None => visitor.visit_map(NoEntries::<M::Error>(PhantomData)),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, M::Error> {
        match self.map {
            Some(_) => visitor.visit_some(self),
            None => visitor.visit_none(),
        }
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct newtype_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
    }
}

/// The map of a null value: no entries.
struct NoEntries<E>(PhantomData<E>);

impl<'de, E: de::Error> MapAccess<'de> for NoEntries<E> {
    type Error = E;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, _: K) -> Result<Option<K::Value>, E> {
        Ok(None)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, _: V) -> Result<V::Value, E> {
        Err(E::custom("value requested from an empty mapping"))
    }
}

struct OnlyKey<'p, A> {
    map: A,
    key: &'p str,
    rest: &'p [String],
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for OnlyKey<'_, A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        while let Some(key) = self.map.next_key::<String>()? {
            if key == self.key {
                return seed.deserialize(key.into_deserializer()).map(Some);
            }
            self.map.next_value::<IgnoredAny>()?;
        }
        Ok(None)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        self.map.next_value_seed(Focus {
            seed,
            path: self.rest,
        })
    }
}

// ---------------------------------------------------------------------------
// Schema walking

/// Paths of every leaf (non-mapping value) of the serialized defaults.
pub(crate) fn leaves(schema: &Value) -> Vec<KeyPath> {
    fn walk(value: &Value, prefix: &mut KeyPath, out: &mut Vec<KeyPath>) {
        match value {
            Value::Object(fields) => {
                for (key, child) in fields {
                    prefix.push(key.clone());
                    walk(child, prefix, out);
                    prefix.pop();
                }
            }
            _ => out.push(prefix.clone()),
        }
    }
    let mut out = Vec::new();
    walk(schema, &mut Vec::new(), &mut out);
    out
}

fn pointer(path: &[String]) -> String {
    path.iter().fold(String::new(), |mut pointer, key| {
        pointer.push('/');
        pointer.push_str(&key.replace('~', "~0").replace('/', "~1"));
        pointer
    })
}

fn copy_leaf(config: &Config, path: &[String], merged: &mut Value) {
    let pointer = pointer(path);
    let Ok(parsed) = serde_json::to_value(config) else {
        return;
    };
    if let (Some(value), Some(slot)) = (parsed.pointer(&pointer), merged.pointer_mut(&pointer)) {
        *slot = value.clone();
    }
}

/// The keys of a YAML document, with where they are; values other than mappings are not kept.
#[derive(Debug)]
pub(crate) enum KeyTree {
    Map(Vec<KeyNode>),
    Other,
}

#[derive(Debug)]
pub(crate) struct KeyNode {
    pub(crate) key: String,
    pub(crate) location: Option<Location>,
    pub(crate) value: KeyTree,
}

impl KeyTree {
    pub(crate) fn parse(text: &str) -> Option<KeyTree> {
        serde_saphyr::from_str_with_options::<KeyTree>(text, options()).ok()
    }

    /// Where the key at `path` is written, if it is.
    fn location(&self, path: &[String]) -> Option<Location> {
        let (key, rest) = path.split_first()?;
        let KeyTree::Map(nodes) = self else {
            return None;
        };
        let node = nodes.iter().find(|node| &node.key == key)?;
        if rest.is_empty() {
            node.location
        } else {
            node.value.location(rest)
        }
    }

    /// Whether the document has a value (mapping or not) at `path`.
    pub(crate) fn contains(&self, path: &[String]) -> bool {
        match path.split_first() {
            None => true,
            Some((key, rest)) => match self {
                KeyTree::Map(nodes) => nodes
                    .iter()
                    .any(|node| &node.key == key && node.value.contains(rest)),
                KeyTree::Other => false,
            },
        }
    }
}

impl<'de> Deserialize<'de> for KeyTree {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(KeyTreeVisitor)
    }
}

struct KeyTreeVisitor;

impl<'de> Visitor<'de> for KeyTreeVisitor {
    type Value = KeyTree;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<KeyTree, A::Error> {
        let mut nodes = Vec::new();
        while let Some(key) = map.next_key::<Spanned<String>>()? {
            let value = map.next_value::<KeyTree>()?;
            nodes.push(KeyNode {
                key: key.value,
                location: convert_location(key.referenced),
                value,
            });
        }
        Ok(KeyTree::Map(nodes))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<KeyTree, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(KeyTree::Other)
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<KeyTree, A::Error> {
        data.variant::<IgnoredAny>()?
            .1
            .newtype_variant::<IgnoredAny>()?;
        Ok(KeyTree::Other)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<KeyTree, D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<KeyTree, D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_bool<E>(self, _: bool) -> Result<KeyTree, E> {
        Ok(KeyTree::Other)
    }

    fn visit_i64<E>(self, _: i64) -> Result<KeyTree, E> {
        Ok(KeyTree::Other)
    }

    fn visit_i128<E>(self, _: i128) -> Result<KeyTree, E> {
        Ok(KeyTree::Other)
    }

    fn visit_u64<E>(self, _: u64) -> Result<KeyTree, E> {
        Ok(KeyTree::Other)
    }

    fn visit_u128<E>(self, _: u128) -> Result<KeyTree, E> {
        Ok(KeyTree::Other)
    }

    fn visit_f64<E>(self, _: f64) -> Result<KeyTree, E> {
        Ok(KeyTree::Other)
    }

    fn visit_char<E>(self, _: char) -> Result<KeyTree, E> {
        Ok(KeyTree::Other)
    }

    fn visit_str<E>(self, _: &str) -> Result<KeyTree, E> {
        Ok(KeyTree::Other)
    }

    fn visit_bytes<E>(self, _: &[u8]) -> Result<KeyTree, E> {
        Ok(KeyTree::Other)
    }

    fn visit_none<E>(self) -> Result<KeyTree, E> {
        Ok(KeyTree::Other)
    }

    fn visit_unit<E>(self) -> Result<KeyTree, E> {
        Ok(KeyTree::Other)
    }
}

/// Reports every key of `tree` that `schema` does not have.
fn unknown_keys(tree: &KeyTree, schema: &Value, prefix: &mut KeyPath, out: &mut Vec<Failure>) {
    let (KeyTree::Map(nodes), Value::Object(fields)) = (tree, schema) else {
        return;
    };
    for node in nodes {
        prefix.push(node.key.clone());
        match fields.get(&node.key) {
            Some(child) => unknown_keys(&node.value, child, prefix, out),
            None => {
                let allowed: Vec<&str> = fields.keys().map(String::as_str).collect();
                out.push(Failure {
                    path: prefix.clone(),
                    reason: unknown_key_reason(&node.key, &allowed),
                    location: node.location,
                });
            }
        }
        prefix.pop();
    }
}

fn unknown_key_reason(key: &str, allowed: &[&str]) -> String {
    let mut reason = format!("unknown key {key:?}");
    if let Some(suggestion) = closest(key, allowed) {
        reason.push_str(&format!(" (did you mean {suggestion:?}?)"));
    }
    reason.push_str("; allowed keys: ");
    reason.push_str(&allowed.join(", "));
    reason
}

/// The allowed key the unknown one was most likely meant to be: same letters
/// ignoring case and separators (`debounce_interval`), or a small typo.
fn closest<'a>(key: &str, allowed: &[&'a str]) -> Option<&'a str> {
    let normalize = |s: &str| -> String {
        s.chars()
            .filter(|c| !matches!(c, '_' | '-' | '.'))
            .flat_map(char::to_lowercase)
            .collect()
    };
    let wanted = normalize(key);
    allowed
        .iter()
        .map(|candidate| (edit_distance(&wanted, &normalize(candidate)), *candidate))
        .filter(|(distance, candidate)| *distance <= (candidate.len() / 4).clamp(1, 3))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(row[j + 1] + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance_counts_single_edits() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("same", "same"), 0);
    }

    #[test]
    fn suggests_the_intended_key() {
        let allowed = ["debounceInterval", "maxDelay"];
        assert_eq!(
            closest("debounce_interval", &allowed),
            Some("debounceInterval")
        );
        assert_eq!(closest("maxDelya", &allowed), Some("maxDelay"));
        assert_eq!(closest("colour", &allowed), None);
    }

    #[test]
    fn overlapping_paths() {
        let path = |s: &str| s.split('.').map(str::to_owned).collect::<Vec<_>>();
        assert!(overlaps(
            "reconciler.maxDelay",
            &path("reconciler.maxDelay")
        ));
        assert!(overlaps("reconciler.maxDelay", &path("reconciler")));
        assert!(!overlaps(
            "reconciler.maxDelay",
            &path("reconciler.debounceInterval")
        ));
        assert!(!overlaps("executor.concurrency", &path("reconciler")));
    }
}
