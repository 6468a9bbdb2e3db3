//! The event catalog rule. The table under `## Event catalog` in crates/bus/README.md is the
//! architecture: which crate consumes each event of `enum Event` (crates/bus/src/event.rs). The
//! code has to agree with it:
//!
//! - every variant has exactly one row, and every row names variants only;
//! - every row names at least one consumer: a crate under `crates/`, its directory name in bold
//!   in the "consumed by" cell (`**executor** (dirty keys)`);
//! - each consumer's non-test code has a pattern on the variant: a `match` arm that does
//!   something (`=> {}` does nothing), an `if let`, `while let` or `let … else`, or a
//!   `matches!`, on `Event::X` itself or nested (`Some(Event::X)`). Building an event
//!   (`publish(Event::X { .. })`) is publishing it, not consuming it;
//! - and the other way round, a crate with such a pattern is named in the variant's row.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::rules::Source;
use super::{SourceTree, Violation};
use crate::{Error, Result};

/// The catalog, relative to the workspace root.
pub(super) const CATALOG: &str = "crates/bus/README.md";
/// The file that defines [`EVENT_ENUM`], relative to the workspace root.
pub(super) const EVENTS: &str = "crates/bus/src/event.rs";
const EVENT_ENUM: &str = "Event";
const HEADING: &str = "## Event catalog";
/// The crate that defines the events; a path `poolkeeper_bus::Event::X` is theirs, other
/// `…::Event::X` paths (kube's `watcher::Event`) are not.
const BUS_CRATE: &str = "poolkeeper_bus";

/// The events each crate under `crates/` consumes, by the crate's directory name.
pub(super) type Consumed = BTreeMap<String, BTreeSet<String>>;

/// The catalog rule on the workspace at `root`.
pub(super) fn check(root: &Path) -> Result<Vec<Violation>> {
    let catalog = read(&root.join(CATALOG))?;
    let events = read(&root.join(EVENTS))?;
    Ok(violations(&catalog, &events, &consumed_by_crate(root)?))
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| Error::io(format!("reading {}", path.display()), e))
}

/// For every crate under `root/crates`, the variants of `Event` its non-test code consumes.
fn consumed_by_crate(root: &Path) -> Result<Consumed> {
    let crates = root.join("crates");
    let entries = std::fs::read_dir(&crates)
        .map_err(|e| Error::io(format!("reading {}", crates.display()), e))?;
    let mut consumed = Consumed::new();
    for dir in entries.filter_map(|entry| entry.ok().map(|e| e.path())) {
        let Some(name) = dir.file_name().and_then(|n| n.to_str()).map(str::to_owned) else {
            continue;
        };
        if !dir.join("Cargo.toml").is_file() {
            continue;
        }
        let tree = SourceTree {
            src: dir.join("src"),
            defaults_allowed: false,
        };
        let mut events = BTreeSet::new();
        for file in tree.checked_files()? {
            events.extend(Source::new(&read(&file)?).consumed_variants(EVENT_ENUM));
        }
        consumed.insert(name, events);
    }
    Ok(consumed)
}

/// One row of the catalog: the events of its first cell and the consumers of its third.
#[derive(Debug, PartialEq, Eq)]
struct Row {
    line: usize,
    events: Vec<String>,
    consumers: Vec<String>,
}

/// The rule on the catalog's text, the text of the file defining the enum, and what each crate
/// consumes.
pub(super) fn violations(catalog: &str, events: &str, consumed: &Consumed) -> Vec<Violation> {
    let at = |path: &str, line, message| Violation {
        path: PathBuf::from(path),
        line,
        message,
    };
    let Some(variants) = Source::new(events).enum_variants(EVENT_ENUM) else {
        return vec![at(EVENTS, 1, format!("no `enum {EVENT_ENUM}` found"))];
    };
    let rows = match rows(catalog) {
        Ok(rows) => rows,
        Err((line, message)) => return vec![at(CATALOG, line, message)],
    };
    let mut found = Vec::new();
    let mut listed: BTreeMap<&str, usize> = BTreeMap::new();
    for row in &rows {
        for event in &row.events {
            if let Some(first) = listed.insert(event, row.line) {
                let message = format!("`{event}` has a row already, on line {first}");
                found.push(at(CATALOG, row.line, message));
            }
            if !variants.iter().any(|(variant, _)| variant == event) {
                let message =
                    format!("`{event}` is not a variant of `enum {EVENT_ENUM}` ({EVENTS})");
                found.push(at(CATALOG, row.line, message));
            }
        }
        found.extend(
            row_violations(row, consumed)
                .into_iter()
                .map(|message| at(CATALOG, row.line, message)),
        );
    }
    for (variant, line) in &variants {
        if !listed.contains_key(variant.as_str()) {
            let message = format!(
                "`{EVENT_ENUM}::{variant}` has no row in the event catalog ({CATALOG}): add one \
                 with its publisher and the crates that consume it"
            );
            found.push(at(EVENTS, *line, message));
        }
    }
    found
}

