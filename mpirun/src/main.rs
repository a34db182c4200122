//! rwrun (placeholder: being written).
fn main() {}
