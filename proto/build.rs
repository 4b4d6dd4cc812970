//! Generates the gRPC code from `proto/ledger.proto` and the standard health service
//! (`proto/health.proto`). madsim-tonic-build writes both the
//! real tonic code and the simulated one; `tonic::include_proto!` picks the right one.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // No system protoc: use the one shipped in protoc-bin-vendored.
    std::env::set_var("PROTOC", protoc_bin_vendored::protoc_bin_path()?);
    println!("cargo:rerun-if-changed=proto/ledger.proto");
    println!("cargo:rerun-if-changed=proto/health.proto");
    tonic_build::configure()
        .compile_protos(&["proto/ledger.proto", "proto/health.proto"], &["proto"])?;
    Ok(())
}
