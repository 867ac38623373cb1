//! Where a node is: an [`Endpoint`], an address or a name that the adapter resolves on every
//! connect attempt (so a server whose address changes is found at its new address).
//!
//! ```
//! use keepwire_proto::Endpoint;
//!
//! let by_name: Endpoint = "db.example:5432".parse().unwrap();
//! assert!(matches!(by_name, Endpoint::Name { port: 5432, .. }));
//! assert_eq!(by_name.to_string(), "db.example:5432");
//!
//! let by_addr: Endpoint = "[::1]:5432".parse().unwrap();
//! assert!(matches!(by_addr, Endpoint::Addr(_)));
//!
//! assert!("db.example".parse::<Endpoint>().is_err()); // no port
//! ```

use alloc::sync::Arc;
use core::fmt;
use core::net::{IpAddr, SocketAddr};
use core::str::FromStr;

/// Where a node is: an address, or a name the adapter resolves on every connect attempt.
///
/// proto never resolves a name: [`Action::Open`](crate::Action::Open) carries the endpoint,
/// and the adapter reports which address it reached with
/// [`Pool::handle_connected_to`](crate::Pool::handle_connected_to).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Endpoint {
    /// A socket address, connected to as it is.
    Addr(SocketAddr),
    /// A host name and a port. Build it with [`Endpoint::name`] or by parsing `host:port`,
    /// which check the name.
    Name {
        /// The host name (a DNS name, never an IP literal when built by [`Endpoint::name`]).
        host: Arc<str>,
        /// The port.
        port: u16,
    },
}

/// The longest host name DNS allows in text form (without a trailing dot).
const MAX_HOST: usize = 253;
/// The longest label of a DNS name.
const MAX_LABEL: usize = 63;

impl Endpoint {
    /// A node by name, resolved by the adapter on every connect attempt. An IP literal
    /// (`"10.0.0.1"`, `"::1"`) gives [`Endpoint::Addr`], so every endpoint prints as it parses.
    ///
    /// Refused: an empty name, one longer than 253 characters, and one that is not a DNS name
    /// (labels of 1 to 63 letters, digits, `-` or `_`, separated by dots; one trailing dot
    /// allowed).
    pub fn name(host: impl Into<Arc<str>>, port: u16) -> Result<Endpoint, EndpointError> {
        let host = host.into();
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(Endpoint::Addr(SocketAddr::new(ip, port)));
        }
        check_host(&host)?;
        Ok(Endpoint::Name { host, port })
    }

    /// The port to connect to.
    pub fn port(&self) -> u16 {
        match self {
            Self::Addr(addr) => addr.port(),
            Self::Name { port, .. } => *port,
        }
    }
}

impl From<SocketAddr> for Endpoint {
    fn from(addr: SocketAddr) -> Self {
        Self::Addr(addr)
    }
}

/// `"10.0.0.1:5432"` and `"[::1]:5432"` give [`Endpoint::Addr`]; `"db.example:5432"` gives
/// [`Endpoint::Name`] (checked as [`Endpoint::name`] checks it). The port is decimal digits
/// only, as in an address (`"db.example:+80"` is refused, as `"10.0.0.1:+80"` is).
impl FromStr for Endpoint {
    type Err = EndpointError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Ok(addr) = s.parse::<SocketAddr>() {
            return Ok(Self::Addr(addr));
        }
        let (host, port) = s.rsplit_once(':').ok_or(EndpointError::NoPort)?;
        if !port.bytes().all(|b| b.is_ascii_digit()) {
            return Err(EndpointError::BadPort); // `u16`'s parse takes a leading `+`
        }
        let port = port.parse::<u16>().map_err(|_| EndpointError::BadPort)?;
        // An IP host with a good port parsed as an address above; what is left of IP hosts,
        // an IPv6 address without brackets, or brackets around anything, fails as a name (no
        // `:` or `[` in a label).
        check_host(host)?;
        Ok(Self::Name {
            host: Arc::from(host),
            port,
        })
    }
}

/// `10.0.0.1:5432`, `[::1]:5432`, `db.example:5432`: what [`FromStr`] parses back.
impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Addr(addr) => fmt::Display::fmt(addr, f),
            Self::Name { host, port } => write!(f, "{host}:{port}"),
        }
    }
}

