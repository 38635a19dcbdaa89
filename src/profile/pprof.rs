//! `--pprof FILE`: pprof's `profile.proto` (github.com/google/pprof, `proto/profile.proto`),
//! gzip'd, as `go tool pprof`, Pyroscope, Parca and Grafana read it: two
//! values a sample (`samples`/`count`, `cpu`/`nanoseconds`; with
//! `--off-cpu` a third, `off_cpu`/`nanoseconds`, the waits'), a location
//! per frame (its address in the process), a function per name, a mapping
//! per module with its build id, and the thread as labels.

use std::collections::HashMap;
use std::io::Write;

use super::{Named, ProfileWriter};

pub const FLAG: &str = "--pprof";

pub struct Pprof;

impl ProfileWriter for Pprof {
    fn write(&self, n: &Named<'_>, out: &mut dyn Write) -> std::io::Result<()> {
        out.write_all(&encode(n))
    }
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Profile {
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    #[prost(int64, tag = "12")]
    pub period: i64,
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ValueType {
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Label {
    #[prost(int64, tag = "1")]
    pub key: i64,
    #[prost(int64, tag = "2")]
    pub str: i64,
    #[prost(int64, tag = "3")]
    pub num: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Mapping {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    #[prost(int64, tag = "5")]
    pub filename: i64,
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Location {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    #[prost(uint64, tag = "3")]
    pub address: u64,
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Line {
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    #[prost(int64, tag = "2")]
    pub line: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Function {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(int64, tag = "2")]
    pub name: i64,
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    #[prost(int64, tag = "4")]
    pub filename: i64,
}

/// The string table: index 0 is "", as pprof requires.
struct Strings(super::Interner);

impl Strings {
    fn id(&mut self, s: &str) -> i64 {
        self.0.id(s.as_bytes()) as i64
    }
}

/// The gzip'd profile.
pub fn encode(n: &Named<'_>) -> Vec<u8> {
    let mut s = Strings(super::Interner::default());
    s.id("");
    let mut sample_type = vec![
        ValueType { r#type: s.id("samples"), unit: s.id("count") },
        ValueType { r#type: s.id("cpu"), unit: s.id("nanoseconds") },
    ];
    if n.wall {
        sample_type.push(ValueType { r#type: s.id("off_cpu"), unit: s.id("nanoseconds") });
    }
    let mapping: Vec<Mapping> = n
        .modules
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let hex: String = m.build_id.iter().map(|b| format!("{b:02x}")).collect();
            Mapping {
                id: i as u64 + 1,
                memory_start: m.start,
                memory_limit: m.end,
                file_offset: m.file_offset,
                filename: s.id(&m.path.to_string_lossy()),
                build_id: s.id(&hex),
                has_functions: true,
            }
        })
        .collect();
    let mut functions: Vec<Function> = Vec::new();
    let mut function_ids: HashMap<(String, Option<u32>), u64> = HashMap::new();
    let location: Vec<Location> = n
        .frames
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let key = (f.name.clone(), f.module);
            let fid = match function_ids.get(&key) {
                Some(&id) => id,
                None => {
                    let id = functions.len() as u64 + 1;
                    let file = f.module.map_or(0, |m| s.id(&n.modules[m as usize].path.to_string_lossy()));
                    let name = s.id(&f.name);
                    functions.push(Function { id, name, system_name: name, filename: file });
                    function_ids.insert(key, id);
                    id
                }
            };
            let address = match f.module {
                Some(m) => f.addr.wrapping_add(n.modules[m as usize].bias),
                None => f.addr,
            };
            Location {
                id: i as u64 + 1,
                mapping_id: f.module.map_or(0, |m| u64::from(m) + 1),
                address,
                line: vec![Line { function_id: fid, line: 0 }],
            }
        })
        .collect();
    let (thread_key, tid_key) = (s.id("thread"), s.id("tid"));
    let sample: Vec<Sample> = n
        .samples
        .iter()
        .enumerate()
        .map(|(i, &(thread, stack, _, period))| {
            let (_, tid, name) = &n.threads[thread as usize];
            let count = n.count(i) as i64;
            Sample {
                location_id: n.stacks[stack as usize].iter().map(|&f| u64::from(f) + 1).collect(),
                value: match (n.wall, n.waited(stack)) {
                    (false, _) => vec![count, period as i64],
                    (true, false) => vec![count, period as i64, 0],
                    (true, true) => vec![count, 0, period as i64],
                },
                label: vec![
                    Label { key: thread_key, str: s.id(name), num: 0 },
                    Label { key: tid_key, str: 0, num: i64::from(*tid) },
                ],
            }
        })
        .collect();
    let period = n.samples.iter().find(|x| !n.waited(x.1)).map_or(0, |x| x.3 as i64);
    let period_type = Some(ValueType { r#type: s.id("cpu"), unit: s.id("nanoseconds") });
    let default_sample_type = s.id("cpu");
    let wall_start = telco_runtime::os::sys::realtime_ns()
        .saturating_sub(telco_runtime::os::sys::monotonic_ns())
        .saturating_add(n.origin);
    let p = Profile {
        sample_type,
        sample,
        mapping,
        location,
        function: functions,
        string_table: s.0.list.into_iter().map(|b| String::from_utf8_lossy(&b).into_owned()).collect(),
        time_nanos: wall_start as i64,
        duration_nanos: (n.end - n.start) as i64,
        period_type,
        period,
        default_sample_type,
    };
    let raw = prost::Message::encode_to_vec(&p);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let _ = gz.write_all(&raw);
    gz.finish().unwrap_or_default()
}
