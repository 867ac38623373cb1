//! TLS on smol (feature `tls`): rustls through futures-rustls, ring as the crypto provider
//! (the code is keepwire-driver's `async_io_tls`, shared with keepwire-async-std).
//!
//! [`handshake`] is a [`HandshakeHook`](crate::HandshakeHook) that runs TLS on every new connection, under its setup
//! deadline; [`connect`] does the same inside a hook of your own, after a plaintext exchange
//! (PostgreSQL's SSLRequest, STARTTLS). Either way the session becomes the connection's
//! stream, and a frame counts as written only when its ciphertext has reached the kernel: see
//! [`keepwire_driver::tls`] for the accounting and the bound on what the TLS layer holds
//! ([`MAX_BUFFERED`]).
//!
//! ```no_run
//! # fn run(ca_pem: &[u8]) -> Result<(), Box<dyn std::error::Error>> {
//! use keepwire_smol::{Config, tls};
//!
//! let tls = tls::TlsConfig::builder().roots_pem(ca_pem).server_name("db.example").build()?;
//! let client = keepwire_smol::client(Config::default())
//!     .node("127.0.0.1:7000".parse::<std::net::SocketAddr>()?)
//!     .handshake(tls::handshake(tls))
//!     .build()?;
//! # let _ = client;
//! # Ok(())
//! # }
//! ```

pub use keepwire_driver::async_io_tls::{connect, handshake};
pub use keepwire_driver::tls::*;
