//! The `timer.profile` samples in a `--perfetto` trace, as Perfetto's own
//! profilers write them (`protos/perfetto/trace/profiling/` in
//! google/perfetto): one sequence of its own whose first packet interns
//! every function name, mapping (path and build id), frame and callstack,
//! then one `PerfSample` packet per sample (its thread, user or kernel
//! mode, its callstack), timed by CLOCK_MONOTONIC, which the trace's clock
//! snapshot ties to the rest. The trace processor lists them in its
//! `perf_sample` table and the UI draws them as a flame graph under the
//! process. A wait (`--off-cpu`) is a slice on its thread's track instead,
//! named `[off-cpu] NAME`, from the moment it blocked for as long as it
//! waited, with the function it blocked in as an argument. The packets are appended to the file after the session's
//! writer has finished it (a trace is a sequence of packets in any order).
//! The messages, sequence and track ids are the trace writer's
//! (`telco_runtime::perfetto` and its `proto`), declared there once.

use super::{Named, ProfileWriter};
use telco_runtime::perfetto::proto::{
    Callstack, DebugAnnotation, Frame, InternedData, InternedString, Mapping, PerfSample, ThreadDescriptor, Trace,
    TracePacket, TrackDescriptor, TrackEvent, TrackEventType, CLOCK_MONOTONIC, MODE_KERNEL, MODE_USER,
    SEQ_INCREMENTAL_STATE_CLEARED, SEQ_NEEDS_INCREMENTAL_STATE,
};
use telco_runtime::perfetto::{SAMPLES_SEQUENCE, SAMPLE_THREAD_UUID};

/// The samples go into the trace `--perfetto` names.
pub use telco_runtime::perfetto::FLAG;

pub struct Samples;

impl ProfileWriter for Samples {
    fn write(&self, n: &Named<'_>, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        out.write_all(&packets(n))
    }

    fn into_trace(&self) -> bool {
        true
    }
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
    trace.packet.push(TracePacket {
        timestamp: Some(n.origin),
        timestamp_clock_id: Some(CLOCK_MONOTONIC),
        trusted_packet_sequence_id: Some(SAMPLES_SEQUENCE),
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
            ..Default::default()
        }),
        ..Default::default()
    });
    // The threads, named (a trace with no calls has no thread tracks).
    for (pid, tid, name) in &n.threads {
        trace.packet.push(TracePacket {
            trusted_packet_sequence_id: Some(SAMPLES_SEQUENCE),
            timestamp: Some(n.origin),
            timestamp_clock_id: Some(CLOCK_MONOTONIC),
            track_descriptor: Some(TrackDescriptor {
                uuid: Some(SAMPLE_THREAD_UUID | u64::from(*tid)),
                thread: Some(ThreadDescriptor {
                    pid: Some(*pid as i32),
                    tid: Some(*tid as i32),
                    thread_name: Some(name.clone()),
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    for (i, &(thread, stack, time, weight)) in n.samples.iter().enumerate() {
        let (pid, tid, _) = &n.threads[thread as usize];
        if n.waited(stack) && i >= n.timed {
            // (Sums of a long session's later waits: no one interval.)
            continue;
        }
        if n.waited(stack) {
            let frames = &n.stacks[stack as usize];
            let name = n.frames[frames[0] as usize].name.clone();
            // The function it blocked in: the first of the program's.
            let function = frames[1..]
                .iter()
                .map(|&f| &n.frames[f as usize])
                .find(|f| f.module.is_some())
                .map_or_else(|| "[unknown]".to_string(), |f| f.name.clone());
            let slice = |at: u64, kind: TrackEventType, args: Vec<DebugAnnotation>| TracePacket {
                timestamp: Some(n.origin + at),
                timestamp_clock_id: Some(CLOCK_MONOTONIC),
                trusted_packet_sequence_id: Some(SAMPLES_SEQUENCE),
                track_event: Some(TrackEvent {
                    r#type: Some(kind as i32),
                    track_uuid: Some(SAMPLE_THREAD_UUID | u64::from(*tid)),
                    name: (kind == TrackEventType::SliceBegin).then(|| name.clone()),
                    categories: if kind == TrackEventType::SliceBegin { vec!["off-cpu".into()] } else { Vec::new() },
                    debug_annotations: args,
                    ..Default::default()
                }),
                ..Default::default()
            };
            let args = vec![DebugAnnotation {
                name: Some("function".into()),
                string_value: Some(function),
                ..Default::default()
            }];
            trace.packet.push(slice(time, TrackEventType::SliceBegin, args));
            trace.packet.push(slice(time + weight, TrackEventType::SliceEnd, Vec::new()));
            continue;
        }
        let in_kernel = n.stacks[stack as usize].first().is_some_and(|&f| kernel[f as usize]);
        trace.packet.push(TracePacket {
            timestamp: Some(n.origin + time),
            timestamp_clock_id: Some(CLOCK_MONOTONIC),
            trusted_packet_sequence_id: Some(SAMPLES_SEQUENCE),
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
