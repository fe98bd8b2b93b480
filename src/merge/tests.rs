//! Unit tests of the merge against prometheus_client's semantics.

use super::*;
use crate::format::file_name::FileName;
use crate::model::float::go_float_string;
use crate::model::MetricFamily;

fn key(family: &str, sample: &str, labels: &[(&str, &str)], help: &str) -> Vec<u8> {
    let labels: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("\"{k}\": \"{v}\""))
        .collect();
    format!(
        "[\"{family}\", \"{sample}\", {{{}}}, \"{help}\"]",
        labels.join(", ")
    )
    .into_bytes()
}

fn file(name: &str, records: Vec<(Vec<u8>, f64, f64)>) -> (FileName, Vec<(Vec<u8>, f64, f64)>) {
    (FileName::parse(name), records)
}

fn lines(families: &[MetricFamily]) -> Vec<String> {
    families
        .iter()
        .flat_map(|f| {
            f.samples.iter().map(|s| {
                let labels: Vec<String> =
                    s.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
                format!(
                    "{}{{{}}} {}",
                    s.name,
                    labels.join(","),
                    go_float_string(s.value)
                )
            })
        })
        .collect()
}

#[test]
fn counters_add_in_file_order() {
    let (families, problems) = merge_records(
        &[
            file(
                "counter_1.db",
                vec![(key("c", "c_total", &[], "h"), 1.0, 0.0)],
            ),
            file(
                "counter_2.db",
                vec![(key("c", "c_total", &[], "other help"), 2.0, 0.0)],
            ),
        ],
        true,
    );
    assert!(problems.is_empty());
    assert_eq!(&*families[0].help, "h");
    assert_eq!(lines(&families), ["c_total{} 3.0"]);
}

#[test]
fn histogram_buckets_union_and_accumulate() {
    let h = |le: &str| key("h", "h_bucket", &[("le", le)], "h");
    let (families, _) = merge_records(
        &[
            file(
                "histogram_1.db",
                vec![
                    (key("h", "h_sum", &[], "h"), 1.5, 0.0),
                    (h("1.0"), 1.0, 0.0),
                    (h("2.0"), 0.0, 0.0),
                    (h("+Inf"), 0.0, 0.0),
                ],
            ),
            file(
                "histogram_2.db",
                vec![
                    (key("h", "h_sum", &[], "h"), 2.0, 0.0),
                    (h("1.5"), 1.0, 0.0),
                    (h("3"), 0.0, 0.0),
                    (h("+Inf"), 1.0, 0.0),
                ],
            ),
        ],
        true,
    );
    assert_eq!(
        lines(&families),
        [
            "h_sum{} 3.5",
            "h_bucket{le=1.0} 1.0",
            "h_bucket{le=1.5} 2.0",
            "h_bucket{le=2.0} 2.0",
            "h_bucket{le=3.0} 2.0",
            "h_bucket{le=+Inf} 3.0",
            "h_count{} 3.0",
        ]
    );
}

#[test]
fn no_accumulate_keeps_raw_buckets_and_no_count() {
    let (families, _) = merge_records(
        &[file(
            "histogram_1.db",
            vec![
                (key("h", "h_sum", &[], "h"), 1.0, 0.0),
                (key("h", "h_bucket", &[("le", "1.0")], "h"), 1.0, 0.0),
                (key("h", "h_bucket", &[("le", "+Inf")], "h"), 0.0, 0.0),
            ],
        )],
        false,
    );
    assert_eq!(
        lines(&families),
        [
            "h_sum{} 1.0",
            "h_bucket{le=1.0} 1.0",
            "h_bucket{le=+Inf} 0.0"
        ]
    );
}

#[test]
fn gauge_modes() {
    let g = |v: f64| (key("g", "g", &[], "h"), v, 0.0);
    let run = |mode: &str| {
        let (families, _) = merge_records(
            &[
                file(&format!("gauge_{mode}_1.db"), vec![g(1.0)]),
                file(&format!("gauge_{mode}_2.db"), vec![g(2.0)]),
            ],
            true,
        );
        lines(&families)
    };
    assert_eq!(run("all"), ["g{pid=1} 1.0", "g{pid=2} 2.0"]);
    assert_eq!(run("min"), ["g{} 1.0"]);
    assert_eq!(run("livemax"), ["g{} 2.0"]);
    assert_eq!(run("sum"), ["g{} 3.0"]);
}

