//! Constants of the standard ABI (generated).
