//! Decoder for the JSON key of a record: `[family, sample, {labels}, help]`.
//!
//! prometheus_client writes keys with `json.dumps(..., sort_keys=True)` and
//! reads them with `json.loads`. This decoder accepts what Python's strict JSON
//! parser accepts for that shape: any JSON whitespace, all escapes including
//! `\uXXXX` and surrogate pairs, duplicate label names (the last value wins),
//! and lone surrogates, which Python keeps inside its strings and which are
//! decoded here as U+FFFD (Rust strings cannot hold them; see
//! `docs/differences.md`). Anything else (a number where a string belongs, a
//! three-element key from prometheus_client < 0.16, an empty family name, raw
//! control characters in a string, trailing data) is an error, and the file
//! holding the key is skipped.

use thiserror::Error;

/// A decoded record key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricKey {
    /// Family (metric) name, e.g. `vllm:prompt_tokens` (counters without `_total`).
    pub family: String,
    /// Sample name, e.g. `vllm:prompt_tokens_total` or `h_bucket`.
    pub sample: String,
    /// Labels sorted by name, names unique (Python's `tuple(sorted(labels.items()))`).
    pub labels: Vec<(String, String)>,
    /// Help text.
    pub help: String,
}

/// Why a key could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum KeyError {
    /// The key bytes are not valid UTF-8.
    #[error("key is not valid UTF-8")]
    NotUtf8,
    /// The key is not valid JSON (or uses JSON that Python's strict parser rejects).
    #[error("key is not valid JSON at byte {offset}: {what}")]
    NotJson {
        /// Byte offset within the key.
        offset: usize,
        /// What was expected or found.
        what: &'static str,
    },
    /// The key is JSON but not `[string, string, {string: string}, string]`.
    #[error("key is not a [family, sample, {{labels}}, help] array: {what}")]
    WrongShape {
        /// What was wrong.
        what: &'static str,
    },
    /// The family name is empty (prometheus_client raises for this).
    #[error("key has an empty metric name")]
    EmptyFamily,
}

/// Decodes a key from the raw bytes stored in a record.
pub fn decode_key(raw: &[u8]) -> Result<MetricKey, KeyError> {
    let text = std::str::from_utf8(raw).map_err(|_| KeyError::NotUtf8)?;
    let mut parser = Parser {
        text,
        bytes: text.as_bytes(),
        pos: 0,
    };
    let key = parser.key()?;
    if key.family.is_empty() {
        return Err(KeyError::EmptyFamily);
    }
    Ok(key)
}

struct Parser<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
}

