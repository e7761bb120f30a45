//! Release builds of the `qosd` binary for glibc pack its relative
//! relocations (`-z pack-relative-relocs`, DT_RELR): the dynamic loader
//! reads ~8 KiB at start instead of ~700 KiB of `.rela.dyn`, which stayed
//! resident for the daemon's life (BENCHMARKS.md, "Memory"). Such a binary
//! needs glibc 2.36 or later to start (a dynamic one; a static one carries
//! its own loader); `QOSD_NO_PACK_RELOCS=1` at build time leaves it out for
//! an older glibc.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=QOSD_NO_PACK_RELOCS");
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    if var("PROFILE") == "release"
        && var("CARGO_CFG_TARGET_OS") == "linux"
        && var("CARGO_CFG_TARGET_ENV") == "gnu"
        && var("QOSD_NO_PACK_RELOCS").is_empty()
    {
        println!("cargo:rustc-link-arg-bin=qosd=-Wl,-z,pack-relative-relocs");
    }
}
