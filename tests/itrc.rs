//! ITRC end to end: the Recorder writes a file from a simulated run of real
//! x86_64 code; an independent Python reader (tests/itrc_reader.py,
//! written from the format description) reads it back and the register
//! values are checked against the simulation; `telco-stap itrc-dump` prints
//! it, disassembles it and converts it to Chrome JSON; an arm64 file laid
//! out by hand as Frida's itracer writes it is read by both; malformed files
//! fail cleanly.

use iced_x86::code_asm::*;
use iced_x86::{Decoder, DecoderOptions, FlowControl, Mnemonic, OpKind, Register};
use serde_json::Value as Json;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use telco_itrc::x64::{gpr_index, X64Regs, REGISTERS, VECTORS};
use telco_itrc::{ModuleInfo, Recorder, RecorderConfig, RecorderStats};

mod common;

const BASE: u64 = 0x401000;
const RETURN_TO: u64 = 0x7777;
const STACK: u64 = 0x7fff0000;

/// `f`: sums 3+2+1 into rax, calling `g` (which doubles rax) each time.
fn program() -> Vec<u8> {
    fn build() -> Result<Vec<u8>, IcedError> {
        let mut a = CodeAssembler::new(64)?;
        let mut top = a.create_label();
        let mut g = a.create_label();
        a.push(rbx)?;
        a.mov(ebx, 3)?;
        a.xor(eax, eax)?;
        a.set_label(&mut top)?;
        a.add(rax, rbx)?;
        a.call(g)?;
        a.dec(ebx)?;
        a.jne(top)?;
        a.pop(rbx)?;
        a.ret()?;
        a.set_label(&mut g)?;
        a.add(rax, rax)?;
        a.ret()?;
        a.assemble(BASE)
    }
    build().expect("assemble")
}

/// Just enough of an x86_64 to run `program()`: what the tracer would see
/// after each single step. Flags are simplified (ZF and SF only).
struct Machine {
    code: Vec<u8>,
    regs: X64Regs,
    stack: HashMap<u64, u64>,
}

impl Machine {
    fn get(&self, r: Register) -> u64 {
        let v = self.regs.get(gpr_index(r).expect("a GPR")).expect("a machine register");
        if r.size() == 4 {
            v & 0xffff_ffff
        } else {
            v
        }
    }

    /// 32-bit writes zero-extend, as on the CPU.
    fn set(&mut self, r: Register, v: u64) {
        let v = if r.size() == 4 { v & 0xffff_ffff } else { v };
        self.regs.set(gpr_index(r).expect("a GPR"), v);
    }

    fn flags(&mut self, r: Register, v: u64) {
        let sign = if r.size() == 4 { v & 0x8000_0000 != 0 } else { v >> 63 != 0 };
        self.regs.rflags = 0x202 | if v == 0 { 0x40 } else { 0 } | if sign { 0x80 } else { 0 };
    }