#[test]
fn mostrecent_newest_wins_ties_keep_first_never_set_is_omitted() {
    let g = |labels: &[(&str, &str)], v: f64, ts: f64| (key("g", "g", labels, "h"), v, ts);
    let (families, _) = merge_records(
        &[
            file(
                "gauge_mostrecent_1.db",
                vec![g(&[("l", "a")], 1.0, 0.0), g(&[("l", "b")], 5.0, 10.0)],
            ),
            file(
                "gauge_mostrecent_2.db",
                vec![g(&[("l", "a")], 2.0, 7.0), g(&[("l", "b")], 6.0, 10.0)],
            ),
        ],
        true,
    );
    // Group b is stored first (file 1), then a (file 2).
    assert_eq!(lines(&families), ["g{l=b} 5.0", "g{l=a} 2.0"]);

    let (families, _) = merge_records(
        &[file("gauge_mostrecent_1.db", vec![g(&[], 1.0, 0.0)])],
        true,
    );
    assert_eq!(families.len(), 1);
    assert!(families[0].samples.is_empty());
}

#[test]
fn sum_of_negative_zero_is_positive_zero() {
    let g = (key("g", "g", &[], "h"), -0.0, 0.0);
    let (families, _) = merge_records(&[file("gauge_sum_1.db", vec![g.clone()])], true);
    assert!(families[0].samples[0].value.is_sign_positive());
    let (families, _) = merge_records(&[file("gauge_max_1.db", vec![g])], true);
    assert!(families[0].samples[0].value.is_sign_negative());
}

#[test]
fn last_gauge_file_decides_the_mode() {
    let g = |v: f64| (key("g", "g", &[], "h"), v, 0.0);
    let (families, _) = merge_records(
        &[
            file("gauge_all_1.db", vec![g(1.0)]),
            file("gauge_sum_2.db", vec![g(2.0)]),
            file("gauge_max_3.db", vec![g(3.0)]),
        ],
        true,
    );
    assert_eq!(lines(&families), ["g{} 3.0"]);
}

#[test]
fn user_pid_label_is_replaced_in_all_mode_and_dropped_otherwise() {
    let g = (key("g", "g", &[("pid", "user")], "h"), 1.0, 0.0);
    let (families, _) = merge_records(&[file("gauge_all_7.db", vec![g.clone()])], true);
    assert_eq!(lines(&families), ["g{pid=7} 1.0"]);
    let (families, _) = merge_records(&[file("gauge_min_7.db", vec![g])], true);
    assert_eq!(lines(&families), ["g{} 1.0"]);
}

#[test]
fn bad_files_are_left_out_whole() {
    let good = file(
        "counter_1.db",
        vec![(key("c", "c_total", &[], "h"), 1.0, 0.0)],
    );
    let (families, problems) = merge_records(
        &[
            good.clone(),
            file("foo_2.db", vec![(key("c", "c_total", &[], "h"), 5.0, 0.0)]),
            file(
                "counter_3.db",
                vec![
                    (key("c", "c_total", &[], "h"), 5.0, 0.0),
                    (b"junk".to_vec(), 1.0, 0.0),
                ],
            ),
            file("gauge_4.db", vec![(key("g", "g", &[], "h"), 5.0, 0.0)]),
            file(
                "histogram_5.db",
                vec![(key("h", "h_bucket", &[("le", "abc")], "h"), 5.0, 0.0)],
            ),
        ],
        true,
    );
    assert_eq!(lines(&families), ["c_total{} 1.0"]);
    let bad: Vec<usize> = problems.iter().map(|(i, _)| *i).collect();
    assert_eq!(bad, [1, 2, 3, 4]);
}

