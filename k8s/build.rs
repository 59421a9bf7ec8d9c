//! Compiles the kubelet protocols in `proto/` with protox (no `protoc` needed) and generates
//! both sides of each service: the plugin serves and calls, the tests' fake kubelet too.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = [
        "proto/deviceplugin.proto",
        "proto/podresources.proto",
        "proto/dra.proto",
        "proto/pluginregistration.proto",
    ];
    for proto in protos {
        println!("cargo:rerun-if-changed={proto}");
    }
    let files = protox::compile(protos, ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(files)?;
    Ok(())
}
