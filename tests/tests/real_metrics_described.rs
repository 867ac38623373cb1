//! Every counter and gauge keepwire records comes with a description (the text an exporter
//! shows as Prometheus' `HELP`). keepwire gives the descriptions once per process, to the
//! recorder in place when its first client starts, so this binary holds this one test.

use std::sync::Arc;
use std::time::Duration;

use keepwire_driver::{ClientBuilder, Runtime, Target};
use keepwire_tests::collect::CollectingRecorder;
use keepwire_tests::peers::{Behaviour, Peer};
use keepwire_tests::{TestRuntime, Tokio, test_config};

async fn every_metric_is_described(runtime: Arc<dyn Runtime>) {
    let recorder = CollectingRecorder::default();
    let _local = metrics::set_default_local_recorder(&recorder);
    let peer = Peer::start(Behaviour::Echo);
    let client = ClientBuilder::new(test_config())
        .node(peer.addr())
        .build(runtime)
        .unwrap();
    let node = client.initial_nodes()[0];
    let answer = client
        .send(Target::Node(node), &b"ping"[..], Duration::from_secs(5))
        .await;
    assert!(answer.is_ok(), "{answer:?}");
    client.counters().await.unwrap(); // one more driver poll: the metrics are flushed
    let counters: Vec<String> = recorder
        .counters()
        .into_iter()
        .map(|((name, _), _)| name)
        .collect();
    let gauges = recorder.gauge_names();
    assert!(
        counters.iter().any(|n| n == "keepwire_submitted_total")
            && gauges.iter().any(|n| n == "keepwire_node_in_flight"),
        "{counters:?} {gauges:?}"
    );
    for name in counters.iter().chain(&gauges) {
        let described = recorder.description(name);
        assert!(
            described.as_deref().is_some_and(|d| !d.is_empty()),
            "{name} has no description"
        );
    }
    client.shutdown().await;
}

#[test]
fn every_metric_is_described_on_tokio() {
    <Tokio as TestRuntime>::run_on_this_thread(every_metric_is_described);
}