    /// Executes one instruction; returns true if it ends a basic block.
    fn step(&mut self) -> bool {
        let at = (self.regs.rip - BASE) as usize;
        let mut d = Decoder::with_ip(64, &self.code[at..], self.regs.rip, DecoderOptions::NONE);
        let i = d.decode();
        self.regs.rip = i.next_ip();
        let src = |m: &Machine| if i.op1_kind() == OpKind::Register { m.get(i.op1_register()) } else { i.immediate(1) };
        match i.mnemonic() {
            Mnemonic::Push => {
                let v = self.get(i.op0_register());
                self.regs.rsp -= 8;
                self.stack.insert(self.regs.rsp, v);
            }
            Mnemonic::Pop => {
                let v = self.stack[&self.regs.rsp];
                self.regs.rsp += 8;
                self.set(i.op0_register(), v);
            }
            Mnemonic::Mov => {
                let v = src(self);
                self.set(i.op0_register(), v);
            }
            Mnemonic::Xor | Mnemonic::Add => {
                let (a, b) = (self.get(i.op0_register()), src(self));
                let v = if i.mnemonic() == Mnemonic::Xor { a ^ b } else { a.wrapping_add(b) };
                self.set(i.op0_register(), v);
                self.flags(i.op0_register(), self.get(i.op0_register()));
            }
            Mnemonic::Dec => {
                let v = self.get(i.op0_register()).wrapping_sub(1);
                self.set(i.op0_register(), v);
                self.flags(i.op0_register(), self.get(i.op0_register()));
            }
            Mnemonic::Jne => {
                if self.regs.rflags & 0x40 == 0 {
                    self.regs.rip = i.near_branch_target();
                }
            }
            Mnemonic::Call => {
                self.regs.rsp -= 8;
                self.stack.insert(self.regs.rsp, i.next_ip());
                self.regs.rip = i.near_branch_target();
            }
            Mnemonic::Ret => {
                self.regs.rip = self.stack[&self.regs.rsp];
                self.regs.rsp += 8;
            }
            m => panic!("the test machine does not know {m:?}"),
        }
        i.flow_control() != FlowControl::Next
    }
}

/// What the simulation saw: registers after every block's last
/// instruction, and the number of instructions executed.
struct Truth {
    block_ends: Vec<X64Regs>,
    steps: u64,
}

fn record(path: &Path, config: RecorderConfig) -> (Truth, RecorderStats) {
    let code = program();
    let regs = X64Regs { rip: BASE, rsp: STACK, rbx: 0x1234, rax: 0x5555, rflags: 0x202, ..Default::default() };
    let mut m = Machine { code: code.clone(), regs, stack: HashMap::from([(STACK, RETURN_TO)]) };
    let file = std::fs::File::create(path).expect("create the ITRC file");
    let mut rec = Recorder::new(std::io::BufWriter::new(file), config).expect("recorder");
    rec.add_module(ModuleInfo { name: "prog".into(), path: "/tmp/prog".into(), base: 0x400000, size: 0x10000 });
    rec.start(&m.regs, m.stack[&STACK]).expect("start");
    let mut read = |addr: u64, buf: &mut [u8]| {
        let Some(at) = addr.checked_sub(BASE).map(|a| a as usize) else { return 0 };
        let n = buf.len().min(code.len().saturating_sub(at));
        buf[..n].copy_from_slice(&code[at..at + n]);
        n
    };
    let mut truth = Truth { block_ends: Vec::new(), steps: 0 };
    // The ptrace loop's shape: step, then hand the registers over; stop
    // once the traced function has returned.
    while m.regs.rip != RETURN_TO {
        let pc = m.regs.rip;
        let ends_block = m.step();
        truth.steps += 1;
        rec.step(pc, &m.regs, &mut read).expect("step");
        if ends_block {
            truth.block_ends.push(m.regs);
        }
    }
    let (_, stats) = rec.end().expect("end");
    (truth, stats)
}

fn scratch(name: &str) -> PathBuf {
    common::scratch("itrc").join(name)
}

/// Runs the Python reader; `None` (said in the output) if python3 is not
/// installed.
fn python_read(path: &Path) -> Option<Output> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/itrc_reader.py");
    match Command::new("python3").arg(script).arg(path).output() {
        Ok(o) => Some(o),
        Err(e) => {
            println!("NOT RUN: the Python cross-check needs python3 ({e})");
            None
        }
    }
}

fn python_json(path: &Path) -> Option<Json> {
    let o = python_read(path)?;
    assert!(o.status.success(), "itrc_reader.py failed: {}", String::from_utf8_lossy(&o.stderr));
    Some(serde_json::from_slice(&o.stdout).expect("the Python reader prints JSON"))
}

fn telco(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_telco-stap")).args(args).output().expect("run telco-stap")
}

