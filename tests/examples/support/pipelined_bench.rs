//! The side-by-side benchmark of a real server's protocol, shared by `memcached_bench`,
//! `redis_bench`, `dns_bench` and `postgres_bench`: the keepwire client against a
//! hand-written tokio client, both pipelining reads on one connection with the same number of
//! requests in flight, against the same server, alternating in the same run.
//!
//! Each round builds a fresh client of each kind (its connection opened by one request before
//! the clock starts); `IN_FLIGHT` tasks then claim requests from a shared counter and send them
//! back to back, and every answer is checked against its key's value. The clients take turns
//! going first. The table shows each round, the medians, and the median of the rounds' ratios
//! (robust to a drift in the machine's load).
//!
//! The baseline is the usual hand-written pipelined client: callers hand (request, reply
//! slot) to a writer task that batches whatever is queued into one write and passes the reply
//! slots to a reader task that cuts answers and fills the slots; each call is wrapped in
//! `tokio::time::timeout`. For an in-order protocol the writer sends the requests' bytes as
//! they are (PostgreSQL's framed as Query messages) and passes the slots in order; for one
//! with ids it frames each request with the codec and the next id of a wrapping counter, and
//! passes (id, slot), which the reader keeps in a map until the answer with that id comes.
//! Both clients cut answers with the same codec and put the same bytes on the wire (keepwire's
//! codec also checks each request, which the baseline's writer does only where it frames with
//! it), so what differs is keepwire: its deadlines, watermarks, write timeout, failure
//! detection and the outcome of every request.

use std::collections::HashMap;
use std::error::Error;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use keepwire_tokio::{Codec, Config, Correlation, Decoded, Target, TokioClientBuilder};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

/// Distinct keys the server holds; request `i` reads key `i % KEYS`.
pub(crate) const KEYS: usize = 1024;
const TIMEOUT: Duration = Duration::from_secs(10);

/// What one protocol's benchmark sends and checks.
pub(crate) trait Workload: Send + Sync + 'static {
    /// The protocol's codec (the same for both clients).
    fn codec(&self) -> impl Codec;
    /// A request answered at once, sent to open the connection before the clock starts.
    fn ping(&self) -> Bytes;
    /// The request that stores key `i`'s value, if the server is to be loaded through the
    /// protocol first (none unless given: the server answers every key already).
    fn store(&self, i: usize) -> Option<Bytes> {
        let _ = i;
        None
    }
    /// Whether `answer` says a value was stored. Asked only of a workload that stores; one
    /// that stores without saying how a stored answer reads fails its first store.
    fn is_stored(&self, answer: &Bytes) -> bool {
        let _ = answer;
        false
    }
    /// The request that reads key `i`.
    fn read(&self, i: usize) -> Bytes;
    /// Whether `answer` is key `i`'s value.
    fn is_value(&self, answer: &Bytes, i: usize) -> bool;
    /// Changes to keepwire's default configuration, if any.
    fn configure(&self, config: &mut Config) {
        let _ = config;
    }
    /// keepwire's client for this protocol, from its builder: the handshake hook, if the
    /// protocol sets a connection up before its first request.
    fn keepwire(&self, builder: TokioClientBuilder) -> TokioClientBuilder {
        builder
    }
    /// The hand-written client's set-up of a fresh connection, before its first request: what
    /// [`Workload::keepwire`]'s hook does (PostgreSQL's startup).
    async fn set_up(&self, stream: &mut TcpStream) -> std::io::Result<()> {
        let _ = stream;
        Ok(())
    }
    /// How the hand-written client's writer puts an in-order request on the wire: as it is,
    /// unless the protocol frames its requests (PostgreSQL's Query message), as keepwire's
    /// codec does.
    fn write_in_order(&self, request: &[u8], out: &mut BytesMut) {
        out.extend_from_slice(request);
    }
}

/// Key `i`'s name.
pub(crate) fn key(i: usize) -> String {
    format!("bench-{:04}", i % KEYS)
}

/// Key `i`'s value.
#[allow(
    dead_code,
    reason = "a workload without values to store (DNS) does not use it"
)]
pub(crate) fn value(i: usize) -> String {
    format!("value-{:04}-{}", i % KEYS, "x".repeat(16))
}

