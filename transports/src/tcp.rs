//! TCP transport (placeholder: being written).
use crate::*;

/// Configuration of the TCP transport.
#[derive(Debug, Clone, Default)]
pub struct TcpConfig {}

/// TCP transport.
#[derive(Debug)]
pub struct TcpTransport {}
