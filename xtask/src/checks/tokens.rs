//! A tokenizer for Rust source that is just enough for the checks: identifiers, punctuation and
//! literals with their line numbers, comments and whitespace dropped, so that braces and
//! keywords inside strings, characters and comments don't count.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Ident,
    Punct,
    /// A string, character or number literal (its text is not kept).
    Literal,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Token {
    pub(super) kind: Kind,
    pub(super) text: String,
    pub(super) line: usize,
}

/// Splits Rust source into identifiers, punctuation and literals, dropping whitespace and
/// comments, so that braces and keywords inside strings, characters and comments don't count.
pub(super) fn tokenize(source: &str) -> Vec<Token> {
    let mut lexer = Lexer {
        chars: source.chars().collect(),
        pos: 0,
        line: 1,
        tokens: Vec::new(),
    };
    lexer.run();
    lexer.tokens
}

struct Lexer {
    chars: Vec<char>,
    pos: usize,
    line: usize,
    tokens: Vec<Token>,
}

impl Lexer {
    fn peek(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.pos + ahead).copied()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek(0)?;
        self.pos += 1;
        if c == '\n' {
            self.line += 1;
        }
        Some(c)
    }

    fn push(&mut self, kind: Kind, text: String, line: usize) {
        self.tokens.push(Token { kind, text, line });
    }

    fn run(&mut self) {
        while let Some(c) = self.peek(0) {
            let line = self.line;
            match (c, self.peek(1)) {
                (c, _) if c.is_whitespace() => {
                    self.bump();
                }
                ('/', Some('/')) => {
                    while self.peek(0).is_some_and(|c| c != '\n') {
                        self.bump();
                    }
                }
                ('/', Some('*')) => self.block_comment(),
                ('"', _) => {
                    self.bump();
                    self.quoted('"');
                    self.push(Kind::Literal, String::new(), line);
                }
                ('\'', _) => self.quote(line),
                (c, _) if c.is_alphabetic() || c == '_' => self.word(line),
                (c, _) if c.is_ascii_digit() => self.number(line),
                _ => self.punct(line),
            }
        }
    }

    /// Block comments nest in Rust.
    fn block_comment(&mut self) {
        self.pos += 2;
        let mut depth = 1;
        while depth > 0 {
            match (self.peek(0), self.peek(1)) {
                (Some('/'), Some('*')) => {
                    self.pos += 2;
                    depth += 1;
                }
                (Some('*'), Some('/')) => {
                    self.pos += 2;
                    depth -= 1;
                }
                (Some(_), _) => {
                    self.bump();
                }
                (None, _) => return,
            }
        }
    }

    /// The rest of a literal whose opening quote was consumed; backslash escapes the next char.
    fn quoted(&mut self, close: char) {
        while let Some(c) = self.bump() {
            if c == '\\' {
                self.bump();
            } else if c == close {
                return;
            }
        }
    }

    /// The rest of a raw string after its opening quote: up to a quote and `hashes` hashes.
    fn raw(&mut self, hashes: usize) {
        while let Some(c) = self.bump() {
            if c == '"' && (0..hashes).all(|i| self.peek(i) == Some('#')) {
                self.pos += hashes;
                return;
            }
        }
    }

    /// `'x'` and `'\n'` are characters; `'a` without a closing quote is a lifetime or a label.
    fn quote(&mut self, line: usize) {
        let is_char = self.peek(1) == Some('\\')
            || (self.peek(1).is_some_and(|c| c != '\'') && self.peek(2) == Some('\''));
        self.bump();
        if is_char {
            self.quoted('\'');
            self.push(Kind::Literal, String::new(), line);
        } else {
            self.push(Kind::Punct, "'".to_owned(), line);
        }
    }

    /// An identifier or keyword, or the prefix of a literal: `r"…"`, `r#"…"#`, `b"…"`, `b'x'`,
    /// `br"…"`, `c"…"`, `cr"…"`; `r#name` is a raw identifier.
    fn word(&mut self, line: usize) {
        let start = self.pos;
        while self
            .peek(0)
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
        {
            self.pos += 1;
        }
        let word: String = self.chars[start..self.pos].iter().collect();
        let hashes = (0..).take_while(|&i| self.peek(i) == Some('#')).count();
        match word.as_str() {
            "r" | "br" | "cr" if self.peek(hashes) == Some('"') => {
                self.pos += hashes + 1;
                self.raw(hashes);
                self.push(Kind::Literal, String::new(), line);
            }
            "r" if hashes == 1 && self.peek(1).is_some_and(|c| c.is_alphabetic() || c == '_') => {
                self.pos += 1;
                self.word(line);
            }
            "b" | "c" if self.peek(0) == Some('"') => {
                self.bump();
                self.quoted('"');
                self.push(Kind::Literal, String::new(), line);
            }
            "b" if self.peek(0) == Some('\'') => {
                self.bump();
                self.quoted('\'');
                self.push(Kind::Literal, String::new(), line);
            }
            _ => self.push(Kind::Ident, word, line),
        }
    }

    /// `42`, `0x1f`, `1_000u64`, `2.5e3` (a method call on an integer, `1.max(2)`, splits at
    /// the dot; either way no brace is involved).
    fn number(&mut self, line: usize) {
        while let Some(c) = self.peek(0) {
            let decimal_point = c == '.' && self.peek(1).is_some_and(|n| n.is_ascii_digit());
            if c.is_alphanumeric() || c == '_' || decimal_point {
                self.pos += 1;
            } else {
                break;
            }
        }
        self.push(Kind::Literal, String::new(), line);
    }

    /// `::`, `->` and `=>` are one token (so `->` is not a closing angle bracket), the rest one
    /// char each (so `>>` closes two generic lists).
    fn punct(&mut self, line: usize) {
        let pair: String = [self.peek(0), self.peek(1)].iter().flatten().collect();
        if matches!(pair.as_str(), "::" | "->" | "=>") {
            self.pos += 2;
            self.push(Kind::Punct, pair, line);
        } else if let Some(c) = self.bump() {
            self.push(Kind::Punct, c.to_string(), line);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_skip_comments_and_literals() {
        let texts = |source: &str| -> Vec<String> {
            tokenize(source).into_iter().map(|t| t.text).collect()
        };
        let cases: [(&str, &[&str]); 7] = [
            ("a::b -> c => d", &["a", "::", "b", "->", "c", "=>", "d"]),
            ("x /* { */ y // }\nz", &["x", "y", "z"]),
            ("\"{\" '{' b\"{\" br#\"\"{\"# c\"{\"", &["", "", "", "", ""]),
            ("'a: loop {}", &["'", "a", ":", "loop", "{", "}"]),
            ("r#fn r#\"}\"#", &["fn", ""]),
            (
                "1.5e3 0x_ff 1.max(2)",
                &["", "", "", ".", "max", "(", "", ")"],
            ),
            ("'é' 'a", &["", "'", "a"]),
        ];
        for (source, expected) in cases {
            assert_eq!(texts(source), expected, "{source}");
        }
        let lines: Vec<usize> = tokenize("a\n\"x\ny\"\nb /* \n */ c")
            .iter()
            .map(|t| t.line)
            .collect();
        assert_eq!(lines, [1, 2, 4, 5]);
    }
}
