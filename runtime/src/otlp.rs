//! `--otlp URL`: every call `--perfetto` would record, as an OpenTelemetry
//! span, sent to an OTLP/HTTP endpoint (`POST URL/v1/traces`, protobuf,
//! gzip) while the session runs. A [`TraceWriter`] on the trace writer
//! thread; the sending is [`crate::export`]'s.
//!
//! * A call is a span named by its probe's function (or its `trace_span`
//!   name), `SPAN_KIND_INTERNAL`, from its start to its end in Unix
//!   nanoseconds, with the thread's id and name as attributes. A call made
//!   inside another (on its thread) is that one's child: calls arrive when
//!   they return, [`Order`] turns them into begins and ends in pre-order,
//!   and a stack per thread holds the spans open. A call with no probed
//!   call around it starts a trace of its own.
//! * Spans are grouped by process: one `ResourceSpans` each, whose
//!   resource says `service.name` (`--service`, or the traced program's
//!   name), `host.name`, `process.pid`, `process.executable.name` and
//!   each `--label KEY=VALUE`.
//! * A request is sent once 8192 spans are waiting, or the oldest has
//!   waited a second; once a second, calls still held for a caller that
//!   has not returned yet are sent as they are (each begins a trace of its
//!   own: a server's `main` never returns while the session runs).
//! * printf lines and `trace_instant`s are OpenTelemetry log records
//!   (`POST URL/v1/logs`), batched the same way, each with its time, its
//!   thread's id and name, and its process's resource: a printf's text is
//!   the body; an instant's name is the record's `event_name`.
//!   `trace_counter`s are not sent: they are counted, and the report says
//!   so.

use crate::export::{Endpoint, Exporter, Sent};
use crate::feed::{Calls, End, Report, TraceWriter};
use crate::perfetto::order::{ByTid, Ev, Order};
use opentelemetry_proto::tonic::collector::logs::v1::{ExportLogsServiceRequest, ExportLogsServiceResponse};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{span::SpanKind, ResourceSpans, ScopeSpans, Span};
use prost::Message;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// The flag that asks for the export (its report says it).
pub const FLAG: &str = "--otlp";

/// Spans waiting before a request is sent.
const BATCH_SPANS: usize = 8192;

/// The longest a span waits to be sent.
const BATCH_AGE: Duration = Duration::from_secs(1);

/// Threads remembered (names and owners), at most: the target chooses how
/// many it makes.
const MAX_THREADS: usize = 1 << 17;

/// Where and how spans go.
pub struct Settings {
    pub endpoint: Endpoint,
    /// The URL as the user gave it, for the report.
    pub url: String,
    /// `service.name`, when `--service` gives it.
    pub service: Option<String>,
    /// `--label KEY=VALUE`s: resource attributes.
    pub labels: Vec<(String, String)>,
    /// `--export-queue`: bytes of requests waiting, at most.
    pub queue: u64,
    /// `--export-timeout`: how long the end of the session waits for the
    /// queue to drain.
    pub timeout: Duration,
    /// `-v`: failed attempts are said as they happen.
    pub verbose: bool,
}

/// A span begun, waiting for its end.
struct Open {
    id: [u8; 8],
    trace: [u8; 16],
    parent: Option<[u8; 8]>,
    start: u64,
    probe: u16,
}

#[derive(Default)]
struct Thread {
    open: Vec<Open>,
    /// Its process and name, looked up when its first span ends.
    owner: Option<(u32, String)>,
}

pub struct Otlp {
    exporter: Exporter,
    path: String,
    url: String,
    timeout: Duration,
    order: Option<Order>,
    clock: crate::os::sys::Clock,
    names: Vec<String>,
    threads: ByTid<Thread>,
    /// What the feed told of threads (their process and name).
    told: HashMap<u32, (u32, Option<Vec<u8>>)>,
    first_pid: u32,
    process: Vec<u8>,
    /// The resource's attributes besides `process.*`.
    resource: Vec<KeyValue>,
    /// Spans waiting, by process.
    batch: BTreeMap<u32, Vec<Span>>,
    waiting: usize,
    oldest: Option<Instant>,
    /// Ids: a keyed counter through splitmix64 (never 0).
    seed: u64,
    next: u64,
    spans: u64,
    traces: u64,
    /// Counters (not exported).
    others: u64,
    /// printf lines and instants, as log records.
    logs: Logs,
}

