//! Sorted streams of primary keys, one per index lookup, and the rows
//! every lookup holds found from them without reading the rows: the
//! engine turns its index's entries into [`Stream`]s, and reads the rows
//! these functions leave.
//!
//! Under one index key the engine keeps the primary keys sorted, so each
//! lookup is a sorted stream: one key's entries, a [`Merged`] few keys'
//! (a range, a prefix, an OR of words), or, over many keys, an unsorted
//! list. The rows every lookup holds are found in one of two ways:
//!
//! - [`intersect_lazily`] (a limit without an order: the caller stops
//!   after a few rows): the sorted streams are intersected step by step
//!   (each stream catches up with the furthest), so a query reads as little
//!   of each as the rows it answers with need;
//! - [`narrow`] (every match is needed): the streams race, a chunk each in
//!   turn; the first to end is the shortest, and each one that ends narrows
//!   the candidates. The race stops when the steps still to take would cost
//!   more than reading the candidates' rows, so a condition that holds most
//!   of the table costs about as much as its rarest companion.
//!
//! Every condition is checked again on each row, so a stream only has to
//! hold at least the rows its condition matches.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};

use itertools::{EitherOrBoth, Itertools};

use crate::index::{KeyRange, Probes};

/// Primary keys a racing stream takes in a turn.
const CHUNK: usize = 256;
/// What reading a row costs, in steps of an index stream (measured on the
/// disk engine: a row read and decoded takes about as long as 64 entries
/// walked).
const ROW_STEPS: usize = 64;
/// A stream this many times denser than the sparsest narrows too little
/// to be worth walking: the rows' own check is cheaper.
const DENSER: usize = 8;
/// Keys each stream shows before a lazy intersection picks its streams.
const PILOT: usize = 64;
/// Streams a query races at most. The caller checks every condition on
/// each row, so a stream left out only widens the candidates; without a
/// bound, a condition repeating a word half a million times raced as many
/// streams, each holding a cursor and the keys it read.
pub const MAX_STREAMS: usize = 16;

/// Primary keys, or the engine's error reading them.
pub type Keys<'t, E> = Box<dyn Iterator<Item = Result<&'t [u8], E>> + 't>;

