//! Unit tests of the writer: the files are the ones prometheus_client writes.

use super::*;

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| c.is_ascii_hexdigit()).collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn key_examples() {
    assert_eq!(
        encode_key("c", "c_total", &[("l", "x")], "help"),
        r#"["c", "c_total", {"l": "x"}, "help"]"#
    );
    assert_eq!(encode_key("g", "g", &[], "gh"), r#"["g", "g", {}, "gh"]"#);
    assert_eq!(
        encode_key("uni", "uni", &[("lbl", "é😀\"x")], "unicode é help"),
        r#"["uni", "uni", {"lbl": "\u00e9\ud83d\ude00\"x"}, "unicode \u00e9 help"]"#
    );
    assert_eq!(
        encode_key(
            "vllm:prompt_tokens",
            "vllm:prompt_tokens_total",
            &[("model_name", "m"), ("engine", "0")],
            "Number of prefill tokens processed."
        ),
        r#"["vllm:prompt_tokens", "vllm:prompt_tokens_total", {"engine": "0", "model_name": "m"}, "Number of prefill tokens processed."]"#
    );
}

#[test]
fn key_escapes() {
    let s = "a\"b\\c\nd\re\tf\u{8}g\u{c}h\u{1}i\u{1f}j\u{7f}k/l\u{80}m\u{ffff}n\u{10ffff}";
    assert_eq!(
        encode_key(s, "", &[], ""),
        r#"["a\"b\\c\nd\re\tf\bg\fh\u0001i\u001fj\u007fk/l\u0080m\uffffn\udbff\udfff", "", {}, ""]"#
    );
}

#[test]
fn key_sorts_by_code_point_and_dedups_last() {
    assert_eq!(
        encode_key(
            "f",
            "f",
            &[("b", "1"), ("a", "2"), ("B", "3"), ("é", "4"), ("a", "5")],
            ""
        ),
        r#"["f", "f", {"B": "3", "a": "5", "b": "1", "\u00e9": "4"}, ""]"#
    );
}

#[test]
fn full_names() {
    assert_eq!(build_full_name("counter", "x_total", "", "", ""), "x");
    assert_eq!(
        build_full_name("counter", "vllm:estimated_flops_per_gpu_total", "", "", ""),
        "vllm:estimated_flops_per_gpu"
    );
    assert_eq!(build_full_name("gauge", "x_total", "", "", ""), "x_total");
    assert_eq!(
        build_full_name("histogram", "lat", "ns", "sub", "seconds"),
        "ns_sub_lat_seconds"
    );
    assert_eq!(
        build_full_name("counter", "b_bytes_total", "", "", "bytes"),
        "b_bytes"
    );
}

#[test]
fn bucket_labels() {
    let cases: &[(f64, &str)] = &[
        (0.005, "0.005"),
        (1.0, "1.0"),
        (2048.0, "2048.0"),
        (1e6, "1e+06"),
        (2097152.0, "2.097152e+06"),
        (8589934592.0, "8.589934592e+09"),
        (0.00001 * 16.0, "0.00016"),
        (f64::INFINITY, "+Inf"),
    ];
    for &(x, want) in cases {
        assert_eq!(bucket_label(x), want, "{x:e}");
    }
}

/// Research note §2.2, first dump: `Counter('c','help',['l']).labels('x').inc(2)` under pid 42.
#[test]
fn counter_hexdump() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = ProcessWriter::new(dir.path(), 42);
    let c = w.counter("c", "help", &[("l", "x")]).unwrap();
    c.inc(&mut w, 2.0).unwrap();
    let bytes = std::fs::read(dir.path().join("counter_42.db")).unwrap();
    assert_eq!(bytes.len(), 65536);
    let want = hex("4800 0000 0000 0000 2400 0000 5b22 6322
         2c20 2263 5f74 6f74 616c 222c 207b 226c
         223a 2022 7822 7d2c 2022 6865 6c70 225d
         2020 2020 2020 2020 0000 0000 0000 0040
         0000 0000 0000 0000");
    assert_eq!(&bytes[..want.len()], &want[..]);
    assert!(bytes[want.len()..].iter().all(|&b| b == 0));
}

/// Research note §2.2, second dump: a `mostrecent` gauge set to 7 at 1700000000.5.
#[test]
fn gauge_hexdump() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = ProcessWriter::new(dir.path(), 42);
    let g = w.gauge("g", "gh", &[], GaugeMode::MostRecent).unwrap();
    g.set_at(&mut w, 7.0, 1700000000.5).unwrap();
    let bytes = std::fs::read(dir.path().join("gauge_mostrecent_42.db")).unwrap();
    let want = hex("3800 0000 0000 0000 1400 0000 5b22 6722
         2c20 2267 222c 207b 7d2c 2022 6768 225d
         2020 2020 2020 2020 0000 0000 0000 1c40
         0000 2040 fc54 d941");
    assert_eq!(&bytes[..want.len()], &want[..]);
    assert!(bytes[want.len()..].iter().all(|&b| b == 0));
    assert_eq!(bytes.len(), 65536);
}

#[test]
fn padding_is_one_to_eight() {
    for len in 0..40usize {
        let key = "x".repeat(len);
        let rec = encode_record(&key, 1.0, 2.0);
        let pad = rec.len() - 4 - len - 16;
        assert!((1..=8).contains(&pad), "len {len} pad {pad}");
        assert_eq!(rec.len() % 8, 0);
        assert!(rec[4 + len..4 + len + pad].iter().all(|&b| b == b' '));
    }
}

#[test]
fn file_names() {
    assert_eq!(counter_file_name(12), "counter_12.db");
    assert_eq!(histogram_file_name("A"), "histogram_A.db");
    assert_eq!(summary_file_name(0), "summary_0.db");
    assert_eq!(
        gauge_file_name(GaugeMode::LiveMostRecent, 7),
        "gauge_livemostrecent_7.db"
    );
    let names: Vec<String> = GaugeMode::ALL_MODES
        .iter()
        .map(|m| gauge_file_name(*m, 1))
        .collect();
    assert_eq!(names.len(), 10);
    for m in GaugeMode::ALL_MODES {
        assert_eq!(GaugeMode::from_name(m.as_str()), Some(m));
    }
    assert_eq!(
        GaugeMode::ALL_MODES.iter().filter(|m| m.is_live()).count(),
        5
    );
    assert_eq!(GaugeMode::from_name("MostRecent"), None);
}

#[test]
fn growth_doubles_and_reopen_continues() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("counter_1.db");
    let mut f = MetricsFile::open(&path).unwrap();
    assert_eq!((f.used(), f.capacity()), (8, 65536));
    let n = 3000;
    for i in 0..n {
        let key = encode_key("c", "c_total", &[("i", &i.to_string())], "h");
        f.write_value(&key, i as f64, 0.0).unwrap();
    }
    assert_eq!(f.capacity(), 262144);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 262144);
    let used = f.used();
    drop(f);

    let recs = read_records(&path).unwrap();
    assert_eq!(recs.len(), n);
    for (i, r) in recs.iter().enumerate() {
        assert_eq!(r.value, i as f64);
    }

    let mut f = MetricsFile::open(&path).unwrap();
    assert_eq!(f.len(), n);
    assert_eq!(f.used(), used);
    let key = encode_key("c", "c_total", &[("i", "5")], "h");
    assert_eq!(f.value(&key), Some((5.0, 0.0)));
    f.write_value(&key, 50.0, 0.0).unwrap();
    assert_eq!(f.used(), used, "existing key must not add a record");
    f.write_value(&encode_key("c", "c_total", &[("i", "new")], "h"), 1.0, 0.0)
        .unwrap();
    assert!(f.used() > used);
    let recs = read_records(&path).unwrap();
    assert_eq!(recs.len(), n + 1);
    assert_eq!(recs[5].value, 50.0);
}

