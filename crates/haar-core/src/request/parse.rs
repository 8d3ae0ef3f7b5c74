//! Lexer and parser of request text: several requests per file, keyword abbreviations, quoted
//! values and `#` comments.
//!
//! Owns turning text into [`Request`]s with values as written (ranges kept). It must not
//! normalise or expand values ([`Request::resolve`] does) and performs no I/O.

use crate::text::line_col;

use super::keywords::{canonical_keyword, canonical_verb};
use super::{Request, RequestError, Values};

// ----------------------------------------------------------------------------------------------
// Lexer

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Word(String),
    Quoted(String),
    Comma,
    Eq,
    Slash,
    Eof,
}

impl Tok {
    fn describe(&self) -> String {
        match self {
            Tok::Word(w) | Tok::Quoted(w) => format!("{w:?}"),
            Tok::Comma => "','".into(),
            Tok::Eq => "'='".into(),
            Tok::Slash => "'/'".into(),
            Tok::Eof => "end of input".into(),
        }
    }
}

fn syntax(text: &str, offset: usize, expected: &str, found: &Tok) -> RequestError {
    let (line, column) = line_col(text, offset);
    RequestError::Syntax {
        line,
        column,
        offset,
        expected: expected.to_string(),
        found: found.describe(),
    }
}

fn tokenise(text: &str) -> Result<Vec<(Tok, usize)>, RequestError> {
    let mut toks = Vec::new();
    let mut chars = text.char_indices().peekable();
    while let Some(&(i, c)) = chars.peek() {
        match c {
            c if c.is_whitespace() => {
                chars.next();
            }
            '#' => {
                while chars.peek().is_some_and(|&(_, c)| c != '\n') {
                    chars.next();
                }
            }
            ',' | '=' | '/' => {
                chars.next();
                let t = match c {
                    ',' => Tok::Comma,
                    '=' => Tok::Eq,
                    _ => Tok::Slash,
                };
                toks.push((t, i));
            }
            '"' | '\'' => {
                chars.next();
                let mut s = String::new();
                loop {
                    match chars.next() {
                        Some((_, q)) if q == c => break,
                        Some((_, x)) => s.push(x),
                        None => {
                            return Err(syntax(
                                text,
                                i,
                                &format!("a closing {c} for the quote opened here"),
                                &Tok::Eof,
                            ));
                        }
                    }
                }
                toks.push((Tok::Quoted(s), i));
            }
            _ => {
                let mut s = String::new();
                while let Some(&(_, x)) = chars.peek() {
                    if x.is_whitespace() || matches!(x, ',' | '=' | '/' | '#' | '"' | '\'') {
                        break;
                    }
                    s.push(x);
                    chars.next();
                }
                toks.push((Tok::Word(s), i));
            }
        }
    }
    toks.push((Tok::Eof, text.len()));
    Ok(toks)
}

// ----------------------------------------------------------------------------------------------
// Parser

struct Parser<'a> {
    text: &'a str,
    toks: Vec<(Tok, usize)>,
    i: usize,
}

impl Parser<'_> {
    fn peek(&self, n: usize) -> &Tok {
        self.toks.get(self.i + n).map_or(&Tok::Eof, |(t, _)| t)
    }

    fn offset(&self) -> usize {
        self.toks.get(self.i).map_or(self.text.len(), |(_, o)| *o)
    }

    fn error(&self, expected: &str) -> RequestError {
        syntax(self.text, self.offset(), expected, self.peek(0))
    }

    fn requests(&mut self) -> Result<Vec<Request>, RequestError> {
        let mut out = Vec::new();
        loop {
            while *self.peek(0) == Tok::Comma {
                self.i += 1;
            }
            if *self.peek(0) == Tok::Eof {
                return Ok(out);
            }
            out.push(self.request()?);
        }
    }

    fn request(&mut self) -> Result<Request, RequestError> {
        let mut req = Request::default();
        match (self.peek(0).clone(), self.peek(1)) {
            (Tok::Word(w), t) if *t != Tok::Eq => {
                req.verb = Some(canonical_verb(&w));
                self.i += 1;
                match self.peek(0) {
                    Tok::Comma => self.i += 1,
                    Tok::Eof | Tok::Word(_) => return Ok(req),
                    _ => return Err(self.error("',' after the verb")),
                }
            }
            (Tok::Word(_), _) => {}
            _ => return Err(self.error("a verb (e.g. retrieve) or keyword=value")),
        }
        loop {
            let (word, at) = match (self.peek(0).clone(), self.peek(1)) {
                (Tok::Word(w), Tok::Eq) => (w, self.offset()),
                // A word not followed by '=' starts the next request.
                (Tok::Word(_), _) | (Tok::Eof, _) => return Ok(req),
                _ => return Err(self.error("keyword=value")),
            };
            let keyword = canonical_keyword(&word).map_err(|candidates| {
                let (line, column) = line_col(self.text, at);
                RequestError::AmbiguousKeyword {
                    keyword: word.clone(),
                    line,
                    column,
                    candidates,
                }
            })?;
            self.i += 2;
            let (first, quoted) = self.value()?;
            let mut values = vec![first];
            while *self.peek(0) == Tok::Slash {
                self.i += 1;
                values.push(self.value()?.0);
            }
            // Only a bare `all` means "any value"; a quoted "all" is the literal text.
            let values = if values.len() == 1 && !quoted && values[0].eq_ignore_ascii_case("all") {
                Values::All
            } else {
                Values::List(values)
            };
            req.set(keyword, values);
            match (self.peek(0), self.peek(1)) {
                (Tok::Comma, _) => self.i += 1,
                (Tok::Eof, _) => return Ok(req),
                (Tok::Word(_), Tok::Eq) => {
                    return Err(self.error("',' between keyword=value entries"));
                }
                (Tok::Word(_), _) => return Ok(req),
                _ => return Err(self.error("',' or '/' after a value")),
            }
        }
    }

    /// The next value and whether it was quoted.
    fn value(&mut self) -> Result<(String, bool), RequestError> {
        match self.peek(0).clone() {
            Tok::Word(w) => {
                self.i += 1;
                Ok((w, false))
            }
            Tok::Quoted(w) => {
                self.i += 1;
                Ok((w, true))
            }
            _ => Err(self.error("a value")),
        }
    }
}