/// One lookup's primary keys.
pub enum Stream<'t, E> {
    /// In ascending order, each once.
    Sorted(Keys<'t, E>),
    /// In index order, perhaps more than once.
    Unsorted(Keys<'t, E>),
}

/// The streams lookups ask for (each with its index's id): an index's rows
/// under one range (`every`), or under any of a lookup's ranges, each range
/// once; each stream once, and at most [`MAX_STREAMS`].
pub fn distinct_streams<'p>(
    lookups: impl IntoIterator<Item = (u32, &'p Probes)>,
) -> Vec<(u32, Vec<KeyRange>)> {
    let mut wanted = Vec::new();
    let mut seen = HashSet::new();
    for (id, probes) in lookups {
        let mut distinct = HashSet::new();
        let ranges = probes.ranges.iter().filter(|range| distinct.insert(*range));
        let ranges: Vec<KeyRange> = ranges.cloned().collect();
        let specs = match probes.every {
            true => ranges.into_iter().map(|range| vec![range]).collect(),
            false => vec![ranges],
        };
        for spec in specs {
            if wanted.len() < MAX_STREAMS && seen.insert((id, spec.clone())) {
                wanted.push((id, spec));
            }
        }
    }
    wanted
}

/// Sorted streams merged into one, each key once.
pub struct Merged<'t, E> {
    streams: Vec<Keys<'t, E>>,
    heads: BinaryHeap<Reverse<(&'t [u8], usize)>>,
    last: Option<&'t [u8]>,
}

impl<'t, E> Merged<'t, E> {
    pub fn new(mut streams: Vec<Keys<'t, E>>) -> Result<Merged<'t, E>, E> {
        let mut heads = BinaryHeap::new();
        for (at, stream) in streams.iter_mut().enumerate() {
            if let Some(key) = stream.next().transpose()? {
                heads.push(Reverse((key, at)));
            }
        }
        Ok(Merged {
            streams,
            heads,
            last: None,
        })
    }

    fn step(&mut self) -> Result<Option<&'t [u8]>, E> {
        while let Some(Reverse((key, at))) = self.heads.pop() {
            if let Some(next) = self.streams[at].next().transpose()? {
                self.heads.push(Reverse((next, at)));
            }
            if self.last != Some(key) {
                self.last = Some(key);
                return Ok(Some(key));
            }
        }
        Ok(None)
    }
}

impl<'t, E> Iterator for Merged<'t, E> {
    type Item = Result<&'t [u8], E>;

    fn next(&mut self) -> Option<Self::Item> {
        self.step().transpose()
    }
}

/// The sparsest of sorted streams and those at most `DENSER` times as
/// dense, found by how far into the key space each gets: the sparsest
/// gets furthest with `PILOT` keys. The keys looked at are not lost.
pub fn sparse_only<'t, E: 't>(streams: Vec<Keys<'t, E>>) -> Result<Vec<Keys<'t, E>>, E> {
    if streams.len() < 2 {
        return Ok(streams);
    }
    let mut shown = Vec::with_capacity(streams.len());
    for mut stream in streams {
        let mut keys = Vec::new();
        let mut ended = false;
        while keys.len() < PILOT {
            match stream.next().transpose()? {
                Some(key) => keys.push(key),
                None => {
                    ended = true;
                    break;
                }
            }
        }
        shown.push((keys, ended, stream));
    }
    // A stream that ended holds every key it has; of those, the shortest.
    let sparsest = (0..shown.len())
        .max_by(|&a, &b| {
            let reach = |at: usize| {
                let (keys, ended, _) = &shown[at];
                (
                    *ended,
                    (!*ended).then(|| keys.last().copied()),
                    Reverse(keys.len()),
                )
            };
            reach(a).cmp(&reach(b))
        })
        .expect("two streams");
    let (reach, whole) = {
        let (keys, ended, _) = &shown[sparsest];
        (keys.last().copied(), *ended)
    };
    let budget = DENSER * shown[sparsest].0.len().max(1);
    let mut kept = Vec::new();
    for (at, (mut keys, ended, mut stream)) in shown.into_iter().enumerate() {
        let mut keep = at == sparsest || (ended && keys.len() <= budget);
        if !keep && !ended {
            // Walk on to where the sparsest got (its end, if it ended).
            let mut ended = false;
            while keys.len() <= budget && (whole || keys.last().copied() < reach) && !ended {
                match stream.next().transpose()? {
                    Some(key) => keys.push(key),
                    None => ended = true,
                }
            }
            keep = keys.len() <= budget;
        }
        if keep {
            kept.push(Box::new(keys.into_iter().map(Ok).chain(stream)) as Keys<'t, E>);
        }
    }
    Ok(kept)
}

/// Hands `found` each key every sorted stream holds, in order, until it
/// answers false: each stream in turn catches up with the furthest.
pub fn intersect_lazily<'t, E>(
    mut streams: Vec<Keys<'t, E>>,
    found: &mut dyn FnMut(&'t [u8]) -> Result<bool, E>,
) -> Result<(), E> {
    let mut heads = Vec::with_capacity(streams.len());
    for stream in &mut streams {
        match stream.next().transpose()? {
            Some(key) => heads.push(key),
            None => return Ok(()),
        }
    }
    loop {
        let target = *heads.iter().max().expect("one stream at least");
        let mut agreed = true;
        for (head, stream) in heads.iter_mut().zip(&mut streams) {
            while *head < target {
                match stream.next().transpose()? {
                    Some(key) => *head = key,
                    None => return Ok(()),
                }
            }
            agreed &= *head == target;
        }
        if !agreed {
            continue;
        }
        if !found(target)? {
            return Ok(());
        }
        for (head, stream) in heads.iter_mut().zip(&mut streams) {
            match stream.next().transpose()? {
                Some(key) => *head = key,
                None => return Ok(()),
            }
        }
    }
}

/// The keys every stream holds, or a few more: the streams race until
/// reading the candidates' rows would cost less than racing on.
pub fn narrow<'t, E>(streams: Vec<Stream<'t, E>>, most: usize) -> Result<Option<Vec<&'t [u8]>>, E> {
    struct Runner<'t, E> {
        keys: Keys<'t, E>,
        sorted: bool,
        seen: Vec<&'t [u8]>,
        done: bool,
        /// Distinct keys in `seen` at least (an unsorted stream may name a
        /// row more than once: counted when `seen` is deduplicated).
        distinct: usize,
    }
    let mut runners: Vec<Runner<'t, E>> = streams
        .into_iter()
        .map(|stream| {
            let (keys, sorted) = match stream {
                Stream::Sorted(keys) => (keys, true),
                Stream::Unsorted(keys) => (keys, false),
            };
            Runner {
                keys,
                sorted,
                seen: Vec::new(),
                done: false,
                distinct: 0,
            }
        })
        .collect();
    let mut candidates: Option<Vec<&'t [u8]>> = None;
    let mut steps_since = 0;
    // The length of the shortest stream that ended.
    let mut shortest = usize::MAX;
    loop {
        let mut racing = false;
        for runner in runners.iter_mut().filter(|runner| !runner.done) {
            for _ in 0..CHUNK {
                match runner.keys.next().transpose()? {
                    Some(key) => runner.seen.push(key),
                    None => {
                        runner.done = true;
                        break;
                    }
                }
                if candidates.is_some() {
                    steps_since += 1;
                }
            }
            if !runner.done && runner.seen.len() > DENSER.saturating_mul(shortest) {
                // Much denser than the shortest: leave the rest to the rows'
                // check, once what it walked has narrowed.
                runner.done = true;
                // An unsorted stream's keys so far rule on nothing.
                if runner.sorted {
                    candidates = candidates.map(|found| walked_past(found, &runner.seen));
                }
                runner.seen = Vec::new();
                continue;
            }
            if !runner.done {
                if runner.sorted {
                    runner.distinct = runner.seen.len();
                } else if runner.seen.len() > most && runner.seen.len() >= 2 * runner.distinct {
                    // Each time it doubles: sorting stays n log n in all.
                    runner.seen.sort_unstable();
                    runner.seen.dedup();
                    runner.distinct = runner.seen.len();
                }
                racing = true;
                continue;
            }
            let mut keys = std::mem::take(&mut runner.seen);
            if !runner.sorted {
                keys.sort_unstable();
                keys.dedup();
            }
            shortest = shortest.min(keys.len().max(1));
            candidates = Some(match candidates {
                None => keys,
                Some(so_far) => intersection(&so_far, &keys),
            });
        }
        let Some(found) = &candidates else {
            // No stream ended, and even the sparsest holds more rows than
            // are worth reading by key.
            if runners.iter().all(|runner| runner.distinct > most) {
                return Ok(None);
            }
            continue;
        };
        if !racing || found.is_empty() || steps_since > ROW_STEPS * found.len() {
            let mut found = candidates.unwrap_or_default();
            for runner in runners
                .iter()
                .filter(|runner| runner.sorted && !runner.done)
            {
                found = walked_past(found, &runner.seen);
            }
            return Ok(Some(found).filter(|found| found.len() <= most));
        }
    }
}

