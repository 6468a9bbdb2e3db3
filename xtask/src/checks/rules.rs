//! A file's tokens with its test code marked, and two rules on them: functions over the length
//! limit, and defaults of tunables.

use super::tokens::{Kind, Token, tokenize};

/// A function longer than the limit.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct LongFunction {
    pub(super) name: String,
    pub(super) line: usize,
    pub(super) lines: usize,
}

/// An `impl Default` or `derive(Default)` of a tunable.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct TunableDefault {
    pub(super) name: String,
    pub(super) how: &'static str,
    pub(super) line: usize,
}

/// A file's tokens and the parts of it that are test code.
pub(super) struct Source {
    tokens: Vec<Token>,
    /// Token index ranges (inclusive) of `#[cfg(test)]` items.
    test_ranges: Vec<(usize, usize)>,
    /// Names of `#[cfg(test)] mod name;` declarations.
    pub(super) test_modules: Vec<String>,
}

impl Source {
    pub(super) fn new(text: &str) -> Self {
        let mut source = Self {
            tokens: tokenize(text),
            test_ranges: Vec::new(),
            test_modules: Vec::new(),
        };
        source.find_test_code();
        source
    }

    /// The number of tokens.
    pub(super) fn len(&self) -> usize {
        self.tokens.len()
    }

    /// The line a token is on.
    pub(super) fn line(&self, index: usize) -> usize {
        self.tokens.get(index).map_or(0, |t| t.line)
    }

    pub(super) fn is(&self, index: usize, text: &str) -> bool {
        self.tokens.get(index).is_some_and(|t| t.text == text)
    }

    pub(super) fn ident(&self, index: usize) -> Option<&str> {
        self.tokens
            .get(index)
            .filter(|t| t.kind == Kind::Ident)
            .map(|t| t.text.as_str())
    }

    fn is_sequence(&self, index: usize, texts: &[&str]) -> bool {
        texts.iter().enumerate().all(|(i, t)| self.is(index + i, t))
    }

    pub(super) fn in_test_code(&self, index: usize) -> bool {
        self.test_ranges
            .iter()
            .any(|&(start, end)| (start..=end).contains(&index))
    }

    /// The index of the bracket closing the one at `open` (`{`, `(`, `[` or `<`).
    pub(super) fn closing(&self, open: usize) -> Option<usize> {
        let close = match self.tokens.get(open)?.text.as_str() {
            "{" => "}",
            "(" => ")",
            "[" => "]",
            "<" => ">",
            _ => return None,
        };
        let open_text = self.tokens[open].text.as_str();
        let mut depth = 0usize;
        for (index, token) in self.tokens.iter().enumerate().skip(open) {
            if token.text == open_text {
                depth += 1;
            } else if token.text == close {
                depth -= 1;
                if depth == 0 {
                    return Some(index);
                }
            }
        }
        None
    }

    /// From `from`, the first `{` or `;` outside parentheses and square brackets: where an item's
    /// body starts, or where an item without one ends (`[u8; 4]` and `fn(u8)` don't count).
    fn item_end_or_body(&self, from: usize) -> Option<usize> {
        let mut depth = 0i32;
        for (index, token) in self.tokens.iter().enumerate().skip(from) {
            match token.text.as_str() {
                "(" | "[" => depth += 1,
                ")" | "]" => depth -= 1,
                "{" | ";" if depth <= 0 => return Some(index),
                _ => {}
            }
        }
        None
    }

    /// The index after the attributes (`#[...]`) starting at `index`.
    fn skip_attributes(&self, mut index: usize) -> usize {
        while self.is(index, "#") && self.is(index + 1, "[") {
            match self.closing(index + 1) {
                Some(close) => index = close + 1,
                None => return self.tokens.len(),
            }
        }
        index
    }

    fn find_test_code(&mut self) {
        for index in 0..self.tokens.len() {
            if self.is_sequence(index, &["#", "!", "[", "cfg", "(", "test", ")", "]"]) {
                self.test_ranges.push((0, self.tokens.len()));
                return;
            }
            if !self.is_sequence(index, &["#", "[", "cfg", "(", "test", ")", "]"]) {
                continue;
            }
            let item = self.skip_attributes(index);
            let Some(end) = self.item_end_or_body(item) else {
                continue;
            };
            if self.is(end, ";") {
                let declared = (item..end).find(|&i| self.is(i, "mod"));
                if let Some(name) = declared.and_then(|i| self.ident(i + 1)) {
                    self.test_modules.push(name.to_owned());
                }
            } else if let Some(close) = self.closing(end) {
                self.test_ranges.push((index, close));
            }
        }
    }

