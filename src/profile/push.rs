//! Profiles sent to a fleet's engines while the session runs: every
//! `--push-interval` seconds the `timer.profile` samples of that window go
//! to Pyroscope (`--pyroscope URL`: `POST URL/ingest`, a gzip'd pprof
//! profile as the multipart field `profile`, the labels in the name) and,
//! with `--otlp URL`, as an OpenTelemetry profile (`POST
//! URL/v1development/profiles`, opentelemetry-proto's messages). The last
//! window goes when the session ends.
//!
//! A window is a [`Profile`] of its own, named (every frame by its
//! module's symbols) and encoded when it is sent, then dropped: memory
//! does not grow with the session's length. The profile files asked for
//! (`--pprof` ...) still get every sample, at the end.

use super::{Files, Named, Profile};
use opentelemetry_proto::tonic::collector::profiles::v1development::{
    ExportProfilesServiceRequest, ExportProfilesServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope};
use opentelemetry_proto::tonic::profiles::v1development as otp;
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use telco_runtime::export::{Endpoint, Exporter, Request, Sent};
use telco_runtime::otlp::{int, text};
use telco_runtime::profile::{Sink, Stack, Summary};

/// Where and how often profiles go.
pub struct Settings {
    /// `--pyroscope`: the endpoint and the URL as given.
    pub pyroscope: Option<(Endpoint, String)>,
    /// `--otlp`.
    pub otlp: Option<(Endpoint, String)>,
    pub every: Duration,
    pub service: String,
    pub labels: Vec<(String, String)>,
    pub queue: u64,
    pub timeout: Duration,
    pub verbose: bool,
}

struct Target {
    exporter: Exporter,
    url: String,
    flag: &'static str,
}

/// A [`Sink`] that sends each window's samples, and keeps every sample
/// for the profile files when some are asked for.
pub struct Push {
    files: Option<Profile>,
    /// The window's samples, a profile per process.
    window: std::collections::BTreeMap<u32, Profile>,
    /// The window's start: CLOCK_REALTIME ns.
    since: u64,
    next: Instant,
    settings: Settings,
    host: String,
    pyroscope: Option<Target>,
    otlp: Option<Target>,
    windows: u64,
    samples: u64,
    /// The modules' symbols, read once for every window.
    symbols: super::Symbols,
    /// What the session's end says (read once the session is over).
    pub report: Arc<Mutex<Vec<String>>>,
}