#[test]
fn python_float_forms() {
    assert_eq!(python_float("1.0"), Some(1.0));
    assert_eq!(python_float(" +Inf "), Some(f64::INFINITY));
    assert_eq!(python_float("-infinity"), Some(f64::NEG_INFINITY));
    assert_eq!(python_float("1e+010"), Some(1e10));
    assert_eq!(python_float("1_0"), Some(10.0));
    assert_eq!(python_float("1__0"), None);
    assert_eq!(python_float("_1"), None);
    assert_eq!(python_float(".5"), Some(0.5));
    assert_eq!(python_float("5."), Some(5.0));
    assert_eq!(python_float("."), None);
    assert_eq!(python_float(""), None);
    assert_eq!(python_float("0x10"), None);
    assert!(python_float("nan").is_some_and(f64::is_nan));
    assert_eq!(python_float("\u{661}\u{662}.5"), Some(12.5));
    assert_eq!(python_float("\u{ff11}"), Some(1.0));
    assert_eq!(python_float("\u{a0}2\u{2003}"), Some(2.0));
    assert_eq!(python_float("\u{669}\u{66a}"), None);
    assert_eq!(python_float("1 0"), None);
}

/// Files for the folding tests: counters, a histogram, `all`, `max` and
/// `mostrecent` gauges over `n` processes, integer values (which add exactly
/// in any order), keys interned in `store`.
type Interned = (FileName, Vec<KeyId>, Vec<(f64, f64)>);
type Record = (Vec<u8>, f64, f64);
fn folding_files(store: &mut KeyStore, n: usize, scale: f64) -> Vec<Interned> {
    let mut files = Vec::new();
    for pid in 0..n {
        let v = (pid as f64 + 1.0) * scale;
        let records: [(&str, Vec<Record>); 5] = [
            (
                "counter",
                vec![
                    (key("c", "c_total", &[("l", "a")], "h"), v, 0.0),
                    (key("c", "c_total", &[("l", "b")], "h"), 2.0 * v, 0.0),
                ],
            ),
            (
                "histogram",
                vec![
                    (key("h", "h_sum", &[], "h"), v, 0.0),
                    (key("h", "h_bucket", &[("le", "1.0")], "h"), 1.0, 0.0),
                    (key("h", "h_bucket", &[("le", "+Inf")], "h"), 2.0, 0.0),
                ],
            ),
            ("gauge_all", vec![(key("g", "g", &[], "h"), v, 0.0)]),
            ("gauge_max", vec![(key("m", "m", &[], "h"), v, 0.0)]),
            (
                "gauge_mostrecent",
                vec![
                    (key("r", "r", &[], "h"), v, 100.0 + pid as f64),
                    // Sample order follows the first store in file order.
                    (
                        key("r", "r", &[("l", &format!("p{}", 5 - pid))], "h"),
                        v,
                        50.0,
                    ),
                ],
            ),
        ];
        for (prefix, records) in records {
            let keys = records
                .iter()
                .map(|(k, _, _)| store.intern(k).expect("key"))
                .collect();
            let values = records.iter().map(|(_, v, t)| (*v, *t)).collect();
            files.push((FileName::parse(&format!("{prefix}_{pid}.db")), keys, values));
        }
    }
    files
}

fn inputs(files: &[Interned]) -> Vec<MergeInput<'_>> {
    files
        .iter()
        .enumerate()
        .map(|(i, (name, keys, values))| MergeInput {
            name,
            keys,
            values,
            generation: i as u64,
        })
        .collect()
}

/// Regression: the first value of a `min`/`max` series was assigned by the
/// op that came first in file order, so a folded evaluation (dead writers
/// first) let a later-applied live file overwrite the dead writers' minimum;
/// and `mostrecent` samples were ordered by the first store in application
/// order instead of file order.
#[test]
fn folding_keeps_min_and_max_whichever_file_comes_first() {
    for first_dead in [true, false] {
        let mut store = KeyStore::new();
        let files = folding_files(&mut store, 6, 1.0);
        let exact = PlanCache::new().merge(&mut store, &inputs(&files)).families;
        let frozen: Vec<bool> = (0..files.len())
            .map(|i| ((i / 5) % 2 == 0) == first_dead)
            .collect();
        let folded = PlanCache::new().merge_folding(&mut store, &inputs(&files), &frozen, &[], &[]);
        assert_eq!(
            lines(&folded.families),
            lines(&exact),
            "first dead: {first_dead}"
        );
    }
}

