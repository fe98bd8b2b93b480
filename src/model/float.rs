//! Python-exact float formatting: `prometheus_client.utils.floatToGoString`.
//!
//! Every value and every histogram `le` label in prometheus_client's output goes
//! through `floatToGoString`, which is Python's `repr(float)` except that
//! positive numbers with seven or more integer digits switch to exponent form
//! (`1234567.0` becomes `1.234567e+06`). Rust's own shortest formatting picks a
//! different digit string than Python when two shortest candidates are equally
//! close to the binary value, so the digits are chosen here with a tie-correct
//! recipe: take the shortest round-trip length from Rust, then re-render with
//! exactly that many digits (Rust's precision formatting is exact and rounds
//! half to even, like David Gay's `dtoa` that CPython uses), and keep the
//! re-rendered digits when they still round-trip.

use std::fmt::Write as _;

/// Formats `x` exactly as prometheus_client 0.26.0's `floatToGoString` does.
///
/// ```
/// use multiproc_exporter::model::float::go_float_string;
/// assert_eq!(go_float_string(1.0), "1.0");
/// assert_eq!(go_float_string(1e6), "1e+06");
/// assert_eq!(go_float_string(f64::INFINITY), "+Inf");
/// assert_eq!(go_float_string(-0.0), "-0.0");
/// ```
pub fn go_float_string(x: f64) -> String {
    let mut out = String::with_capacity(24);
    write_go_float(&mut out, x);
    out
}

/// Formats `x` as Python's `repr(float)` does (`str(float)` too), which is
/// how Ray's metrics agent writes histogram bounds: like [`go_float_string`]
/// without the exponent form for seven to sixteen integer digits.
///
/// ```
/// use multiproc_exporter::model::float::python_repr_string;
/// assert_eq!(python_repr_string(1e6), "1000000.0");
/// assert_eq!(python_repr_string(1e16), "1e+16");
/// assert_eq!(python_repr_string(0.0001), "0.0001");
/// assert_eq!(python_repr_string(f64::INFINITY), "+Inf");
/// ```
pub fn python_repr_string(x: f64) -> String {
    let mut out = String::with_capacity(24);
    write_float(&mut out, x, false);
    out
}

/// Appends the `floatToGoString` form of `x` to `out` (see [`go_float_string`]).
pub fn write_go_float(out: &mut String, x: f64) {
    write_float(out, x, true);
}

/// Python's `repr(float)` of `x` (infinities as `+Inf`/`-Inf`, NaN as
/// `NaN`), with `floatToGoString`'s exponent form for positive numbers of
/// seven to sixteen integer digits when `go_exponent`.
fn write_float(out: &mut String, x: f64, go_exponent: bool) {
    if x.is_nan() {
        out.push_str("NaN");
        return;
    }
    if x == f64::INFINITY {
        out.push_str("+Inf");
        return;
    }
    if x == f64::NEG_INFINITY {
        out.push_str("-Inf");
        return;
    }
    if x == 0.0 {
        out.push_str(if x.is_sign_negative() { "-0.0" } else { "0.0" });
        return;
    }
    let digits = ShortestDigits::of(x.abs());
    let (digits, decpt) = (digits.digits(), digits.decimal_point);
    let n = digits.len() as i32;
    if x.is_sign_negative() {
        out.push('-');
    }
    // floatToGoString: for positive values whose repr has the '.' at index > 6
    // (that is, fixed notation with 7..=16 integer digits) use Go's exponent form.
    if go_exponent && x > 0.0 && (7..=16).contains(&decpt) {
        let mantissa_digits = digits.trim_end_matches('0');
        out.push_str(&mantissa_digits[..1]);
        if mantissa_digits.len() > 1 {
            out.push('.');
            out.push_str(&mantissa_digits[1..]);
        }
        let _ = write!(out, "e+{:02}", decpt - 1);
        return;
    }
    // Python repr (float_repr_style 'short'), as in CPython's format_float_short.
    if decpt <= -4 || decpt > 16 {
        out.push_str(&digits[..1]);
        if n > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let exp = decpt - 1;
        let sign = if exp < 0 { '-' } else { '+' };
        let _ = write!(out, "e{sign}{:02}", exp.abs());
    } else if decpt <= 0 {
        out.push_str("0.");
        for _ in 0..(-decpt) {
            out.push('0');
        }
        out.push_str(digits);
    } else if decpt >= n {
        out.push_str(digits);
        for _ in 0..(decpt - n) {
            out.push('0');
        }
        out.push_str(".0");
    } else {
        out.push_str(&digits[..decpt as usize]);
        out.push('.');
        out.push_str(&digits[decpt as usize..]);
    }
}

/// The shortest decimal digits that round-trip to a positive finite double,
/// with ties between equally short candidates broken like CPython's `repr`.
struct ShortestDigits {
    buf: [u8; 24],
    len: usize,
    /// `x = 0.d1d2...dn × 10^decimal_point`.
    decimal_point: i32,
}

impl ShortestDigits {
    fn of(x: f64) -> Self {
        // Whole numbers below 2^53 (counters, bucket counts) are their own
        // shortest digits: every other candidate with fewer digits is a
        // multiple of ten at least 1 away, more than half a unit in the last
        // place there.
        if x < 9_007_199_254_740_992.0 && x == x.trunc() {
            return Self::of_whole(x as u64);
        }
        let mut shortest = StackText::default();
        let _ = write!(shortest, "{x:e}");
        let mut result = Self::from_exponential(shortest.as_str());
        let n = result.len;
        if n > 1 {
            // Same length, exact half-to-even rounding; differs from the
            // shortest form only when two candidates are equally close.
            let mut exact = StackText::default();
            let _ = write!(exact, "{:.*e}", n - 1, x);
            if exact.as_str().parse::<f64>() == Ok(x) {
                let candidate = Self::from_exponential(exact.as_str());
                if candidate.digits() != "0" {
                    result = candidate;
                }
            }
        }
        result
    }