fn ok_stdout(o: &Output) -> String {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "stderr: {err}");
    assert!(!err.contains("panicked"), "{err}");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn hex(s: &Json) -> u64 {
    u64::from_str_radix(s.as_str().expect("a hex string").trim_start_matches("0x"), 16).expect("hex")
}

/// Where `g` is and where its calls return to, from the code itself.
fn call_facts() -> (u64, u64) {
    let code = program();
    let mut d = Decoder::with_ip(64, &code, BASE, DecoderOptions::NONE);
    let call = d.iter().find(|i| i.mnemonic() == Mnemonic::Call).expect("a call");
    (call.near_branch_target(), call.next_ip())
}

#[test]
fn recorded_x86_64_trace_reads_back_in_python_with_the_simulated_values() {
    let path = scratch("x86.itrc");
    // Small chunks: the file has many CHUNK records.
    let (truth, stats) = record(&path, RecorderConfig { chunk_size: 64, ..Default::default() });
    assert_eq!((stats.records, stats.lost, stats.partial), (truth.block_ends.len() as u64, 0, 0));
    let Some(py) = python_json(&path) else { return };

    let names: Vec<&str> = py["registers"].as_array().unwrap().iter().map(|r| r[0].as_str().unwrap()).collect();
    let ours: Vec<&str> = REGISTERS.iter().chain(VECTORS.iter()).copied().collect();
    assert_eq!(names, ours);
    let sizes: Vec<u64> = py["registers"].as_array().unwrap().iter().map(|r| r[1].as_u64().unwrap()).collect();
    assert!(sizes[..REGISTERS.len()].iter().all(|&s| s == 8), "{sizes:?}");
    assert!(sizes[REGISTERS.len()..].iter().all(|&s| s == 32), "{sizes:?}");
    assert_eq!(hex(&py["start"]["rip"]), BASE);
    assert_eq!(hex(&py["start"]["rbx"]), 0x1234);
    assert_eq!(hex(&py["start"]["ra"]), RETURN_TO);
    assert_eq!(py["end"], true);
    assert_eq!(py["lost"], Json::Null);
    assert_eq!(py["python_json"], true, "messages are byte for byte what Frida's itracer.py writes");
    let types: Vec<&str> = py["messages"].as_array().unwrap().iter().map(|m| m.as_str().unwrap()).collect();
    assert_eq!((types[0], *types.last().unwrap()), ("itrace:start", "itrace:end"));

    // Replaying the writes gives the simulated registers at every block end.
    let (g, after_call) = call_facts();
    let records = py["records"].as_array().unwrap();
    assert_eq!(records.len(), truth.block_ends.len());
    let mut state: HashMap<String, u64> =
        py["start"].as_object().unwrap().iter().map(|(k, v)| (k.clone(), hex(v))).collect();
    for (i, (r, want)) in records.iter().zip(&truth.block_ends).enumerate() {
        let address = hex(&r["address"]);
        let writes = r["writes"].as_array().unwrap();
        assert_eq!((writes[0][0].as_u64(), writes[0][1].as_str()), (Some(0), Some("ra")), "record {i}");
        let ra = hex(&writes[0][2]);
        assert_eq!(ra, if address == g { after_call } else { RETURN_TO }, "ra of record {i} at {address:#x}");
        for w in writes {
            state.insert(w[1].as_str().unwrap().to_string(), hex(&w[2]));
        }
        for (k, name) in REGISTERS.iter().enumerate().skip(1).take(17) {
            assert_eq!(state[*name], want.get(k as u32).unwrap(), "{name} after record {i} at {address:#x}");
        }
        // rip is never written: the next record's address says it.
        if let Some(next) = records.get(i + 1) {
            assert_eq!(hex(&next["address"]), want.rip, "the block after record {i}");
        }
    }
    assert_eq!(state["rax"], 34, "((3 * 2 + 2) * 2 + 1) * 2");

    // Every declared block has its code, and the first is the function.
    let first = &py["blocks"][format!("{BASE:#x}")];
    assert_eq!(first["name"], "prog!0x1000");
    let code = hex_bytes(first["code"].as_str().unwrap());
    assert_eq!(code, program()[..code.len()]);
    std::fs::remove_file(&path).ok();
}

