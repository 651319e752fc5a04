//! A record: its primary key and its columns, in the order Tokyo Cabinet's
//! map keeps them (a column put again keeps its place, a new one goes last).

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};

/// One record of a table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    pub key: Vec<u8>,
    pub columns: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Record {
    pub fn new(key: impl Into<Vec<u8>>) -> Self {
        Record {
            key: key.into(),
            columns: Vec::new(),
        }
    }

    /// The value of a column; the name `""` is the primary key, as in
    /// Tokyo Cabinet's conditions and orders.
    pub fn get(&self, name: &[u8]) -> Option<&[u8]> {
        if name.is_empty() {
            return Some(&self.key);
        }
        self.columns
            .iter()
            .find(|(column, _)| column == name)
            .map(|(_, value)| &value[..])
    }

    /// Sets a column: a known one keeps its place, a new one goes last.
    pub fn put(&mut self, name: &[u8], value: &[u8]) {
        match self.columns.iter_mut().find(|(column, _)| column == name) {
            Some((_, old)) => *old = value.to_vec(),
            None => self.columns.push((name.to_vec(), value.to_vec())),
        }
    }

    /// Builds a record from `name, value, name, value…`; a trailing name
    /// without a value is dropped, as Tokyo Cabinet drops it.
    pub fn from_pairs<'a>(key: &[u8], fields: impl IntoIterator<Item = &'a [u8]>) -> Self {
        let mut record = Record::new(key);
        let mut fields = fields.into_iter();
        let pairs = std::iter::from_fn(|| match (fields.next(), fields.next()) {
            (Some(name), Some(value)) => Some((name, Some(value))),
            _ => None,
        });
        record.put_all(pairs);
        record
    }

    /// Sets columns as [`put`](Self::put) would one by one (`None` removes
    /// one), with one lookup per column instead of a search of the record
    /// each time: a request of many columns was quadratic.
    pub fn put_all<'a>(&mut self, changes: impl IntoIterator<Item = (&'a [u8], Option<&'a [u8]>)>) {
        let mut at: HashMap<Vec<u8>, usize> = self
            .columns
            .iter()
            .enumerate()
            .map(|(index, (name, _))| (name.clone(), index))
            .collect();
        let mut removed = vec![false; self.columns.len()];
        for (name, value) in changes {
            match (at.entry(name.to_vec()), value) {
                (Entry::Occupied(known), Some(value)) => {
                    self.columns[*known.get()].1 = value.to_vec();
                }
                (Entry::Occupied(known), None) => removed[known.remove()] = true,
                (Entry::Vacant(new), Some(value)) => {
                    new.insert(self.columns.len());
                    self.columns.push((name.to_vec(), value.to_vec()));
                    removed.push(false);
                }
                (Entry::Vacant(_), None) => {}
            }
        }
        let mut removed = removed.into_iter();
        self.columns.retain(|_| !removed.next().unwrap_or(false));
    }

    /// Tokyo Cabinet's putcat: `other`'s columns this record lacks go last;
    /// the ones it has stay as they are.
    pub fn add_missing(&mut self, other: &Record) {
        let have: HashSet<&[u8]> = self.columns.iter().map(|(name, _)| &name[..]).collect();
        let missing: Vec<_> = other
            .columns
            .iter()
            .filter(|(name, _)| !have.contains(&name[..]))
            .cloned()
            .collect();
        self.columns.extend(missing);
    }

    /// The columns as Tokyo Tyrant carries them: `name\0value\0…`, no
    /// trailing NUL.
    pub fn zero_separated(&self) -> Vec<u8> {
        join_zero_separated(self.columns.iter().map(|(n, v)| (&n[..], &v[..])))
    }

    /// The bytes Tokyo Cabinet keeps a record in (`tcmapdump`: each name
    /// and value after its length as a varint of 7 bits a byte), which
    /// `vsiz` answers.
    pub fn dumped_len(&self) -> usize {
        let varint_len = |n: usize| (usize::BITS - n.leading_zeros()).div_ceil(7).max(1) as usize;
        let field = |bytes: &[u8]| varint_len(bytes.len()) + bytes.len();
        self.columns.iter().map(|(n, v)| field(n) + field(v)).sum()
    }

    /// Parses `name\0value\0…` (Tokyo Tyrant's column list).
    pub fn from_zero_separated(key: &[u8], bytes: &[u8]) -> Self {
        if bytes.is_empty() {
            return Record::new(key);
        }
        Record::from_pairs(key, bytes.split(|&b| b == 0))
    }
}

