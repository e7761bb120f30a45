//! The fuzz targets' checks over their seed corpora, as a normal test: every
//! file in `fuzz/seeds/<target>/` (seeds, and inputs that once crashed a
//! target) must pass the target's check. Fuzzing campaigns themselves run
//! with `scripts/fuzz` (cargo-fuzz, libFuzzer), not here: see docs/fuzzing.md.

#[path = "../fuzz/checks.rs"]
mod checks;

use std::path::Path;

#[test]
fn every_seed_passes_its_target() {
    let seeds = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds");
    let mut dirs: Vec<String> = std::fs::read_dir(&seeds)
        .unwrap_or_else(|e| panic!("{}: {e}", seeds.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    dirs.sort();
    let mut names: Vec<String> = checks::TARGETS.iter().map(|(n, _)| n.to_string()).collect();
    names.sort();
    assert_eq!(dirs, names, "fuzz/seeds/ and the fuzz targets differ");

    // Every fuzz target (fuzz/Cargo.toml) has its check here.
    let manifest = std::fs::read_to_string(seeds.join("../Cargo.toml")).unwrap();
    for name in &names {
        assert!(
            manifest.contains(&format!("path = \"fuzz_targets/{name}.rs\"")),
            "fuzz target {name} missing from fuzz/Cargo.toml"
        );
    }

    let mut total = 0;
    for (name, check) in checks::TARGETS {
        let dir = seeds.join(name);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "{}: no seed", dir.display());
        for f in files {
            let data = std::fs::read(&f).unwrap();
            let r = std::panic::catch_unwind(|| check(&data));
            assert!(r.is_ok(), "fuzz target {name} fails on {}", f.display());
            total += 1;
        }
    }
    assert!(total >= names.len());
}
