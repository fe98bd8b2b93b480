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
/// use multiproc_exporter::float::go_float_string;
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

/// Appends the `floatToGoString` form of `x` to `out` (see [`go_float_string`]).
pub fn write_go_float(out: &mut String, x: f64) {
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
    if x > 0.0 && (7..=16).contains(&decpt) {
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
        let mut scratch = String::with_capacity(32);
        let _ = write!(scratch, "{x:e}");
        let (short_digits, short_exp) = split_exponent(&scratch);
        let n = short_digits.len();
        let mut result = Self::from_parts(&short_digits, short_exp);
        if n > 1 {
            // Same length, exact half-to-even rounding; differs from the
            // shortest form only when two candidates are equally close.
            let mut exact = String::with_capacity(32);
            let _ = write!(exact, "{:.*e}", n - 1, x);
            if exact.parse::<f64>() == Ok(x) {
                let (exact_digits, exact_exp) = split_exponent(&exact);
                let exact_digits = exact_digits.trim_end_matches('0');
                if !exact_digits.is_empty() {
                    result = Self::from_parts(exact_digits, exact_exp);
                }
            }
        }
        result
    }

    fn from_parts(digits: &str, exp10: i32) -> Self {
        let mut buf = [0u8; 24];
        let len = digits.len().min(buf.len());
        buf[..len].copy_from_slice(&digits.as_bytes()[..len]);
        Self {
            buf,
            len,
            decimal_point: exp10 + 1,
        }
    }

    fn digits(&self) -> &str {
        // The buffer only ever holds ASCII digits copied from Rust's formatter.
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or("0")
    }
}

/// Splits Rust's `{:e}` output (`d.ddde-5`) into its digit string (without the
/// dot, trailing zeros removed) and the decimal exponent.
fn split_exponent(formatted: &str) -> (String, i32) {
    let (mantissa, exp) = formatted.split_once('e').unwrap_or((formatted, "0"));
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let digits = digits.trim_end_matches('0');
    let digits = if digits.is_empty() { "0" } else { digits };
    (digits.to_string(), exp.parse().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::go_float_string;

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