fn hex_bytes(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

#[test]
fn over_budget_traces_say_how_many_records_were_lost() {
    let path = scratch("budget.itrc");
    let (truth, stats) = record(&path, RecorderConfig { max_bytes: Some(2400), ..Default::default() });
    assert!(stats.lost > 0 && stats.records > 0, "{stats:?}");
    assert_eq!(stats.records + stats.lost, truth.block_ends.len() as u64);
    let len = std::fs::metadata(&path).unwrap().len();
    assert!(len <= 2400 + 100, "{len}");
    if let Some(py) = python_json(&path) {
        assert_eq!(py["python_json"], true, "itrace:lost as Frida writes it");
        assert_eq!(py["lost"].as_u64(), Some(stats.lost));
        assert_eq!(py["records"].as_array().unwrap().len() as u64, stats.records);
    }
    let out = ok_stdout(&telco(&["itrc-dump", path.to_str().unwrap()]));
    assert!(out.contains(&format!("lost: {} block records dropped so far\nend\n", stats.lost)), "{out}");
    std::fs::remove_file(&path).ok();
}

#[test]
fn itrc_dump_prints_disassembles_and_converts_our_x86_64_files() {
    let path = scratch("dump.itrc");
    let (truth, _) = record(&path, RecorderConfig::default());
    let file = path.to_str().unwrap();
    let (g, after_call) = call_facts();

    let out = ok_stdout(&telco(&["itrc-dump", file]));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "itrc: x86_64, 35 registers");
    assert_eq!(lines[1], "start:");
    assert!(lines[2].starts_with("    rip=0x401000 "), "{}", lines[2]);
    assert!(out.contains(" rbx=0x1234 "), "{out}");
    assert!(out.contains("ra=0x7777\n"), "{out}");
    // push rbx (1 byte), mov ebx,3 (5), xor eax,eax (2), add rax,rbx (3), call g (5).
    assert!(
        out.contains(
            "compile 0x401000 prog!0x1000: 16 bytes, writes +0 ra, +1 rsp, +6 rbx, +8 rax, +8 rflags, \
             +11 rax, +11 rflags, +16 rsp\n"
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "exec #1 0x401000 prog!0x1000: +0 ra=0x7777  +1 rsp=0x7ffefff8  +6 rbx=0x3  +8 rax=0x0  \
             +8 rflags=0x242  +11 rax=0x3  +11 rflags=0x202  +16 rsp=0x7ffefff0\n"
        ),
        "{out}"
    );
    assert!(out.contains(&format!("exec #2 {g:#x} prog!{:#x}: +0 ra={after_call:#x}  ", g - 0x400000)), "{out}");
    assert_eq!(lines.iter().filter(|l| l.starts_with("exec #")).count(), truth.block_ends.len());
    let blocks = lines.iter().filter(|l| l.starts_with("compile ")).count();
    assert_eq!(
        *lines.last().unwrap(),
        format!("summary: {blocks} blocks compiled, {} blocks executed, 0 lost, end reached", truth.block_ends.len())
    );

    let out = ok_stdout(&telco(&["itrc-dump", "--disasm", file]));
    assert!(out.contains("\n    0x401000  53                    push rbx"), "{out}");
    assert!(out.contains(&format!("call {g:#x}")), "{out}");
    assert!(out.contains("xor eax, eax"), "{out}");
    assert!(out.lines().any(|l| l.contains("dec ebx") && l.ends_with("; rbx rflags")), "{out}");

    let chrome = scratch("dump.json");
    ok_stdout(&telco(&["itrc-dump", file, "--chrome", chrome.to_str().unwrap()]));
    let json: Json = serde_json::from_slice(&std::fs::read(&chrome).unwrap()).expect("valid Chrome JSON");
    let events = json["traceEvents"].as_array().unwrap();
    let of = |cat: &str| events.iter().filter(|e| e["cat"] == cat).collect::<Vec<_>>();
    let blocks = of("block");
    assert_eq!(blocks.len(), truth.block_ends.len());
    assert!(blocks.iter().all(|e| e["ph"] == "X" && e["pid"] == 1 && e["tid"] == 1));
    let total: u64 = blocks.iter().map(|e| e["dur"].as_u64().unwrap()).sum();
    assert_eq!(total, truth.steps, "1 µs per instruction");
    let functions = of("function");
    let root = functions.iter().find(|e| e["name"] == "prog!0x1000").expect("the traced function");
    assert_eq!((root["ts"].as_u64(), root["dur"].as_u64()), (Some(0), Some(truth.steps)));
    let calls: Vec<_> = functions.iter().filter(|e| e["name"] == format!("prog!{:#x}", g - 0x400000)).collect();
    assert_eq!(calls.len(), 3, "{functions:?}");
    assert!(calls.iter().all(|c| c["dur"] == 2), "g runs add + ret: {calls:?}");
    assert!(events.iter().any(|e| e["ph"] == "M" && e["name"] == "thread_name"));
    assert!(events.iter().any(|e| e["ph"] == "i" && e["name"] == "itrace:end"));
    std::fs::remove_file(&path).ok();
    std::fs::remove_file(&chrome).ok();
}