/// Runs the benchmark against the server at `addr` with the arguments `[REQUESTS [IN_FLIGHT
/// [ROUNDS]]]` (defaults 200,000, 64 and 7) and prints its table.
pub(crate) async fn run_bench<W: Workload>(
    workload: W,
    server: &str,
    addr: SocketAddr,
) -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let requests: usize = args.next().map_or(Ok(200_000), |a| a.parse())?;
    let in_flight: usize = args.next().map_or(Ok(64), |a| a.parse())?;
    let rounds: usize = args.next().map_or(Ok(7), |a| a.parse())?;
    let workload = Arc::new(workload);

    let loader = Handwritten::connect(addr, Arc::clone(&workload)).await?;
    for (i, store) in (0..KEYS).filter_map(|i| Some((i, workload.store(i)?))) {
        let answer = loader.send(store).await?;
        assert!(workload.is_stored(&answer), "storing key {i}: {answer:?}");
    }

    println!("{server}: {requests} reads per client per round, {in_flight} in flight");
    println!("round  keepwire (req/s)  hand-written tokio (req/s)  keepwire / hand-written");
    let (mut ours, mut theirs, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 1..=rounds {
        // Each goes first every other round, so a drift in the machine's load (it is shared)
        // favours neither.
        let run = |kind| run(kind, Arc::clone(&workload), addr, requests, in_flight);
        let (keepwire, baseline) = if round % 2 == 1 {
            let keepwire = run(Kind::Keepwire).await?;
            (keepwire, run(Kind::Handwritten).await?)
        } else {
            let baseline = run(Kind::Handwritten).await?;
            (run(Kind::Keepwire).await?, baseline)
        };
        println!(
            "{round:>5}  {keepwire:>16.0}  {baseline:>26.0}  {:>23.2}",
            keepwire / baseline
        );
        ours.push(keepwire);
        theirs.push(baseline);
        ratios.push(keepwire / baseline);
    }
    println!(
        "median {:>15.0}  {:>26.0}  {:>23.2}",
        median(&mut ours),
        median(&mut theirs),
        median(&mut ratios)
    );
    println!("(the last column's median is the median of the rounds' ratios)");
    Ok(())
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Keepwire,
    Handwritten,
}

/// Either client, behind one `send`.
#[derive(Clone)]
enum AnyClient {
    Keepwire(keepwire_tokio::Client, keepwire_tokio::NodeId),
    Handwritten(Arc<Handwritten>),
}

impl AnyClient {
    async fn send(&self, request: Bytes) -> Result<Bytes, String> {
        match self {
            Self::Keepwire(client, node) => client
                .send(Target::Node(*node), request, TIMEOUT)
                .await
                .map_err(|e| e.to_string()),
            Self::Handwritten(client) => client.send(request).await.map_err(|e| e.to_string()),
        }
    }
}

/// One round of one client: requests per second.
async fn run<W: Workload>(
    kind: Kind,
    workload: Arc<W>,
    addr: SocketAddr,
    requests: usize,
    in_flight: usize,
) -> Result<f64, Box<dyn Error>> {
    let client = match kind {
        Kind::Keepwire => {
            let mut config = Config::default();
            workload.configure(&mut config);
            let builder = keepwire_tokio::client(config)
                .node(addr)
                .codec(workload.codec());
            let client = workload.keepwire(builder).build()?;
            let node = client.initial_nodes()[0];
            AnyClient::Keepwire(client, node)
        }
        Kind::Handwritten => AnyClient::Handwritten(Arc::new(
            Handwritten::connect(addr, Arc::clone(&workload)).await?,
        )),
    };
    client.send(workload.ping()).await?; // connected before the clock starts
    let claimed = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..in_flight {
        let (client, claimed, workload) =
            (client.clone(), Arc::clone(&claimed), Arc::clone(&workload));
        tasks.spawn(async move {
            let mut wrong = 0usize;
            loop {
                let i = claimed.fetch_add(1, Ordering::Relaxed);
                if i >= requests {
                    return wrong;
                }
                let answer = client.send(workload.read(i)).await;
                let right = answer.is_ok_and(|a| workload.is_value(&a, i));
                wrong += usize::from(!right);
            }
        });
    }
    let mut wrong = 0;
    while let Some(task) = tasks.join_next().await {
        wrong += task?;
    }
    let elapsed = started.elapsed();
    if wrong > 0 {
        return Err(format!("{kind:?}: {wrong} wrong or failed answers").into());
    }
    if let AnyClient::Keepwire(client, _) = &client {
        client.shutdown().await;
    }
    Ok(requests as f64 / elapsed.as_secs_f64())
}

