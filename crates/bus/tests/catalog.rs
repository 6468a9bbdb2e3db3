//! The catalog in this crate's README and the `## Events` sections of the
//! crates' READMEs say what the code does: every event of [`Event`] is a
//! row of the catalog with a consumer, no row names an event that does not
//! exist, and the crate READMEs name only events of the catalog.

use std::collections::BTreeSet;
use std::path::Path;

use poolkeeper_bus::EventName;
use strum::IntoEnumIterator;

const CRATES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

fn events() -> BTreeSet<&'static str> {
    EventName::iter().map(EventName::as_str).collect()
}

/// The leading identifier of each backticked span in `text`, with what
/// follows it inside the span (`Name{a,b}` gives `("Name", "{a,b}")`).
fn code_spans(text: &str) -> Vec<(&str, &str)> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(|span| {
            let end = span
                .find(|c: char| !c.is_ascii_alphanumeric())
                .unwrap_or(span.len());
            span.split_at(end)
        })
        .collect()
}

/// The lines of `## Events` (or `## Event catalog`) up to the next heading
/// of the same level.
fn events_section(readme: &str) -> Option<String> {
    let start = readme
        .lines()
        .position(|line| line.starts_with("## Event"))?;
    let section: Vec<&str> = readme
        .lines()
        .skip(start + 1)
        .take_while(|line| !line.starts_with("## "))
        .collect();
    Some(section.join("\n"))
}

/// The rows of the catalog table: the events of the first column and the
/// "consumed by" column.
fn catalog_rows() -> Vec<(Vec<String>, String)> {
    let readme = std::fs::read_to_string(Path::new(CRATES).join("bus/README.md")).unwrap();
    let section = events_section(&readme).expect("the bus README has an event catalog");
    section
        .lines()
        .filter(|line| line.starts_with("| `"))
        .map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").collect();
            assert_eq!(cells.len(), 3, "a catalog row has three cells: {line}");
            let names = code_spans(cells[0])
                .into_iter()
                .map(|(name, _)| name.to_owned())
                .collect();
            (names, cells[2].trim().to_owned())
        })
        .collect()
}

#[test]
fn the_catalog_lists_every_event_once_with_a_consumer() {
    let rows = catalog_rows();
    let mut listed = Vec::new();
    for (names, consumers) in &rows {
        assert!(
            !consumers.is_empty(),
            "{names:?} has no consumer in the catalog"
        );
        listed.extend(names.iter().map(String::as_str));
    }
    let unique: BTreeSet<&str> = listed.iter().copied().collect();
    assert_eq!(
        unique.len(),
        listed.len(),
        "an event is listed twice: {listed:?}"
    );
    assert_eq!(unique, events(), "the catalog and the Event enum differ");
}

#[test]
fn crate_readmes_name_only_catalog_events() {
    let events = events();
    let mut mentioned: BTreeSet<String> = BTreeSet::new();
    for entry in std::fs::read_dir(CRATES).unwrap() {
        let readme = entry.unwrap().path().join("README.md");
        let Ok(text) = std::fs::read_to_string(&readme) else {
            continue;
        };
        let Some(section) = events_section(&text) else {
            continue;
        };
        for (name, rest) in code_spans(&section) {
            // An event is written with its fields, `Name{...}` or `Name { ... }`.
            let capitalised = name.starts_with(|c: char| c.is_ascii_uppercase());
            if capitalised && rest.trim_start().starts_with('{') {
                assert!(
                    events.contains(name),
                    "{}: `{name}` is not an event of the catalog",
                    readme.display()
                );
            }
            if events.contains(name) {
                mentioned.insert(name.to_owned());
            }
        }
    }
    let unmentioned: Vec<&&str> = events
        .iter()
        .filter(|event| !mentioned.contains(**event))
        .collect();
    assert!(
        unmentioned.is_empty(),
        "no crate README names {unmentioned:?} in its Events section"
    );
}