impl Push {
    pub fn start(settings: Settings, files: Files) -> std::io::Result<Push> {
        let target = |e: &Option<(Endpoint, String)>, flag: &'static str, rejected| -> std::io::Result<_> {
            Ok(match e {
                Some((endpoint, url)) => Some(Target {
                    exporter: Exporter::start(endpoint, settings.queue, rejected, settings.verbose)?,
                    url: url.clone(),
                    flag,
                }),
                None => None,
            })
        };
        let pyroscope = target(&settings.pyroscope, "--pyroscope", no_answer)?;
        let otlp = target(&settings.otlp, "--otlp", rejected_profiles)?;
        let keep = files.any() || files.perfetto.is_some();
        Ok(Push {
            files: keep.then(|| Profile::new(files)),
            window: Default::default(),
            since: telco_runtime::os::sys::realtime_ns(),
            next: Instant::now() + settings.every,
            host: telco_runtime::os::proc::hostname(),
            settings,
            pyroscope,
            otlp,
            windows: 0,
            samples: 0,
            symbols: Default::default(),
            report: Arc::default(),
        })
    }

    /// Send the window (a profile per process), and start the next.
    fn push(&mut self) {
        let now = telco_runtime::os::sys::realtime_ns();
        let (from, until) = (self.since, now);
        self.since = now;
        for (pid, window) in std::mem::take(&mut self.window) {
            self.send(pid, &window, from, until);
        }
    }

    fn send(&mut self, pid: u32, window: &Profile, from: u64, until: u64) {
        if window.samples.is_empty() {
            return;
        }
        let n = window.samples.len() as u64;
        self.windows += 1;
        self.samples += n;
        let named = window.named_with(&mut self.symbols);
        if let Some(t) = &self.pyroscope {
            let pprof = super::pprof::encode(&named);
            let (boundary, body) = multipart(&pprof);
            let hz = 1_000_000_000 / usual_period(&named).max(1);
            let mut labels = vec![
                ("host".to_string(), self.host.clone()),
                ("service".to_string(), self.settings.service.clone()),
                ("pid".to_string(), pid.to_string()),
            ];
            labels.extend(self.settings.labels.iter().cloned());
            let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{}={}", label(k), label(v))).collect();
            let name = format!("{}.cpu{{{}}}", label(&self.settings.service), labels.join(","));
            let path = format!(
                "{}?name={}&from={}&until={}&format=pprof&sampleRate={hz}&spyName=telco-stap",
                t_path(&self.settings.pyroscope, "/ingest"),
                percent(&name),
                from / 1_000_000_000,
                until.div_ceil(1_000_000_000),
            );
            t.exporter.send(Request {
                path,
                content_type: format!("multipart/form-data; boundary={boundary}"),
                gzip: false,
                body,
                items: n,
            });
        }
        if let Some(t) = &self.otlp {
            let request = otlp_request(&named, from, until, &self.settings, &self.host);
            t.exporter.send_protobuf(
                &t_path(&self.settings.otlp, "/v1development/profiles"),
                &request.encode_to_vec(),
                n,
            );
        }
    }
}

/// The samples' period (ns): the median of what each stands for (the
/// first may be odd: a thread's first tick).
fn usual_period(n: &Named<'_>) -> u64 {
    let mut p: Vec<u64> = n.samples.iter().map(|s| s.3).collect();
    if p.is_empty() {
        return 1_000_000_000 / 99;
    }
    let mid = p.len() / 2;
    *p.select_nth_unstable(mid).1
}

fn t_path(e: &Option<(Endpoint, String)>, signal: &str) -> String {
    e.as_ref().map_or_else(String::new, |(e, _)| e.path(signal))
}

/// Pyroscope's label values: letters, digits, `_`, `-` and `.`; anything
/// else becomes `_`.
fn label(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') { c } else { '_' }).collect()
}

