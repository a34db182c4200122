//! Why each path was chosen: the table behind `rwrun --explain`,
//! [`crate::Universe::explain`] and `RANKWIRE_LOG=info`, and the `RANKWIRE_REQUIRE`
//! check that turns a fallback into an error at init. Selection and the table are
//! one module, `select.rs` (the rows come from the same walk as the routes); this
//! module keeps the public paths (`rankwire::explain::*`).

pub use crate::select::{EXPLAIN_ENV, REQUIRABLE, REQUIRE_ENV, Row, render};

pub(crate) use crate::select::Paths;
