//! Generates the CRI (`runtime.v1`) client and server, and containerd's
//! events client (`containerd.services.events.v1`), from `proto/` at build
//! time. `protox` parses the .proto files in pure Rust, so no system `protoc`
//! is needed.
//!
//! Release builds of the `qosd` binary for glibc also pack its relative
//! relocations (`-z pack-relative-relocs`, DT_RELR): the dynamic loader
//! reads ~8 KiB at start instead of ~700 KiB of `.rela.dyn`, which stayed
//! resident for the daemon's life (BENCHMARKS.md section 7, "RSS below
//! 16 MiB"). Such a binary needs glibc 2.36 or later to start (a dynamic
//! one; a static one carries its own loader); `QOSD_NO_PACK_RELOCS=1` at
//! build time leaves it out for an older glibc.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    println!("cargo:rerun-if-env-changed=QOSD_NO_PACK_RELOCS");
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    if var("PROFILE") == "release"
        && var("CARGO_CFG_TARGET_OS") == "linux"
        && var("CARGO_CFG_TARGET_ENV") == "gnu"
        && var("QOSD_NO_PACK_RELOCS").is_empty()
    {
        println!("cargo:rustc-link-arg-bin=qosd=-Wl,-z,pack-relative-relocs");
    }
    let fds = protox::compile(
        ["runtime/v1/cri.proto", "containerd/events/v1/events.proto"],
        ["proto"],
    )?;
    tonic_prost_build::configure()
        .build_client(true)
        // The server is used by unit tests (fake runtimes); it costs little.
        .build_server(true)
        .generate_default_stubs(true)
        .compile_fds(fds)?;
    Ok(())
}