/// A row without a consumer, consumers that are no crate or don't consume its events, and
/// crates that consume them unnamed.
fn row_violations(row: &Row, consumed: &Consumed) -> Vec<String> {
    let mut found = Vec::new();
    if row.consumers.is_empty() {
        found.push(format!(
            "{} has no consumer: name each crate that consumes it in bold (`**executor**`)",
            names(&row.events)
        ));
    }
    for (name, events) in consumed {
        let unnamed: Vec<String> = row
            .events
            .iter()
            .filter(|event| events.contains(*event) && !row.consumers.contains(name))
            .cloned()
            .collect();
        if !unnamed.is_empty() {
            found.push(format!(
                "crates/{name}/src consumes {}, but the row does not name **{name}**",
                names(&unnamed)
            ));
        }
    }
    for consumer in &row.consumers {
        let Some(events) = consumed.get(consumer) else {
            found.push(format!(
                "**{consumer}** is named as a consumer, but there is no crate crates/{consumer}"
            ));
            continue;
        };
        let missing: Vec<String> = row
            .events
            .iter()
            .filter(|event| !events.contains(*event))
            .cloned()
            .collect();
        if !missing.is_empty() {
            found.push(format!(
                "**{consumer}** is named as a consumer of {}, but no non-test code in \
                 crates/{consumer}/src matches it (a match arm that does something, `if let`, \
                 `let … else` or `matches!` on `{EVENT_ENUM}::…`)",
                names(&missing)
            ));
        }
    }
    found
}

fn names(events: &[String]) -> String {
    let quoted: Vec<String> = events.iter().map(|e| format!("`{e}`")).collect();
    quoted.join(" / ")
}

/// The rows of the table under [`HEADING`], or the line and reason the table is malformed.
fn rows(catalog: &str) -> std::result::Result<Vec<Row>, (usize, String)> {
    let mut lines = catalog
        .lines()
        .enumerate()
        .map(|(index, text)| (index + 1, text));
    if !lines.any(|(_, text)| text.trim_end() == HEADING) {
        return Err((1, format!("no `{HEADING}` section")));
    }
    let mut rows = Vec::new();
    for (line, text) in lines.take_while(|(_, text)| !text.starts_with("## ")) {
        if !text.starts_with("| `") {
            continue;
        }
        let cells = cells(text);
        let [events, _published_by, consumers] = cells.as_slice() else {
            return Err((
                line,
                format!(
                    "a catalog row has three cells (event, published by, consumed by), this one \
                     has {}",
                    cells.len()
                ),
            ));
        };
        rows.push(Row {
            line,
            events: code_spans(events),
            consumers: bold_spans(consumers),
        });
    }
    if rows.is_empty() {
        return Err((1, format!("no rows under `{HEADING}`")));
    }
    Ok(rows)
}

/// The cells of a Markdown table row; `\|` is a pipe inside a cell.
fn cells(row: &str) -> Vec<String> {
    let inner = row.trim().trim_start_matches('|');
    let inner = inner.strip_suffix('|').unwrap_or(inner);
    let mut cells = vec![String::new()];
    let mut escaped = false;
    for c in inner.chars() {
        match c {
            '|' if !escaped => cells.push(String::new()),
            _ => {
                if let Some(cell) = cells.last_mut() {
                    cell.push(c);
                }
            }
        }
        escaped = c == '\\';
    }
    cells.iter().map(|cell| cell.trim().to_owned()).collect()
}

/// The leading identifier of each backticked span (`Name{a,b}` gives `Name`).
fn code_spans(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(|span| {
            span.chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect::<String>()
        })
        .filter(|name| !name.is_empty())
        .collect()
}

/// The text of each `**bold**` span.
fn bold_spans(cell: &str) -> Vec<String> {
    cell.split("**")
        .skip(1)
        .step_by(2)
        .map(|span| span.trim().to_owned())
        .collect()
}

