//! The client-facing HTTP surface: route table, body reading, request parsing, response relay.

pub mod admin;
pub mod metering;
pub mod parse;
pub mod relay;
pub mod request_id;
pub mod routes;

use bytes::Bytes;
use http_body_util::{Either, Full};

pub use relay::RelayBody;

/// Every response body the gateway sends: a small buffered one, or a relayed upstream stream.
pub type GatewayBody = Either<Full<Bytes>, RelayBody>;

pub fn full(bytes: impl Into<Bytes>) -> GatewayBody {
    Either::Left(Full::new(bytes.into()))
}
