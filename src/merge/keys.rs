//! Decoded, interned record keys ([`KeyStore`]): every distinct key is
//! decoded once and kept across scrapes, and its strings and label tuples
//! are interned, so planning hashes small integers, not strings.

use std::hash::BuildHasher as _;
use std::sync::Arc;

use hashbrown::HashTable;
use rustc_hash::{FxBuildHasher, FxHashMap};
use xxhash_rust::xxh3::xxh3_128;

use crate::format::key::{decode_key, KeyError};
use crate::model::Labels;

/// Identifies a distinct record key within a [`KeyStore`].
pub type KeyId = u32;
pub(super) type StrId = u32;
pub(super) type TupleId = u32;

/// What the allocator adds to every allocation, for the estimate.
const ALLOCATION_OVERHEAD: usize = 16;
/// The counts in front of an `Arc`'s contents.
const ARC_HEADER: usize = 16;
/// One output label: two `Arc<str>`.
const LABEL_PAIR: usize = 32;

/// What the output labels of a label set of `pairs` pairs add to the
/// store's estimate (its slot counted twice: the vector of them doubles).
fn output_labels_bytes(pairs: usize) -> usize {
    pairs * LABEL_PAIR
        + ARC_HEADER
        + ALLOCATION_OVERHEAD
        + 2 * std::mem::size_of::<Option<Labels>>()
}

/// Decoded, interned record keys shared by every file and kept across scrapes.
///
/// Sized for high cardinality: a raw key is remembered by its 128-bit XXH3
/// hash, not its bytes (two different keys of one exporter share a hash with
/// a probability far below that of a memory error: about 10^-27 for a
/// million keys); strings and label tuples are stored once, and their tables
/// hold only ids.
#[derive(Debug)]
pub struct KeyStore {
    /// Key ids by the low half of their raw key's hash.
    raw: HashTable<KeyId>,
    /// Each key's raw key hash.
    raw_hashes: Vec<u128>,
    pub(super) keys: Vec<KeyInfo>,
    pub(super) strings: Vec<Arc<str>>,
    string_ids: HashTable<StrId>,
    pub(super) tuples: Vec<Box<[(StrId, StrId)]>>,
    tuple_ids: HashTable<TupleId>,
    pub(super) with_pid: FxHashMap<(TupleId, StrId), TupleId>,
    pub(super) without_pid: FxHashMap<TupleId, TupleId>,
    pub(super) split_le: FxHashMap<TupleId, Option<(TupleId, StrId)>>,
    pub(super) with_le: FxHashMap<(TupleId, StrId), TupleId>,
    output_labels: Vec<Option<Labels>>,
    pub(super) pid: StrId,
    pub(super) le: StrId,
    /// Bytes of raw keys, strings, label pairs and output label pairs held,
    /// for [`KeyStore::approx_bytes`].
    content_bytes: usize,
    /// What building the output labels of every label set stored for a key
    /// adds to the store, summed; and what those built so far added: see
    /// [`KeyStore::merge_reserve`].
    merge_reserve: usize,
    merge_realized: usize,
}