/// The log records' own exporter (its counts are apart from the spans'),
/// started at the first record.
struct Logs {
    endpoint: Endpoint,
    queue: u64,
    verbose: bool,
    path: String,
    exporter: Option<Exporter>,
    batch: BTreeMap<u32, Vec<LogRecord>>,
    waiting: usize,
    oldest: Option<Instant>,
    records: u64,
}

impl Otlp {
    /// Start sending to `settings.endpoint` for a session of process
    /// `pid`, named `process`, whose probes' functions are `names`.
    pub fn start(settings: Settings, pid: u32, process: &str, names: &[String]) -> std::io::Result<Otlp> {
        let path = settings.endpoint.path("/v1/traces");
        let exporter = Exporter::start(&settings.endpoint, settings.queue, rejected, settings.verbose)?;
        // (The UTS namespace's: a container's own name.)
        let host = crate::os::proc::hostname();
        let service = settings.service.clone().unwrap_or_else(|| process.to_string());
        let mut resource = vec![text("service.name", &service), text("host.name", &host)];
        resource.extend(settings.labels.iter().map(|(k, v)| text(k, v)));
        let mut seed = [0u8; 8];
        // A fresh key per session (ids must not repeat across sessions).
        let _ = std::fs::File::open("/dev/urandom").and_then(|mut f| std::io::Read::read_exact(&mut f, &mut seed));
        Ok(Otlp {
            exporter,
            path,
            url: settings.url,
            timeout: settings.timeout,
            order: Some(Order::default()),
            clock: crate::os::sys::clock(),
            names: names.to_vec(),
            threads: ByTid::default(),
            told: HashMap::new(),
            first_pid: pid,
            process: process.as_bytes().to_vec(),
            resource,
            batch: BTreeMap::new(),
            waiting: 0,
            oldest: None,
            seed: u64::from_le_bytes(seed) ^ crate::os::sys::monotonic_ns(),
            next: 0,
            spans: 0,
            traces: 0,
            others: 0,
            logs: Logs {
                path: settings.endpoint.path("/v1/logs"),
                endpoint: settings.endpoint,
                queue: settings.queue,
                verbose: settings.verbose,
                exporter: None,
                batch: BTreeMap::new(),
                waiting: 0,
                oldest: None,
                records: 0,
            },
        })
    }

