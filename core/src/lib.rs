//! rankwire (being written).
pub mod bootstrap;