impl Source {
    /// The variants of `enum name { … }`, each with its line.
    pub(super) fn enum_variants(&self, name: &str) -> Option<Vec<(String, usize)>> {
        let open = (0..self.len()).find(|&i| {
            self.is(i, "enum") && self.ident(i + 1) == Some(name) && self.is(i + 2, "{")
        })? + 2;
        let close = self.closing(open)?;
        let mut variants = Vec::new();
        let mut expect_variant = true;
        let mut at = open + 1;
        while at < close {
            if self.is(at, "#") && self.is(at + 1, "[") {
                at = self.closing(at + 1)? + 1;
                continue;
            }
            if self.is(at, "{") || self.is(at, "(") {
                at = self.closing(at)? + 1;
                continue;
            }
            if self.is(at, ",") {
                expect_variant = true;
            } else if let Some(variant) = self.ident(at).filter(|_| expect_variant) {
                variants.push((variant.to_owned(), self.line(at)));
                expect_variant = false;
            }
            at += 1;
        }
        Some(variants)
    }

    /// The variants of `enum_name` this file consumes outside test code: `enum_name::X` in a
    /// pattern that is not the whole of a `match` arm doing nothing.
    pub(super) fn consumed_variants(&self, enum_name: &str) -> BTreeSet<String> {
        let mut consumed = BTreeSet::new();
        for start in 0..self.len() {
            let Some(variant) = self
                .ident(start + 2)
                .filter(|_| self.ident(start) == Some(enum_name) && self.is(start + 1, "::"))
            else {
                continue;
            };
            let foreign =
                start >= 2 && self.is(start - 1, "::") && self.ident(start - 2) != Some(BUS_CRATE);
            if foreign || self.in_test_code(start) {
                continue;
            }
            let mut end = start + 3;
            if self.is(end, "{") || self.is(end, "(") {
                match self.closing(end) {
                    Some(close) => end = close + 1,
                    None => continue,
                }
            }
            if self.consumes(start, end) {
                consumed.insert(variant.to_owned());
            }
        }
        consumed
    }

    /// Whether the tokens `start..end` are (part of) a pattern that does something.
    fn consumes(&self, start: usize, end: usize) -> bool {
        let follower = self.after_alternatives(end);
        if self.is(follower, "=>") {
            return !self.is_empty_arm(follower + 1);
        }
        if self.is(follower, "if") {
            return self
                .guard_arrow(follower + 1)
                .is_some_and(|arrow| !self.is_empty_arm(arrow + 1));
        }
        if self.is(follower, "=") && !self.is(follower + 1, "=") {
            return true;
        }
        if !(self.is(follower, ",") || self.is_closer(follower)) {
            return false;
        }
        // Inside a group: a `matches!` argument after its comma, or a part of a larger
        // pattern or expression, judged as a whole.
        let Some(open) = self.enclosing_opener(start) else {
            return false;
        };
        if self.is(open, "(") && self.is_matches_macro(open) {
            return self.top_level_comma(open + 1, start);
        }
        let nested = self.is(open, "(")
            || self.is(open, "[")
            || (self.is(open, "{") && self.is_type_name(open.wrapping_sub(1)));
        let Some(close) = self.closing(open).filter(|_| nested) else {
            return false;
        };
        self.consumes(self.path_start(open), close + 1)
    }

    /// The first token from `at` past the alternatives of an or-pattern (`A | B`).
    fn after_alternatives(&self, mut at: usize) -> usize {
        while self.is(at, "|") {
            at += 1;
            while at < self.len() {
                if self.is(at, "{") || self.is(at, "(") || self.is(at, "[") {
                    at = self.closing(at).map_or(self.len(), |close| close + 1);
                    continue;
                }
                let ends = ["|", "=>", "if", "=", ",", ";"];
                if ends.iter().any(|end| self.is(at, end)) || self.is_closer(at) {
                    break;
                }
                at += 1;
            }
        }
        at
    }

    /// The `=>` that ends a match guard starting at `at`.
    fn guard_arrow(&self, mut at: usize) -> Option<usize> {
        while at < self.len() {
            if self.is(at, "=>") {
                return Some(at);
            }
            if self.is(at, ";") || self.is_closer(at) {
                return None;
            }
            if self.is(at, "{") || self.is(at, "(") || self.is(at, "[") {
                at = self.closing(at)?;
            }
            at += 1;
        }
        None
    }

