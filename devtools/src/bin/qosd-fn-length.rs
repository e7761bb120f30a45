//! `qosd-fn-length [LIMIT [ROOT]]`: the workspace's (or the checkout at
//! ROOT's) non-test functions longer than LIMIT lines (default 100),
//! longest first, each marked when a
//! `// Long by design:` comment justifies it; then the Rust files under a
//! `src/` that no module declares. `tests/architecture.rs` holds the
//! workspace to the limit with the same scanner.

#[path = "../fn_length.rs"]
mod fn_length;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

fn main() -> ExitCode {
    let limit: usize = match std::env::args().nth(1).map(|a| a.parse()) {
        None => 100,
        Some(Ok(n)) => n,
        Some(Err(e)) => {
            eprintln!("usage: qosd-fn-length [LIMIT [ROOT]]: {e}");
            return ExitCode::from(2);
        }
    };
    let root = std::env::args()
        .nth(2)
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".."));
    let scan = match fn_length::scan(&root) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("qosd-fn-length: {}: {e}", root.display());
            return ExitCode::FAILURE;
        }
    };
    let mut long: Vec<_> = scan.functions.iter().filter(|f| f.lines > limit).collect();
    long.sort_by(|a, b| b.lines.cmp(&a.lines).then(a.path.cmp(&b.path)));
    for f in &long {
        println!(
            "{:>4} {}:{} {}{}",
            f.lines,
            f.path.display(),
            f.line,
            f.name,
            if f.justified { " (long by design)" } else { "" }
        );
    }
    println!(
        "{} of {} functions over {limit} lines",
        long.len(),
        scan.functions.len()
    );
    for f in &scan.unreached {
        println!("not in any module tree: {}", f.display());
    }
    ExitCode::SUCCESS
}
