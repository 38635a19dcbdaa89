// Target for tests/dwarf.rs: a Rust struct behind a reference and a &str
// (a two-word slice passed in two registers), read by name.
pub struct Point {
    pub x: i32,
    pub y: i64,
}

#[inline(never)]
pub fn measure(name: &str, p: &Point, scale: u32) -> i64 {
    let r = (p.x as i64) * p.y * scale as i64 + name.len() as i64;
    println!("measure name={} x={} y={} scale={} r={}", name, p.x, p.y, scale, r);
    r
}

fn main() {
    let p = Point { x: 3, y: -4 };
    let name = String::from("widget");
    // Called through a pointer: the function keeps the platform's calling
    // convention at any optimisation level.
    let f: fn(&str, &Point, u32) -> i64 = std::hint::black_box(measure);
    std::hint::black_box(f(&name, &p, 5));
}