// --- arm64, laid out as Frida's itracer writes it ---------------------------

fn message(out: &mut Vec<u8>, json: &str, data: &[u8]) {
    out.extend_from_slice(&1u32.to_be_bytes());
    out.extend_from_slice(&(json.len() as u32).to_be_bytes());
    out.extend_from_slice(json.as_bytes());
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
}

fn chunk(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&2u32.to_be_bytes());
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(bytes);
}

/// Frida's arm64 register list: pc, sp, nzcv, x0-x28, fp, lr (index 33),
/// v0-v31 (16 bytes each); the start data is the raw GumArm64CpuContext.
fn arm64_file() -> Vec<u8> {
    let mut regs = vec![("pc".to_string(), 8), ("sp".into(), 8), ("nzcv".into(), 8)];
    regs.extend((0..29).map(|i| (format!("x{i}"), 8)));
    regs.extend([("fp".into(), 8), ("lr".into(), 8)]);
    regs.extend((0..32).map(|i| (format!("v{i}"), 16)));
    let list: Vec<String> = regs.iter().map(|(n, s)| format!("{{\"name\": \"{n}\", \"size\": {s}}}")).collect();
    let mut context = Vec::new();
    for v in [0x100000u64, 0x7000, 0x6000_0000] {
        context.extend_from_slice(&v.to_le_bytes());
    }
    for i in 0..29u64 {
        context.extend_from_slice(&i.to_le_bytes());
    }
    context.extend_from_slice(&0x7100u64.to_le_bytes());
    context.extend_from_slice(&0xdeadu64.to_le_bytes());
    for i in 0..32u128 {
        context.extend_from_slice(&((i << 64) | 0xff).to_le_bytes());
    }
    assert_eq!(context.len(), 784, "sizeof(GumArm64CpuContext)");

    let mut f = b"ITRC".to_vec();
    // Stalker compiles the first block before it runs, so Frida's first
    // compile precedes the start. Block A: ldr x0; ldr q0; bl B.
    message(
        &mut f,
        concat!(
            r#"{"type": "itrace:compile", "payload": {"writes": [[0, 33], [4, 3], [8, 34]], "address": "0x100000", "#,
            r#""size": 12, "compiled": {"address": "0x7f000000", "size": 96}, "name": "app!0x0", "#,
            r#""module": {"path": "/data/app", "base": "0x100000"}}}"#
        ),
        &[],
    );
    message(&mut f, &format!(r#"{{"type": "itrace:start", "payload": [{}]}}"#, list.join(", ")), &context);
    // Block B (the callee): sub sp; ret.
    message(
        &mut f,
        concat!(
            r#"{"type": "itrace:compile", "payload": {"writes": [[0, 33], [4, 1]], "address": "0x200000", "#,
            r#""size": 8, "compiled": {"address": "0x7f000100", "size": 64}, "name": "libx.so!0x0", "#,
            r#""module": {"path": "/system/lib64/libx.so", "base": "0x200000"}}}"#
        ),
        &[],
    );
    // Block C, where B returns to: b somewhere (no module).
    message(
        &mut f,
        concat!(
            r#"{"type": "itrace:compile", "payload": {"writes": [[0, 33]], "address": "0x10000c", "#,
            r#""size": 4, "compiled": {"address": "0x7f000200", "size": 32}, "name": "0x10000c"}}"#
        ),
        &[],
    );
    let mut stream = Vec::new();
    for v in [0x100000u64, 0xdead, 0x42] {
        stream.extend_from_slice(&v.to_le_bytes());
    }
    stream.extend_from_slice(&0x0102030405060708090a0b0c0d0e0f10u128.to_le_bytes());
    for v in [0x200000u64, 0x10000c, 0x6ff0, 0x10000c, 0x10000c] {
        stream.extend_from_slice(&v.to_le_bytes());
    }
    // Frida's reader cuts its ring buffer anywhere: records straddle chunks.
    chunk(&mut f, &stream[..10]);
    chunk(&mut f, &stream[10..37]);
    chunk(&mut f, &stream[37..]);
    message(&mut f, r#"{"type": "itrace:lost", "payload": {"lost": 2}}"#, &[]);
    message(&mut f, r#"{"type": "itrace:end"}"#, &[]);
    f
}

#[test]
fn frida_arm64_files_are_read_by_itrc_dump_and_the_python_reader() {
    let path = scratch("arm64.itrc");
    std::fs::write(&path, arm64_file()).unwrap();
    let file = path.to_str().unwrap();

    if let Some(py) = python_json(&path) {
        let records = py["records"].as_array().unwrap();
        assert_eq!(records.len(), 3);
        assert_eq!(
            records[0]["writes"],
            serde_json::json!([[0, "lr", "0xdead"], [4, "x0", "0x42"], [8, "v0", "0x102030405060708090a0b0c0d0e0f10"]])
        );
        assert_eq!(records[1]["writes"], serde_json::json!([[0, "lr", "0x10000c"], [4, "sp", "0x6ff0"]]));
        assert_eq!(py["start"]["v31"], "0x1f00000000000000ff");
        assert_eq!((py["lost"].as_u64(), &py["end"]), (Some(2), &Json::Bool(true)));
        assert_eq!(py["python_json"], true);
    }

    let out = ok_stdout(&telco(&["itrc-dump", "--disasm", file]));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "itrc: arm64, 66 registers");
    assert!(lines[2].starts_with("    pc=0x100000"), "{out}");
    assert!(out.contains(" v31=0x000000000000001f00000000000000ff"), "{out}");
    // The compile that came before the start is printed after it, with names.
    assert!(out.contains("compile 0x100000 app!0x0: 12 bytes, writes +0 lr, +4 x0, +8 v0\n"), "{out}");
    assert!(out.contains("(no code bytes in this file, so no disassembly: Frida's itracer does not record them)"));
    assert!(out.contains("compile 0x10000c: 4 bytes, writes +0 lr\n    (no code bytes)\n"), "{out}");
    assert!(
        out.contains("exec #1 0x100000 app!0x0: +0 lr=0xdead  +4 x0=0x42  +8 v0=0x0102030405060708090a0b0c0d0e0f10\n"),
        "{out}"
    );
    assert!(out.contains("exec #2 0x200000 libx.so!0x0: +0 lr=0x10000c  +4 sp=0x6ff0\n"), "{out}");
    assert!(out.contains("exec #3 0x10000c: +0 lr=0x10000c\nlost: 2 block records dropped so far\nend\n"), "{out}");
    assert_eq!(*lines.last().unwrap(), "summary: 3 blocks compiled, 3 blocks executed, 2 lost, end reached");

    // Calls found through lr: B is a call from A (lr = A's end), C its return.
    let chrome = scratch("arm64.json");
    ok_stdout(&telco(&["itrc-dump", file, "--chrome", chrome.to_str().unwrap()]));
    let json: Json = serde_json::from_slice(&std::fs::read(&chrome).unwrap()).expect("valid Chrome JSON");
    let events = json["traceEvents"].as_array().unwrap();
    let call = events.iter().find(|e| e["cat"] == "function" && e["name"] == "libx.so!0x0").expect("B's call");
    assert_eq!((call["ts"].as_u64(), call["dur"].as_u64()), (Some(3), Some(2)), "A is 3 instructions, B 2");
    let root = events.iter().find(|e| e["cat"] == "function" && e["name"] == "app!0x0").expect("the root");
    assert_eq!(root["dur"].as_u64(), Some(6));
    assert!(events.iter().any(|e| e["ph"] == "i" && e["name"] == "itrace:lost" && e["args"]["lost"] == 2));
    std::fs::remove_file(&path).ok();
    std::fs::remove_file(&chrome).ok();
}

// --- malformed files ----------------------------------------------------------

fn assert_fails(o: &Output, needles: &[&str]) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "stdout: {}\nstderr: {err}", String::from_utf8_lossy(&o.stdout));
    for n in needles {
        assert!(err.contains(n), "stderr lacks {n:?}: {err}");
    }
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn malformed_files_fail_with_a_clear_message() {
    let good = arm64_file();
    let path = scratch("bad.itrc");
    let file = path.to_str().unwrap();

    std::fs::write(&path, b"\x7fELF\x02\x01\x01").unwrap();
    assert_fails(&telco(&["itrc-dump", file]), &["cannot read", "not an ITRC file: it starts with \"\\x7fELF\""]);

    // Cut inside the last message: what came before is still printed.
    std::fs::write(&path, &good[..good.len() - 3]).unwrap();
    let o = telco(&["itrc-dump", file]);
    assert_fails(&o, &["is not a valid ITRC file", "the file is truncated"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("exec #3 0x10000c"));

    // Cut anywhere: never a panic, always exit 1 or a clean shorter file.
    for n in (4..good.len()).step_by(29) {
        std::fs::write(&path, &good[..n]).unwrap();
        let o = telco(&["itrc-dump", file]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!err.contains("panicked"), "cut at {n}: {err}");
        assert!(o.status.code() == Some(1) || o.status.code() == Some(0), "cut at {n}: {err}");
        if let Some(py) = python_read(&path) {
            // The Python reader agrees on which cuts are malformed.
            assert_eq!(
                py.status.code(),
                o.status.code(),
                "cut at {n}: {err} / {}",
                String::from_utf8_lossy(&py.stderr)
            );
        }
    }

    // A block record whose block was never declared.
    let mut f = b"ITRC".to_vec();
    message(&mut f, r#"{"type": "itrace:start", "payload": [{"name": "pc", "size": 8}]}"#, &[0; 8]);
    chunk(&mut f, &0x1234u64.to_le_bytes());
    std::fs::write(&path, &f).unwrap();
    assert_fails(&telco(&["itrc-dump", file]), &["block 0x1234, which no itrace:compile declared"]);

    // Malformed JSON.
    let mut f = b"ITRC".to_vec();
    message(&mut f, r#"{"type": "itrace:start", "payload": [}"#, &[]);
    std::fs::write(&path, &f).unwrap();
    assert_fails(&telco(&["itrc-dump", file]), &["malformed JSON in the message at byte 4"]);
    std::fs::remove_file(&path).ok();
}
