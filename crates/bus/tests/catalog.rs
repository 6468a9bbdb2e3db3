//! The `## Events` sections of the crates' READMEs name only events of
//! [`EventName`], and every event is named by some crate. The catalog in
//! this crate's README is held to the code by `cargo xtask checks`: a row per
//! event, and the crates it names as consumers match the event.

use poolkeeper_bus::EventName;
use std::collections::BTreeSet;
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