    fn id(&mut self) -> u64 {
        loop {
            self.next += 1;
            let mut z = self.seed.wrapping_add(self.next.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            if z != 0 {
                return z;
            }
        }
    }

    fn event(&mut self, ev: Ev) {
        match ev {
            Ev::Begin { tid, ts, probe } => {
                let id = self.id().to_le_bytes();
                let i = match self.threads.position(tid) {
                    Some(i) => i,
                    None => self.threads.insert(tid, Thread::default()),
                };
                let (parent, trace) = match self.threads.at(i).open.last() {
                    Some(p) => (Some(p.id), p.trace),
                    None => {
                        self.traces += 1;
                        let mut t = [0u8; 16];
                        t[..8].copy_from_slice(&self.id().to_le_bytes());
                        t[8..].copy_from_slice(&self.id().to_le_bytes());
                        (None, t)
                    }
                };
                self.threads.at(i).open.push(Open { id, trace, parent, start: ts, probe });
            }
            Ev::End { tid, ts } => {
                let Some(i) = self.threads.position(tid) else { return };
                let Some(o) = self.threads.at(i).open.pop() else { return };
                let (pid, name) = self.thread_owner(tid);
                let fname = self.names.get(usize::from(o.probe)).map_or("?", String::as_str).to_string();
                let span = Span {
                    trace_id: o.trace.to_vec(),
                    span_id: o.id.to_vec(),
                    parent_span_id: o.parent.map(|p| p.to_vec()).unwrap_or_default(),
                    name: fname.clone(),
                    kind: SpanKind::Internal as i32,
                    start_time_unix_nano: o.start,
                    end_time_unix_nano: ts.max(o.start),
                    attributes: vec![int("thread.id", i64::from(tid)), text("thread.name", &name)],
                    ..Default::default()
                };
                self.batch.entry(pid).or_default().push(span);
                self.waiting += 1;
                self.spans += 1;
                self.oldest.get_or_insert_with(Instant::now);
            }
        }
    }

    /// Thread `tid`'s process and name, looked up once.
    fn thread_owner(&mut self, tid: u32) -> (u32, String) {
        let i = match self.threads.position(tid) {
            Some(i) => i,
            None => self.threads.insert(tid, Thread::default()),
        };
        if let Some(o) = &self.threads.at(i).owner {
            return o.clone();
        }
        let owner = self.owner_of(tid);
        self.threads.at(i).owner = Some(owner.clone());
        owner
    }

    /// Thread `tid`'s process and name.
    fn owner_of(&self, tid: u32) -> (u32, String) {
        let (pid, told) = match self.told.get(&tid) {
            Some((pid, comm)) => (*pid, comm.as_ref()),
            None => (self.first_pid, None),
        };
        let name = crate::feed::thread_name(pid, tid, told, &self.process);
        (pid, String::from_utf8_lossy(&name).into_owned())
    }

    /// Process `pid`'s resource.
    fn resource_of(&self, pid: u32) -> Resource {
        let mut attributes = self.resource.clone();
        let exe = crate::feed::process_name(pid, self.told.get(&pid).and_then(|t| t.1.as_ref()), &self.process);
        attributes.push(int("process.pid", i64::from(pid)));
        attributes.push(text("process.executable.name", &String::from_utf8_lossy(&exe)));
        Resource { attributes, ..Default::default() }
    }

    /// Send the spans waiting as one request.
    fn send(&mut self) {
        if self.waiting == 0 {
            return;
        }
        let batch = std::mem::take(&mut self.batch);
        let resource_spans = batch
            .into_iter()
            .map(|(pid, spans)| ResourceSpans {
                resource: Some(self.resource_of(pid)),
                scope_spans: vec![ScopeSpans { scope: Some(scope()), spans, ..Default::default() }],
                ..Default::default()
            })
            .collect();
        let request = ExportTraceServiceRequest { resource_spans };
        self.exporter.send_protobuf(&self.path, &request.encode_to_vec(), self.waiting as u64);
        self.waiting = 0;
        self.oldest = None;
    }

    /// Send the log records waiting as one request.
    fn send_logs(&mut self) {
        if self.logs.waiting == 0 {
            return;
        }
        let batch = std::mem::take(&mut self.logs.batch);
        let resource_logs = batch
            .into_iter()
            .map(|(pid, log_records)| ResourceLogs {
                resource: Some(self.resource_of(pid)),
                scope_logs: vec![ScopeLogs { scope: Some(scope()), log_records, ..Default::default() }],
                ..Default::default()
            })
            .collect();
        let request = ExportLogsServiceRequest { resource_logs };
        let n = self.logs.waiting as u64;
        self.logs.waiting = 0;
        self.logs.oldest = None;
        if self.logs.exporter.is_none() {
            let l = &self.logs;
            match Exporter::start(&l.endpoint, l.queue, rejected_logs, l.verbose) {
                Ok(e) => self.logs.exporter = Some(e),
                Err(e) => {
                    crate::eprintln_escaped!("WARNING: {FLAG}: cannot start sending log records: {e}");
                    self.logs.records = 0;
                    return;
                }
            }
        }
        if let Some(e) = &self.logs.exporter {
            e.send_protobuf(&self.logs.path, &request.encode_to_vec(), n);
        }
    }

    fn maybe_send(&mut self) {
        if self.waiting >= BATCH_SPANS || self.oldest.is_some_and(|t| t.elapsed() >= BATCH_AGE) {
            self.send();
        }
        if self.logs.waiting >= BATCH_SPANS || self.logs.oldest.is_some_and(|t| t.elapsed() >= BATCH_AGE) {
            self.send_logs();
        }
    }
}

fn scope() -> InstrumentationScope {
    InstrumentationScope { name: "telco-stap".into(), version: env!("CARGO_PKG_VERSION").into(), ..Default::default() }
}

/// A 2xx answer's partial success for log records.
fn rejected_logs(body: &[u8]) -> Option<(u64, String)> {
    let r = ExportLogsServiceResponse::decode(body).ok()?;
    let p = r.partial_success?;
    let n = u64::try_from(p.rejected_log_records).unwrap_or(0);
    let why: String = p.error_message.chars().take(200).flat_map(char::escape_debug).collect();
    Some((n, format!("{n} log records rejected: {why}")))
}

/// A 2xx answer's partial success: the spans rejected, and why.
fn rejected(body: &[u8]) -> Option<(u64, String)> {
    let r = ExportTraceServiceResponse::decode(body).ok()?;
    let p = r.partial_success?;
    let n = u64::try_from(p.rejected_spans).unwrap_or(0);
    let why: String = p.error_message.chars().take(200).flat_map(char::escape_debug).collect();
    Some((n, format!("{n} spans rejected: {why}")))
}

/// A string attribute.
pub fn text(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue { value: Some(any_value::Value::StringValue(v.into())) }),
        ..Default::default()
    }
}