/// Parses a file of requests: each starts with a verb (`retrieve, class=od, ...`), entries are
/// separated by commas, requests by their verbs; `#` starts a comment; values may be quoted
/// with `"` or `'`. The first request may omit the verb.
pub fn parse_requests(text: &str) -> Result<Vec<Request>, RequestError> {
    Parser {
        text,
        toks: tokenise(text)?,
        i: 0,
    }
    .requests()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::test_support::list;

    #[test]
    fn parses_cli_form() {
        let r = Request::parse("retrieve,class=od,param=t/2t,date=-1").unwrap();
        assert_eq!(r.verb.as_deref(), Some("retrieve"));
        assert_eq!(r.to_string(), "retrieve,class=od,param=t/2t,date=-1");
        let r = Request::parse("class=od, step = 0 / 6").unwrap();
        assert_eq!(r.verb, None);
        assert_eq!(r.to_string(), "class=od,step=0/6");
    }

    #[test]
    fn abbreviations_and_case() {
        let r = Request::parse("RET,CLAS=OD,ste=0,levtyp=pl,leve=500,parameter=t").unwrap();
        assert_eq!(r.verb.as_deref(), Some("retrieve"));
        let kws: Vec<&str> = r.params.iter().map(|p| p.keyword.as_str()).collect();
        assert_eq!(kws, ["class", "step", "levtype", "levelist", "param"]);
        assert_eq!(list(&r, "class"), ["OD"]);
        let e = Request::parse("retrieve,\n  lev=1").unwrap_err();
        assert_eq!(
            e.to_string(),
            "line 2, column 3: ambiguous keyword \"lev\": could be levelist or levtype; write more letters"
        );
        // A keyword MARS does not know is kept (schemas may define it).
        let r = Request::parse("myfancykey=1").unwrap();
        assert_eq!(r.params[0].keyword, "myfancykey");
    }

    #[test]
    fn files_of_requests() {
        let text = "# two requests\nretrieve,\n  class = od, # comment\n  target = \"out, file.grib\"\n\
                    retrieve, class='rd', expver=\"x/y\"\nlist,class=od,\nlist";
        let rs = parse_requests(text).unwrap();
        assert_eq!(rs.len(), 4);
        assert_eq!(list(&rs[0], "target"), ["out, file.grib"]);
        assert_eq!(list(&rs[1], "expver"), ["x/y"]);
        assert_eq!(rs[2].verb.as_deref(), Some("list"));
        assert!(rs[3].params.is_empty());
        // Printing quotes what needs quoting, and reparses to the same request.
        for r in &rs {
            assert_eq!(&Request::parse(&r.to_string()).unwrap(), r);
        }
        assert!(matches!(
            Request::parse(text),
            Err(RequestError::NotOneRequest { count: 4 })
        ));
    }

    #[test]
    fn syntax_errors_point_at_the_problem() {
        let e = Request::parse("retrieve,class=od,\nstep=").unwrap_err();
        assert_eq!(
            e.to_string(),
            "line 2, column 6: expected a value, found end of input"
        );
        let e = Request::parse("class=od stream=oper").unwrap_err();
        assert!(
            e.to_string().contains("column 10: expected ',' between"),
            "{e}"
        );
        let e = Request::parse("class=\"od").unwrap_err();
        assert!(e.to_string().contains("closing \""), "{e}");
        let e = Request::parse("=od").unwrap_err();
        assert!(matches!(e, RequestError::Syntax { offset: 0, .. }), "{e}");
    }
}