/// The hand-written baseline: a writer task that batches, a reader task that answers in
/// order, or by id.
struct Handwritten {
    requests: mpsc::UnboundedSender<(Bytes, oneshot::Sender<Bytes>)>,
}

/// A request's reply slot on its way from the writer to the reader: in order, or with the id
/// its frame carries.
type Waiting = (Option<u64>, oneshot::Sender<Bytes>);

impl Handwritten {
    async fn connect<W: Workload>(addr: SocketAddr, workload: Arc<W>) -> std::io::Result<Self> {
        let mut stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        workload.set_up(&mut stream).await?;
        let codec = workload.codec();
        let (mut reader, mut writer) = stream.into_split();
        let (requests, mut queued) = mpsc::unbounded_channel::<(Bytes, oneshot::Sender<Bytes>)>();
        let (waiting, mut answered) = mpsc::unbounded_channel::<Waiting>();
        // With ids: the largest, after which they wrap. (A hand-written client counts and
        // trusts the id space to be larger than what is in flight; keepwire also never reuses
        // the id of a request that may still be answered.)
        let ids = match codec.correlation() {
            Correlation::ById { bits } => Some(u64::MAX >> (64 - bits)),
            _ => None,
        };
        let mut decoder = codec.decoder();
        tokio::spawn(async move {
            let mut out = BytesMut::with_capacity(64 * 1024);
            let mut next = 0u64;
            while let Some(first) = queued.recv().await {
                let mut item = Some(first);
                while let Some((request, reply)) = item.take().or_else(|| queued.try_recv().ok()) {
                    let id = match ids {
                        None => {
                            workload.write_in_order(&request, &mut out);
                            None
                        }
                        Some(max) => {
                            let id = next;
                            next = if next == max { 0 } else { next + 1 };
                            if codec.encode(&request, Some(id), &mut out).is_err() {
                                continue; // the caller's slot drops: "connection lost"
                            }
                            Some(id)
                        }
                    };
                    let _ = waiting.send((id, reply));
                }
                if writer.write_all(&out).await.is_err() {
                    return;
                }
                out.clear();
            }
        });
        tokio::spawn(async move {
            let mut buf = BytesMut::with_capacity(64 * 1024);
            let mut by_id: HashMap<u64, oneshot::Sender<Bytes>> = HashMap::new();
            loop {
                match reader.read_buf(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                while let Ok(Some(decoded)) = decoder.decode(&mut buf) {
                    let (reply, answer) = match decoded {
                        Decoded::Next(answer) => match answered.recv().await {
                            Some((_, reply)) => (reply, answer),
                            None => return,
                        },
                        Decoded::Tagged { id, payload } => {
                            while let Ok((Some(id), reply)) = answered.try_recv() {
                                by_id.insert(id, reply);
                            }
                            let Some(reply) = by_id.remove(&id) else {
                                return; // an id that names no request: the stream is lost
                            };
                            (reply, payload)
                        }
                        _ => return,
                    };
                    let _ = reply.send(answer);
                }
            }
        });
        Ok(Self { requests })
    }

    async fn send(&self, request: Bytes) -> Result<Bytes, &'static str> {
        let (reply, answer) = oneshot::channel();
        self.requests
            .send((request, reply))
            .map_err(|_| "connection closed")?;
        match tokio::time::timeout(TIMEOUT, answer).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(_)) => Err("connection lost"),
            Err(_) => Err("deadline exceeded"),
        }
    }
}
