//! Comparing the exporter with Python's prometheus_client byte for byte: the
//! scripts under `tests/python/`, a readable line diff, and fresh seeds for
//! the randomised comparisons.

use std::path::PathBuf;

use super::repo_root;

/// A script under `tests/python/`.
pub(crate) fn python_script(name: &str) -> PathBuf {
    repo_root().join("tests").join("python").join(name)
}

/// Shows bytes as text with invisible characters made visible (one line of output per input line).
fn show_line(line: &[u8]) -> String {
    let s = String::from_utf8_lossy(line);
    let mut out = String::new();
    for c in s.chars() {
        match c {
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

fn split_lines(b: &[u8]) -> Vec<&[u8]> {
    // Keep the information whether the last line had a newline: a missing final newline is a difference.
    b.split_inclusive(|&c| c == b'\n').collect()
}

/// A unified-style line diff of `expected` vs `actual` (LCS based; falls back to the first differing
/// line for very long inputs). Lines without a trailing newline are marked `\ no newline`.
pub(crate) fn diff(expected: &[u8], actual: &[u8]) -> String {
    let a = split_lines(expected);
    let b = split_lines(actual);
    let fmt = |tag: char, l: &[u8]| {
        let (body, nl) = match l.strip_suffix(b"\n") {
            Some(body) => (body, ""),
            None => (l, "  \\ no newline"),
        };
        format!("{tag}{}{nl}\n", show_line(body))
    };
    let mut out = format!(
        "--- expected ({} bytes)\n+++ actual ({} bytes)\n",
        expected.len(),
        actual.len()
    );
    if a.len() * b.len() > 4_000_000 {
        let i = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
        out.push_str(&format!("@@ first difference at line {} @@\n", i + 1));
        for l in a.iter().skip(i).take(5) {
            out.push_str(&fmt('-', l));
        }
        for l in b.iter().skip(i).take(5) {
            out.push_str(&fmt('+', l));
        }
        return out;
    }
    // LCS table.
    let (n, m) = (a.len(), b.len());
    let mut t = vec![vec![0u32; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            t[i][j] = if a[i] == b[j] {
                t[i + 1][j + 1] + 1
            } else {
                t[i + 1][j].max(t[i][j + 1])
            };
        }
    }
    // Walk it, keeping 2 lines of context around changes.
    let mut ops: Vec<(char, &[u8])> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            ops.push((' ', a[i]));
            i += 1;
            j += 1;
        } else if j < m && (i == n || t[i][j + 1] >= t[i + 1][j]) {
            ops.push(('+', b[j]));
            j += 1;
        } else {
            ops.push(('-', a[i]));
            i += 1;
        }
    }
    let changed: Vec<bool> = ops.iter().map(|(t, _)| *t != ' ').collect();
    let near = |k: usize| {
        let lo = k.saturating_sub(2);
        let hi = (k + 3).min(ops.len());
        changed[lo..hi].iter().any(|&c| c)
    };
    let mut skipped = false;
    for (k, (tag, l)) in ops.iter().enumerate() {
        if near(k) {
            if skipped {
                out.push_str("@@ ... @@\n");
                skipped = false;
            }
            out.push_str(&fmt(*tag, l));
        } else {
            skipped = true;
        }
    }
    out
}

/// A fresh seed for randomised tests (printed by the callers so a failure can be replayed).
pub(crate) fn random_seed() -> u64 {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    let mut h = RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    h.write_u32(std::process::id());
    h.finish() % 1_000_000_000
}