    /// `{}` or `()`: an arm that does nothing.
    fn is_empty_arm(&self, at: usize) -> bool {
        (self.is(at, "{") && self.is(at + 1, "}")) || (self.is(at, "(") && self.is(at + 1, ")"))
    }

    fn is_closer(&self, at: usize) -> bool {
        self.is(at, ")") || self.is(at, "]") || self.is(at, "}")
    }

    /// The unmatched `(`, `[` or `{` before `at`.
    fn enclosing_opener(&self, at: usize) -> Option<usize> {
        let mut depth = 0usize;
        for index in (0..at).rev() {
            if self.is_closer(index) {
                depth += 1;
            } else if self.is(index, "(") || self.is(index, "[") || self.is(index, "{") {
                if depth == 0 {
                    return Some(index);
                }
                depth -= 1;
            }
        }
        None
    }

    /// `matches!(` with `open` at its parenthesis.
    fn is_matches_macro(&self, open: usize) -> bool {
        open >= 2 && self.is(open - 1, "!") && self.ident(open - 2) == Some("matches")
    }

    /// A comma outside brackets in `from..to`.
    fn top_level_comma(&self, from: usize, to: usize) -> bool {
        let mut at = from;
        while at < to {
            if self.is(at, ",") {
                return true;
            }
            if self.is(at, "{") || self.is(at, "(") || self.is(at, "[") {
                match self.closing(at) {
                    Some(close) => at = close,
                    None => return false,
                }
            }
            at += 1;
        }
        false
    }

    /// A capitalised identifier: the struct of a struct pattern or literal (`match x {` has a
    /// lower-case scrutinee before its brace).
    fn is_type_name(&self, at: usize) -> bool {
        self.ident(at)
            .is_some_and(|name| name.starts_with(|c: char| c.is_ascii_uppercase()))
    }

