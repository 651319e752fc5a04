//! A query: conditions (all must hold), an order, a limit and a skip, and
//! meta-search over several queries, with Tokyo Cabinet's semantics.
//!
//! Records come in primary-key order, which is kura's natural order (Tokyo
//! Cabinet's is the hash file's); sorting is stable, so records an order
//! ties keep primary-key order.

use std::cmp::Ordering;
use std::collections::HashMap;

use crate::columns::{Columns, Record};
use crate::condition::Condition;
use crate::number;

/// How results are ordered, numbered as Tokyo Cabinet's `TDBQO*`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OrderKind {
    StrAsc = 0,
    StrDesc = 1,
    NumAsc = 2,
    NumDesc = 3,
}

impl OrderKind {
    /// Reads an order as `tctdbqrystrtoordertype` does; `None` for an
    /// unknown one (Tokyo Cabinet then leaves the order unset).
    pub fn parse(text: &str) -> Option<OrderKind> {
        Some(match text.to_ascii_uppercase().as_str() {
            "STRASC" | "STR" | "ASC" => OrderKind::StrAsc,
            "STRDESC" | "DESC" => OrderKind::StrDesc,
            "NUMASC" | "NUM" => OrderKind::NumAsc,
            "NUMDESC" => OrderKind::NumDesc,
            other => match other.parse::<i64>().ok()? {
                0 => OrderKind::StrAsc,
                1 => OrderKind::StrDesc,
                2 => OrderKind::NumAsc,
                3 => OrderKind::NumDesc,
                _ => return None,
            },
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            OrderKind::StrAsc => "STRASC",
            OrderKind::StrDesc => "STRDESC",
            OrderKind::NumAsc => "NUMASC",
            OrderKind::NumDesc => "NUMDESC",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Order {
    pub column: Vec<u8>,
    pub kind: OrderKind,
}

impl Order {
    /// Compares two records; a record without the column comes last in
    /// either direction.
    fn compare(&self, a: &Record, b: &Record) -> Ordering {
        if self.column.is_empty() {
            return self.compare_keys(&a.key, &b.key);
        }
        match (a.get(&self.column), b.get(&self.column)) {
            (None, None) => Ordering::Equal,
            (None, Some(_)) => Ordering::Greater,
            (Some(_), None) => Ordering::Less,
            (Some(a), Some(b)) => match self.kind {
                OrderKind::StrAsc => a.cmp(b),
                OrderKind::StrDesc => b.cmp(a),
                OrderKind::NumAsc => compare_numbers(a, b),
                OrderKind::NumDesc => compare_numbers(b, a),
            },
        }
    }

    /// The primary key orders as Tokyo Cabinet orders it: bytes, or
    /// `tccmpdecimal` for the numeric orders.
    fn compare_keys(&self, a: &[u8], b: &[u8]) -> Ordering {
        match self.kind {
            OrderKind::StrAsc => a.cmp(b),
            OrderKind::StrDesc => b.cmp(a),
            OrderKind::NumAsc => compare_decimal(a, b),
            OrderKind::NumDesc => compare_decimal(b, a),
        }
    }
}

/// Numbers as `tctdbatof` reads them. Tokyo Cabinet's comparison is not an
/// order when a value is NaN; kura puts NaN after +∞ so sorting stays an
/// order, and treats -0 as 0.
fn compare_numbers(a: &[u8], b: &[u8]) -> Ordering {
    let a = number::parse(a) + 0.0;
    let b = number::parse(b) + 0.0;
    a.total_cmp(&b)
}

/// `tccmpdecimal`: the signed integer part, then the fraction, then the
/// bytes, so distinct keys never tie. A `+` sign is not a number here.
pub fn compare_decimal(a: &[u8], b: &[u8]) -> Ordering {
    let (a_integer, a_fraction) = decimal_parts(a);
    let (b_integer, b_fraction) = decimal_parts(b);
    a_integer
        .cmp(&b_integer)
        .then_with(|| a_fraction.total_cmp(&b_fraction))
        .then_with(|| a.cmp(b))
}

fn decimal_parts(text: &[u8]) -> (i64, f64) {
    let mut rest = text;
    while let [first, tail @ ..] = rest {
        if *first > b' ' && *first != 0x7f {
            break;
        }
        rest = tail;
    }
    let negative = rest.first() == Some(&b'-');
    if negative {
        rest = &rest[1..];
    }
    let mut integer: i64 = 0;
    while let [digit @ b'0'..=b'9', tail @ ..] = rest {
        integer = integer
            .wrapping_mul(10)
            .wrapping_add(i64::from(digit - b'0'));
        rest = tail;
    }
    let mut fraction = 0.0;
    if let [b'.', tail @ ..] = rest {
        let mut base = 10.0;
        for digit in tail.iter().take_while(|b| b.is_ascii_digit()).take(16) {
            fraction += f64::from(digit - b'0') / base;
            base *= 10.0;
        }
    }
    if negative {
        // Wrapping as the digits did: `-9223372036854775808` is i64::MIN.
        (integer.wrapping_neg(), -fraction)
    } else {
        (integer, fraction)
    }
}

/// One query.
#[derive(Clone, Debug, Default)]
pub struct Query {
    pub conditions: Vec<Condition>,
    pub order: Option<Order>,
    /// At most this many results (`None`: all); Tokyo Cabinet's negative
    /// max is `None`, and 0 gives nothing.
    pub limit: Option<usize>,
    pub skip: usize,
}

/// Conditions past which a query reads a wide record through a map.
const FEW_CONDITIONS: usize = 8;

/// A record read through a map of its columns (the key through itself).
struct Mapped<'r, R: ?Sized> {
    record: &'r R,
    by_name: HashMap<&'r [u8], &'r [u8]>,
}

impl<R: Columns + ?Sized> Columns for Mapped<'_, R> {
    fn get(&self, name: &[u8]) -> Option<&[u8]> {
        match name.is_empty() {
            true => self.record.get(name),
            false => self.by_name.get(name).copied(),
        }
    }
}

impl Query {
    /// Sets the limit as `tctdbqrysetlimit` takes it: a negative max is no
    /// limit, a negative skip none.
    pub fn set_limit(&mut self, max: i64, skip: i64) {
        self.limit = usize::try_from(max).ok();
        self.skip = usize::try_from(skip).unwrap_or(0);
    }

    pub fn matches<R: Columns + ?Sized>(&self, record: &R) -> bool {
        // Many conditions read a record of many columns through a map: a
        // walk of it per condition would cost their product (38,000
        // conditions against a 70,000-column row took 10 s).
        if self.conditions.len() > FEW_CONDITIONS {
            if let Some(by_name) = record.by_name() {
                let mapped = Mapped { record, by_name };
                return self.conditions.iter().all(|c| c.matches(&mapped));
            }
        }
        self.conditions
            .iter()
            .all(|condition| condition.matches(record))
    }

    /// The records that match, ordered, skipped and limited. `records` are
    /// in primary-key order.
    pub fn search<'r>(&self, records: &'r [Record]) -> Vec<&'r Record> {
        let found = self.matching_sorted(records);
        limited(found, self.skip, self.limit)
    }

