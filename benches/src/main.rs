//! rankwire-bench (placeholder)
fn main() {}