/// The candidates a sorted stream cut short still rules on: up to the last
/// key it reached (`walked`, its keys so far), only those it showed.
fn walked_past<'t>(candidates: Vec<&'t [u8]>, walked: &[&'t [u8]]) -> Vec<&'t [u8]> {
    let Some(&reached) = walked.last() else {
        return candidates;
    };
    let mut at = 0;
    candidates
        .into_iter()
        .filter(|&key| {
            if key > reached {
                return true;
            }
            while walked[at] < key {
                at += 1;
            }
            walked[at] == key
        })
        .collect()
}

/// The keys two sorted lists both hold.
fn intersection<'t>(a: &[&'t [u8]], b: &[&'t [u8]]) -> Vec<&'t [u8]> {
    a.iter()
        .merge_join_by(b, |x, y| x.cmp(y))
        .filter_map(|pair| match pair {
            EitherOrBoth::Both(&key, _) => Some(key),
            EitherOrBoth::Left(_) | EitherOrBoth::Right(_) => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(list: &[&'static str]) -> Keys<'static, ()> {
        Box::new(
            list.iter()
                .map(|key| Ok(key.as_bytes()))
                .collect::<Vec<_>>()
                .into_iter(),
        )
    }

    #[test]
    fn merged_streams_come_out_sorted_and_each_once() {
        let merged = Merged::new(vec![
            keys(&["a", "c", "e"]),
            keys(&["b", "c", "f"]),
            keys(&[]),
        ]);
        let out: Vec<&[u8]> = merged.unwrap().map(Result::unwrap).collect();
        assert_eq!(out, [&b"a"[..], b"b", b"c", b"e", b"f"]);
    }

    #[test]
    fn lazy_intersection_finds_what_every_stream_holds_and_stops_when_told() {
        let mut found = Vec::new();
        let streams = vec![
            keys(&["a", "b", "d", "f", "g"]),
            keys(&["b", "c", "d", "g"]),
        ];
        intersect_lazily(streams, &mut |key| {
            found.push(key);
            Ok(true)
        })
        .unwrap();
        assert_eq!(found, [&b"b"[..], b"d", b"g"]);

        let mut first = Vec::new();
        let streams = vec![keys(&["a", "b", "d"]), keys(&["a", "b", "d"])];
        intersect_lazily(streams, &mut |key| {
            first.push(key);
            Ok(first.len() < 2)
        })
        .unwrap();
        assert_eq!(first, [&b"a"[..], b"b"]);
    }

    /// Keys `k00000` … of `n`s, in the order given (kept for the test's
    /// whole run, as LMDB's pages are for a transaction).
    fn numbered(n: impl Iterator<Item = usize>) -> Keys<'static, ()> {
        let keys: Vec<String> = n.map(|n| format!("k{n:05}")).collect();
        let keys: &'static [String] = Box::leak(keys.into_boxed_slice());
        Box::new(keys.iter().map(|k| Ok(k.as_bytes())))
    }

    #[test]
    fn the_race_narrows_to_what_every_stream_holds() {
        let all = numbered(0..2000);
        let unsorted = Stream::Unsorted(keys(&["k00007", "k00003", "k00007", "zz"]));
        let found = narrow(vec![Stream::Sorted(all), unsorted], usize::MAX)
            .unwrap()
            .unwrap();
        // The short stream ends first; the long one may be cut short, so
        // its keys narrow only as far as it got.
        assert!(found.contains(&&b"k00003"[..]) && found.contains(&&b"k00007"[..]));
        assert!(found.len() <= 3, "{found:?}");
        assert_eq!(
            narrow(
                vec![Stream::Sorted(keys(&["a"])), Stream::Sorted(keys(&["b"]))],
                usize::MAX
            )
            .unwrap(),
            Some(Vec::<&[u8]>::new())
        );
    }

    #[test]
    fn a_stream_cut_short_still_narrows_up_to_where_it_got() {
        let short = Stream::Sorted(keys(&["k00003", "k00007", "k01500"]));
        // Holds every key but k00003, far too many to walk to its end.
        let long = Stream::Sorted(numbered((0..200_000).filter(|&n| n != 3)));
        let found = narrow(vec![short, long], usize::MAX).unwrap().unwrap();
        assert_eq!(found, [&b"k00007"[..], b"k01500"]);
    }

    #[test]
    fn each_stream_is_raced_once_and_at_most_sixteen() {
        let word = |w: &str| KeyRange::Prefix(w.as_bytes().to_vec());
        let repeated = Probes {
            ranges: vec![word("x"); 50_000],
            every: true,
        };
        assert_eq!(distinct_streams([(1, &repeated)]), [(1, vec![word("x")])]);
        // The same ranges in another index are other streams; a union's
        // ranges each once, and an identical union once.
        let union = Probes {
            ranges: vec![word("a"), word("b"), word("a")],
            every: false,
        };
        let streams = distinct_streams([(1, &repeated), (2, &repeated), (1, &union), (1, &union)]);
        assert_eq!(
            streams,
            [
                (1, vec![word("x")]),
                (2, vec![word("x")]),
                (1, vec![word("a"), word("b")])
            ]
        );
        let many = Probes {
            ranges: (0..40).map(|n| word(&format!("w{n}"))).collect(),
            every: true,
        };
        assert_eq!(distinct_streams([(1, &many)]).len(), MAX_STREAMS);
    }

    #[test]
    fn a_dense_unsorted_stream_cut_short_keeps_the_candidates_of_a_stream_that_ended() {
        // The sorted stream ends at one key; the unsorted one is then far
        // denser and is cut short: its keys so far rule on nothing, and the
        // race ends with the sorted stream's key (it once lost the
        // candidates and raced on forever).
        let streams = vec![
            Stream::Sorted(keys(&["k00003"])),
            Stream::Unsorted(numbered(0..2000)),
        ];
        let found = narrow(streams, usize::MAX).unwrap();
        assert_eq!(found, Some(vec![&b"k00003"[..]]));
    }

    #[test]
    fn the_race_gives_up_when_every_stream_holds_more_than_is_worth_reading_by_key() {
        let many = || numbered(0..2000);
        // Two dense streams: neither ends before both pass the bound.
        let dense = vec![Stream::Sorted(many()), Stream::Sorted(many())];
        assert_eq!(narrow(dense, 1000).unwrap(), None);
        // One stream ends under the bound: read by key.
        let one_sparse = vec![Stream::Sorted(many()), Stream::Sorted(keys(&["k00003"]))];
        assert_eq!(
            narrow(one_sparse, 1000).unwrap(),
            Some(vec![&b"k00003"[..]])
        );
        // An unsorted stream counts rows, not entries: 4,000 entries of
        // 2,000 rows are not over a bound of 3,000.
        let unsorted = Stream::Unsorted(numbered((0..4000).map(|n| n % 2000)));
        let found = narrow(vec![unsorted], 3000).unwrap();
        assert_eq!(found.map(|found| found.len()), Some(2000));
        // Every stream ends, the intersection still over the bound: a scan.
        let all = vec![Stream::Sorted(many())];
        assert_eq!(narrow(all, 1000).unwrap(), None);
        let all = vec![Stream::Sorted(many())];
        assert_eq!(
            narrow(all, 5000).unwrap().map(|found| found.len()),
            Some(2000)
        );
    }
}
