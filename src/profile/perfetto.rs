//! The `timer.profile` samples in a `--perfetto` trace, as Perfetto's own
//! profilers write them (`protos/perfetto/trace/profiling/` in
//! google/perfetto): one sequence of its own whose first packet interns
//! every function name, mapping (path and build id), frame and callstack,
//! then one `PerfSample` packet per sample (its thread, user or kernel
//! mode, its callstack), timed by CLOCK_MONOTONIC, which the trace's clock
//! snapshot ties to the rest. The trace processor lists them in its
//! `perf_sample` table and the UI draws them as a flame graph under the
//! process. The packets are appended to the file after the session's
//! writer has finished it (a trace is a sequence of packets in any order).

use super::Named;

/// A sequence id of its own (the writer's are 1 and 2 + a thread's index).
const SEQUENCE: u32 = 0x7fff_0001;
const CLOCK_MONOTONIC: u32 = 3;
const SEQ_INCREMENTAL_STATE_CLEARED: u32 = 1;
const SEQ_NEEDS_INCREMENTAL_STATE: u32 = 2;
const MODE_KERNEL: i32 = 1;
const MODE_USER: i32 = 2;

#[derive(Clone, PartialEq, prost::Message)]
struct Trace {
    #[prost(message, repeated, tag = "1")]
    packet: Vec<Packet>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Packet {
    #[prost(uint64, optional, tag = "8")]
    timestamp: Option<u64>,
    #[prost(uint32, optional, tag = "10")]
    trusted_packet_sequence_id: Option<u32>,
    #[prost(message, optional, tag = "12")]
    interned_data: Option<InternedData>,
    #[prost(uint32, optional, tag = "13")]
    sequence_flags: Option<u32>,
    #[prost(bool, optional, tag = "41")]
    incremental_state_cleared: Option<bool>,
    #[prost(uint32, optional, tag = "58")]
    timestamp_clock_id: Option<u32>,
    #[prost(message, optional, tag = "60")]
    track_descriptor: Option<TrackDescriptor>,
    #[prost(message, optional, tag = "66")]
    perf_sample: Option<PerfSample>,
    #[prost(bool, optional, tag = "87")]
    first_packet_on_sequence: Option<bool>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct TrackDescriptor {
    #[prost(uint64, optional, tag = "1")]
    uuid: Option<u64>,
    #[prost(message, optional, tag = "4")]
    thread: Option<ThreadDescriptor>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ThreadDescriptor {
    #[prost(int32, optional, tag = "1")]
    pid: Option<i32>,
    #[prost(int32, optional, tag = "2")]
    tid: Option<i32>,
    #[prost(string, optional, tag = "5")]
    thread_name: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct InternedData {
    #[prost(message, repeated, tag = "5")]
    function_names: Vec<InternedString>,
    #[prost(message, repeated, tag = "6")]
    frames: Vec<Frame>,
    #[prost(message, repeated, tag = "7")]
    callstacks: Vec<Callstack>,
    #[prost(message, repeated, tag = "16")]
    build_ids: Vec<InternedString>,
    #[prost(message, repeated, tag = "17")]
    mapping_paths: Vec<InternedString>,
    #[prost(message, repeated, tag = "19")]
    mappings: Vec<Mapping>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct InternedString {
    #[prost(uint64, optional, tag = "1")]
    iid: Option<u64>,
    #[prost(bytes = "vec", optional, tag = "2")]
    str: Option<Vec<u8>>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Mapping {
    #[prost(uint64, optional, tag = "1")]
    iid: Option<u64>,
    #[prost(uint64, optional, tag = "2")]
    build_id: Option<u64>,
    #[prost(uint64, optional, tag = "3")]
    start_offset: Option<u64>,
    #[prost(uint64, optional, tag = "4")]
    start: Option<u64>,
    #[prost(uint64, optional, tag = "5")]
    end: Option<u64>,
    #[prost(uint64, optional, tag = "6")]
    load_bias: Option<u64>,
    #[prost(uint64, repeated, packed = "false", tag = "7")]
    path_string_ids: Vec<u64>,
    #[prost(uint64, optional, tag = "8")]
    exact_offset: Option<u64>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Frame {
    #[prost(uint64, optional, tag = "1")]
    iid: Option<u64>,
    #[prost(uint64, optional, tag = "2")]
    function_name_id: Option<u64>,
    #[prost(uint64, optional, tag = "3")]
    mapping_id: Option<u64>,
    #[prost(uint64, optional, tag = "4")]
    rel_pc: Option<u64>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Callstack {
    #[prost(uint64, optional, tag = "1")]
    iid: Option<u64>,
    #[prost(uint64, repeated, packed = "false", tag = "2")]
    frame_ids: Vec<u64>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct PerfSample {
    #[prost(uint32, optional, tag = "1")]
    cpu: Option<u32>,
    #[prost(uint32, optional, tag = "2")]
    pid: Option<u32>,
    #[prost(uint32, optional, tag = "3")]
    tid: Option<u32>,
    #[prost(uint64, optional, tag = "4")]
    callstack_iid: Option<u64>,
    #[prost(int32, optional, tag = "5")]
    cpu_mode: Option<i32>,
}

/// Interned strings: iids from 1.
#[derive(Default)]
struct Strings(super::Interner);

impl Strings {
    fn id(&mut self, s: &[u8]) -> u64 {
        self.0.id(s) as u64 + 1
    }

    fn list(self) -> Vec<InternedString> {
        self.0
            .list
            .into_iter()
            .enumerate()
            .map(|(i, s)| InternedString { iid: Some(i as u64 + 1), str: Some(s) })
            .collect()
    }
}

/// The packets (`Trace.packet` fields) to append to a `--perfetto` file;
/// empty without samples.
pub fn packets(n: &Named<'_>) -> Vec<u8> {
    if n.samples.is_empty() {
        return Vec::new();
    }
    let (mut names, mut paths, mut builds) = (Strings::default(), Strings::default(), Strings::default());
    let mut mappings: Vec<Mapping> = n
        .modules
        .iter()
        .enumerate()
        .map(|(i, m)| Mapping {
            iid: Some(i as u64 + 1),
            build_id: (!m.build_id.is_empty()).then(|| builds.id(&m.build_id)),
            start_offset: Some(m.file_offset),
            start: Some(m.start),
            end: Some(m.end),
            load_bias: Some(0),
            path_string_ids: m
                .path
                .to_string_lossy()
                .split('/')
                .filter(|c| !c.is_empty())
                .map(|c| paths.id(c.as_bytes()))
                .collect(),
            exact_offset: Some(m.file_offset),
        })
        .collect();
    // Frames in no module (`[unknown]`, `[kernel]`) get a mapping of
    // their own: the trace processor wants one for every frame.
    let elsewhere = mappings.len() as u64 + 1;
    mappings.push(Mapping {
        iid: Some(elsewhere),
        path_string_ids: vec![paths.id(b"[unknown]")],
        start: Some(0),
        end: Some(u64::MAX),
        ..Default::default()
    });
    let frames: Vec<Frame> = n
        .frames
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let name = names.id(f.name.as_bytes());
            let (mapping_id, rel_pc) = match f.module {
                Some(m) => {
                    let info = &n.modules[m as usize];
                    (Some(u64::from(m) + 1), Some(f.addr.wrapping_add(info.bias).wrapping_sub(info.start)))
                }
                None => (Some(elsewhere), Some(f.addr)),
            };
            Frame { iid: Some(i as u64 + 1), function_name_id: Some(name), mapping_id, rel_pc }
        })
        .collect();
    // Perfetto lists a callstack's frames from the root.
    let callstacks: Vec<Callstack> = n
        .stacks
        .iter()
        .enumerate()
        .map(|(i, s)| Callstack {
            iid: Some(i as u64 + 1),
            frame_ids: s.iter().rev().map(|&f| u64::from(f) + 1).collect(),
        })
        .collect();
    let kernel: Vec<bool> = n.frames.iter().map(|f| f.name == "[kernel]" || f.name.ends_with("_[k]")).collect();
    let mut trace = Trace { packet: Vec::with_capacity(n.samples.len() + 1) };
    trace.packet.push(Packet {
        timestamp: Some(n.origin),
        timestamp_clock_id: Some(CLOCK_MONOTONIC),
        trusted_packet_sequence_id: Some(SEQUENCE),
        first_packet_on_sequence: Some(true),
        incremental_state_cleared: Some(true),
        sequence_flags: Some(SEQ_INCREMENTAL_STATE_CLEARED),
        interned_data: Some(InternedData {
            function_names: names.list(),
            frames,
            callstacks,
            build_ids: builds.list(),
            mapping_paths: paths.list(),
            mappings,
        }),
        perf_sample: None,
        track_descriptor: None,
    });
    // The threads, named (a trace with no calls has no thread tracks).
    for (pid, tid, name) in &n.threads {
        trace.packet.push(Packet {
            trusted_packet_sequence_id: Some(SEQUENCE),
            timestamp: Some(n.origin),
            timestamp_clock_id: Some(CLOCK_MONOTONIC),
            track_descriptor: Some(TrackDescriptor {
                uuid: Some(0x7465_6c63_0000_0000 | u64::from(*tid)),
                thread: Some(ThreadDescriptor {
                    pid: Some(*pid as i32),
                    tid: Some(*tid as i32),
                    thread_name: Some(name.clone()),
                }),
            }),
            ..Default::default()
        });
    }
    for &(thread, stack, time, _) in &n.samples {
        let (pid, tid, _) = &n.threads[thread as usize];
        let in_kernel = n.stacks[stack as usize].first().is_some_and(|&f| kernel[f as usize]);
        trace.packet.push(Packet {
            timestamp: Some(n.origin + time),
            timestamp_clock_id: Some(CLOCK_MONOTONIC),
            trusted_packet_sequence_id: Some(SEQUENCE),
            sequence_flags: Some(SEQ_NEEDS_INCREMENTAL_STATE),
            perf_sample: Some(PerfSample {
                cpu: Some(0),
                pid: Some(*pid),
                tid: Some(*tid),
                callstack_iid: Some(u64::from(stack) + 1),
                cpu_mode: Some(if in_kernel { MODE_KERNEL } else { MODE_USER }),
            }),
            ..Default::default()
        });
    }
    prost::Message::encode_to_vec(&trace)
}