    /// Functions (with a body, outside test code) longer than `limit` lines.
    pub(super) fn long_functions(&self, limit: usize) -> Vec<LongFunction> {
        let mut found = Vec::new();
        for index in 0..self.tokens.len() {
            // `fn(u8) -> u8` is a function pointer type, not a function.
            let Some(name) = self
                .is(index, "fn")
                .then(|| self.ident(index + 1))
                .flatten()
            else {
                continue;
            };
            if self.in_test_code(index) {
                continue;
            }
            let Some(body) = self
                .item_end_or_body(index + 2)
                .filter(|&b| self.is(b, "{"))
            else {
                continue;
            };
            let Some(close) = self.closing(body) else {
                continue;
            };
            let line = self.tokens[index].line;
            let lines = self.tokens[close].line - line + 1;
            if lines > limit {
                found.push(LongFunction {
                    name: name.to_owned(),
                    line,
                    lines,
                });
            }
        }
        found
    }

    /// `impl Default for X` and `#[derive(.., Default, ..)] struct X` where X is a tunable's
    /// settings type, outside test code.
    pub(super) fn tunable_defaults(&self) -> Vec<TunableDefault> {
        (0..self.tokens.len())
            .filter(|&index| !self.in_test_code(index))
            .filter_map(|index| {
                self.impl_default(index)
                    .map(|name| (name, "`impl Default`"))
                    .or_else(|| {
                        self.derived_default(index)
                            .map(|n| (n, "`#[derive(Default)]`"))
                    })
                    .filter(|(name, _)| is_tunable(name))
                    .map(|(name, how)| TunableDefault {
                        name: name.to_owned(),
                        how,
                        line: self.tokens[index].line,
                    })
            })
            .collect()
    }

    /// The type of `impl<..> path::Default for path::Type<..>` starting at `index`.
    fn impl_default(&self, index: usize) -> Option<&str> {
        if !self.is(index, "impl") {
            return None;
        }
        let mut at = index + 1;
        if self.is(at, "<") {
            at = self.closing(at)? + 1;
        }
        let trait_end = (at..self.tokens.len()).find(|&i| !self.is_path_token(i))?;
        if !self.is(trait_end, "for") || trait_end == at || self.ident(trait_end - 1)? != "Default"
        {
            return None;
        }
        let type_end = (trait_end + 1..self.tokens.len())
            .find(|&i| !self.is_path_token(i))
            .unwrap_or(self.tokens.len());
        (type_end > trait_end + 1)
            .then(|| self.ident(type_end - 1))
            .flatten()
    }

    /// The struct of `#[derive(.., Default, ..)] [more attributes] [pub(..)] struct Name`
    /// starting at `index`.
    fn derived_default(&self, index: usize) -> Option<&str> {
        if !self.is_sequence(index, &["#", "[", "derive", "("]) {
            return None;
        }
        let list_end = self.closing(index + 3)?;
        let derives_default = (index + 4..list_end).any(|i| self.ident(i) == Some("Default"));
        if !derives_default {
            return None;
        }
        let mut at = self.skip_attributes(self.closing(index + 1)? + 1);
        if self.is(at, "pub") {
            at += 1;
            if self.is(at, "(") {
                at = self.closing(at)? + 1;
            }
        }
        self.is(at, "struct").then(|| self.ident(at + 1)).flatten()
    }

    /// A part of `a::b::C`: an identifier other than the keywords that end a path in an impl
    /// header, or `::`.
    fn is_path_token(&self, index: usize) -> bool {
        self.tokens.get(index).is_some_and(|t| {
            (t.kind == Kind::Ident && !matches!(t.text.as_str(), "for" | "where")) || t.text == "::"
        })
    }
}

