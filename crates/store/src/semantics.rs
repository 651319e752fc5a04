//! memcached's decisions, made once for both engines: what a store, delete,
//! incr/decr or read does given the item it finds. Pure functions over the
//! parts of an item they look at; each engine turns the plan into its own
//! item (a slot in memory, a record on disk) and assigns the CAS.
//!
//! `tests/semantics.rs` runs one suite against both engines.

use crate::{ArithCommand, ArithOutcome, DeleteCommand, DeleteOutcome, ExpiryTime};
use crate::{Recache, StoreCommand, StoreMode, StoreOutcome};

/// An item's bits, in both engines: read since it was stored, marked stale
/// by a meta delete with `I`, its recache token handed out.
pub const FETCHED: u8 = 1;
pub const STALE: u8 = 2;
pub const WIN_SENT: u8 = 4;

/// The parts of a live item memcached's decisions read.
#[derive(Debug, Clone, Copy)]
pub struct Current<'v> {
    pub value: &'v [u8],
    pub flags: u32,
    pub cas: u64,
    /// Marked stale by a meta delete with `I`.
    pub stale: bool,
    /// Its recache token was handed out.
    pub win_sent: bool,
}

impl<'v> Current<'v> {
    /// An item of `bits` ([`STALE`], [`WIN_SENT`]).
    pub fn new(value: &'v [u8], flags: u32, cas: u64, bits: u8) -> Self {
        let (stale, win_sent) = (bits & STALE != 0, bits & WIN_SENT != 0);
        Current {
            value,
            flags,
            cas,
            stale,
            win_sent,
        }
    }
}

/// When a written item expires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// As the current item does.
    Keep,
    At(ExpiryTime),
}

/// An item to write in place of the current one; the engine gives it a new
/// CAS.
#[derive(Debug, Clone, Copy)]
pub struct Write<'a> {
    /// The value, in parts to concatenate (append and prepend join two).
    pub parts: [&'a [u8]; 2],
    pub flags: u32,
    pub expiry: Expiry,
    pub stale: bool,
    pub win_sent: bool,
}

impl Write<'_> {
    pub fn value_len(&self) -> usize {
        self.parts[0].len() + self.parts[1].len()
    }

    /// The bits the item it writes starts with.
    pub fn bits(&self) -> u8 {
        (u8::from(self.stale) * STALE) | (u8::from(self.win_sent) * WIN_SENT)
    }
}

#[derive(Debug, Clone, Copy)]
pub enum StorePlan<'a> {
    Refuse(StoreOutcome),
    Write(Write<'a>),
}

/// set, add, replace, append, prepend and cas (text, meta and binary).
/// An append or prepend whose value would grow past `max_value` (`-I`) is
/// not stored: memcached finds no item that large to allocate.
pub fn plan_store<'a>(
    command: &StoreCommand<'a>,
    current: Option<Current<'a>>,
    max_value: usize,
) -> StorePlan<'a> {
    // memcached's order (`do_store_item`): an add over an item is refused
    // whatever its CAS; the others compare the CAS first.
    if command.mode == StoreMode::Add && current.is_some() {
        return StorePlan::Refuse(StoreOutcome::NotStored);
    }
    let mut stale = false;
    // A CAS of 0 is none (memcached's CAS_NONE): an append or prepend with
    // it compares nothing; the other modes find it differs.
    let appends = matches!(command.mode, StoreMode::Append | StoreMode::Prepend);
    let compare_cas = command.compare_cas.filter(|&cas| cas != 0 || !appends);
    if let (Some(item), Some(cas)) = (&current, compare_cas) {
        if cas != item.cas {
            // Meta `I` with `C` on a set or replace: an older CAS (not 0,
            // which is none) still stores, but the item stays stale
            // (memcached's CAS_STALE).
            let may_be_stale = matches!(command.mode, StoreMode::Set | StoreMode::Replace);
            if command.stale_if_older && may_be_stale && (1..item.cas).contains(&cas) {
                stale = true;
            } else {
                return StorePlan::Refuse(StoreOutcome::Exists);
            }
        }
    }
    let write = match (command.mode, current) {
        // A compare-and-set (a replace with a CAS too) of a missing item.
        (StoreMode::Set | StoreMode::Replace, None) if command.compare_cas.is_some() => {
            return StorePlan::Refuse(StoreOutcome::NotFound)
        }
        (StoreMode::Replace | StoreMode::Append | StoreMode::Prepend, None) => {
            return StorePlan::Refuse(StoreOutcome::NotStored)
        }
        (StoreMode::Append | StoreMode::Prepend, Some(item))
            if item.value.len() + command.value.len() > max_value =>
        {
            return StorePlan::Refuse(StoreOutcome::NotStored)
        }
        // Append and prepend keep the item's flags and expiry.
        (StoreMode::Append | StoreMode::Prepend, Some(item)) => Write {
            parts: if command.mode == StoreMode::Append {
                [item.value, command.value]
            } else {
                [command.value, item.value]
            },
            flags: item.flags,
            expiry: Expiry::Keep,
            stale: false,
            win_sent: false,
        },
        _ => Write {
            parts: [command.value, &[]],
            flags: command.flags,
            expiry: Expiry::At(command.expiry),
            stale: false,
            win_sent: false,
        },
    };
    if stale {
        // Still stale, with its expiry, and nobody else may win the
        // recache if the token was handed out.
        let item = current.expect("a stale store replaces an item");
        return StorePlan::Write(Write {
            expiry: Expiry::Keep,
            stale: true,
            win_sent: item.win_sent,
            ..write
        });
    }
    StorePlan::Write(write)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeletePlan {
    Refuse(DeleteOutcome),
    Remove,
    /// Meta `I`: keep the item, stale, with a new CAS and its recache token
    /// not yet handed out.
    Invalidate(Expiry),
}