/// What a condition reads of a record: a column's value by name, the name
/// `""` being the primary key.
pub trait Columns {
    fn get(&self, name: &[u8]) -> Option<&[u8]>;

    /// The columns by name (the key not among them), for a record of many
    /// that many lookups read; `None` where a walk per lookup is cheap.
    fn by_name(&self) -> Option<HashMap<&[u8], &[u8]>> {
        None
    }
}

impl<C: Columns + ?Sized> Columns for &C {
    fn get(&self, name: &[u8]) -> Option<&[u8]> {
        (**self).get(name)
    }

    fn by_name(&self) -> Option<HashMap<&[u8], &[u8]>> {
        (**self).by_name()
    }
}

/// Columns past which a record is worth a map for many lookups.
const FEW_COLUMNS: usize = 16;

impl Columns for Record {
    fn get(&self, name: &[u8]) -> Option<&[u8]> {
        Record::get(self, name)
    }

    fn by_name(&self) -> Option<HashMap<&[u8], &[u8]>> {
        let pairs = self.columns.iter().map(|(n, v)| (&n[..], &v[..]));
        // The first of a name wins, as `get` finds it.
        (self.columns.len() > FEW_COLUMNS).then(|| pairs.rev().collect())
    }
}

/// A record read where the engine keeps it (`Record::encode_columns`), so
/// that a scan checks a row's conditions without copying it.
#[derive(Clone, Copy, Debug)]
pub struct StoredRecord<'a> {
    key: &'a [u8],
    columns: &'a [u8],
}

impl<'a> StoredRecord<'a> {
    /// `None` when the stored columns are damaged.
    pub fn new(key: &'a [u8], columns: &'a [u8]) -> Option<StoredRecord<'a>> {
        let mut rest = columns;
        while !rest.is_empty() {
            take_field(&mut rest)?;
            take_field(&mut rest)?;
        }
        Some(StoredRecord { key, columns })
    }

    pub fn key(&self) -> &'a [u8] {
        self.key
    }

    /// The bytes of its stored columns.
    pub fn columns_size(&self) -> usize {
        self.columns.len()
    }

    /// The columns, name and value, in their order.
    pub fn pairs(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> {
        let mut rest = self.columns;
        std::iter::from_fn(move || Some((take_field(&mut rest)?, take_field(&mut rest)?)))
    }

    pub fn to_record(&self) -> Record {
        let mut record = Record::new(self.key);
        record.columns = self
            .pairs()
            .map(|(name, value)| (name.to_vec(), value.to_vec()))
            .collect();
        record
    }
}

impl Columns for StoredRecord<'_> {
    fn get(&self, name: &[u8]) -> Option<&[u8]> {
        if name.is_empty() {
            return Some(self.key);
        }
        self.pairs()
            .find(|(column, _)| *column == name)
            .map(|(_, value)| value)
    }

    fn by_name(&self) -> Option<HashMap<&[u8], &[u8]>> {
        // Each column takes 8 bytes at least: fewer bytes, few columns.
        // (Not `pairs().nth(FEW_COLUMNS)`: LLVM unrolls that walk, and its
        // constraint elimination then took the release build for ever.)
        if self.columns.len() <= 8 * FEW_COLUMNS {
            return None;
        }
        let pairs: Vec<_> = self.pairs().collect();
        // The first of a name wins, as `get` finds it.
        (pairs.len() > FEW_COLUMNS).then(|| pairs.into_iter().rev().collect())
    }
}

/// One length-prefixed field of stored columns.
fn take_field<'a>(bytes: &mut &'a [u8]) -> Option<&'a [u8]> {
    let (len, rest) = bytes.split_first_chunk::<4>()?;
    let len = u32::from_le_bytes(*len) as usize;
    let field = rest.get(..len)?;
    *bytes = &rest[len..];
    Some(field)
}

impl Record {
    /// The columns as the engine stores them: for each, its name's length
    /// (u32 LE), the name, its value's length (u32 LE), the value.
    pub fn encode_columns(&self) -> Vec<u8> {
        let size = self
            .columns
            .iter()
            .map(|(name, value)| 8 + name.len() + value.len())
            .sum();
        let mut out = Vec::with_capacity(size);
        for (name, value) in &self.columns {
            out.extend_from_slice(&(name.len() as u32).to_le_bytes());
            out.extend_from_slice(name);
            out.extend_from_slice(&(value.len() as u32).to_le_bytes());
            out.extend_from_slice(value);
        }
        out
    }

