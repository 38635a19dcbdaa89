//! SystemTap's floatingpoint tapset (64-bit IEEE 754 values in longs,
//! computed on the integer registers by the runtime library): every
//! operation against the machine's own floating point on edge cases
//! (zeros, subnormals, infinities, NaN, the largest and smallest values,
//! halfway roundings) and a fixed sample of bit patterns, bit for bit.

mod common;
use common::telco_run as telco;

/// A fixed sequence of 64-bit patterns (splitmix64 from a constant seed).
fn patterns(n: usize) -> Vec<u64> {
    let mut x: u64 = 0x5eed_f00d_1234_5678;
    (0..n)
        .map(|_| {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        })
        .collect()
}

fn values() -> Vec<f64> {
    let mut v = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        1.5,
        2.5,
        -2.5,
        3.0,
        10.0,
        0.1,
        1e-300,
        1e300,
        f64::MAX,
        f64::MIN_POSITIVE,
        f64::from_bits(1),
        f64::from_bits(0x000f_ffff_ffff_ffff),
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        9007199254740993.0,
        123456789.125,
    ];
    // Random patterns, and ones of moderate size (exponents near 0).
    for p in patterns(60) {
        v.push(f64::from_bits(p));
        v.push(f64::from_bits((p & 0x800f_ffff_ffff_ffff) | (0x3f0 + (p >> 52) % 32) << 52));
    }
    v
}

fn same(a: f64, b: u64) -> bool {
    let b = f64::from_bits(b);
    (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits()
}

fn remainder(a: f64, b: f64) -> f64 {
    // SAFETY: a pure libm function of two numbers.
    unsafe { libc_remainder(a, b) }
}

extern "C" {
    #[link_name = "remainder"]
    fn libc_remainder(a: f64, b: f64) -> f64;
}

#[test]
fn arithmetic_is_the_machines_bit_for_bit() {
    let v = values();
    // Pairs: each value with the next one, and with itself.
    let mut pairs: Vec<(f64, f64)> =
        v.iter().enumerate().flat_map(|(i, &a)| [(a, v[(i + 1) % v.len()]), (a, a)]).collect();
    // Sums and products exactly halfway between two values: ties to even.
    let half_ulp = f64::EPSILON / 2.0;
    pairs.extend([
        (1.0, half_ulp),
        (1.0 + f64::EPSILON, half_ulp),
        (1.0, 3.0 * half_ulp),
        (-1.0, -half_ulp),
        (1.0 + f64::EPSILON, 1.0 + f64::EPSILON),
        (9007199254740992.0, 1.0),
        (9007199254740994.0, 1.0),
    ]);
    let mut script = String::from("probe begin {\n");
    for (i, (a, b)) in pairs.iter().enumerate() {
        script.push_str(&format!("  a[{i}] = {}; b[{i}] = {}\n", a.to_bits() as i64, b.to_bits() as i64));
    }
    script.push_str(&format!(
        "  for (i = 0; i < {}; i++)\n    printf(\"%x %x %x %x %x %x %d %d %d\\n\", fp_add(a[i], b[i]), fp_sub(a[i], b[i]), \
         fp_mul(a[i], b[i]), fp_div(a[i], b[i]), fp_rem(a[i], b[i]), fp_sqrt(a[i]), fp_eq(a[i], b[i]), \
         fp_le(a[i], b[i]), fp_lt(a[i], b[i]))\n  exit()\n}}\nglobal a[{}], b[{}]\n",
        pairs.len(),
        pairs.len(),
        pairs.len()
    ));
    let (out, err, code) = telco(&["-D", "MAXACTION=100000", "-e", &script]);
    assert_eq!(code, Some(0), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), pairs.len(), "{out}");
    for (&(a, b), line) in pairs.iter().zip(lines) {
        let w: Vec<&str> = line.split(' ').collect();
        let bits = |i: usize| u64::from_str_radix(w[i], 16).unwrap_or_else(|_| panic!("{line}"));
        let flag = |i: usize| w[i] == "1";
        let what = format!("a={a:e} ({:#x}) b={b:e} ({:#x}): {line}", a.to_bits(), b.to_bits());
        assert!(same(a + b, bits(0)), "add {what}");
        assert!(same(a - b, bits(1)), "sub {what}");
        assert!(same(a * b, bits(2)), "mul {what}");
        assert!(same(a / b, bits(3)), "div {what}");
        assert!(same(remainder(a, b), bits(4)), "rem {what}");
        assert!(same(a.sqrt(), bits(5)), "sqrt {what}");
        assert_eq!((flag(6), flag(7), flag(8)), (a == b, a <= b, a < b), "compare {what}");
    }
}

#[test]
fn conversions_and_text_are_systemtaps() {
    let cases: [(f64, i64); 8] =
        [(2.5, 0), (-2.5, 0), (2.5, 4), (-2.7, 1), (-2.2, 2), (2.2, 3), (1e15 + 0.5, 0), (3.5, 0)];
    let mut script = String::from("probe begin {\n");
    for (x, mode) in cases {
        script.push_str(&format!("  println(fp_to_long({}, {mode}, 0))\n", x.to_bits() as i64));
    }
    script.push_str(
        "  println(fp_to_string(long_to_fp(-7), 2))\n  println(fp_to_string(fp32_to_fp64(0x40490fdb), 6))\n  \
         println(fp_to_string(string_to_fp(\"1.25e2\"), 1))\n  exit()\n}\n",
    );
    let (out, err, code) = telco(&["-e", &script]);
    assert_eq!(code, Some(0), "{err}");
    let want: Vec<String> = cases
        .iter()
        .map(|&(x, mode)| match mode {
            0 => x.round_ties_even(),
            1 => x.trunc(),
            2 => x.floor(),
            3 => x.ceil(),
            _ => x.round(),
        } as i64)
        .map(|v| v.to_string())
        .chain(["-7.00".to_string(), "3.141593".to_string(), "125.0".to_string()])
        .collect();
    assert_eq!(out.lines().collect::<Vec<_>>(), want);
    let (_, err, code) = telco(&["-e", "probe begin { println(string_to_fp(\"1.2x\")); exit() }"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("invalid format"), "{err}");
}
