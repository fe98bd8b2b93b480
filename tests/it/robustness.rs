//! Property tests: the pure core never panics, whatever bytes a file holds.
//!
//! The layout scanner, the key decoder and the merge see arbitrary bytes and
//! arbitrary (but well-formed) keys; each must return an error or a result,
//! never panic, and never report a record outside the bytes it was given.

use multiproc_exporter::format::file_name::FileName;
use multiproc_exporter::format::key::decode_key;
use multiproc_exporter::format::layout::{read_used, read_value, scan_records, HEADER_LEN};
use multiproc_exporter::merge::merge_records;
use proptest::prelude::*;

fn file_bytes(records: &[(String, f64, f64)]) -> Vec<u8> {
    let records: Vec<(&str, f64, f64)> = records
        .iter()
        .map(|(k, v, t)| (k.as_str(), *v, *t))
        .collect();
    multiproc_exporter::format::writer::file_bytes(&records)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn layout_never_panics_or_escapes_its_slice(data in proptest::collection::vec(any::<u8>(), 0..512), claimed_len in 0usize..1024) {
        if let Ok(Some(used)) = read_used(&data, claimed_len.max(data.len())) {
            let mut out = Vec::new();
            let _ = scan_records(&data, HEADER_LEN, used, &mut out);
            for location in out {
                prop_assert!(location.end() <= data.len());
                let _ = location.key(&data);
                let _ = read_value(&data, location.value_offset);
            }
        }
    }

    #[test]
    fn key_decoder_never_panics(raw in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = decode_key(&raw);
    }

    #[test]
    fn key_decoder_never_panics_on_near_json(raw in r#"\[("[a-z\\"u0-9]{0,6}"|[{}:, 0-9\]\[]){0,12}\]"#) {
        let _ = decode_key(raw.as_bytes());
    }

    #[test]
    fn merge_never_panics(
        files in proptest::collection::vec(
            (
                prop_oneof![
                    Just("counter_1.db"), Just("gauge_all_2.db"), Just("gauge_mostrecent_3.db"),
                    Just("gauge_min_4.db"), Just("histogram_5.db"), Just("summary_6.db"), Just("gauge_7.db"),
                ],
                proptest::collection::vec(
                    (
                        prop_oneof![Just("a"), Just("b"), Just("")],
                        prop_oneof![Just("a"), Just("a_bucket"), Just("a_sum"), Just("a_count"), Just("a_total")],
                        prop_oneof![Just(""), Just(r#""le": "1.0""#), Just(r#""le": "+Inf""#), Just(r#""pid": "9""#), Just(r#""le": "x""#), Just(r#""le": "NaN""#)],
                        any::<f64>(),
                        any::<f64>(),
                    ),
                    0..6,
                ),
            ),
            0..6,
        )
    ) {
        let inputs: Vec<_> = files
            .iter()
            .map(|(name, records)| {
                let records = records
                    .iter()
                    .map(|(family, sample, labels, v, t)| {
                        (format!(r#"["{family}", "{sample}", {{{labels}}}, "h"]"#).into_bytes(), *v, *t)
                    })
                    .collect();
                (FileName::parse(name), records)
            })
            .collect();
        let (families, _problems) = merge_records(&inputs, true);
        for format in [multiproc_exporter::expose::encode::Format::Text, multiproc_exporter::expose::encode::Format::OpenMetrics] {
            let _ = multiproc_exporter::expose::encode::encode(&families, format, Default::default());
        }
    }

    #[test]
    fn well_formed_files_round_trip(records in proptest::collection::vec(("[ -~]{0,40}", any::<f64>(), any::<f64>()), 0..20)) {
        let data = file_bytes(&records);
        let used = read_used(&data, data.len()).unwrap().unwrap();
        let mut out = Vec::new();
        prop_assert_eq!(scan_records(&data, HEADER_LEN, used, &mut out), Ok(used));
        prop_assert_eq!(out.len(), records.len());
        for (location, (key, value, ts)) in out.iter().zip(&records) {
            prop_assert_eq!(location.key(&data), key.as_bytes());
            let (v, t) = read_value(&data, location.value_offset);
            prop_assert_eq!(v.to_bits(), value.to_bits());
            prop_assert_eq!(t.to_bits(), ts.to_bits());
        }
    }
}