    /// Records that all match (in primary-key order), ordered, skipped and
    /// limited.
    pub fn arrange<'r>(&self, matched: &'r [Record]) -> Vec<&'r Record> {
        limited(self.sorted(matched.iter().collect()), self.skip, self.limit)
    }

    /// With an order and a limit the answer needs only the best `limit +
    /// skip` matches: once `matched` holds twice that many (and at least
    /// 64), it keeps the best, sorted, ties in the order they came. A
    /// search that calls this after each match holds a bounded number.
    pub fn trim(&self, matched: &mut Vec<Record>) {
        let (Some(order), Some(limit)) = (&self.order, self.limit) else {
            return;
        };
        let best = limit.saturating_add(self.skip);
        if matched.len() >= best.saturating_mul(2).max(64) {
            matched.sort_by(|a, b| order.compare(a, b));
            matched.truncate(best);
        }
    }

    /// How many matches, the first in primary-key order, the answer needs:
    /// `None` when it needs them all (no limit, or an order to sort by).
    pub fn matches_needed(&self) -> Option<usize> {
        match (&self.order, self.limit) {
            (None, Some(limit)) => Some(limit.saturating_add(self.skip)),
            _ => None,
        }
    }

    fn matching_sorted<'r>(&self, records: &'r [Record]) -> Vec<&'r Record> {
        self.sorted(records.iter().filter(|r| self.matches(r)).collect())
    }

    /// In the query's order, if it has one (a stable sort).
    fn sorted<'r>(&self, mut found: Vec<&'r Record>) -> Vec<&'r Record> {
        if let Some(order) = &self.order {
            found.sort_by(|a, b| order.compare(a, b));
        }
        found
    }
}

