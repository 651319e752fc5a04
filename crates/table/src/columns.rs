//! A record: its primary key and its columns, in the order Tokyo Cabinet's
//! map keeps them (a column put again keeps its place, a new one goes last).

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
        while let (Some(name), Some(value)) = (fields.next(), fields.next()) {
            record.put(name, value);
        }
        record
    }

    /// The columns as Tokyo Tyrant carries them: `name\0value\0…`, no
    /// trailing NUL.
    pub fn zero_separated(&self) -> Vec<u8> {
        join_zero_separated(self.columns.iter().map(|(n, v)| (&n[..], &v[..])))
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
}

impl<C: Columns + ?Sized> Columns for &C {
    fn get(&self, name: &[u8]) -> Option<&[u8]> {
        (**self).get(name)
    }
}

impl Columns for Record {
    fn get(&self, name: &[u8]) -> Option<&[u8]> {
        Record::get(self, name)
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
