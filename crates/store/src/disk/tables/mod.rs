//! Tables on the disk engine: rows (`rows.rs`) in their own keyspace of
//! the pending table, the update log and LMDB; secondary indexes kept in
//! the row's transaction (`indexes.rs`); and the queries that read them
//! (`lookups.rs`).

pub(super) mod indexes;
mod lookups;
pub(super) mod rows;
