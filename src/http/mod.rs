//! HTTP/1.1 client-side wire handling: endpoint URLs, response heads (httparse), chunked
//! transfer decoding and SSE line scanning. Every decoder is a state machine over `&[u8]`
//! that accepts its input split at any byte, and none allocates per event.

pub mod blocking;
pub mod chunked;
pub mod date;
pub mod date_check;
pub mod endpoint;
pub mod probe;
pub mod response;
pub mod sse;

/// A malformed or unacceptable response: recorded with error kind `protocol`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ProtocolError(pub String);

impl ProtocolError {
    pub fn new(message: impl Into<String>) -> Self {
        ProtocolError(message.into())
    }
}