/// The settings types whose defaults belong to the config schema.
fn is_tunable(type_name: &str) -> bool {
    type_name.ends_with("Settings") || type_name == "Retries"
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (name, line of `fn`, lines) of each function over the limit.
    type Long = Vec<(&'static str, usize, usize)>;
    /// (type, how, line) of each tunable default.
    type Defaults = Vec<(&'static str, &'static str, usize)>;

    /// `fn name() {` + `body_lines` lines + `}`.
    fn function(name: &str, body_lines: usize) -> String {
        let mut text = format!("fn {name}() {{\n");
        for i in 0..body_lines {
            text.push_str(&format!("    let _x{i} = {i};\n"));
        }
        text.push_str("}\n");
        text
    }

    #[test]
    fn function_length_counts_from_fn_to_the_closing_brace() {
        let five_lines = function("fits", 3);
        let six_lines = function("over", 4);
        // (what, limit, source, long functions as (name, line, lines))
        let cases: Vec<(&str, usize, String, Long)> = vec![
            ("at the limit", 5, five_lines.clone(), vec![]),
            ("one over", 5, six_lines.clone(), vec![("over", 1, 6)]),
            (
                "line of the second function",
                5,
                format!("{five_lines}\n{six_lines}"),
                vec![("over", 7, 6)],
            ),
            (
                "signature over several lines",
                1,
                "pub async fn wide<T>(\n    a: T,\n    b: [u8; 4],\n) -> Result<(), E>\nwhere\n    T: Fn(u8) -> u8,\n{\n}\n"
                    .into(),
                vec![("wide", 1, 8)],
            ),
            (
                "braces in strings, chars and comments",
                1,
                "fn quoted() {\n    let _ = \"}}}\";\n    let _ = '}';\n    // }\n    /* } /* nested } */ */\n    let _ = r#\"}\"#;\n}\nfn after() {}\n"
                    .into(),
                vec![("quoted", 1, 7)],
            ),
            (
                "lifetimes are not characters",
                1,
                "fn borrow<'a>(x: &'a str) -> &'a str {\n    let _: &'static str = \"{\";\n    x\n}\n"
                    .into(),
                vec![("borrow", 1, 4)],
            ),
            (
                "escaped quotes",
                1,
                "fn escapes() {\n    let _ = '\\'';\n    let _ = \"\\\"{\";\n    let _ = b'{';\n    let _ = '\\u{7b}';\n}\n"
                    .into(),
                vec![("escapes", 1, 6)],
            ),
            (
                "declarations without a body and fn pointer types",
                1,
                "trait T {\n    fn declared(&self);\n}\ntype F = fn(u8) -> u8;\nfn body() {\n}\n"
                    .into(),
                vec![("body", 5, 2)],
            ),
            (
                "nested functions count on their own",
                2,
                "fn outer() {\n    fn inner() {\n        let _ = 1;\n    }\n}\n".into(),
                vec![("outer", 1, 5), ("inner", 2, 3)],
            ),
            (
                "test modules are skipped",
                1,
                "#[cfg(test)]\nmod tests {\n    fn table() {\n        let _ = 1;\n    }\n}\n"
                    .into(),
                vec![],
            ),
            (
                "test-only functions are skipped, the next one is not",
                1,
                "#[cfg(test)]\n#[allow(unused)]\nfn helper() -> [u8; 2] {\n    [1, 2]\n}\nfn real() {\n    let _ = 1;\n}\n"
                    .into(),
                vec![("real", 6, 3)],
            ),
        ];
        for (what, limit, text, expected) in cases {
            let found = Source::new(&text).long_functions(limit);
            let found: Vec<(&str, usize, usize)> = found
                .iter()
                .map(|f| (f.name.as_str(), f.line, f.lines))
                .collect();
            assert_eq!(found, expected, "{what}:\n{text}");
        }
    }

    #[test]
    fn whole_test_files_and_declared_test_modules_are_found() {
        let source = Source::new("#![cfg(test)]\nfn a() {\n\n}\n");
        assert!(source.long_functions(1).is_empty());
        let source = Source::new("mod real;\n#[cfg(test)]\nmod fake;\n#[cfg(test)]\nmod tests;\n");
        assert_eq!(source.test_modules, ["fake", "tests"]);
    }

    #[test]
    fn tunable_defaults_are_found() {
        let cases: [(&str, &str, Defaults); 13] = [
            (
                "impl",
                "impl Default for WebhookSettings {\n    fn default() -> Self { todo() }\n}\n",
                vec![("WebhookSettings", "`impl Default`", 1)],
            ),
            (
                "impl with paths and generics",
                "impl<T: Into<String>> std::default::Default for crate::x::LeaseSettings<T> {}\n",
                vec![("LeaseSettings", "`impl Default`", 1)],
            ),
            (
                "Retries",
                "impl Default for Retries {}\n",
                vec![("Retries", "`impl Default`", 1)],
            ),
            (
                "derive",
                "/// Docs.\n#[derive(Debug, Clone, Default)]\n#[serde(default)]\npub(crate) struct AdminSettings {\n    a: u8,\n}\n",
                vec![("AdminSettings", "`#[derive(Default)]`", 2)],
            ),
            (
                "derive by path",
                "#[derive(std::default::Default)]\npub struct Retries;\n",
                vec![("Retries", "`#[derive(Default)]`", 1)],
            ),
            (
                "other types",
                "impl Default for TestEnvBuilder {}\n#[derive(Default)]\nstruct Counts;\n",
                vec![],
            ),
            (
                "other traits",
                "impl Clone for WebhookSettings {}\nimpl From<Config> for WebhookSettings {}\n",
                vec![],
            ),
            (
                "derive without Default",
                "#[derive(Debug, Clone)]\npub struct WebhookSettings;\n",
                vec![],
            ),
            (
                "derive on an enum",
                "#[derive(Default)]\nenum PolicySettings { #[default] A }\n",
                vec![],
            ),
            (
                "names that only contain it",
                "impl Default for SettingsCache {}\nimpl Default for RetriesLeft {}\n",
                vec![],
            ),
            (
                "where clause",
                "impl<T> Default for ExecutorSettings where T: Clone {}\n",
                vec![("ExecutorSettings", "`impl Default`", 1)],
            ),
            (
                "in strings and comments",
                "// impl Default for WebhookSettings {}\nconst S: &str = \"impl Default for Retries {}\";\n",
                vec![],
            ),
            (
                "in test code",
                "#[cfg(test)]\nmod tests {\n    impl Default for super::WebhookSettings {}\n}\n",
                vec![],
            ),
        ];
        for (what, text, expected) in cases {
            let found = Source::new(text).tunable_defaults();
            let found: Vec<(&str, &str, usize)> = found
                .iter()
                .map(|d| (d.name.as_str(), d.how, d.line))
                .collect();
            assert_eq!(found, expected, "{what}:\n{text}");
        }
    }
}
