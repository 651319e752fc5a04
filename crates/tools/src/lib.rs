//! kura's tools, built on the same protocol codec as the server.

pub mod bench;
pub mod output;
