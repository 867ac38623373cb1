//! Clients for four real servers, written as keepwire codecs: [`postgres`] (the simple query
//! protocol, with startup and authentication in a handshake hook), [`memcached`] (the text
//! protocol) and [`redis`] (RESP2), which are in order, and [`dns`] (DNS over TCP), whose
//! responses carry the query's id and may come in any order. The bytes on the wire are the
//! protocol's own.
//!
//! They depend on nothing but `keepwire-driver` and `bytes`, so the tests, the examples and
//! the fuzz targets share them, and an application can copy one: with a runtime crate as its
//! only keepwire dependency, it imports the same names from that crate
//! (`keepwire_tokio::{Codec, Decoder, ...}` re-exports them all).

pub mod dns;
pub mod memcached;
pub mod postgres;
pub mod redis;

/// Every response `decoder` cuts from `buf`, for the tests of an in-order codec (a tagged
/// response is a bug there); stops at the first that is not complete yet.
#[cfg(test)]
fn decode_in_order(
    decoder: &mut dyn keepwire_driver::Decoder,
    buf: &mut bytes::BytesMut,
) -> Result<Vec<bytes::Bytes>, keepwire_driver::Violation> {
    let mut out = Vec::new();
    while let Some(decoded) = decoder.decode(buf)? {
        match decoded {
            keepwire_driver::Decoded::Next(payload) => out.push(payload),
            other => panic!("in order only: {other:?}"),
        }
    }
    Ok(out)
}

/// Every response a fresh decoder of `codec` cuts from `input` arriving whole
/// ([`decode_in_order`]).
#[cfg(test)]
fn decode_whole(
    codec: &impl keepwire_driver::Codec,
    input: &[u8],
) -> Result<Vec<bytes::Bytes>, keepwire_driver::Violation> {
    decode_in_order(&mut *codec.decoder(), &mut bytes::BytesMut::from(input))
}

#[cfg(test)]
mod tests {
    //! Mutated valid streams, fed in random chunks: the decoders and parsers answer with a
    //! value or a typed error, never a panic, and never hold more than they were given. (A
    //! cheap net under the fuzz targets, which go much further.)

    use bytes::BytesMut;
    use keepwire_driver::{Codec, Decoded};

    use super::{dns, memcached, postgres, redis};

    /// xorshift64*: deterministic, no dependency.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    fn mutate(rng: &mut Rng, valid: &[u8]) -> Vec<u8> {
        let mut bytes = valid.to_vec();
        for _ in 0..rng.below(4) {
            let at = rng.below(bytes.len());
            match rng.below(3) {
                0 => bytes[at] = rng.next() as u8,
                1 => {
                    bytes.remove(at);
                }
                _ => bytes.insert(at, rng.next() as u8),
            }
        }
        bytes
    }

    fn feed(rng: &mut Rng, codec: &dyn Codec, input: &[u8], parse: impl Fn(&bytes::Bytes)) {
        let mut decoder = codec.decoder();
        let mut buf = BytesMut::new();
        let mut fed = 0;
        while fed < input.len() {
            let n = 1 + rng.below(64).min(input.len() - fed - 1);
            buf.extend_from_slice(&input[fed..fed + n]);
            fed += n;
            loop {
                match decoder.decode(&mut buf) {
                    Ok(Some(Decoded::Next(payload) | Decoded::Tagged { payload, .. })) => {
                        parse(&payload)
                    }
                    Ok(Some(other)) => panic!("{other:?}"),
                    Ok(None) => break,
                    Err(_) => return,
                }
            }
            assert!(buf.len() <= fed);
        }
    }

    #[test]
    fn mutated_streams_never_panic() {
        let mut rng = Rng(0x6b65_6570_7769_7265);
        let memcached_stream: &[u8] = b"STORED\r\nVALUE k 5 3 77\r\nabc\r\nVALUE k2 0 0\r\n\r\n\
            END\r\nEND\r\n42\r\nNOT_FOUND\r\nSTAT pid 1\r\nEND\r\nVERSION 1.6.18\r\n";
        let postgres_stream: &[u8] = b"T\0\0\0\x21\0\x01?column?\0\0\0\0\0\0\0\0\0\0\x17\0\x04\
            \xff\xff\xff\xff\0\0D\0\0\0\x0b\0\x01\0\0\0\x011C\0\0\0\x0dSELECT 1\0Z\0\0\0\x05I\
            E\0\0\0\x11SERROR\0C42601\0\0Z\0\0\0\x05I";
        let redis_stream: &[u8] = b"+OK\r\n-ERR no\r\n:7\r\n$3\r\nabc\r\n$-1\r\n*2\r\n*1\r\n\
            :1\r\n$0\r\n\r\n*0\r\n";
        let dns_stream: &[u8] = b"\0\x2b\0\x07\x81\x80\0\x01\0\x01\0\0\0\0\x02db\x07example\0\
            \0\x10\0\x01\xc0\x0c\0\x10\0\x01\0\0\0\x3c\0\x03\x02ok\0\x1e\0\x08\x81\x83\0\
            \x01\0\0\0\x01\0\0\x01x\0\0\x01\0\x01\0\0\x06\0\x01\0\0\0\0\0\0";
        let startup = postgres::Startup::new("u", "d").password("p");
        for _ in 0..20_000 {
            let input = mutate(&mut rng, memcached_stream);
            feed(&mut rng, &memcached::Memcached::new(), &input, |p| {
                let _ = memcached::Reply::parse(p);
            });
            let _ = memcached::check_request(&input, 100);
            let input = mutate(&mut rng, postgres_stream);
            feed(&mut rng, &postgres::Postgres::new(), &input, |p| {
                let _ = postgres::Response::parse(p);
            });
            let mut received = BytesMut::from(&input[..]);
            for _ in 0..8 {
                if !matches!(startup.step(&mut received), Ok(postgres::Step::Send(_))) {
                    break;
                }
            }
            let input = mutate(&mut rng, redis_stream);
            feed(&mut rng, &redis::Redis::new(), &input, |p| {
                let _ = redis::Reply::parse(p);
            });
            let _ = redis::check_command(&input);
            let input = mutate(&mut rng, dns_stream);
            feed(&mut rng, &dns::Dns::new(), &input, |p| {
                let _ = dns::Message::parse(p);
            });
            let _ = dns::check_query(&input);
        }
    }
}