#[test]
fn reopen_via_process_writer_continues_counter() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut w = ProcessWriter::new(dir.path(), 77);
        let c = w.counter("c", "h", &[]).unwrap();
        c.inc(&mut w, 5.0).unwrap();
        let g = w.gauge("g", "h", &[], GaugeMode::LiveSum).unwrap();
        g.inc(&mut w, 3.0).unwrap();
    }
    let mut w = ProcessWriter::new(dir.path(), 77);
    let c = w.counter("c", "h", &[]).unwrap();
    assert_eq!(c.get(&w).unwrap(), 5.0);
    c.inc(&mut w, 1.0).unwrap();
    assert_eq!(c.get(&w).unwrap(), 6.0);
    let g = w.gauge("g", "h", &[], GaugeMode::LiveSum).unwrap();
    assert_eq!(g.get(&w).unwrap(), 3.0);
    assert_eq!(mark_process_dead(dir.path(), 77).unwrap(), 1);
    assert!(!dir.path().join("gauge_livesum_77.db").exists());
    assert!(dir.path().join("counter_77.db").exists());
}

#[test]
fn histogram_and_summary_records_in_python_order() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = ProcessWriter::new(dir.path(), 3);
    let h = w
        .histogram("h", "hh", &[("a", "1")], &[0.5, 1.0, 1e6])
        .unwrap();
    h.observe(&mut w, 0.7).unwrap();
    h.observe(&mut w, 5e6).unwrap();
    h.observe(&mut w, f64::NAN).unwrap();
    let s = w.summary("s", "sh", &[]).unwrap();
    s.observe(&mut w, 2.5).unwrap();
    s.observe(&mut w, 1.5).unwrap();

    let recs = read_records(&dir.path().join("histogram_3.db")).unwrap();
    let keys: Vec<&str> = recs.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(
        keys,
        [
            r#"["h", "h_sum", {"a": "1"}, "hh"]"#,
            r#"["h", "h_bucket", {"a": "1", "le": "0.5"}, "hh"]"#,
            r#"["h", "h_bucket", {"a": "1", "le": "1.0"}, "hh"]"#,
            r#"["h", "h_bucket", {"a": "1", "le": "1e+06"}, "hh"]"#,
            r#"["h", "h_bucket", {"a": "1", "le": "+Inf"}, "hh"]"#,
        ]
    );
    assert!(recs[0].value.is_nan());
    let buckets: Vec<f64> = recs[1..].iter().map(|r| r.value).collect();
    assert_eq!(buckets, [0.0, 1.0, 0.0, 1.0]);
    assert_eq!(h.count(&w).unwrap(), 2.0);

    let recs = read_records(&dir.path().join("summary_3.db")).unwrap();
    assert_eq!(recs[0].key, r#"["s", "s_count", {}, "sh"]"#);
    assert_eq!((recs[0].value, recs[1].value), (2.0, 4.0));
    assert_eq!(recs[1].key, r#"["s", "s_sum", {}, "sh"]"#);
}

#[test]
fn python_errors_are_reproduced() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = ProcessWriter::new(dir.path(), 1);
    assert!(w.histogram("h", "", &[], &[2.0, 1.0]).is_err());
    assert!(w.histogram("h", "", &[], &[f64::INFINITY]).is_err());
    assert!(w.histogram("h", "", &[("le", "x")], &[1.0]).is_err());
    assert!(w.summary("s", "", &[("quantile", "x")]).is_err());
    let c = w.counter("c", "", &[]).unwrap();
    assert!(c.inc(&mut w, -1.0).is_err());
    let g = w.gauge("g", "", &[], GaugeMode::MostRecent).unwrap();
    assert!(g.inc(&mut w, 1.0).is_err());
    assert!(g.dec(&mut w, 1.0).is_err());
    let mut other = ProcessWriter::new(dir.path(), 2);
    assert!(c.inc(&mut other, 1.0).is_err());
}

#[test]
fn gauge_timestamps() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = ProcessWriter::new(dir.path(), 1);
    let all = w.gauge("a", "", &[], GaugeMode::All).unwrap();
    all.set_at(&mut w, 1.0, 123.0).unwrap();
    let mr = w.gauge("m", "", &[], GaugeMode::LiveMostRecent).unwrap();
    let before = now_timestamp();
    mr.set(&mut w, 2.0).unwrap();
    let a = read_records(&dir.path().join("gauge_all_1.db")).unwrap();
    assert_eq!((a[0].value, a[0].timestamp), (1.0, 0.0));
    let m = read_records(&dir.path().join("gauge_livemostrecent_1.db")).unwrap();
    assert_eq!(m[0].value, 2.0);
    assert!(m[0].timestamp >= before && m[0].timestamp > 1.6e9);
}

#[test]
fn rejects_corrupt_existing_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("counter_9.db");
    let mut data = vec![0u8; 65536];
    data[..4].copy_from_slice(&100i32.to_ne_bytes());
    data[8..16].copy_from_slice(b"somejunk");
    std::fs::write(&path, &data).unwrap();
    assert_eq!(
        MetricsFile::open(&path).unwrap_err().kind(),
        io::ErrorKind::InvalidData
    );
}