impl Parser<'_> {
    fn key(&mut self) -> Result<MetricKey, KeyError> {
        self.skip_ws();
        self.expect(b'[', "expected '['")?;
        let family = self.string_element("family name is not a string")?;
        self.comma("key has fewer than 4 elements")?;
        let sample = self.string_element("sample name is not a string")?;
        self.comma("key has fewer than 4 elements")?;
        self.skip_ws();
        if self.peek() != Some(b'{') {
            return Err(self.shape_or_json("labels are not an object"));
        }
        let labels = self.labels()?;
        self.comma("key has fewer than 4 elements")?;
        let help = self.string_element("help is not a string")?;
        self.skip_ws();
        match self.peek() {
            Some(b']') => self.pos += 1,
            Some(b',') => {
                return Err(KeyError::WrongShape {
                    what: "key has more than 4 elements",
                })
            }
            _ => return Err(self.json_error("expected ']'")),
        }
        self.skip_ws();
        if self.pos != self.bytes.len() {
            return Err(self.json_error("extra data after the key"));
        }
        Ok(MetricKey {
            family,
            sample,
            labels,
            help,
        })
    }

    fn labels(&mut self) -> Result<Vec<(String, String)>, KeyError> {
        self.expect(b'{', "expected '{'")?;
        let mut labels: Vec<(String, String)> = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(labels);
        }
        loop {
            self.skip_ws();
            if self.peek() != Some(b'"') {
                return Err(self.json_error("expected a label name string"));
            }
            let name = self.string()?;
            self.skip_ws();
            self.expect(b':', "expected ':'")?;
            let value = self.string_element("label value is not a string")?;
            labels.push((name, value));
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    break;
                }
                _ => return Err(self.json_error("expected ',' or '}'")),
            }
        }
        // Python: dict keeps the last value for a repeated name; then sorted().
        // A stable sort keeps repeated names in file order, so keeping the last
        // of each run keeps the last value.
        labels.sort_by(|a, b| a.0.cmp(&b.0));
        let mut unique: Vec<(String, String)> = Vec::with_capacity(labels.len());
        for (name, value) in labels {
            match unique.last_mut() {
                Some(last) if last.0 == name => last.1 = value,
                _ => unique.push((name, value)),
            }
        }
        Ok(unique)
    }

    /// Parses a string at an element position; any other JSON value there is a
    /// shape error (when valid JSON) or a JSON error.
    fn string_element(&mut self, shape: &'static str) -> Result<String, KeyError> {
        self.skip_ws();
        if self.peek() == Some(b'"') {
            self.string()
        } else {
            Err(self.shape_or_json(shape))
        }
    }

    /// Decides whether a non-string value at the cursor is still valid JSON
    /// (a shape error) or not (a JSON error). Python fails either way.
    fn shape_or_json(&self, shape: &'static str) -> KeyError {
        match self.peek() {
            Some(b'[' | b'{' | b'-' | b'0'..=b'9' | b't' | b'f' | b'n' | b'N' | b'I') => {
                KeyError::WrongShape { what: shape }
            }
            Some(b']') => KeyError::WrongShape {
                what: "key has fewer than 4 elements",
            },
            _ => self.json_error("expected a value"),
        }
    }

    fn comma(&mut self, too_short: &'static str) -> Result<(), KeyError> {
        self.skip_ws();
        match self.peek() {
            Some(b',') => {
                self.pos += 1;
                Ok(())
            }
            Some(b']') => Err(KeyError::WrongShape { what: too_short }),
            _ => Err(self.json_error("expected ','")),
        }
    }

    fn string(&mut self) -> Result<String, KeyError> {
        self.expect(b'"', "expected '\"'")?;
        let mut out = String::new();
        loop {
            let start = self.pos;
            // Copy the run of plain characters up to the next quote or backslash.
            while let Some(&b) = self.bytes.get(self.pos) {
                if b == b'"' || b == b'\\' {
                    break;
                }
                if b < 0x20 {
                    return Err(self.json_error("control character in a string"));
                }
                self.pos += 1;
            }
            out.push_str(&self.text[start..self.pos]);
            match self.bytes.get(self.pos) {
                None => return Err(self.json_error("unterminated string")),
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(out);
                }
                Some(_) => {
                    self.pos += 1;
                    self.escape(&mut out)?;
                }
            }
        }
    }

    fn escape(&mut self, out: &mut String) -> Result<(), KeyError> {
        let Some(&b) = self.bytes.get(self.pos) else {
            return Err(self.json_error("unterminated escape"));
        };
        self.pos += 1;
        let c = match b {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let first = self.hex4()?;
                if (0xD800..0xDC00).contains(&first) {
                    // A high surrogate: combine with a following low surrogate escape.
                    if self.bytes.get(self.pos) == Some(&b'\\')
                        && self.bytes.get(self.pos + 1) == Some(&b'u')
                    {
                        let save = self.pos;
                        self.pos += 2;
                        let second = self.hex4()?;
                        if (0xDC00..0xE000).contains(&second) {
                            let code = 0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00);
                            out.push(char::from_u32(code).unwrap_or('\u{FFFD}'));
                            return Ok(());
                        }
                        self.pos = save;
                    }
                    '\u{FFFD}'
                } else {
                    char::from_u32(first).unwrap_or('\u{FFFD}')
                }
            }
            _ => return Err(self.json_error("invalid escape")),
        };
        out.push(c);
        Ok(())
    }

    fn hex4(&mut self) -> Result<u32, KeyError> {
        let digits = self
            .bytes
            .get(self.pos..self.pos + 4)
            .ok_or_else(|| self.json_error("truncated \\u escape"))?;
        let mut code = 0u32;
        for &d in digits {
            let v = (d as char)
                .to_digit(16)
                .ok_or_else(|| self.json_error("invalid \\u escape"))?;
            code = code * 16 + v;
        }
        self.pos += 4;
        Ok(code)
    }

    fn expect(&mut self, b: u8, what: &'static str) -> Result<(), KeyError> {
        if self.peek() == Some(b) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.json_error(what))
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn json_error(&self, what: &'static str) -> KeyError {
        KeyError::NotJson {
            offset: self.pos,
            what,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn decodes_python_dumps_output() {
        let key = decode_key(br#"["c", "c_total", {"a": "1", "b": "x y"}, "help"]"#).unwrap();
        assert_eq!(key.family, "c");
        assert_eq!(key.sample, "c_total");
        assert_eq!(key.labels, labels(&[("a", "1"), ("b", "x y")]));
        assert_eq!(key.help, "help");
    }

    #[test]
    fn decodes_escapes_and_surrogate_pairs() {
        let raw =
            br#"["uni", "uni", {"lbl": "\u00e9\ud83d\ude00\"x\\\n\t\/"}, "unicode \u00e9 help"]"#;
        let key = decode_key(raw).unwrap();
        assert_eq!(key.labels[0].1, "é😀\"x\\\n\t/");
        assert_eq!(key.help, "unicode é help");
    }

    #[test]
    fn lone_surrogates_become_replacement_characters() {
        let key = decode_key(br#"["a", "a", {"l": "x\ud800y\udc00"}, "\uDBFF"]"#).unwrap();
        assert_eq!(key.labels[0].1, "x\u{FFFD}y\u{FFFD}");
        assert_eq!(key.help, "\u{FFFD}");
        // A high surrogate followed by a non-surrogate escape keeps both.
        let key = decode_key(br#"["a", "a", {}, "\ud800\u0041"]"#).unwrap();
        assert_eq!(key.help, "\u{FFFD}A");
    }

    #[test]
    fn repeated_label_names_keep_the_last_value_and_sort() {
        let key = decode_key(br#"["a", "a", {"z": "1", "b": "2", "z": "3"}, ""]"#).unwrap();
        assert_eq!(key.labels, labels(&[("b", "2"), ("z", "3")]));
    }

    #[test]
    fn accepts_json_whitespace() {
        let key = decode_key(b" [ \"a\" ,\n\"a\" ,\t{ } ,\r\"h\" ] \n").unwrap();
        assert_eq!(key.family, "a");
    }

    #[test]
    fn rejects_what_python_cannot_use() {
        for raw in [
            &b"\xff\xfe"[..],
            br#"["a", "a", {}]"#,
            br#"["a", "a", {}, "h", "extra"]"#,
            br#"["a", "a", {"l": 1}, "h"]"#,
            br#"["a", 1, {}, "h"]"#,
            br#"["a", "a", [], "h"]"#,
            br#"["a", "a", {}, null]"#,
            br#"["", "a", {}, "h"]"#,
            br#"["a", "a", {}, "h"] x"#,
            b"[\"a\x01\", \"a\", {}, \"h\"]",
            br#"["a\x", "a", {}, "h"]"#,
            br#"["a", "a", {}, "h""#,
            b"",
            b"somejunk",
        ] {
            assert!(
                decode_key(raw).is_err(),
                "{:?}",
                String::from_utf8_lossy(raw)
            );
        }
    }
}
