//! What a protocol with ids costs on keepwire, against a real server: the keepwire DNS client
//! against a hand-written tokio DNS-over-TCP client, TXT queries of Unbound's local zone
//! pipelined on one connection (`support/pipelined_bench.rs` says how it runs and what the
//! baseline is).
//!
//! ```text
//! cargo run --release -p keepwire-tests --example dns_bench [-- REQUESTS [IN_FLIGHT [ROUNDS [quickack]]]]
//! ```
//!
//! Defaults: 200,000 queries per client per round, 64 in flight, 7 rounds; it starts its own
//! Unbound on a free loopback port (one thread; it answers the local zone itself). With
//! `quickack`, keepwire's client has `TCP_QUICKACK` on (`SocketOptions::quickack`; Unbound
//! leaves Nagle's algorithm on); the hand-written one is as before.

use std::error::Error;

use bytes::Bytes;
use keepwire_tests::protocols::dns::{self, CH, Data, Dns, Message, TXT};
use keepwire_tests::servers::{LOCAL_TEXT, LOCAL_ZONE, UnboundServer};
use keepwire_tokio::{Codec, Config};

#[path = "support/pipelined_bench.rs"]
mod pipelined_bench;

use pipelined_bench::{Workload, key, run_bench};

struct Queries {
    quickack: bool,
}

impl Queries {
    fn name(i: usize) -> String {
        format!("{}.{LOCAL_ZONE}", key(i))
    }
}

impl Workload for Queries {
    fn codec(&self) -> impl Codec {
        Dns::new()
    }

    fn ping(&self) -> Bytes {
        dns::query_in("id.server", TXT, CH).expect("a valid name")
    }

    fn read(&self, i: usize) -> Bytes {
        dns::query(&Self::name(i), TXT).expect("a valid name")
    }

    fn is_value(&self, answer: &Bytes, i: usize) -> bool {
        let Ok(message) = Message::parse(answer) else {
            return false;
        };
        let asked = message.questions.first().map(|q| &q.name[..]);
        let text = match message.answers.first().map(|r| &r.data) {
            Some(Data::Txt(text)) => text.first().map(|t| &t[..]),
            _ => None,
        };
        asked == Some(&Self::name(i)[..]) && text == Some(LOCAL_TEXT.as_bytes())
    }

    fn configure(&self, config: &mut Config) {
        config.socket.quickack = self.quickack;
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let server = UnboundServer::start()?;
    let quickack = std::env::args().nth(4).is_some_and(|a| a == "quickack");
    let what = if quickack {
        "Unbound (DNS over TCP), keepwire with TCP_QUICKACK"
    } else {
        "Unbound (DNS over TCP)"
    };
    run_bench(Queries { quickack }, what, server.addr()).await
}