fn check_host(host: &str) -> Result<(), EndpointError> {
    if host.is_empty() {
        return Err(EndpointError::EmptyHost);
    }
    let name = host.strip_suffix('.').unwrap_or(host);
    if name.len() > MAX_HOST {
        return Err(EndpointError::HostTooLong { len: host.len() });
    }
    let label_ok = |label: &str| {
        (1..=MAX_LABEL).contains(&label.len())
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    if !name.split('.').all(label_ok) {
        return Err(EndpointError::BadHost);
    }
    Ok(())
}

/// Why a string or a name is not an [`Endpoint`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EndpointError {
    /// No `:port` after the host.
    #[error("no port: expected host:port")]
    NoPort,
    /// The port is not a number from 0 to 65535.
    #[error("the port is not a number from 0 to 65535")]
    BadPort,
    /// The host name is empty.
    #[error("the host name is empty")]
    EmptyHost,
    /// The host name is longer than DNS allows (253 characters).
    #[error("the host name is {len} characters long; DNS allows 253")]
    HostTooLong {
        /// Its length.
        len: usize,
    },
    /// The host is neither an IP address nor a DNS name (labels of 1 to 63 letters, digits,
    /// `-` or `_`, separated by dots).
    #[error("the host is neither an IP address nor a DNS name")]
    BadHost,
}

#[cfg(test)]
mod tests {
    use alloc::string::{String, ToString};

    use super::*;

    #[test]
    fn addresses_parse_as_addresses() {
        let v4: Endpoint = "10.0.0.1:5432".parse().unwrap();
        assert_eq!(v4, Endpoint::Addr(SocketAddr::from(([10, 0, 0, 1], 5432))));
        let v6: Endpoint = "[::1]:5432".parse().unwrap();
        assert_eq!(v6, Endpoint::Addr("[::1]:5432".parse().unwrap()));
        let from: Endpoint = SocketAddr::from(([127, 0, 0, 1], 1)).into();
        assert_eq!(from.port(), 1);
    }

    #[test]
    fn names_parse_as_names_and_round_trip() {
        for text in ["db.example:5432", "localhost:11211", "a-b_c.d.:1", "x:0"] {
            let e: Endpoint = text.parse().unwrap();
            assert!(matches!(e, Endpoint::Name { .. }), "{text}");
            assert_eq!(e.to_string(), text);
            assert_eq!(e.to_string().parse::<Endpoint>().unwrap(), e);
        }
        let e = Endpoint::name("db.example", 5432).unwrap();
        assert_eq!(e, "db.example:5432".parse().unwrap());
        assert_eq!(e.port(), 5432);
    }

    #[test]
    fn an_ip_literal_given_as_a_name_is_an_address() {
        assert_eq!(
            Endpoint::name("::1", 7).unwrap(),
            Endpoint::Addr("[::1]:7".parse().unwrap())
        );
        let e = Endpoint::name("10.0.0.1", 7).unwrap();
        assert_eq!(e.to_string().parse::<Endpoint>().unwrap(), e);
    }

    #[test]
    fn bad_strings_and_names_are_refused_with_a_typed_error() {
        let long = "a.".repeat(127) + "ab"; // 256 characters
        let cases: [(String, EndpointError); 13] = [
            ("db.example".into(), EndpointError::NoPort),
            ("db.example:".into(), EndpointError::BadPort),
            ("db.example:65536".into(), EndpointError::BadPort),
            ("db.example:http".into(), EndpointError::BadPort),
            ("db.example:+80".into(), EndpointError::BadPort),
            (":5432".into(), EndpointError::EmptyHost),
            (format_port(&long), EndpointError::HostTooLong { len: 256 }),
            ("::1:5432".into(), EndpointError::BadHost),
            ("10.0.0.1:+80".into(), EndpointError::BadPort),
            ("[::1]:+80".into(), EndpointError::BadPort),
            ("[db.example]:5432".into(), EndpointError::BadHost),
            ("db..example:5432".into(), EndpointError::BadHost),
            ("db example:5432".into(), EndpointError::BadHost),
        ];
        for (text, error) in cases {
            assert_eq!(text.parse::<Endpoint>(), Err(error), "{text}");
        }
        assert_eq!(Endpoint::name("", 1), Err(EndpointError::EmptyHost));
        assert_eq!(
            Endpoint::name(long.as_str(), 1),
            Err(EndpointError::HostTooLong { len: 256 })
        );
        let label = "a".repeat(64);
        assert_eq!(
            Endpoint::name(label.as_str(), 1),
            Err(EndpointError::BadHost)
        );
        assert_eq!(Endpoint::name("db:1", 1), Err(EndpointError::BadHost));
        assert_eq!(
            EndpointError::NoPort.to_string(),
            "no port: expected host:port"
        );
    }

    #[test]
    fn the_longest_names_dns_allows_are_accepted() {
        // 253 characters, labels of 63 at most.
        let longest =
            "a".repeat(63) + "." + &"b".repeat(63) + "." + &"c".repeat(63) + "." + &"d".repeat(61);
        assert_eq!(longest.len(), 253);
        for host in [longest.clone(), longest + "."] {
            let e = Endpoint::name(host.as_str(), 1).unwrap();
            assert_eq!(format_port(&host).parse::<Endpoint>().unwrap(), e);
        }
    }

    fn format_port(host: &str) -> String {
        alloc::format!("{host}:1")
    }
}