fn limited<T>(found: Vec<T>, skip: usize, limit: Option<usize>) -> Vec<T> {
    found
        .into_iter()
        .skip(skip)
        .take(limit.unwrap_or(usize::MAX))
        .collect()
}

/// How meta-search combines queries (`TDBMS*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetOperation {
    Union = 0,
    Intersection = 1,
    Difference = 2,
}

impl SetOperation {
    /// Reads a set operation by Tokyo Cabinet's names (`tctdbmetastrtosettype`).
    pub fn parse(text: &str) -> Option<SetOperation> {
        Some(match text.to_ascii_uppercase().as_str() {
            "UNION" | "CUP" | "+" | "OR" => SetOperation::Union,
            "ISECT" | "INTERSECTION" | "CAP" | "*" | "AND" => SetOperation::Intersection,
            "DIFF" | "DIFFERENCE" | "MINUS" | "-" | "ANDNOT" | "NOT" => SetOperation::Difference,
            other => match other.parse::<i64>().ok()? {
                0 => SetOperation::Union,
                1 => SetOperation::Intersection,
                2 => SetOperation::Difference,
                _ => return None,
            },
        })
    }
}

/// Several queries combined as `tctdbmetasearch` combines them (a row
/// several queries match is the same record in each). The first query's
/// order, skip and limit shape the result.
/// - Union: each query's own results (its order, its limit plus skip), in
///   first-seen order, then sorted by the first query's order if it has one
///   (not when it orders by the primary key).
/// - Intersection: the records every query finds, in the last query's order.
/// - Difference: the first query's records no other query finds, in its order.
///
/// `members(i)` gives the records query `i` matches, in primary-key order;
/// it is asked for one query at a time, so a caller need not hold every
/// query's list at once (a meta-search of many queries over a large table).
pub fn metasearch<'r>(
    queries: &[Query],
    operation: SetOperation,
    members: &dyn Fn(usize) -> Vec<&'r Record>,
) -> Vec<&'r Record> {
    let Some(first) = queries.first() else {
        return Vec::new();
    };
    let sorted = |i: usize| queries[i].sorted(members(i));
    if queries.len() == 1 {
        return limited(sorted(0), first.skip, first.limit);
    }
    let identities = |records: &[&Record]| -> std::collections::HashSet<*const Record> {
        records.iter().map(|r| *r as *const Record).collect()
    };
    let mut set: Vec<&Record> = Vec::new();
    match operation {
        SetOperation::Union => {
            let mut seen = std::collections::HashSet::new();
            for (i, query) in queries.iter().enumerate() {
                let fetch = query.limit.map(|limit| limit.saturating_add(query.skip));
                for record in limited(sorted(i), 0, fetch) {
                    if seen.insert(record as *const Record) {
                        set.push(record);
                    }
                }
            }
            // Tokyo Cabinet sorts the union by the column's stored value,
            // and the primary key is not one: ordered by it, the union
            // stays in first-seen order.
            if let Some(order) = first.order.as_ref().filter(|o| !o.column.is_empty()) {
                set.sort_by(|a, b| order.compare(a, b));
            }
        }
        SetOperation::Intersection => {
            set = sorted(0);
            for i in 1..queries.len() {
                if set.is_empty() {
                    break;
                }
                let keep = identities(&set);
                set = sorted(i)
                    .into_iter()
                    .filter(|r| keep.contains(&(*r as *const Record)))
                    .collect();
            }
        }
        SetOperation::Difference => {
            set = sorted(0);
            for i in 1..queries.len() {
                if set.is_empty() {
                    break;
                }
                let drop = identities(&members(i));
                set.retain(|r| !drop.contains(&(*r as *const Record)));
            }
        }
    }
    limited(set, first.skip, first.limit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::columns::StoredRecord;
    use crate::condition::Operator;

    fn table() -> Vec<Record> {
        let rows: [(&str, &[(&str, &str)]); 5] = [
            ("a", &[("age", "30"), ("name", "x")]),
            ("b", &[("age", "4")]),
            ("c", &[("name", "y")]),
            ("d", &[("age", "30")]),
            ("e", &[("age", "-1")]),
        ];
        rows.iter()
            .map(|(key, columns)| {
                let mut record = Record::new(key.as_bytes());
                for (name, value) in columns.iter() {
                    record.put(name.as_bytes(), value.as_bytes());
                }
                record
            })
            .collect()
    }

    fn keys(found: &[&Record]) -> String {
        found
            .iter()
            .map(|r| String::from_utf8_lossy(&r.key))
            .collect()
    }

    fn condition(column: &str, operator: &str, expression: &str) -> Condition {
        let (operator, flags) = Operator::parse(operator).unwrap();
        Condition::new(column.as_bytes(), operator, flags, expression.as_bytes())
    }

    fn ordered(column: &str, kind: OrderKind) -> Option<Order> {
        Some(Order {
            column: column.as_bytes().to_vec(),
            kind,
        })
    }

    /// Past a few conditions a wide record is read through a map: the
    /// answers are those of a walk per condition, on a record as on one
    /// read where the engine keeps it.
    #[test]
    fn many_conditions_on_a_wide_record_answer_as_each_alone() {
        let mut record = Record::new(&b"key7"[..]);
        for n in 0..40 {
            record.put(format!("c{n}").as_bytes(), n.to_string().as_bytes());
        }
        let stored_bytes = record.encode_columns();
        let stored = StoredRecord::new(&record.key, &stored_bytes).unwrap();
        let holding = [
            condition("c3", "NUMEQ", "3"),
            condition("", "STRBW", "key"),
            condition("c39", "NUMGE", "39"),
            condition("missing", "!STREQ", "x"),
        ];
        let failing = [
            condition("c5", "NUMEQ", "6"),
            condition("missing", "STREQ", "x"),
            condition("", "STREQ", "key8"),
        ];
        for extra in [
            None,
            Some(&failing[0]),
            Some(&failing[1]),
            Some(&failing[2]),
        ] {
            let mut conditions: Vec<Condition> = (0..10)
                .map(|n| condition(&format!("c{n}"), "NUMLT", "100"))
                .chain(holding.iter().cloned())
                .collect();
            conditions.extend(extra.cloned());
            let each_alone = conditions.iter().all(|c| c.matches(&record));
            assert_eq!(each_alone, extra.is_none());
            let query = Query {
                conditions,
                ..Query::default()
            };
            assert!(record.by_name().is_some() && query.conditions.len() > FEW_CONDITIONS);
            assert_eq!(query.matches(&record), each_alone, "{extra:?}");
            assert_eq!(query.matches(&stored), each_alone, "{extra:?}");
        }
    }

    #[test]
    fn the_most_negative_decimal_key_sorts_first_without_overflow() {
        // Its digits wrap to i64::MIN; negating that overflowed (a panic in
        // debug builds).
        let most_negative = b"-9223372036854775808";
        assert_eq!(compare_decimal(most_negative, b"1"), Ordering::Less);
        assert_eq!(compare_decimal(b"-1", most_negative), Ordering::Greater);
    }

    #[test]
    fn trimming_as_rows_come_keeps_the_answer_a_full_sort_gives() {
        // Many ties, so a trim that lost their order would show.
        let records: Vec<Record> = (0..500)
            .map(|n| {
                let mut record = Record::new(format!("k{n:03}").into_bytes());
                record.put(b"age", (n % 7).to_string().as_bytes());
                record
            })
            .collect();
        for (kind, max, skip) in [
            (OrderKind::NumAsc, 5, 3),
            (OrderKind::NumDesc, 40, 0),
            (OrderKind::StrAsc, 1, 90),
        ] {
            let mut query = Query {
                order: ordered("age", kind),
                ..Query::default()
            };
            query.set_limit(max, skip);
            let mut kept = Vec::new();
            for record in &records {
                kept.push(record.clone());
                query.trim(&mut kept);
                assert!(kept.len() < 2 * (max + skip).max(64) as usize);
            }
            assert_eq!(
                keys(&query.arrange(&kept)),
                keys(&query.search(&records)),
                "{kind:?} {max} {skip}"
            );
        }
    }

    #[test]
    fn missing_columns_sort_last_both_ways_and_ties_keep_key_order() {
        let records = table();
        let mut query = Query {
            order: ordered("age", OrderKind::NumDesc),
            ..Query::default()
        };
        assert_eq!(keys(&query.search(&records)), "adbec");
        query.order = ordered("age", OrderKind::StrAsc);
        assert_eq!(keys(&query.search(&records)), "eadbc");
        query.set_limit(2, 1);
        assert_eq!(keys(&query.search(&records)), "ad");
        query.set_limit(0, 0);
        assert_eq!(keys(&query.search(&records)), "");
        query.set_limit(-1, 3);
        assert_eq!(keys(&query.search(&records)), "bc");
    }

    #[test]
    fn keys_order_by_tokyo_cabinets_decimal_comparison() {
        let mut sorted: Vec<&[u8]> = vec![
            b"10", b"9", b"3", b"2", b" 2", b"1.50", b"1.5", b"1e5", b"0.1", b"b", b"abc", b"a",
            b"+3", b"-1", b"-1.5",
        ];
        sorted.sort_by(|a, b| compare_decimal(a, b));
        let expected: Vec<&[u8]> = vec![
            b"-1.5", b"-1", b"+3", b"a", b"abc", b"b", b"0.1", b"1e5", b"1.5", b"1.50", b" 2",
            b"2", b"3", b"9", b"10",
        ];
        assert_eq!(sorted, expected);
    }

    #[test]
    fn meta_search_unions_intersects_and_subtracts() {
        let records = table();
        let by_age = Query {
            conditions: vec![condition("age", "NUMGE", "4")],
            ..Query::default()
        };
        let named = Query {
            conditions: vec![condition("name", "STRBW", "")],
            ..Query::default()
        };
        // What each query matches, in primary-key order.
        let matched = |queries: &[Query]| -> Vec<Vec<&Record>> {
            (queries.iter())
                .map(|query| records.iter().filter(|r| query.matches(r)).collect())
                .collect()
        };
        let both = [by_age.clone(), named.clone()];
        let members = matched(&both);
        let combined = |operation| keys(&metasearch(&both, operation, &|i| members[i].clone()));
        assert_eq!(combined(SetOperation::Union), "abdc");
        assert_eq!(combined(SetOperation::Intersection), "a");
        assert_eq!(combined(SetOperation::Difference), "bd");
        // Ordered by a column, the union is sorted; by the primary key it
        // keeps first-seen order, as in Tokyo Cabinet.
        let by_name = Query {
            order: ordered("name", OrderKind::StrDesc),
            ..by_age.clone()
        };
        let queries = [by_name, named.clone()];
        let members = matched(&queries);
        let union = metasearch(&queries, SetOperation::Union, &|i| members[i].clone());
        assert_eq!(keys(&union), "cabd");
        let by_key = Query {
            order: ordered("", OrderKind::StrDesc),
            ..by_age
        };
        let queries = [by_key, named];
        let members = matched(&queries);
        let union = metasearch(&queries, SetOperation::Union, &|i| members[i].clone());
        assert_eq!(keys(&union), "dbac");
    }
}