pub fn plan_delete(command: &DeleteCommand, current: Option<Current<'_>>) -> DeletePlan {
    let Some(item) = current else {
        return DeletePlan::Refuse(DeleteOutcome::NotFound);
    };
    if command.compare_cas.is_some_and(|cas| cas != item.cas) {
        return DeletePlan::Refuse(DeleteOutcome::Exists);
    }
    match command.invalidate {
        Some(expiry) => DeletePlan::Invalidate(expiry.map_or(Expiry::Keep, Expiry::At)),
        None => DeletePlan::Remove,
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArithPlan {
    Refuse(ArithOutcome),
    /// A miss with vivify: a new counter, flags 0.
    Create {
        value: u64,
        digits: Vec<u8>,
        expiry: ExpiryTime,
    },
    /// The item's value becomes `digits`; its flags stay. Its fetched,
    /// stale and token bits stay when the number keeps its length
    /// (memcached rewrites the item in place) and go when it grows (a new
    /// item).
    Update {
        value: u64,
        digits: Vec<u8>,
        expiry: Expiry,
    },
}

/// incr and decr: an increment wraps at 2^64, a decrement stops at 0, and a
/// number shorter than the item's is padded with spaces to its length, as
/// memcached rewrites the item in place.
pub fn plan_arith(command: &ArithCommand, current: Option<Current<'_>>) -> ArithPlan {
    let Some(item) = current else {
        return match command.vivify {
            Some((initial, expiry)) => ArithPlan::Create {
                value: initial,
                digits: digits_of(initial),
                expiry,
            },
            None => ArithPlan::Refuse(ArithOutcome::NotFound),
        };
    };
    // memcached refuses an empty value before it compares the CAS.
    if item.value.is_empty() {
        return ArithPlan::Refuse(ArithOutcome::NonNumeric);
    }
    if command.compare_cas.is_some_and(|cas| cas != item.cas) {
        return ArithPlan::Refuse(ArithOutcome::Exists);
    }
    let Some(number) = crate::counter::parse(item.value) else {
        return ArithPlan::Refuse(ArithOutcome::NonNumeric);
    };
    let value = if command.decrement {
        number.saturating_sub(command.delta)
    } else {
        number.wrapping_add(command.delta)
    };
    let mut digits = digits_of(value);
    if digits.len() < item.value.len() {
        digits.resize(item.value.len(), b' ');
    }
    ArithPlan::Update {
        value,
        digits,
        expiry: command.touch.map_or(Expiry::Keep, Expiry::At),
    }
}

fn digits_of(number: u64) -> Vec<u8> {
    let mut digits = Vec::with_capacity(20);
    crate::counter::push(&mut digits, number);
    digits
}

/// Whether a read wins the right to recache the item (a meta get, of an
/// item made stale or, with `R`, about to expire): only while nobody holds
/// the token. `ttl` is after any touch the read makes, -1 for never.
pub fn wins_recache(item: &Current<'_>, ttl: i64, recache: Recache) -> bool {
    let Recache::Meta { below } = recache else {
        return false;
    };
    !item.win_sent && (item.stale || below.is_some_and(|below| ttl != -1 && ttl < below))
}

/// The empty item a read with vivify (meta `N`) creates on a miss; its
/// reader holds the recache token.
pub fn vivified(expiry: ExpiryTime) -> Write<'static> {
    Write {
        parts: [&[], &[]],
        flags: 0,
        expiry: Expiry::At(expiry),
        stale: false,
        win_sent: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(value: &[u8]) -> Current<'_> {
        Current {
            value,
            flags: 3,
            cas: 10,
            stale: false,
            win_sent: false,
        }
    }

    fn store(mode: StoreMode, compare_cas: Option<u64>) -> StoreCommand<'static> {
        StoreCommand {
            mode,
            key: b"k",
            value: b"new",
            flags: 9,
            expiry: 5,
            compare_cas,
            stale_if_older: false,
        }
    }

    #[test]
    fn store_modes_refuse_as_memcached_does() {
        let refused = |mode, cas, current| match plan_store(&store(mode, cas), current, usize::MAX)
        {
            StorePlan::Refuse(outcome) => Some(outcome),
            StorePlan::Write(_) => None,
        };
        let old = Some(item(b"old"));
        assert_eq!(
            refused(StoreMode::Add, None, old),
            Some(StoreOutcome::NotStored)
        );
        assert_eq!(refused(StoreMode::Add, None, None), None);
        for mode in [StoreMode::Replace, StoreMode::Append, StoreMode::Prepend] {
            assert_eq!(refused(mode, None, None), Some(StoreOutcome::NotStored));
            assert_eq!(refused(mode, None, old), None);
        }
        assert_eq!(
            refused(StoreMode::Set, Some(10), None),
            Some(StoreOutcome::NotFound)
        );
        assert_eq!(
            refused(StoreMode::Set, Some(9), old),
            Some(StoreOutcome::Exists)
        );
        assert_eq!(refused(StoreMode::Set, Some(10), old), None);
    }

    #[test]
    fn append_keeps_flags_and_expiry_and_a_stale_cas_keeps_the_token() {
        let StorePlan::Write(write) = plan_store(
            &store(StoreMode::Append, None),
            Some(item(b"old")),
            usize::MAX,
        ) else {
            panic!("writes")
        };
        assert_eq!(
            (write.parts, write.flags, write.expiry),
            ([&b"old"[..], b"new"], 3, Expiry::Keep)
        );
        let stale = StoreCommand {
            stale_if_older: true,
            ..store(StoreMode::Set, Some(4))
        };
        let taken = Current {
            win_sent: true,
            ..item(b"old")
        };
        let StorePlan::Write(write) = plan_store(&stale, Some(taken), usize::MAX) else {
            panic!("an older CAS stores")
        };
        assert!(write.stale && write.win_sent);
        assert_eq!(write.expiry, Expiry::Keep);
        let newer = StoreCommand {
            stale_if_older: true,
            ..store(StoreMode::Set, Some(11))
        };
        assert!(matches!(
            plan_store(&newer, Some(item(b"old")), usize::MAX),
            StorePlan::Refuse(StoreOutcome::Exists)
        ));
    }

    #[test]
    fn counters_pad_wrap_and_floor() {
        let incr = |delta, value: &[u8]| {
            plan_arith(
                &ArithCommand {
                    delta,
                    ..ArithCommand::default()
                },
                Some(item(value)),
            )
        };
        assert_eq!(
            incr(1, b"99"),
            ArithPlan::Update {
                value: 100,
                digits: b"100".to_vec(),
                expiry: Expiry::Keep
            }
        );
        assert!(matches!(
            incr(2, b"18446744073709551615"),
            ArithPlan::Update { value: 1, .. }
        ));
        let decr = plan_arith(
            &ArithCommand {
                decrement: true,
                delta: 5,
                ..ArithCommand::default()
            },
            Some(item(b"100")),
        );
        assert!(
            matches!(decr, ArithPlan::Update { value: 95, ref digits, .. } if digits == b"95 ")
        );
        assert_eq!(incr(1, b"x1"), ArithPlan::Refuse(ArithOutcome::NonNumeric));
    }

    #[test]
    fn the_recache_token_is_won_once() {
        let fresh = item(b"v");
        let below_30 = Recache::Meta { below: Some(30) };
        assert!(!wins_recache(&fresh, -1, below_30), "never expires");
        assert!(!wins_recache(&fresh, 40, below_30));
        assert!(wins_recache(&fresh, 20, below_30));
        let stale = Current {
            stale: true,
            ..fresh
        };
        assert!(wins_recache(&stale, -1, Recache::Meta { below: None }));
        assert!(!wins_recache(&stale, -1, Recache::Never), "a classic read");
        let taken = Current {
            win_sent: true,
            ..stale
        };
        assert!(!wins_recache(&taken, 20, below_30));
    }
}
