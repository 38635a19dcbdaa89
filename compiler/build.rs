fn main() {
    // Generates src/grammar.rs into OUT_DIR from src/grammar.lalrpop.
    if let Err(e) = lalrpop::process_src() {
        eprintln!("lalrpop failed: {e}");
        std::process::exit(1);
    }
}