/// Percent-encoding of a query value.
fn percent(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A multipart/form-data body with the file field `profile`: the
/// boundary and the body.
fn multipart(profile: &[u8]) -> (String, Vec<u8>) {
    let boundary = format!("telco-stap-{:016x}", telco_runtime::os::sys::monotonic_ns());
    let mut b = Vec::with_capacity(profile.len() + 256);
    b.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
    b.extend_from_slice(b"Content-Disposition: form-data; name=\"profile\"; filename=\"profile.pprof\"\r\n");
    b.extend_from_slice(b"Content-Type: application/octet-stream\r\n\r\n");
    b.extend_from_slice(profile);
    b.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (boundary, b)
}

fn no_answer(_: &[u8]) -> Option<(u64, String)> {
    None
}

/// A 2xx answer's partial success, and why: a request holds one profile,
/// so a profile rejected is every sample of the request (the exporter
/// counts no more than the request's).
fn rejected_profiles(body: &[u8]) -> Option<(u64, String)> {
    let r = ExportProfilesServiceResponse::decode(body).ok()?;
    let p = r.partial_success?;
    let n = u64::try_from(p.rejected_profiles).unwrap_or(0);
    let why: String = p.error_message.chars().take(200).flat_map(char::escape_debug).collect();
    Some((if n > 0 { u64::MAX } else { 0 }, format!("{n} profiles rejected: {why}")))
}

/// The window as an OTLP profiles request: one dictionary (every table
/// starts with its zero entry, as the protocol asks), one profile of CPU
/// nanoseconds per process, a sample per `timer.profile` sample with its
/// time and its thread's id and name.
fn otlp_request(n: &Named<'_>, from: u64, until: u64, s: &Settings, host: &str) -> ExportProfilesServiceRequest {
    let mut strings: Vec<String> = vec![String::new()];
    let mut string_ids: HashMap<String, i32> = HashMap::from([(String::new(), 0)]);
    let mut sid = |t: &str| -> i32 {
        if let Some(&i) = string_ids.get(t) {
            return i;
        }
        strings.push(t.to_string());
        let i = (strings.len() - 1) as i32;
        string_ids.insert(t.to_string(), i);
        i
    };
    let mut dict = otp::ProfilesDictionary {
        mapping_table: vec![otp::Mapping::default()],
        location_table: vec![otp::Location::default()],
        function_table: vec![otp::Function::default()],
        link_table: vec![otp::Link::default()],
        attribute_table: vec![otp::KeyValueAndUnit::default()],
        stack_table: vec![otp::Stack::default()],
        ..Default::default()
    };
    for m in n.modules {
        let name = sid(&m.path.to_string_lossy());
        dict.mapping_table.push(otp::Mapping {
            memory_start: m.start,
            memory_limit: m.end,
            file_offset: m.file_offset,
            filename_strindex: name,
            ..Default::default()
        });
    }
    for (name, module) in &n.functions {
        let file = module.map_or(0, |m| sid(&n.modules[m as usize].path.to_string_lossy()));
        let name = sid(name);
        dict.function_table.push(otp::Function {
            name_strindex: name,
            system_name_strindex: name,
            filename_strindex: file,
            start_line: 0,
        });
    }
    for (i, f) in n.frames.iter().enumerate() {
        let address = match f.module {
            Some(m) => f.addr.wrapping_add(n.modules[m as usize].bias),
            None => f.addr,
        };
        dict.location_table.push(otp::Location {
            mapping_index: f.module.map_or(0, |m| m as i32 + 1),
            address,
            lines: vec![otp::Line { function_index: n.function_of[i] as i32 + 1, line: 0, column: 0 }],
            attribute_indices: Vec::new(),
        });
    }
    for st in n.stacks {
        dict.stack_table.push(otp::Stack { location_indices: st.iter().map(|&f| f as i32 + 1).collect() });
    }
    // Each thread's two attributes, in the attribute table.
    let (tid_key, name_key) = (sid("thread.id"), sid("thread.name"));
    let mut thread_attrs = Vec::with_capacity(n.threads.len());
    for (_, tid, name) in &n.threads {
        let at = dict.attribute_table.len() as i32;
        dict.attribute_table.push(otp::KeyValueAndUnit {
            key_strindex: tid_key,
            value: Some(AnyValue { value: Some(any_value::Value::IntValue(i64::from(*tid))) }),
            unit_strindex: 0,
        });
        dict.attribute_table.push(otp::KeyValueAndUnit {
            key_strindex: name_key,
            value: Some(AnyValue { value: Some(any_value::Value::StringValue(name.clone())) }),
            unit_strindex: 0,
        });
        thread_attrs.push(vec![at, at + 1]);
    }
    let (cpu, ns) = (sid("cpu"), sid("nanoseconds"));
    // The samples' wall times: CLOCK_MONOTONIC turned into the Unix time.
    let wall = telco_runtime::os::sys::realtime_ns()
        .saturating_sub(telco_runtime::os::sys::monotonic_ns())
        .saturating_add(n.origin);
    let mut by_pid: std::collections::BTreeMap<u32, Vec<otp::Sample>> = Default::default();
    for &(thread, stack, t, period) in &n.samples {
        let pid = n.threads[thread as usize].0;
        by_pid.entry(pid).or_default().push(otp::Sample {
            stack_index: stack as i32 + 1,
            attribute_indices: thread_attrs[thread as usize].clone(),
            link_index: 0,
            values: vec![period as i64],
            timestamps_unix_nano: vec![wall.saturating_add(t)],
        });
    }
    let period = usual_period(n) as i64;
    dict.string_table = strings;
    let mut profile_id = [0u8; 16];
    profile_id[..8].copy_from_slice(&from.to_le_bytes());
    profile_id[8..].copy_from_slice(&telco_runtime::os::sys::monotonic_ns().to_le_bytes());
    let resource_profiles = by_pid
        .into_iter()
        .map(|(pid, samples)| {
            let mut attributes =
                vec![text("service.name", &s.service), text("host.name", host), int("process.pid", i64::from(pid))];
            attributes.extend(s.labels.iter().map(|(k, v)| text(k, v)));
            otp::ResourceProfiles {
                resource: Some(Resource { attributes, ..Default::default() }),
                scope_profiles: vec![otp::ScopeProfiles {
                    scope: Some(InstrumentationScope {
                        name: "telco-stap".into(),
                        version: env!("CARGO_PKG_VERSION").into(),
                        ..Default::default()
                    }),
                    profiles: vec![otp::Profile {
                        sample_type: Some(otp::ValueType { type_strindex: cpu, unit_strindex: ns }),
                        samples,
                        time_unix_nano: from,
                        duration_nano: until.saturating_sub(from),
                        period_type: Some(otp::ValueType { type_strindex: cpu, unit_strindex: ns }),
                        period,
                        profile_id: profile_id.to_vec(),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }
        })
        .collect();
    ExportProfilesServiceRequest { resource_profiles, dictionary: Some(dict) }
}

impl Sink for Push {
    fn sample(&mut self, s: &Stack<'_>) {
        if let Some(f) = self.files.as_mut() {
            f.sample(s);
        }
        self.window.entry(s.pid).or_insert_with(|| Profile::new(Files::default())).sample(s);
    }

    fn tick(&mut self) {
        if Instant::now() >= self.next {
            self.push();
            self.next = Instant::now() + self.settings.every;
        }
    }

    fn finish(&mut self, summary: &Summary) -> std::io::Result<()> {
        self.push();
        let mut lines = Vec::new();
        // Both endpoints drain within the one --export-timeout.
        let by = Instant::now() + self.settings.timeout;
        for t in [&self.pyroscope, &self.otlp].into_iter().flatten() {
            t.exporter.close(by);
        }
        for t in [self.pyroscope.take(), self.otlp.take()].into_iter().flatten() {
            let sent = t.exporter.finish(self.settings.timeout);
            lines.extend(report(t.flag, &t.url, &sent, self.windows, self.samples));
        }
        if let Ok(mut r) = self.report.lock() {
            *r = lines;
        }
        match self.files.as_mut() {
            Some(f) => f.finish(summary),
            None => Ok(()),
        }
    }
}

fn report(flag: &str, url: &str, sent: &Sent, windows: u64, samples: u64) -> Vec<String> {
    let mut v = vec![format!(
        "{flag}: {} of {samples} timer.profile samples in {} of {windows} profiles delivered to {url}",
        sent.items.saturating_sub(sent.rejected),
        sent.requests
    )];
    let lost = sent.lost();
    for (n, why) in &lost {
        v.push(format!("WARNING: {flag}: {n} samples not delivered: {why}"));
    }
    if let Some(e) = &sent.first_error {
        if !lost.is_empty() {
            v.push(format!("WARNING: {flag}: {url} said: {e}"));
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_queries_are_escaped() {
        assert_eq!(label("my app/v2"), "my_app_v2");
        assert_eq!(percent("a.cpu{host=x,k=v w}"), "a.cpu%7Bhost%3Dx%2Ck%3Dv%20w%7D");
        let (b, body) = multipart(b"PP");
        let text = String::from_utf8_lossy(&body);
        assert!(text.starts_with(&format!("--{b}\r\n")) && text.ends_with(&format!("\r\n--{b}--\r\n")), "{text}");
        assert!(text.contains("name=\"profile\"") && text.contains("\r\n\r\nPP\r\n"), "{text}");
    }
}
