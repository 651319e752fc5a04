//! Tables as Tokyo Cabinet's table database has them: a record is a primary
//! key and columns (name → bytes), and a query is conditions, an order, a
//! limit and a skip, with Tokyo Cabinet 1.4.48's semantics to the byte
//! (`docs/DESIGN.md`, "Tables"). No storage and no protocol here: the engine
//! hands records in primary-key order and gets the matching ones back.

pub mod columns;
pub mod condition;
pub mod index;
pub mod number;
pub mod posix_regex;
pub mod query;
pub mod streams;
pub mod text;

pub use columns::{Columns, Record, StoredRecord};
pub use condition::{Condition, Operator};
pub use index::{plan, IndexCommand, IndexKind, KeyRange, Lookup, Probes};
pub use query::{metasearch, Order, OrderKind, Query, SetOperation};