/// Where a [`KeyStore`] stood ([`KeyStore::mark`]): what
/// [`KeyStore::truncate`] takes it back to.
#[derive(Debug, Clone, Copy)]
pub struct StoreMark {
    keys: usize,
    strings: usize,
    tuples: usize,
    content_bytes: usize,
    merge_reserve: usize,
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
            raw: HashTable::new(),
            raw_hashes: Vec::new(),
            keys: Vec::new(),
            strings: Vec::new(),
            string_ids: HashTable::new(),
            tuples: Vec::new(),
            tuple_ids: HashTable::new(),
            with_pid: FxHashMap::default(),
            without_pid: FxHashMap::default(),
            split_le: FxHashMap::default(),
            with_le: FxHashMap::default(),
            output_labels: Vec::new(),
            merge_reserve: 0,
            merge_realized: 0,
            pid: 0,
            le: 0,
            content_bytes: 0,
        };
        store.pid = store.string("pid");
        store.le = store.string("le");
        store
    }

    /// [`Self::intern`] for a key whose family `keep` keeps; a key it does
    /// not keep is decoded (to learn its family) but not stored: `None`.
    pub fn intern_kept(
        &mut self,
        raw: &[u8],
        keep: impl Fn(&str) -> bool,
    ) -> Result<Option<KeyId>, KeyError> {
        let hash = xxh3_128(raw);
        let hashes = &self.raw_hashes;
        if let Some(&id) = self
            .raw
            .find(hash as u64, |&id| hashes[id as usize] == hash)
        {
            return Ok(Some(id));
        }
        let key = decode_key(raw)?;
        if !keep(&key.family) {
            return Ok(None);
        }
        Ok(Some(self.store(hash, &key)))
    }

    /// Returns the id of a raw key, decoding it the first time it is seen.
    pub fn intern(&mut self, raw: &[u8]) -> Result<KeyId, KeyError> {
        let hash = xxh3_128(raw);
        let hashes = &self.raw_hashes;
        if let Some(&id) = self
            .raw
            .find(hash as u64, |&id| hashes[id as usize] == hash)
        {
            return Ok(id);
        }
        let key = decode_key(raw)?;
        Ok(self.store(hash, &key))
    }

    /// Where the store stands now, for [`Self::truncate`].
    pub fn mark(&self) -> StoreMark {
        StoreMark {
            keys: self.keys.len(),
            strings: self.strings.len(),
            tuples: self.tuples.len(),
            content_bytes: self.content_bytes,
            merge_reserve: self.merge_reserve,
        }
    }

    /// Forgets every key, string and label set stored since `mark` (taken
    /// since the last merge: nothing refers to them but the ids handed out
    /// since, which the caller drops). A reader does when it leaves a file
    /// out part read: the keys it had interned of it are never merged, and
    /// kept they would be charged to the memory budget for nothing (issue
    /// 53: a source cut for the budget stayed cut by the keys of the file
    /// it had read in part). The capacity of the tables stays.
    pub fn truncate(&mut self, mark: StoreMark) {
        if self.keys.len() == mark.keys
            && self.strings.len() == mark.strings
            && self.tuples.len() == mark.tuples
        {
            return;
        }
        self.raw.retain(|id| (*id as usize) < mark.keys);
        self.raw_hashes.truncate(mark.keys);
        self.keys.truncate(mark.keys);
        self.string_ids.retain(|id| (*id as usize) < mark.strings);
        self.strings.truncate(mark.strings);
        self.tuple_ids.retain(|id| (*id as usize) < mark.tuples);
        self.tuples.truncate(mark.tuples);
        self.content_bytes = mark.content_bytes;
        self.merge_reserve = mark.merge_reserve;
    }

    /// Stores a decoded key whose raw bytes hash to `hash`.
    fn store(&mut self, hash: u128, key: &crate::format::key::MetricKey) -> KeyId {
        let family = self.string(&key.family);
        let sample = self.string(&key.sample);
        let help = self.string(&key.help);
        let pairs: Vec<(StrId, StrId)> = key
            .labels
            .iter()
            .map(|(n, v)| (self.string(n), self.string(v)))
            .collect();
        let new_labels = self.tuples.len();
        let labels = self.tuple(pairs);
        if labels as usize == new_labels {
            // Its output labels, built by the first merge that serves it.
            self.merge_reserve += output_labels_bytes(self.tuples[new_labels].len());
        }
        let id = self.keys.len() as KeyId;
        self.keys.push(KeyInfo {
            family,
            sample,
            help,
            labels,
        });
        self.raw_hashes.push(hash);
        let hashes = &self.raw_hashes;
        self.raw
            .insert_unique(hash as u64, id, |&id| hashes[id as usize] as u64);
        id
    }

    /// An estimate of the heap this store holds, in bytes: the capacity of
    /// its tables and vectors plus the bytes of the keys, strings and label
    /// tuples in them (the allocator's own overhead estimated per
    /// allocation). Used by the memory budget ([`crate::source::MemoryBudget`]).
    pub fn approx_bytes(&self) -> usize {
        fn table<K, V>(map: &FxHashMap<K, V>) -> usize {
            // One control byte per bucket besides the entry.
            map.capacity() * (std::mem::size_of::<(K, V)>() + 1)
        }
        fn ids(table: &HashTable<u32>) -> usize {
            table.capacity() * (std::mem::size_of::<u32>() + 1)
        }
        self.content_bytes
            + ids(&self.raw)
            + self.raw_hashes.capacity() * std::mem::size_of::<u128>()
            + self.keys.capacity() * std::mem::size_of::<KeyInfo>()
            + self.strings.capacity() * std::mem::size_of::<Arc<str>>()
            + ids(&self.string_ids)
            + self.tuples.capacity() * std::mem::size_of::<Box<[(StrId, StrId)]>>()
            + ids(&self.tuple_ids)
            + table(&self.with_pid)
            + table(&self.without_pid)
            + table(&self.split_le)
            + table(&self.with_le)
            + self.output_labels.capacity() * std::mem::size_of::<Option<Labels>>()
    }

    /// About what the merges to come add to [`Self::approx_bytes`] for the
    /// keys stored so far: the output labels of their label sets not built
    /// yet (keys of files left out are never merged: theirs stay reserved).
    /// The memory budget reserves it while reading, so that what is charged
    /// after the merge stays within the budget.
    pub fn merge_reserve(&self) -> usize {
        self.merge_reserve.saturating_sub(self.merge_realized)
    }

    /// What the next key stored could add to [`Self::approx_bytes`] at
    /// most, besides its own bytes: the vectors and tables that are full
    /// double. The memory budget checks it before a key is interned.
    pub fn growth_bytes(&self) -> usize {
        fn vec<T>(v: &Vec<T>) -> usize {
            if v.len() == v.capacity() {
                v.capacity().max(4) * std::mem::size_of::<T>()
            } else {
                0
            }
        }
        fn ids<T>(table: &HashTable<T>) -> usize {
            if table.len() == table.capacity() {
                // Buckets are a power of two above 8/7 of the capacity.
                (table.capacity().max(4) * 2) * (std::mem::size_of::<T>() + 1)
            } else {
                0
            }
        }
        vec(&self.raw_hashes)
            + vec(&self.keys)
            + vec(&self.strings)
            + vec(&self.tuples)
            + ids(&self.raw)
            + ids(&self.string_ids)
            + ids(&self.tuple_ids)
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
        let hash = FxBuildHasher.hash_one(s);
        let strings = &self.strings;
        if let Some(&id) = self
            .string_ids
            .find(hash, |&id| &*strings[id as usize] == s)
        {
            return id;
        }
        let id = self.strings.len() as StrId;
        self.strings.push(s.into());
        self.content_bytes += s.len() + ARC_HEADER + ALLOCATION_OVERHEAD;
        let strings = &self.strings;
        self.string_ids.insert_unique(hash, id, |&id| {
            FxBuildHasher.hash_one(&*strings[id as usize])
        });
        id
    }

    pub(super) fn tuple(&mut self, pairs: Vec<(StrId, StrId)>) -> TupleId {
        let hash = FxBuildHasher.hash_one(pairs.as_slice());
        let tuples = &self.tuples;
        if let Some(&id) = self
            .tuple_ids
            .find(hash, |&id| *tuples[id as usize] == *pairs)
        {
            return id;
        }
        let id = self.tuples.len() as TupleId;
        let boxed: Box<[(StrId, StrId)]> = pairs.into();
        self.content_bytes += std::mem::size_of_val(&*boxed) + ALLOCATION_OVERHEAD;
        self.tuples.push(boxed);
        let tuples = &self.tuples;
        self.tuple_ids.insert_unique(hash, id, |&id| {
            FxBuildHasher.hash_one(&*tuples[id as usize])
        });
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
        let index = labels as usize;
        if let Some(Some(found)) = self.output_labels.get(index) {
            return found.clone();
        }
        let built = Labels::new(self.tuples[index].iter().map(|&(n, v)| {
            (
                self.strings[n as usize].clone(),
                self.strings[v as usize].clone(),
            )
        }));
        self.content_bytes +=
            self.tuples[index].len() * LABEL_PAIR + ARC_HEADER + ALLOCATION_OVERHEAD;
        self.merge_realized += output_labels_bytes(self.tuples[index].len());
        if self.output_labels.len() <= index {
            self.output_labels.resize(index + 1, None);
        }
        self.output_labels[index] = Some(built.clone());
        built
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::writer::encode_key;

    /// Issue 53: the keys of a file left out part read stayed in the store,
    /// charged for nothing. Taken back out, the store is as it was: the
    /// same estimate, the same ids for the keys it kept, and the keys taken
    /// out interned anew as new ones.
    #[test]
    fn keys_stored_since_a_mark_are_taken_back_out() {
        let key = |i: u32| encode_key("f", "f_total", &[("i", &i.to_string())], "F.");
        let mut store = KeyStore::new();
        let kept: Vec<KeyId> = (0..3)
            .map(|i| store.intern(key(i).as_bytes()).unwrap())
            .collect();
        let mark = store.mark();
        let bytes = store.approx_bytes();
        let reserve = store.merge_reserve();
        for i in 3..40 {
            store.intern(key(i).as_bytes()).unwrap();
        }
        assert!(store.approx_bytes() > bytes);
        store.truncate(mark);
        assert_eq!(store.len(), 3);
        assert_eq!(store.merge_reserve(), reserve);
        // The tables keep their capacity; what they hold is as before.
        assert!(store.approx_bytes() >= bytes);
        assert_eq!(store.content_bytes, mark.content_bytes);
        for (i, &id) in (0..3).zip(&kept) {
            assert_eq!(store.intern(key(i).as_bytes()).unwrap(), id);
        }
        assert_eq!(store.intern(key(3).as_bytes()).unwrap(), 3);
        assert_eq!(store.family_name(3), "f");
        assert_eq!(store.len(), 4);
    }
}
