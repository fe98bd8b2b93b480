//! Reading a text-format exposition back into samples, for tests that compare
//! values rather than bytes (a per-writer view with the merged one, the
//! exporter's families with those Ray's metrics agent exports).

use std::collections::{BTreeMap, BTreeSet};

/// One sample line: name, labels, value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sample {
    pub(crate) name: String,
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) value: f64,
}

impl Sample {
    /// The labels without `name`.
    pub(crate) fn labels_without(&self, name: &str) -> BTreeMap<String, String> {
        let mut labels = self.labels.clone();
        labels.remove(name);
        labels
    }
}

/// A parsed exposition: samples in order, and the `# TYPE` of each declared
/// name.
#[derive(Debug, Clone, Default)]
pub(crate) struct Exposition {
    pub(crate) samples: Vec<Sample>,
    pub(crate) types: BTreeMap<String, String>,
    pub(crate) helps: BTreeMap<String, String>,
}

impl Exposition {
    /// Parses the text format (0.0.4; OpenMetrics without exemplars too).
    pub(crate) fn parse(text: &str) -> Exposition {
        let mut out = Exposition::default();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect("TYPE line");
                out.types.insert(name.to_owned(), kind.to_owned());
            } else if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
                out.helps.insert(name.to_owned(), help.to_owned());
            } else if !line.starts_with('#') && !line.trim().is_empty() {
                out.samples.push(parse_sample(line));
            }
        }
        out
    }

    /// The samples named `name`.
    pub(crate) fn named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples.iter().filter(move |s| s.name == name)
    }

    /// Every declared family name (from `# TYPE`).
    pub(crate) fn family_names(&self) -> BTreeSet<String> {
        self.types.keys().cloned().collect()
    }

    /// The label names of the samples of the family declared as `family`
    /// (its samples are `family`, `family_bucket`, `_sum`, `_count`, ...).
    pub(crate) fn label_names(&self, family: &str) -> BTreeSet<String> {
        self.samples
            .iter()
            .filter(|s| {
                s.name == family
                    || ["_bucket", "_sum", "_count", "_total", "_created"]
                        .iter()
                        .any(|suffix| s.name == format!("{family}{suffix}"))
            })
            .flat_map(|s| s.labels.keys().cloned())
            .filter(|name| name != "le" && name != "quantile")
            .collect()
    }
}

fn parse_sample(line: &str) -> Sample {
    let (name_end, labels, rest) = match line.find('{') {
        Some(open) => {
            let (labels, after) = parse_labels(&line[open + 1..]);
            (open, labels, after)
        }
        None => {
            let space = line.find(' ').expect("sample value");
            (space, BTreeMap::new(), &line[space..])
        }
    };
    let value = rest.split_whitespace().next().expect("value");
    Sample {
        name: line[..name_end].to_owned(),
        labels,
        value: parse_value(value),
    }
}

/// Parses `a="x",b="y"}` and returns the labels and what follows the `}`.
fn parse_labels(mut text: &str) -> (BTreeMap<String, String>, &str) {
    let mut labels = BTreeMap::new();
    loop {
        text = text.trim_start_matches(',');
        if let Some(rest) = text.strip_prefix('}') {
            return (labels, rest);
        }
        let eq = text.find('=').expect("label =");
        let name = text[..eq].to_owned();
        let mut chars = text[eq + 2..].char_indices();
        let mut value = String::new();
        let end = loop {
            let (i, c) = chars.next().expect("closing quote");
            match c {
                '\\' => match chars.next().expect("escape").1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                '"' => break i,
                c => value.push(c),
            }
        };
        labels.insert(name, value);
        text = &text[eq + 2 + end + 1..];
    }
}

fn parse_value(text: &str) -> f64 {
    match text {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        _ => text.parse().unwrap_or_else(|_| panic!("value {text:?}")),
    }
}

#[test]
fn parses_names_labels_and_values() {
    let e = Exposition::parse(
        "# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"1\\\"\\n\",y=\"\"} 2.5\nb +Inf\n",
    );
    assert_eq!(e.types["a_total"], "counter");
    assert_eq!(e.samples[0].labels["x"], "1\"\n");
    assert_eq!(e.samples[0].value, 2.5);
    assert_eq!(e.samples[1].name, "b");
    assert!(e.samples[1].value.is_infinite());
    assert_eq!(
        e.label_names("a"),
        ["x", "y"].iter().map(|s| s.to_string()).collect()
    );
}
