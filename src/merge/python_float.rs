//! Python's `float()` on a histogram bucket's `le` label.

/// Parses a string the way Python's `float()` does: surrounding whitespace,
/// a sign, `inf`, `infinity` and `nan` in any case, `_` between digits, and
/// decimal digits of any script (`float('١٢.5')` is `12.5`).
pub fn python_float(text: &str) -> Option<f64> {
    // CPython first maps whitespace to ' ' and decimal digits to ASCII
    // (`_PyUnicode_TransformDecimalAndSpaceToASCII`), then parses ASCII.
    let mut ascii = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii() {
            ascii.push(if ('\u{1c}'..='\u{1f}').contains(&c) {
                ' '
            } else {
                c
            });
        } else if c.is_whitespace() {
            ascii.push(' ');
        } else {
            ascii.push(unicode_decimal_digit(c)?);
        }
    }
    let trimmed = ascii.trim_matches(|c: char| c.is_ascii_whitespace() || c == '\u{b}');
    if trimmed.is_empty() {
        return None;
    }
    let body = trimmed.strip_prefix(['+', '-']).unwrap_or(trimmed);
    let lower = body.to_ascii_lowercase();
    if matches!(lower.as_str(), "inf" | "infinity" | "nan") {
        return trimmed.parse::<f64>().ok();
    }
    let bytes = trimmed.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-' => {}
            b'_' => {
                let before = i.checked_sub(1).is_some_and(|j| bytes[j].is_ascii_digit());
                let after = bytes.get(i + 1).is_some_and(u8::is_ascii_digit);
                if !before || !after {
                    return None;
                }
            }
            _ => return None,
        }
    }
    trimmed.replace('_', "").parse::<f64>().ok()
}

/// The ASCII digit for a Unicode decimal digit (general category Nd, which
/// Unicode lays out in runs of ten starting at a zero), as Python maps them.
fn unicode_decimal_digit(c: char) -> Option<char> {
    // The zero of every run of decimal digits, Unicode 14.0 (Python 3.11).
    const ZEROS: [u32; 65] = [
        0x660, 0x6F0, 0x7C0, 0x966, 0x9E6, 0xA66, 0xAE6, 0xB66, 0xBE6, 0xC66, 0xCE6, 0xD66, 0xDE6,
        0xE50, 0xED0, 0xF20, 0x1040, 0x1090, 0x17E0, 0x1810, 0x1946, 0x19D0, 0x1A80, 0x1A90,
        0x1B50, 0x1BB0, 0x1C40, 0x1C50, 0xA620, 0xA8D0, 0xA900, 0xA9D0, 0xA9F0, 0xAA50, 0xABF0,
        0xFF10, 0x104A0, 0x10D30, 0x11066, 0x110F0, 0x11136, 0x111D0, 0x112F0, 0x11450, 0x114D0,
        0x11650, 0x116C0, 0x11730, 0x118E0, 0x11950, 0x11C50, 0x11D50, 0x11DA0, 0x16A60, 0x16AC0,
        0x16B50, 0x1D7CE, 0x1D7D8, 0x1D7E2, 0x1D7EC, 0x1D7F6, 0x1E140, 0x1E2F0, 0x1E950, 0x1FBF0,
    ];
    let code = c as u32;
    let run = ZEROS.partition_point(|&zero| zero <= code).checked_sub(1)?;
    let offset = code - ZEROS[run];
    (offset < 10).then(|| char::from(b'0' + offset as u8))
}