    /// The digits of a whole number (`v > 0`).
    fn of_whole(mut v: u64) -> Self {
        let mut reversed = [0u8; 24];
        let mut count = 0;
        while v > 0 && count < reversed.len() {
            reversed[count] = b'0' + (v % 10) as u8;
            v /= 10;
            count += 1;
        }
        let mut buf = [0u8; 24];
        for (i, digit) in reversed[..count].iter().rev().enumerate() {
            buf[i] = *digit;
        }
        let mut len = count;
        while len > 1 && buf[len - 1] == b'0' {
            len -= 1;
        }
        Self {
            buf,
            len,
            decimal_point: count as i32,
        }
    }

    /// Parses Rust's `{:e}` output (`d.ddde-5`): the digits without the dot,
    /// trailing zeros removed (`0` if none is left), and the exponent.
    fn from_exponential(formatted: &str) -> Self {
        let (mantissa, exp) = formatted.split_once('e').unwrap_or((formatted, "0"));
        let mut buf = [0u8; 24];
        let mut len = 0;
        for &b in mantissa.as_bytes() {
            if b.is_ascii_digit() && len < buf.len() {
                buf[len] = b;
                len += 1;
            }
        }
        while len > 0 && buf[len - 1] == b'0' {
            len -= 1;
        }
        if len == 0 {
            buf[0] = b'0';
            len = 1;
        }
        Self {
            buf,
            len,
            decimal_point: exp.parse::<i32>().unwrap_or(0) + 1,
        }
    }

    fn digits(&self) -> &str {
        // The buffer only ever holds ASCII digits.
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or("0")
    }
}

/// A small text buffer on the stack, for Rust's float formatting without an
/// allocation (the longest `{:e}` of an `f64` is 24 bytes).
struct StackText {
    buf: [u8; 48],
    len: usize,
}

impl Default for StackText {
    fn default() -> Self {
        Self {
            buf: [0; 48],
            len: 0,
        }
    }
}

impl StackText {
    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or("")
    }
}

impl std::fmt::Write for StackText {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        if end > self.buf.len() {
            return Err(std::fmt::Error);
        }
        self.buf[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{go_float_string, ShortestDigits, StackText};
    use std::fmt::Write as _;

    /// The general path (Rust's shortest, then exact re-rendering).
    fn general(x: f64) -> (String, i32) {
        let mut shortest = StackText::default();
        write!(shortest, "{x:e}").unwrap();
        let d = ShortestDigits::from_exponential(shortest.as_str());
        (d.digits().to_string(), d.decimal_point)
    }

    #[test]
    fn whole_numbers_take_the_same_digits_as_the_general_path() {
        let mut cases: Vec<u64> = (1..20_000).collect();
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..200_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let v = state >> (11 + state % 40);
            let zeros = 10u64.pow((state % 8) as u32);
            cases.push(v.max(1));
            cases.push((v / zeros).max(1) * zeros);
        }
        cases.extend([
            (1 << 53) - 1,
            1 << 52,
            999_999,
            1_000_000,
            10_000_000_000_000_000 / 10,
        ]);
        for v in cases {
            if v >= 1 << 53 {
                continue;
            }
            let x = v as f64;
            let whole = ShortestDigits::of_whole(v);
            assert_eq!(
                (whole.digits().to_string(), whole.decimal_point),
                general(x),
                "{v}"
            );
        }
    }

    #[test]
    #[allow(clippy::excessive_precision)] // exact tie cases, on purpose
    fn research_note_table() {
        let cases: &[(f64, &str)] = &[
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1.0, "1.0"),
            (42.0, "42.0"),
            (0.0001, "0.0001"),
            (1e-05, "1e-05"),
            (1.5e-07, "1.5e-07"),
            (5e-324, "5e-324"),
            (999999.0, "999999.0"),
            (1e6, "1e+06"),
            (1234567.0, "1.234567e+06"),
            (1000000.5, "1.0000005e+06"),
            (12345678.9, "1.23456789e+07"),
            (123456789.123, "1.23456789123e+08"),
            (1e10, "1e+10"),
            (1.5e10, "1.5e+10"),
            (1e15, "1e+15"),
            (1.234567890123e12, "1.234567890123e+12"),
            (9999999999999998.0, "9.999999999999998e+15"),
            (1e16, "1e+16"),
            (1.5e21, "1.5e+21"),
            (-1000000.0, "-1000000.0"),
            (-1e16, "-1e+16"),
            (0.30000000000000004, "0.30000000000000004"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (f64::INFINITY, "+Inf"),
            (f64::NEG_INFINITY, "-Inf"),
            (f64::NAN, "NaN"),
            (15.299999999999999, "15.299999999999999"),
            (0.005, "0.005"),
            (2.5, "2.5"),
            (-1113178120592002.25, "-1113178120592002.2"),
            (111659285584252.12, "1.1165928558425212e+14"),
            (1e-4, "0.0001"),
            (1.5e-4, "0.00015"),
            (123.0, "123.0"),
            (1e22, "1e+22"),
            (-2.5e-10, "-2.5e-10"),
        ];
        for &(x, want) in cases {
            assert_eq!(go_float_string(x), want, "formatting {x:e}");
        }
    }
}
