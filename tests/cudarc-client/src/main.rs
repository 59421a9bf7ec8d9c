//! A program written against `cudarc`, as a Rust application would use it: a context on
//! device 0, allocations on a stream, host↔device copies, and memory info. Prints one JSON
//! line of what it saw; exits non-zero (naming the step) on the first failure.

use cudarc::driver::{CudaContext, DriverError};
use std::process::ExitCode;

fn main() -> ExitCode {
    match run() {
        Ok(report) => {
            println!("{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("cudarc-client: {e}");
            ExitCode::FAILURE
        }
    }
}

/// What failed, with the driver's error.
fn step(what: &'static str) -> impl Fn(DriverError) -> String {
    move |e| format!("{what}: {e:?}")
}

fn run() -> Result<String, String> {
    const COUNT: usize = 1 << 20;
    let ctx = CudaContext::new(0).map_err(step("CudaContext::new(0)"))?;
    let name = ctx.name().map_err(step("device name"))?;
    let total_mem = ctx.total_mem().map_err(step("total memory"))?;
    let (free_before, total) = ctx.mem_get_info().map_err(step("mem_get_info"))?;
    let stream = ctx.default_stream();

    let host: Vec<u32> = (0..COUNT as u32)
        .map(|i| i.wrapping_mul(2_654_435_761) ^ 0xa5a5_a5a5)
        .collect();
    let on_device = stream.clone_htod(&host).map_err(step("clone_htod"))?;
    let (free_during, _) = ctx
        .mem_get_info()
        .map_err(step("mem_get_info after alloc"))?;
    let mut zeros = stream
        .alloc_zeros::<u32>(COUNT)
        .map_err(step("alloc_zeros"))?;
    stream
        .memcpy_dtod(&on_device, &mut zeros)
        .map_err(step("memcpy_dtod"))?;
    let back: Vec<u32> = stream.clone_dtoh(&zeros).map_err(step("clone_dtoh"))?;
    stream.synchronize().map_err(step("synchronize"))?;
    if back != host {
        let first = back
            .iter()
            .zip(&host)
            .position(|(a, b)| a != b)
            .unwrap_or(back.len());
        return Err(format!(
            "data did not round-trip: first difference at word {first}"
        ));
    }
    let bytes = (COUNT * 4) as u64;
    if (free_before as u64) < free_during as u64 + bytes {
        return Err(format!(
            "mem_get_info: free went from {free_before} to {free_during} after allocating {bytes} bytes"
        ));
    }
    drop(on_device);
    drop(zeros);
    stream
        .synchronize()
        .map_err(step("synchronize after free"))?;
    let (free_after, _) = ctx
        .mem_get_info()
        .map_err(step("mem_get_info after free"))?;
    Ok(format!(
        "{{\"name\":\"{name}\",\"total_mem\":{total_mem},\"total\":{total},\"free_before\":{free_before},\
         \"free_during\":{free_during},\"free_after\":{free_after},\"bytes\":{bytes},\"verified\":true}}"
    ))
}