    /// Where the path before the bracket at `open` starts (`a::B(` starts at `a`), or `open`.
    fn path_start(&self, open: usize) -> usize {
        let mut start = open;
        while start > 0 && (self.ident(start - 1).is_some() || self.is(start - 1, "::")) {
            start -= 1;
        }
        start
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consumed_variants_are_patterns_that_do_something() {
        // (what, source, consumed variants)
        let cases: [(&str, &str, &[&str]); 16] = [
            (
                "match arms",
                "fn f(e: &Event) { match e { Event::A { x, .. } => x.go(), Event::B => {} } }",
                &["A"],
            ),
            (
                "an arm with a guard",
                "fn f(e: &Event) { match e { Event::A { k } if k.ok() => go(), _ => () } }",
                &["A"],
            ),
            (
                "an empty arm after a guard",
                "fn f(e: &Event) { match e { Event::A { k } if k.ok() => {}, _ => go() } }",
                &[],
            ),
            (
                "alternatives share their arm",
                "fn f(e: &Event) { match e { Event::A | Event::B(_) => go(), Event::C | Event::D => () } }",
                &["A", "B"],
            ),
            (
                "if let and let else",
                "fn f(e: Event) { if let Event::A { x } = e { go(x) } let Event::B = e else { return }; }",
                &["A", "B"],
            ),
            (
                "matches!",
                "fn f(e: &Event) -> bool { matches!(e, Event::A { .. } | Event::B) }",
                &["A", "B"],
            ),
            (
                "nested in a pattern",
                "fn f(d: Delivery) { match d { Delivery::Event(Envelope { event: Event::A, .. }) => go(), _ => {} } \
                 while let Some(Event::B(x)) = next() { go(x) } }",
                &["A", "B"],
            ),
            (
                "published, not consumed",
                "fn f(bus: &Bus) { bus.publish(Event::A { x: 1 }); let b = Event::B; out.push(Event::C); }",
                &[],
            ),
            (
                "built in an arm's body",
                "fn f(x: X) -> Option<Event> { match x { X::A => Some(Event::A { x }), X::B => Event::B, } }",
                &[],
            ),
            (
                "a vector of events",
                "fn f() -> Vec<Event> { vec![Event::A, Event::B { x: 1 }] }",
                &[],
            ),
            (
                "a struct literal holding one",
                "fn f() { let e = Envelope { seq: 1, event: Event::A }; }",
                &[],
            ),
            (
                "compared, not matched",
                "fn f(e: Event) -> bool { Event::A == e }",
                &[],
            ),
            (
                "another crate's Event",
                "fn f(e: watcher::Event<K>) { match e { watcher::Event::A => go(), _ => {} } }",
                &[],
            ),
            (
                "the bus's Event by its path",
                "fn f(e: E) { if let poolkeeper_bus::Event::A = e { go() } }",
                &["A"],
            ),
            (
                "in comments, strings and test code",
                "// match e { Event::A => go() }\nconst S: &str = \"if let Event::B = e {}\";\n\
                 #[cfg(test)]\nmod tests { fn t(e: Event) { assert!(matches!(e, Event::C)); } }",
                &[],
            ),
            (
                "another enum",
                "fn f(e: Other) { match e { Other::A => go(), _ => {} } }",
                &[],
            ),
        ];
        for (what, text, expected) in cases {
            let found = Source::new(text).consumed_variants("Event");
            let found: Vec<&str> = found.iter().map(String::as_str).collect();
            assert_eq!(found, expected, "{what}:\n{text}");
        }
    }

    #[test]
    fn enum_variants_are_read_with_their_lines() {
        let text = "/// Docs.\n#[derive(Debug)]\npub enum Event {\n    /// A.\n    A {\n        \
                    #[serde(skip)]\n        x: Vec<u8>,\n    },\n    B,\n    #[serde(rename = \"c\")]\n    \
                    C(u8, String),\n}\nenum Other { D }\n";
        let variants = Source::new(text).enum_variants("Event");
        let expected = [("A", 5), ("B", 9), ("C", 11)].map(|(name, line)| (name.to_owned(), line));
        assert_eq!(variants, Some(expected.to_vec()));
        assert_eq!(Source::new("enum Other { A }").enum_variants("Event"), None);
    }

    #[test]
    fn rows_are_read_from_the_catalog_section() {
        let catalog = "# bus\n\n| `NotInTheCatalog` | x | **y** |\n\n## Event catalog\n\n\
                       | event | published by | consumed by |\n|---|---|---|\n\
                       | `A{x}` / `B` | **not a consumer** here | **executor** (`x` of `A`), **recorder** (`Ok \\| Err`) |\n\
                       | `C` | watchers | metrics, logs |\n\n## Metrics\n\n| `D` | x | **z** |\n";
        let expected = vec![
            Row {
                line: 9,
                events: vec!["A".into(), "B".into()],
                consumers: vec!["executor".into(), "recorder".into()],
            },
            Row {
                line: 10,
                events: vec!["C".into()],
                consumers: vec![],
            },
        ];
        assert_eq!(rows(catalog), Ok(expected));
        assert_eq!(
            rows("## Event catalog\n\n| `A` | two cells |\n").map_err(|(line, _)| line),
            Err(3)
        );
        assert!(rows("## Events\n\n| `A` | b | **c** |\n").is_err());
        assert!(rows("## Event catalog\n\nNo table.\n").is_err());
    }

    const EVENTS_FIXTURE: &str = "pub enum Event {\n    A { x: u8 },\n    B,\n    C,\n}\n";

    /// The crates of the fixtures and what they consume.
    fn consumed(crates: &[(&str, &str)]) -> Consumed {
        crates
            .iter()
            .map(|(name, source)| {
                (
                    name.to_string(),
                    Source::new(source).consumed_variants("Event"),
                )
            })
            .collect()
    }

    fn messages(catalog: &str, crates: &[(&str, &str)]) -> Vec<String> {
        violations(catalog, EVENTS_FIXTURE, &consumed(crates))
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    /// Consumes `A` and `C`.
    const EXECUTOR: &str =
        "fn on(e: &Event) { match e { Event::A { x } => go(x), Event::C => stop(), _ => {} } }";
    /// Consumes `B` and `C`.
    const RECORDER: &str = "fn on(e: &Event) { if let Event::B = e { note() } else if matches!(e, Event::C) { skip() } }";
    /// Publishes `B`.
    const WATCHERS: &str = "fn f(bus: &Bus) { bus.publish(Event::B); }";

    const HEADER: &str =
        "## Event catalog\n\n| event | published by | consumed by |\n|---|---|---|\n";

    #[test]
    fn a_catalog_that_holds_has_no_violation() {
        let catalog = format!(
            "{HEADER}| `A{{x}}` | watchers | **executor** (its `x`) |\n\
             | `B` | watchers | **recorder** (Events) |\n\
             | `C` | executor | **recorder**, **executor** (stops) |\n"
        );
        let crates = [
            ("executor", EXECUTOR),
            ("recorder", RECORDER),
            ("watchers", WATCHERS),
        ];
        assert_eq!(messages(&catalog, &crates), Vec::<String>::new());
    }

    #[test]
    fn catalog_violations_name_the_row_and_the_reason() {
        let crates = [
            ("executor", EXECUTOR),
            ("recorder", RECORDER),
            ("watchers", WATCHERS),
        ];
        let no_match = |line: usize, consumer: &str, event: &str| {
            format!(
                "crates/bus/README.md:{line}: **{consumer}** is named as a consumer of `{event}`, \
                 but no non-test code in crates/{consumer}/src matches it (a match arm that does \
                 something, `if let`, `let … else` or `matches!` on `Event::…`)"
            )
        };
        let unnamed = |line: usize, consumer: &str, event: &str| {
            format!(
                "crates/bus/README.md:{line}: crates/{consumer}/src consumes `{event}`, but the \
                 row does not name **{consumer}**"
            )
        };
        // (what, the rows, the violations)
        let cases: [(&str, &str, Vec<String>); 7] = [
            (
                "an event without a consumer",
                "| `A` | watchers | **executor** |\n| `B` | watchers | metrics, logs |\n\
                 | `C` | executor | **executor**, **recorder** |\n",
                vec![
                    "crates/bus/README.md:6: `B` has no consumer: name each crate that consumes \
                     it in bold (`**executor**`)"
                        .to_owned(),
                    unnamed(6, "recorder", "B"),
                ],
            ),
            (
                "a consumer that does not match an event of its row",
                "| `A` / `B` | watchers | **executor**, **recorder** |\n\
                 | `C` | executor | **executor**, **recorder** |\n",
                vec![no_match(5, "executor", "B"), no_match(5, "recorder", "A")],
            ),
            (
                "a publisher named as a consumer",
                "| `A` | watchers | **executor** |\n| `B` | watchers | **recorder**, **watchers** |\n\
                 | `C` | executor | **executor**, **recorder** |\n",
                vec![no_match(6, "watchers", "B")],
            ),
            (
                "a consumer left out",
                "| `A` | watchers | **executor** |\n| `B` | watchers | **recorder** |\n\
                 | `C` | executor | **executor** |\n",
                vec![unnamed(7, "recorder", "C")],
            ),
            (
                "a consumer that is no crate",
                "| `A` | watchers | **executor**, **metrics** |\n| `B` | watchers | **recorder** |\n\
                 | `C` | executor | **executor**, **recorder** |\n",
                vec![
                    "crates/bus/README.md:5: **metrics** is named as a consumer, but there is no \
                     crate crates/metrics"
                        .to_owned(),
                ],
            ),
            (
                "an event without a row",
                "| `A` | watchers | **executor** |\n| `C` | executor | **executor**, **recorder** |\n",
                vec![
                    "crates/bus/src/event.rs:3: `Event::B` has no row in the event catalog \
                     (crates/bus/README.md): add one with its publisher and the crates that \
                     consume it"
                        .to_owned(),
                ],
            ),
            (
                "a row twice and a row that is no event",
                "| `A` | watchers | **executor** |\n| `B` | watchers | **recorder** |\n\
                 | `C` | executor | **executor**, **recorder** |\n| `A` / `D` | x | **executor** |\n",
                vec![
                    "crates/bus/README.md:8: `A` has a row already, on line 5".to_owned(),
                    "crates/bus/README.md:8: `D` is not a variant of `enum Event` \
                     (crates/bus/src/event.rs)"
                        .to_owned(),
                    no_match(8, "executor", "D"),
                ],
            ),
        ];
        for (what, table, expected) in cases {
            let found = messages(&format!("{HEADER}{table}"), &crates);
            assert_eq!(found, expected, "{what}");
        }
    }

    #[test]
    fn a_missing_catalog_or_enum_is_reported() {
        let found = violations("# bus\n", EVENTS_FIXTURE, &Consumed::new());
        assert_eq!(found.len(), 1);
        assert!(
            found[0].message.contains("no `## Event catalog` section"),
            "{found:?}"
        );
        let found = violations(
            "## Event catalog\n\n| `A` | x | **y** |\n",
            "enum Other {}",
            &Consumed::new(),
        );
        assert_eq!(found.len(), 1);
        assert!(found[0].message.contains("no `enum Event`"), "{found:?}");
    }
}
