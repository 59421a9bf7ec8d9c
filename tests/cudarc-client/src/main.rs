//! A program written against `cudarc`, as a Rust application would use it: a context on
//! device 0, allocations on a stream, host↔device copies, and memory info. Prints one JSON
//! line of what it saw; exits non-zero (naming the step) on the first failure.
//!
//! Modes for the memory-cap tests (the same protocol as `tests/clients/tessera_client.c`):
//! - `capfill`: fill device 0 to the cap, largest chunks first and down to one byte; print
//!   `full {json}`, wait for a line on stdin, free one chunk and allocate again; print
//!   `done {json}`.
//! - `names`: calls the library does not intercept (name, attribute, count) and three
//!   allocate/free pairs; print `names {json}`.
//! - `hold <bytes>`: allocate on device 0, print `ready {json}`, sleep until killed.
//! - `primary`: the primary-context sequence of the context-cap tests; at each step print
//!   `step {json}` (its name and result code) and wait for a line on stdin.

use cudarc::driver::{result, sys, CudaContext, DriverError};
use std::process::ExitCode;

fn main() -> ExitCode {
    let outcome = match std::env::args().nth(1).as_deref() {
        None => run(),
        Some("capfill") => capfill(),
        Some("names") => names(),
        Some("hold") => hold(std::env::args().nth(2)),
        Some("primary") => primary(),
        Some(other) => Err(format!(
            "unknown mode `{other}`: capfill, names, hold or primary"
        )),
    };
    match outcome {
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

/// The driver's result code of a call, 0 for success.
fn code(r: &Result<impl Sized, DriverError>) -> u32 {
    match r {
        Ok(_) => 0,
        Err(e) => e.0 as u32,
    }
}

fn is_oom(e: &DriverError) -> bool {
    e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY
}

fn capfill() -> Result<String, String> {
    let ctx = CudaContext::new(0).map_err(step("CudaContext::new(0)"))?;
    let device_total = ctx.total_mem().map_err(step("total memory"))?;
    let (free_before, total_before) = result::mem_get_info().map_err(step("mem_get_info"))?;
    let mut chunks: Vec<(sys::CUdeviceptr, usize)> = Vec::new();
    // A start that is no power of two: reaching the cap exactly needs every size down to 1.
    let mut chunk = 100_000_000usize;
    while chunk >= 1 {
        loop {
            // SAFETY: the memory is only allocated and freed, never read.
            match unsafe { result::malloc_sync(chunk) } {
                Ok(p) => chunks.push((p, chunk)),
                Err(e) if is_oom(&e) => break,
                Err(e) => return Err(format!("cuMemAlloc_v2 while filling: {e:?}")),
            }
        }
        chunk /= 2;
    }
    let allocated: usize = chunks.iter().map(|c| c.1).sum();
    let (free_full, total_full) = result::mem_get_info().map_err(step("mem_get_info full"))?;
    // SAFETY: as above.
    let extra = unsafe { result::malloc_sync(1) };
    println!(
        "full {{\"pid\":{},\"binding\":\"cudarc\",\"allocated\":{allocated},\"allocations\":{},\
         \"free_before\":{free_before},\"total_before\":{total_before},\"device_total\":{device_total},\
         \"free_full\":{free_full},\"total_full\":{total_full},\"one_more_rc\":{}}}",
        std::process::id(),
        chunks.len(),
        code(&extra)
    );
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);

    let (first, freed) = chunks[0];
    // SAFETY: `first` came from malloc_sync and is freed once.
    unsafe { result::free_sync(first) }.map_err(step("cuMemFree_v2"))?;
    let (free_after_free, _) = result::mem_get_info().map_err(step("mem_get_info"))?;
    // SAFETY: as above.
    let refill = unsafe { result::malloc_sync(freed) };
    // SAFETY: as above.
    let again = unsafe { result::malloc_sync(1) };
    let (free_refilled, _) = result::mem_get_info().map_err(step("mem_get_info"))?;
    let rest = chunks[1..].iter().map(|c| c.0);
    for p in rest
        .chain(refill.iter().copied())
        .chain(extra.iter().copied())
        .chain(again.iter().copied())
    {
        // SAFETY: each pointer came from malloc_sync and is freed once.
        unsafe { result::free_sync(p) }.map_err(step("cuMemFree_v2"))?;
    }
    let (free_all_freed, _) = result::mem_get_info().map_err(step("mem_get_info"))?;
    Ok(format!(
        "done {{\"freed\":{freed},\"free_after_free\":{free_after_free},\"refill_rc\":{},\
         \"one_more_rc\":{},\"free_refilled\":{free_refilled},\"free_all_freed\":{free_all_freed}}}",
        code(&refill),
        code(&again)
    ))
}

fn hold(bytes: Option<String>) -> Result<String, String> {
    let bytes: usize = bytes
        .as_deref()
        .and_then(|b| b.parse().ok())
        .ok_or("hold <bytes>: a size in bytes")?;
    let _ctx = CudaContext::new(0).map_err(step("CudaContext::new(0)"))?;
    // SAFETY: the memory is only held, never read; the process is killed holding it.
    let p = unsafe { result::malloc_sync(bytes) }.map_err(step("cuMemAlloc_v2"))?;
    // println! flushes at the newline: stdout is line-buffered.
    println!(
        "ready {{\"pid\":{},\"binding\":\"cudarc\",\"bytes\":{bytes},\"ptr\":{p}}}",
        std::process::id()
    );
    loop {
        std::thread::park();
    }
}

fn names() -> Result<String, String> {
    let ctx = CudaContext::new(0).map_err(step("CudaContext::new(0)"))?;
    let name = ctx.name().map_err(step("device name"))?;
    let sms = ctx
        .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        .map_err(step("multiprocessor count"))?;
    let count = result::device::get_count().map_err(step("device count"))?;
    for _ in 0..3 {
        // SAFETY: the memory is only allocated and freed.
        let p = unsafe { result::malloc_sync(4096) }.map_err(step("cuMemAlloc_v2"))?;
        // SAFETY: p came from malloc_sync and is freed once.
        unsafe { result::free_sync(p) }.map_err(step("cuMemFree_v2"))?;
    }
    Ok(format!(
        "names {{\"binding\":\"cudarc\",\"name\":\"{name}\",\"sms\":{sms},\"count\":{count}}}"
    ))
}

/// One step of the primary-context sequence: reports it and waits for a line on stdin.
fn primary_step(name: &str, rc: sys::CUresult) {
    println!(
        "step {{\"pid\":{},\"name\":\"{name}\",\"rc\":{}}}",
        std::process::id(),
        rc as u32
    );
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
}

fn primary() -> Result<String, String> {
    result::init().map_err(step("cuInit"))?;
    let dev = result::device::get(0).map_err(step("cuDeviceGet"))?;
    let mut ctx = std::ptr::null_mut();
    let retain = |ctx: &mut sys::CUcontext| {
        // SAFETY: the driver's own entry point through cudarc's loaded library, with a
        // device it returned and a context out-pointer to our local.
        unsafe { sys::cuDevicePrimaryCtxRetain(ctx, dev) }
    };
    // SAFETY: as for the retain, with the same device.
    let release = || unsafe { sys::cuDevicePrimaryCtxRelease_v2(dev) };
    // SAFETY: as for the retain, with the same device.
    let reset = || unsafe { sys::cuDevicePrimaryCtxReset_v2(dev) };
    let must = |what: &'static str, rc: sys::CUresult| match rc {
        sys::CUresult::CUDA_SUCCESS => Ok(()),
        e => Err(format!("{what}: {e:?}")),
    };
    primary_step("retained", retain(&mut ctx));
    primary_step("retained_twice", retain(&mut ctx));
    primary_step("released_once", release());
    primary_step("released", release());
    must("cuDevicePrimaryCtxRetain", retain(&mut ctx))?;
    primary_step("reset", reset());
    primary_step("late_release", release());
    must("cuDevicePrimaryCtxRetain", retain(&mut ctx))?;
    must("cuDevicePrimaryCtxRetain", retain(&mut ctx))?;
    primary_step("reset_retained_twice", reset());
    primary_step("retained_again", retain(&mut ctx));
    Ok("primary done".to_string())
}