/// Folding dead writers' files into a base gives prometheus_client's output
/// for values that add exactly, and a folded file is not read again while
/// the plan and the frozen set stay the same.
#[test]
fn folded_files_give_the_same_families_and_are_applied_once() {
    let mut store = KeyStore::new();
    let mut files = folding_files(&mut store, 6, 1.0);
    let exact = PlanCache::new().merge(&mut store, &inputs(&files)).families;
    // Every other process dead: the even ones' files (five each) frozen.
    let frozen: Vec<bool> = (0..files.len()).map(|i| (i / 5) % 2 == 0).collect();
    let mut cache = PlanCache::new();
    let folded = cache.merge_folding(&mut store, &inputs(&files), &frozen, &[], &[]);
    assert_eq!(lines(&folded.families), lines(&exact));
    assert_eq!(folded.families, exact);
    // A frozen file's values are not read again: changing them changes
    // nothing while the base stands; a live file's change shows.
    for (i, (_, _, values)) in files.iter_mut().enumerate() {
        for value in values.iter_mut() {
            value.0 += if frozen[i] { 1000.0 } else { 1.0 };
        }
    }
    let again = cache.merge_folding(&mut store, &inputs(&files), &frozen, &[], &[]);
    assert!(!again.replanned);
    let expected: Vec<String> = {
        let mut unchanged = files.clone();
        for (i, (_, _, values)) in unchanged.iter_mut().enumerate() {
            if frozen[i] {
                for value in values.iter_mut() {
                    value.0 -= 1000.0;
                }
            }
        }
        lines(
            &PlanCache::new()
                .merge(&mut store, &inputs(&unchanged))
                .families,
        )
    };
    assert_eq!(lines(&again.families), expected);
    // Without a frozen file the merge is in file order again.
    let none = cache.merge_folding(&mut store, &inputs(&files), &[], &[], &[]);
    assert_eq!(
        lines(&none.families),
        lines(&PlanCache::new().merge(&mut store, &inputs(&files)).families)
    );
}

/// The frozen files a merge marks as skipped can be left out of the next
/// ones ([`PlanCache::merge_steady`]): same families, the live files' new
/// values show, and a live file whose structure changed needs a full merge.
#[test]
fn a_steady_merge_leaves_the_skipped_files_out_and_gives_the_same_families() {
    let mut store = KeyStore::new();
    let mut files = folding_files(&mut store, 6, 1.0);
    let frozen: Vec<bool> = (0..files.len()).map(|i| (i / 5) % 2 == 0).collect();
    let mut cache = PlanCache::new();
    // Nothing skipped: no steady merge.
    cache.merge_folding(&mut store, &inputs(&files), &frozen, &[], &[]);
    assert!(cache.merge_steady(&inputs(&files)).is_none());
    let full = cache.merge_folding(&mut store, &inputs(&files), &frozen, &frozen, &[]);
    let live = |files: &[Interned]| -> Vec<Interned> {
        files
            .iter()
            .zip(&frozen)
            .filter(|(_, f)| !**f)
            .map(|(file, _)| file.clone())
            .collect()
    };
    let positions: Vec<u64> = (0..frozen.len())
        .filter(|i| !frozen[*i])
        .map(|i| i as u64)
        .collect();
    // The generations of the files in the full list.
    fn live_inputs<'a>(live: &'a [Interned], positions: &[u64]) -> Vec<MergeInput<'a>> {
        inputs(live)
            .into_iter()
            .zip(positions)
            .map(|(input, i)| MergeInput {
                generation: *i,
                ..input
            })
            .collect()
    }
    let rest = live(&files);
    let steady = cache
        .merge_steady(&live_inputs(&rest, &positions))
        .expect("steady");
    assert_eq!(steady.families, full.families);
    assert_eq!(
        (steady.files_merged, steady.records),
        (full.files_merged, full.records)
    );
    // The live files count on.
    for (i, (_, _, values)) in files.iter_mut().enumerate() {
        if !frozen[i] {
            for value in values.iter_mut() {
                value.0 += 1.0;
            }
        }
    }
    let rest = live(&files);
    let steady = cache
        .merge_steady(&live_inputs(&rest, &positions))
        .expect("steady");
    assert_eq!(
        lines(&steady.families),
        lines(&PlanCache::new().merge(&mut store, &inputs(&files)).families)
    );
    // A file less (or a changed structure): not steady.
    assert!(cache
        .merge_steady(&live_inputs(&rest[1..], &positions))
        .is_none());
}