    /// Reads columns [`encode_columns`](Self::encode_columns) wrote; `None`
    /// if they are damaged.
    pub fn decode_columns(key: &[u8], bytes: &[u8]) -> Option<Record> {
        StoredRecord::new(key, bytes).map(|stored| stored.to_record())
    }
}

/// `name\0value\0name\0value`, as `tcstrjoin4` writes it.
pub fn join_zero_separated<'a>(pairs: impl IntoIterator<Item = (&'a [u8], &'a [u8])>) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in pairs {
        if !out.is_empty() {
            out.push(0);
        }
        out.extend_from_slice(name);
        out.push(0);
        out.extend_from_slice(value);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dumped_length_counts_a_varint_before_each_name_and_value() {
        let small = Record::from_pairs(b"k", [&b"name"[..], b"Bob", b"age", b"30"]);
        assert_eq!(small.dumped_len(), 16);
        let long = vec![b'v'; 200];
        let two_bytes = Record::from_pairs(b"k", [&b"v"[..], &long]);
        assert_eq!(two_bytes.dumped_len(), 1 + 1 + 2 + 200);
        let empty = Record::from_pairs(b"k", [&b"e"[..], b""]);
        assert_eq!(empty.dumped_len(), 1 + 1 + 1);
    }

    #[test]
    fn put_all_does_what_puts_and_removals_one_by_one_do() {
        let start = Record::from_pairs(b"k", [&b"a"[..], b"1", b"b", b"2", b"c", b"3"]);
        let changes: [(&[u8], Option<&[u8]>); 6] = [
            (b"b", None),
            (b"d", Some(b"4")),
            (b"a", Some(b"5")),
            (b"b", Some(b"6")),
            (b"x", None),
            (b"d", Some(b"7")),
        ];
        let mut one_by_one = start.clone();
        for (name, value) in changes {
            match value {
                Some(value) => one_by_one.put(name, value),
                None => one_by_one.columns.retain(|(have, _)| have != name),
            }
        }
        let mut at_once = start;
        at_once.put_all(changes);
        assert_eq!(at_once, one_by_one);
        assert_eq!(
            at_once.zero_separated(),
            b"a\x005\x00c\x003\x00d\x007\x00b\x006"
        );
    }

    #[test]
    fn a_record_of_a_hundred_thousand_columns_is_built_one_lookup_per_column() {
        // A search of the record per column made this 5e9 comparisons.
        let names: Vec<String> = (0..100_000).map(|n| format!("c{n}")).collect();
        let fields = names.iter().flat_map(|name| [name.as_bytes(), b"v"]);
        let record = Record::from_pairs(b"k", fields);
        assert_eq!(record.columns.len(), 100_000);
        assert_eq!(record.columns[99_999].0, b"c99999");
        let mut merged = Record::from_pairs(b"k", [&b"c5"[..], b"old"]);
        merged.add_missing(&record);
        assert_eq!(merged.columns.len(), 100_000);
        assert_eq!(merged.get(b"c5"), Some(&b"old"[..]));
    }

    #[test]
    fn a_column_put_again_keeps_its_place_with_the_last_value() {
        let record = Record::from_pairs(b"d", [&b"x"[..], b"1", b"y", b"3", b"x", b"2", b"odd"]);
        assert_eq!(
            record.columns,
            [
                (b"x".to_vec(), b"2".to_vec()),
                (b"y".to_vec(), b"3".to_vec())
            ]
        );
        assert_eq!(record.get(b""), Some(&b"d"[..]));
        assert_eq!(record.get(b"z"), None);
    }

    #[test]
    fn stored_columns_round_trip_and_damage_is_seen() {
        let record = Record::from_pairs(b"k", [&b"name"[..], b"B\0b", b"", b"x"]);
        let stored = record.encode_columns();
        assert_eq!(Record::decode_columns(b"k", &stored), Some(record));
        assert_eq!(
            Record::decode_columns(b"k", &stored[..stored.len() - 1]),
            None
        );
        assert_eq!(
            Record::decode_columns(b"k", b""),
            Some(Record::new(&b"k"[..]))
        );
    }

    #[test]
    fn zero_separated_columns_round_trip() {
        let record = Record::from_pairs(b"k", [&b"name"[..], b"Bob", b"empty", b""]);
        assert_eq!(record.zero_separated(), b"name\0Bob\0empty\0");
        assert_eq!(
            Record::from_zero_separated(b"k", &record.zero_separated()),
            record
        );
        assert_eq!(
            Record::from_zero_separated(b"k", b""),
            Record::new(&b"k"[..])
        );
    }
}
