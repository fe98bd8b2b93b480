//! A whole merge in one call ([`merge_records`]): for tests and one-shot tools.

use super::keys::{KeyId, KeyStore};
use super::plan::{plan, PlanInput};
use crate::format::file_name::FileName;
use crate::format::key::KeyError;
use crate::model::MetricFamily;

/// A record as stored in a file: raw key bytes, value and timestamp.
pub type RawRecord = (Vec<u8>, f64, f64);

/// A whole merge in one call: decodes keys, plans and evaluates.
///
/// Each input is a file name plus its records as `(raw key, value,
/// timestamp)`. Returns the families and the inputs left out with their
/// errors (a key that does not decode leaves its whole file out). This is the
/// simple entry point for tests and one-shot tools; servers keep a
/// [`KeyStore`] and a [`super::PlanCache`] across scrapes instead.
pub fn merge_records(
    files: &[(FileName, Vec<RawRecord>)],
    accumulate: bool,
) -> (Vec<MetricFamily>, Vec<(usize, String)>) {
    let mut store = KeyStore::new();
    let mut problems: Vec<(usize, String)> = Vec::new();
    let mut keys: Vec<Vec<KeyId>> = Vec::with_capacity(files.len());
    let mut values: Vec<Vec<(f64, f64)>> = Vec::with_capacity(files.len());
    let mut usable = Vec::new();
    for (index, (_, records)) in files.iter().enumerate() {
        let decoded: Result<Vec<KeyId>, KeyError> = records
            .iter()
            .map(|(raw, _, _)| store.intern(raw))
            .collect();
        match decoded {
            Ok(ids) => {
                keys.push(ids);
                values.push(records.iter().map(|&(_, v, t)| (v, t)).collect());
                usable.push(index);
            }
            Err(error) => problems.push((index, error.to_string())),
        }
    }
    let inputs: Vec<PlanInput<'_>> = usable
        .iter()
        .zip(&keys)
        .map(|(&index, keys)| PlanInput {
            name: &files[index].0,
            keys,
        })
        .collect();
    let planned = plan(&mut store, &inputs, accumulate);
    for (input, error) in &planned.excluded {
        problems.push((usable[*input], error.to_string()));
    }
    problems.sort_by_key(|(i, _)| *i);
    let families = planned
        .plan
        .evaluate(|i| values[i].as_slice())
        .unwrap_or_default();
    (families, problems)
}