/// An integer attribute.
pub fn int(k: &str, v: i64) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue { value: Some(any_value::Value::IntValue(v)) }),
        ..Default::default()
    }
}

impl TraceWriter for Otlp {
    fn add_name(&mut self, name: &str) {
        self.names.push(name.to_string());
    }

    fn calls(&mut self, calls: Calls<'_>) -> std::io::Result<()> {
        let clock = self.clock;
        let Some(mut order) = self.order.take() else { return Ok(()) };
        for c in calls {
            order.call(c.tid, c.probe, c.start, c.end, &|t| clock.ns(t), &mut |ev| self.event(ev));
            if self.waiting >= BATCH_SPANS {
                self.send();
            }
        }
        self.order = Some(order);
        Ok(())
    }

    fn instant(&mut self, tid: u32, ts_ns: u64, cat: &str, name: &[u8], said: Option<&[u8]>) -> std::io::Result<()> {
        let (pid, thread) = self.thread_owner(tid);
        let mut record = LogRecord {
            time_unix_nano: ts_ns,
            observed_time_unix_nano: ts_ns,
            attributes: vec![int("thread.id", i64::from(tid)), text("thread.name", &thread)],
            ..Default::default()
        };
        match (cat, said) {
            ("printf", Some(t)) => {
                let t = String::from_utf8_lossy(t);
                let body = t.strip_suffix('\n').unwrap_or(&t).to_string();
                record.body = Some(AnyValue { value: Some(any_value::Value::StringValue(body)) });
            }
            _ => record.event_name = String::from_utf8_lossy(name).into_owned(),
        }
        self.logs.batch.entry(pid).or_default().push(record);
        self.logs.waiting += 1;
        self.logs.records += 1;
        self.logs.oldest.get_or_insert_with(Instant::now);
        if self.logs.waiting >= BATCH_SPANS {
            self.send_logs();
        }
        Ok(())
    }

    fn counter(&mut self, _: u64, _: &[u8], _: i64) -> std::io::Result<()> {
        self.others += 1;
        Ok(())
    }

    fn owner(&mut self, tid: u32, pid: u32, comm: Option<&[u8]>) {
        crate::feed::remember_owner(&mut self.told, MAX_THREADS, tid, pid, comm);
    }

