//! The schema text parser: FDB5's grammar (see [`crate::schema`]), with errors that name the
//! line and column and what was expected there.
//!
//! Owns reading schema text into [`Schema`] values. It must not interpret rules (matching is
//! [`super::matching`]'s job) nor normalise values; it only checks that type names exist.

use crate::text::{closest, line_col};
use crate::value::{TYPE_NAMES, ValueType};

use super::{Matcher, Predicate, Rule, Schema, SchemaError};

impl Schema {
    /// Parses a schema. Errors name the line and column and what was expected there.
    pub fn parse(text: &str) -> Result<Schema, SchemaError> {
        Parser {
            text,
            pos: 0,
            line_at: (0, 1),
        }
        .schema()
    }
}

struct Parser<'a> {
    text: &'a str,
    pos: usize,
    /// A position and its 1-based line, so that each rule's line is counted from the last
    /// one instead of from the start (linear, not quadratic, in the schema's length).
    line_at: (usize, usize),
}

/// Characters that end an identifier (FDB5's `parseIdent`), besides whitespace and `#`.
const STOP: &[char] = &['/', '=', ',', ';', ':', '[', ']', '?', '\0'];

impl Parser<'_> {
    /// The 1-based line of the current position.
    fn line_here(&mut self) -> usize {
        let (at, line) = self.line_at;
        let line = if self.pos >= at {
            line + self.text[at..self.pos].matches('\n').count()
        } else {
            line_col(self.text, self.pos).0
        };
        self.line_at = (self.pos, line);
        line
    }

    fn skip(&mut self) {
        let bytes = self.text.as_bytes();
        while self.pos < bytes.len() {
            let c = bytes[self.pos];
            if c == b'#' {
                while self.pos < bytes.len() && bytes[self.pos] != b'\n' {
                    self.pos += 1;
                }
            } else if c.is_ascii_whitespace() {
                self.pos += 1;
            } else {
                break;
            }
        }
    }

    fn peek(&mut self) -> Option<char> {
        self.skip();
        self.text[self.pos..].chars().next()
    }

    fn found(&mut self) -> String {
        match self.peek() {
            None => "end of input".to_string(),
            Some(c) if STOP.contains(&c) || c == '-' => format!("'{}'", c.escape_debug()),
            Some(_) => {
                let save = self.pos;
                let word = self.ident(true);
                self.pos = save;
                let word: String = word.chars().take(40).collect();
                format!("{word:?}")
            }
        }
    }

    fn error(&mut self, expected: &str) -> SchemaError {
        let found = self.found();
        let (line, column) = line_col(self.text, self.pos);
        SchemaError::Syntax {
            line,
            column,
            expected: expected.to_string(),
            found,
        }
    }

    fn eat(&mut self, c: char, expected: &str) -> Result<(), SchemaError> {
        if self.peek() == Some(c) {
            self.pos += c.len_utf8();
            Ok(())
        } else {
            Err(self.error(expected))
        }
    }

    /// An identifier; `-` ends keywords but may appear in values.
    fn ident(&mut self, value: bool) -> String {
        self.skip();
        let start = self.pos;
        for (i, c) in self.text[start..].char_indices() {
            if c.is_whitespace() || c == '#' || STOP.contains(&c) || (!value && c == '-') {
                self.pos = start + i;
                return self.text[start..self.pos].to_string();
            }
        }
        self.pos = self.text.len();
        self.text[start..].to_string()
    }

    fn type_name(&mut self) -> Result<ValueType, SchemaError> {
        self.skip();
        let at = self.pos;
        let name = self.ident(false);
        if name.is_empty() {
            return Err(self.error("a type name"));
        }
        name.parse().map_err(|()| {
            let (line, column) = line_col(self.text, at);
            SchemaError::UnknownType {
                line,
                column,
                suggestions: closest(&name, TYPE_NAMES.iter().copied(), 3),
                name,
            }
        })
    }

    fn declare(
        &mut self,
        types: &mut Vec<(String, ValueType)>,
        keyword: &str,
        ty: ValueType,
        at: usize,
    ) -> Result<(), SchemaError> {
        if types.iter().any(|(k, _)| k == keyword) {
            let (line, column) = line_col(self.text, at);
            return Err(SchemaError::DuplicateType {
                line,
                column,
                keyword: keyword.to_string(),
            });
        }
        types.push((keyword.to_string(), ty));
        Ok(())
    }

    fn schema(&mut self) -> Result<Schema, SchemaError> {
        let mut types = Vec::new();
        loop {
            match self.peek() {
                None | Some('[') => break,
                _ => {}
            }
            let at = self.pos;
            let name = self.ident(false);
            if name.is_empty() {
                return Err(self.error("a type declaration 'keyword: Type;' or a rule '['"));
            }
            self.eat(':', "':' in a type declaration 'keyword: Type;'")?;
            let ty = self.type_name()?;
            self.eat(';', "';' after the type declaration")?;
            self.declare(&mut types, &name, ty, at)?;
        }
        let mut rules = Vec::new();
        while self.peek() == Some('[') {
            rules.push(self.rule(0)?);
        }
        if self.peek().is_some() {
            return Err(self.error("'[' starting a rule, or end of input"));
        }
        Ok(Schema { types, rules })
    }

    fn rule(&mut self, depth: usize) -> Result<Rule, SchemaError> {
        self.skip();
        let line = self.line_here();
        self.eat('[', "'['")?;
        let mut rule = Rule {
            predicates: Vec::new(),
            types: Vec::new(),
            rules: Vec::new(),
            line,
        };
        let nested = if depth < 2 {
            " or '[' starting a sub-rule"
        } else {
            ""
        };
        loop {
            match self.peek() {
                Some(']') => {
                    self.pos += 1;
                    return Ok(rule);
                }
                Some('[') if depth < 2 => rule.rules.push(self.rule(depth + 1)?),
                Some('[') => {
                    return Err(self.error("',' or ']': rules nest three levels deep at most"));
                }
                _ if !rule.rules.is_empty() => {
                    return Err(self.error("']' or '[': keywords come before sub-rules"));
                }
                _ => {
                    rule.predicates.push(self.predicate(&mut rule.types)?);
                    match self.peek() {
                        Some(',') => {
                            self.pos += 1;
                            if matches!(self.peek(), Some('[' | ']')) {
                                return Err(self.error("a keyword after ','"));
                            }
                        }
                        Some(']' | '[') => {}
                        _ => return Err(self.error(&format!("',' or ']'{nested}"))),
                    }
                }
            }
        }
    }

    fn predicate(
        &mut self,
        types: &mut Vec<(String, ValueType)>,
    ) -> Result<Predicate, SchemaError> {
        self.skip();
        let at = self.pos;
        let keyword = self.ident(false);
        if keyword.is_empty() {
            return Err(self.error("a keyword"));
        }
        if self.peek() == Some(':') {
            self.pos += 1;
            let ty = self.type_name()?;
            self.declare(types, &keyword, ty, at)?;
        }
        let matcher = match self.peek() {
            Some('?') => {
                self.pos += 1;
                Matcher::Optional(self.ident(true))
            }
            Some('-') => {
                self.pos += 1;
                if !types.iter().any(|(k, _)| *k == keyword) {
                    types.push((keyword.clone(), ValueType::Ignore));
                }
                Matcher::Hidden(self.ident(true))
            }
            Some('=') => {
                self.pos += 1;
                let mut values = Vec::new();
                loop {
                    let v = self.ident(true);
                    if v.is_empty() {
                        return Err(self.error(&format!("a value for {keyword:?}")));
                    }
                    values.push(v);
                    if self.peek() != Some('/') {
                        break;
                    }
                    self.pos += 1;
                }
                Matcher::Values(values)
            }
            _ => Matcher::Always,
        };
        Ok(Predicate { keyword, matcher })
    }
}
