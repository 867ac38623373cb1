//! Test doubles for the telemetry facades: a `tracing` subscriber and a `metrics` recorder
//! that keep everything they are given, for assertions.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, Key, KeyName, Metadata as MetricsMetadata,
    Recorder, SharedString, Unit,
};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One recorded span: its name, fields and parent.
#[derive(Clone, Debug)]
pub struct SeenSpan {
    /// The span's name.
    pub name: &'static str,
    /// Its fields, printed with `Debug` (strings without quotes).
    pub fields: HashMap<String, String>,
    parent: Option<u64>,
}

/// One recorded event: level, target, message, fields, and the chain of spans it was in
/// (innermost first).
#[derive(Clone, Debug)]
pub struct SeenEvent {
    /// Its level.
    pub level: Level,
    /// Its target.
    pub target: String,
    /// Its message.
    pub message: String,
    /// Its other fields.
    pub fields: HashMap<String, String>,
    /// The spans it was in, innermost first.
    pub spans: Vec<SeenSpan>,
}

impl SeenEvent {
    /// The field `name` of the innermost span called `span` this event was in.
    pub fn span_field(&self, span: &str, name: &str) -> Option<&str> {
        self.spans
            .iter()
            .find(|s| s.name == span)
            .and_then(|s| s.fields.get(name))
            .map(String::as_str)
    }
}

#[derive(Default)]
struct Fields(HashMap<String, String>);

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

#[derive(Debug, Default)]
struct Collected {
    spans: HashMap<u64, SeenSpan>,
    events: Vec<SeenEvent>,
}

/// A subscriber that records every span and event (install it with
/// `tracing::subscriber::with_default`), and hands out what it saw.
#[derive(Clone, Debug, Default)]
pub struct CollectingSubscriber {
    collected: Arc<Mutex<Collected>>,
    next: Arc<AtomicU64>,
}

impl CollectingSubscriber {
    /// Every event so far.
    pub fn events(&self) -> Vec<SeenEvent> {
        lock(&self.collected).events.clone()
    }
}

impl Subscriber for CollectingSubscriber {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let mut fields = Fields::default();
        span.record(&mut fields);
        let parent = span.parent().map(Id::into_u64);
        lock(&self.collected).spans.insert(
            id,
            SeenSpan {
                name: span.metadata().name(),
                fields: fields.0,
                parent,
            },
        );
        Id::from_u64(id)
    }

    fn record(&self, span: &Id, values: &Record<'_>) {
        let mut fields = Fields::default();
        values.record(&mut fields);
        if let Some(seen) = lock(&self.collected).spans.get_mut(&span.into_u64()) {
            seen.fields.extend(fields.0);
        }
    }

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let message = fields.0.remove("message").unwrap_or_default();
        let mut collected = lock(&self.collected);
        let mut spans = Vec::new();
        let mut next = event.parent().map(Id::into_u64);
        while let Some(id) = next {
            let Some(span) = collected.spans.get(&id) else {
                break;
            };
            spans.push(span.clone());
            next = span.parent;
        }
        collected.events.push(SeenEvent {
            level: *event.metadata().level(),
            target: event.metadata().target().to_owned(),
            message,
            fields: fields.0,
            spans,
        });
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

/// A metric as a [`CollectingRecorder`] holds it: its name and labels, sorted.
pub type MetricKey = (String, Vec<(String, String)>);

#[derive(Debug, Default)]
struct Value(AtomicU64);

impl CounterFn for Value {
    fn increment(&self, value: u64) {
        self.0.fetch_add(value, Ordering::Relaxed);
    }

    fn absolute(&self, value: u64) {
        self.0.fetch_max(value, Ordering::Relaxed);
    }
}

/// A gauge's value, as `f64` bits.
#[derive(Debug, Default)]
struct GaugeValue(Mutex<f64>);

impl GaugeFn for GaugeValue {
    fn increment(&self, value: f64) {
        *lock(&self.0) += value;
    }

    fn decrement(&self, value: f64) {
        *lock(&self.0) -= value;
    }

    fn set(&self, value: f64) {
        *lock(&self.0) = value;
    }
}

/// A recorder that keeps every counter and gauge (install it with
/// `metrics::with_local_recorder` around building and running the client, or globally), and
/// reads them back.
#[derive(Clone, Debug, Default)]
pub struct CollectingRecorder {
    counters: Arc<Mutex<HashMap<MetricKey, Arc<Value>>>>,
    gauges: Arc<Mutex<HashMap<MetricKey, Arc<GaugeValue>>>>,
    descriptions: Arc<Mutex<HashMap<String, String>>>,
}

fn key_of(key: &Key) -> MetricKey {
    let mut labels: Vec<(String, String)> = key
        .labels()
        .map(|l| (l.key().to_owned(), l.value().to_owned()))
        .collect();
    labels.sort();
    (key.name().to_owned(), labels)
}

fn wanted(name: &str, labels: &[(&str, &str)]) -> MetricKey {
    let mut labels: Vec<(String, String)> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    labels.sort();
    (name.to_owned(), labels)
}

impl CollectingRecorder {
    /// The counter `name` with exactly `labels`, if it was registered.
    pub fn counter(&self, name: &str, labels: &[(&str, &str)]) -> Option<u64> {
        lock(&self.counters)
            .get(&wanted(name, labels))
            .map(|v| v.0.load(Ordering::Relaxed))
    }

    /// The gauge `name` with exactly `labels`, if it was registered.
    pub fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        lock(&self.gauges)
            .get(&wanted(name, labels))
            .map(|v| *lock(&v.0))
    }

    /// The description given for the counter or gauge `name`, if one was.
    pub fn description(&self, name: &str) -> Option<String> {
        lock(&self.descriptions).get(name).cloned()
    }

    /// The names of every gauge registered.
    pub fn gauge_names(&self) -> Vec<String> {
        let mut names: Vec<_> = lock(&self.gauges).keys().map(|(n, _)| n.clone()).collect();
        names.sort();
        names.dedup();
        names
    }

    /// Every counter registered, with its value.
    pub fn counters(&self) -> Vec<(MetricKey, u64)> {
        let mut all: Vec<_> = lock(&self.counters)
            .iter()
            .map(|(k, v)| (k.clone(), v.0.load(Ordering::Relaxed)))
            .collect();
        all.sort();
        all
    }
}

impl Recorder for CollectingRecorder {
    fn describe_counter(&self, name: KeyName, _: Option<Unit>, description: SharedString) {
        lock(&self.descriptions).insert(name.as_str().to_owned(), description.into_owned());
    }

    fn describe_gauge(&self, name: KeyName, _: Option<Unit>, description: SharedString) {
        lock(&self.descriptions).insert(name.as_str().to_owned(), description.into_owned());
    }

    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &MetricsMetadata<'_>) -> Counter {
        let value = Arc::clone(lock(&self.counters).entry(key_of(key)).or_default());
        Counter::from_arc(value)
    }

    fn register_gauge(&self, key: &Key, _: &MetricsMetadata<'_>) -> Gauge {
        let value = Arc::clone(lock(&self.gauges).entry(key_of(key)).or_default());
        Gauge::from_arc(value)
    }

    fn register_histogram(&self, _: &Key, _: &MetricsMetadata<'_>) -> Histogram {
        Histogram::noop()
    }
}