    /// Calls held for a caller that has not returned: sent as they are.
    fn refresh(&mut self) {
        let clock = self.clock;
        if let Some(mut order) = self.order.take() {
            order.write_held(&|t| clock.ns(t), &mut |ev| self.event(ev));
            self.order = Some(order);
        }
        // Threads with nothing open are forgotten (names are looked up
        // again): memory stays flat however many threads come and go.
        if self.threads.len() > 1024 {
            let mut keep = ByTid::default();
            for (tid, t) in self.threads.iter_mut() {
                if !t.open.is_empty() {
                    keep.insert(tid, std::mem::take(t));
                }
            }
            self.threads = keep;
        }
        self.maybe_send();
    }

    fn full(&self) -> bool {
        false
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.maybe_send();
        Ok(())
    }

    fn finish(mut self: Box<Self>, end: &End) -> std::io::Result<Report> {
        let clock = self.clock;
        let mut too_deep = 0;
        if let Some(mut order) = self.order.take() {
            order.finish(&|t| clock.ns(t), &mut |ev| self.event(ev));
            too_deep = order.too_deep;
        }
        self.send();
        self.send_logs();
        // Spans and log records drain within the one --export-timeout.
        let by = Instant::now() + self.timeout;
        self.exporter.close(by);
        if let Some(e) = &self.logs.exporter {
            e.close(by);
        }
        let this = *self;
        let sent = this.exporter.finish(this.timeout);
        let mut r = report(&sent, &this.url, this.spans, this.traces, this.others, end.unspooled);
        if let Some(e) = this.logs.exporter {
            let logs = e.finish(this.timeout);
            let records = this.logs.records;
            r.holds.push_str(&format!(
                ", with {} of {records} log records (printf lines, trace_instant()s) in {} request{}",
                logs.items - logs.rejected.min(logs.items),
                logs.requests,
                if logs.requests == 1 { "" } else { "s" }
            ));
            for (n, why) in lost(&logs, 0) {
                r.lacks.push(format!("WARNING: {FLAG}: {n} log records not delivered: {why}"));
            }
        }
        if too_deep > 0 {
            r.lacks.push(format!(
                "WARNING: {FLAG}: {too_deep} calls nested more than {} deep were left out",
                crate::perfetto::order::MAX_DEPTH
            ));
        }
        Ok(r)
    }
}

/// What was not delivered, and why.
fn lost(sent: &Sent, unspooled: u64) -> Vec<(u64, &'static str)> {
    let mut v = sent.lost();
    if unspooled > 0 {
        v.push((unspooled, "the trace writer fell behind"));
    }
    v
}

/// What the export's report says.
fn report(sent: &Sent, url: &str, spans: u64, traces: u64, others: u64, unspooled: u64) -> Report {
    let mut lacks = Vec::new();
    for (n, why) in lost(sent, unspooled) {
        lacks.push(format!("WARNING: {FLAG}: {n} spans not delivered: {why}"));
    }
    if let Some(e) = &sent.first_error {
        if sent.queue_full + sent.refused + sent.rejected + sent.unsent > 0 || sent.requests == 0 {
            lacks.push(format!("WARNING: {FLAG}: {url} said: {e}"));
        }
    }
    let mut warnings = Vec::new();
    if others > 0 {
        warnings.push(format!("WARNING: {FLAG}: {others} trace_counter() values are not exported"));
    }
    let retried = match sent.retries {
        0 => String::new(),
        1 => " (1 attempt retried)".to_string(),
        n => format!(" ({n} attempts retried)"),
    };
    Report {
        flag: FLAG,
        holds: format!(
            "{FLAG}: {} spans of {spans} ({traces} traces) in {} request{} delivered to {url}{retried}",
            sent.items - sent.rejected.min(sent.items),
            sent.requests,
            if sent.requests == 1 { "" } else { "s" }
        ),
        left_out: 0,
        max_size: 0,
        lacks,
        warnings,
        calls: spans,
        events: sent.items,
        ..Report::default()
    }
}
