//! Datatypes.
