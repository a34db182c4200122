//! ring (placeholder)
fn main() {}
