//! Clients for two real servers, written as keepwire codecs: [`postgres`] (the simple query
//! protocol, with startup and authentication in a handshake hook) and [`memcached`] (the text
//! protocol). Both are in order: the bytes on the wire are the protocol's own.
//!
//! They depend on nothing but `keepwire-driver` and `bytes`, so the tests, the examples and
//! the fuzz targets share them, and an application can copy one: with a runtime crate as its
//! only keepwire dependency, it imports the same names from that crate
//! (`keepwire_tokio::{Codec, Decoder, ...}` re-exports them all).

pub mod memcached;
pub mod postgres;
