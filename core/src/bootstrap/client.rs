//! Rank-side bootstrap client (placeholder: being written).
