//! Decoded, interned record keys ([`KeyStore`]): every distinct key is
//! decoded once and kept across scrapes, and its strings and label tuples
//! are interned, so planning hashes small integers, not strings.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::format::key::{decode_key, KeyError};
use crate::model::Labels;

/// Identifies a distinct record key within a [`KeyStore`].
pub type KeyId = u32;
pub(super) type StrId = u32;
pub(super) type TupleId = u32;

/// Decoded, interned record keys shared by every file and kept across scrapes.
#[derive(Debug)]
pub struct KeyStore {
    pub(super) raw: FxHashMap<Box<[u8]>, KeyId>,
    pub(super) keys: Vec<KeyInfo>,
    pub(super) strings: Vec<Arc<str>>,
    pub(super) string_ids: FxHashMap<Arc<str>, StrId>,
    pub(super) tuples: Vec<Box<[(StrId, StrId)]>>,
    pub(super) tuple_ids: FxHashMap<Box<[(StrId, StrId)]>, TupleId>,
    pub(super) with_pid: FxHashMap<(TupleId, StrId), TupleId>,
    pub(super) without_pid: FxHashMap<TupleId, TupleId>,
    pub(super) split_le: FxHashMap<TupleId, Option<(TupleId, StrId)>>,
    pub(super) with_le: FxHashMap<(TupleId, StrId), TupleId>,
    pub(super) output_labels: FxHashMap<TupleId, Labels>,
    pub(super) pid: StrId,
    pub(super) le: StrId,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct KeyInfo {
    pub(super) family: StrId,
    pub(super) sample: StrId,
    pub(super) help: StrId,
    pub(super) labels: TupleId,
}

impl Default for KeyStore {
    fn default() -> Self {
        Self::new()
    }
}

impl KeyStore {
    /// An empty store.
    pub fn new() -> Self {
        let mut store = Self {
            raw: FxHashMap::default(),
            keys: Vec::new(),
            strings: Vec::new(),
            string_ids: FxHashMap::default(),
            tuples: Vec::new(),
            tuple_ids: FxHashMap::default(),
            with_pid: FxHashMap::default(),
            without_pid: FxHashMap::default(),
            split_le: FxHashMap::default(),
            with_le: FxHashMap::default(),
            output_labels: FxHashMap::default(),
            pid: 0,
            le: 0,
        };
        store.pid = store.string("pid");
        store.le = store.string("le");
        store
    }

    /// Returns the id of a raw key, decoding it the first time it is seen.
    pub fn intern(&mut self, raw: &[u8]) -> Result<KeyId, KeyError> {
        if let Some(&id) = self.raw.get(raw) {
            return Ok(id);
        }
        let key = decode_key(raw)?;
        let family = self.string(&key.family);
        let sample = self.string(&key.sample);
        let help = self.string(&key.help);
        let pairs: Vec<(StrId, StrId)> = key
            .labels
            .iter()
            .map(|(n, v)| (self.string(n), self.string(v)))
            .collect();
        let labels = self.tuple(pairs);
        let id = self.keys.len() as KeyId;
        self.keys.push(KeyInfo {
            family,
            sample,
            help,
            labels,
        });
        self.raw.insert(raw.into(), id);
        Ok(id)
    }

    /// Number of distinct keys decoded so far.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether no key has been decoded yet.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The family name of a key.
    pub fn family_name(&self, key: KeyId) -> &str {
        &self.strings[self.keys[key as usize].family as usize]
    }

    pub(super) fn string(&mut self, s: &str) -> StrId {
        if let Some(&id) = self.string_ids.get(s) {
            return id;
        }
        let id = self.strings.len() as StrId;
        let shared: Arc<str> = s.into();
        self.strings.push(shared.clone());
        self.string_ids.insert(shared, id);
        id
    }

    pub(super) fn tuple(&mut self, pairs: Vec<(StrId, StrId)>) -> TupleId {
        if let Some(&id) = self.tuple_ids.get(pairs.as_slice()) {
            return id;
        }
        let id = self.tuples.len() as TupleId;
        let boxed: Box<[(StrId, StrId)]> = pairs.into();
        self.tuples.push(boxed.clone());
        self.tuple_ids.insert(boxed, id);
        id
    }

    /// `labels_key + (('pid', pid),)`.
    pub(super) fn tuple_with_pid(&mut self, labels: TupleId, pid: StrId) -> TupleId {
        if let Some(&id) = self.with_pid.get(&(labels, pid)) {
            return id;
        }
        let mut pairs = self.tuples[labels as usize].to_vec();
        pairs.push((self.pid, pid));
        let id = self.tuple(pairs);
        self.with_pid.insert((labels, pid), id);
        id
    }

    /// `tuple(l for l in labels if l[0] != 'pid')`.
    pub(super) fn tuple_without_pid(&mut self, labels: TupleId) -> TupleId {
        if let Some(&id) = self.without_pid.get(&labels) {
            return id;
        }
        let pid = self.pid;
        let pairs: Vec<_> = self.tuples[labels as usize]
            .iter()
            .copied()
            .filter(|&(n, _)| n != pid)
            .collect();
        let id = self.tuple(pairs);
        self.without_pid.insert(labels, id);
        id
    }

    /// For labels holding `le`: the labels without any `le` and the first `le` value.
    pub(super) fn tuple_split_le(&mut self, labels: TupleId) -> Option<(TupleId, StrId)> {
        if let Some(&cached) = self.split_le.get(&labels) {
            return cached;
        }
        let le = self.le;
        let pairs = &self.tuples[labels as usize];
        let result = pairs.iter().find(|&&(n, _)| n == le).map(|&(_, v)| v);
        let result = match result {
            Some(value) => {
                let without: Vec<_> = pairs.iter().copied().filter(|&(n, _)| n != le).collect();
                Some((self.tuple(without), value))
            }
            None => None,
        };
        self.split_le.insert(labels, result);
        result
    }

    /// `labels + (('le', bound),)`.
    pub(super) fn tuple_with_le(&mut self, labels: TupleId, bound: StrId) -> TupleId {
        if let Some(&id) = self.with_le.get(&(labels, bound)) {
            return id;
        }
        let mut pairs = self.tuples[labels as usize].to_vec();
        pairs.push((self.le, bound));
        let id = self.tuple(pairs);
        self.with_le.insert((labels, bound), id);
        id
    }

    /// `dict(labels)` as a sorted label set.
    pub(super) fn labels_for_output(&mut self, labels: TupleId) -> Labels {
        if let Some(found) = self.output_labels.get(&labels) {
            return found.clone();
        }
        let built = Labels::new(self.tuples[labels as usize].iter().map(|&(n, v)| {
            (
                self.strings[n as usize].clone(),
                self.strings[v as usize].clone(),
            )
        }));
        self.output_labels.insert(labels, built.clone());
        built
    }
}
