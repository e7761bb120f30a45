//! Generates the CRI (`runtime.v1`) client and server, and containerd's
//! events client (`containerd.services.events.v1`), from `proto/` at build
//! time. `protox` parses the .proto files in pure Rust, so no system `protoc`
//! is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
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
