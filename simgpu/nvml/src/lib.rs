//! The simulated NVML, `libnvidia-ml.so.1`.
//!
//! Every answer comes from the node state of the `simgpu` crate, opened by the first
//! `nvmlInit`: devices, the memory each process holds, and the busy time of each device's
//! engine, from which utilizations are computed (see [`sampling`]). Every export is declared
//! once through [`nvml_entry!`], which catches panics.

#[macro_use]
pub mod ffi;
pub mod activity;
pub mod device;
pub mod faults;
pub mod links;
pub mod processes;
pub mod sampling;
pub mod session;
pub mod system;

#[cfg(test)]
mod tests {
    //! The exports end to end, on a node of their own. One test, because NVML's state is
    //! process-wide.

    use crate::activity::*;
    use crate::device::*;
    use crate::ffi::*;
    use crate::system::*;
    use std::ffi::{c_char, CStr};

    fn text(buf: &[c_char]) -> String {
        // SAFETY: every string entry NUL-terminates inside the buffer it was given.
        unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn a_monitor_sees_what_a_process_holds_and_runs() {
        let state = std::env::temp_dir().join(format!("simgpu-nvml-test-{}", std::process::id()));
        let _ = std::fs::remove_file(&state);
        std::env::set_var(simgpu::config::ENV_STATE, &state);
        std::env::set_var(simgpu::config::ENV_DEVICES, "T4,tiny:1GiB:4:7.0");
        let mut count = 0u32;
        let mut dev: NvmlDevice = std::ptr::null_mut();
        let mut name = [0 as c_char; buffer::DEVICE_NAME];
        // SAFETY: every pointer passed is a valid local of the type and size the entry point
        // expects, or deliberately null (here and in the block below).
        unsafe {
            assert_eq!(nvmlDeviceGetCount_v2(&mut count), code::UNINITIALIZED);
            assert_eq!(nvmlInit_v2(), code::SUCCESS);
            assert_eq!(nvmlInit(), code::SUCCESS);
            assert_eq!(nvmlShutdown(), code::SUCCESS);
            assert_eq!(nvmlDeviceGetCount_v2(&mut count), code::SUCCESS);
            assert_eq!(count, 2);
            assert_eq!(
                nvmlDeviceGetHandleByIndex_v2(2, &mut dev),
                code::INVALID_ARGUMENT
            );
            assert_eq!(nvmlDeviceGetHandleByIndex_v2(1, &mut dev), code::SUCCESS);
            assert_eq!(nvmlDeviceGetName(dev, name.as_mut_ptr(), 64), code::SUCCESS);
            assert_eq!(text(&name), "tiny");
            assert_eq!(
                nvmlDeviceGetName(dev, name.as_mut_ptr(), 4),
                code::INSUFFICIENT_SIZE
            );
            let mut uuid = [0 as c_char; buffer::DEVICE_UUID];
            assert_eq!(nvmlDeviceGetUUID(dev, uuid.as_mut_ptr(), 80), code::SUCCESS);
            let mut by_uuid: NvmlDevice = std::ptr::null_mut();
            assert_eq!(
                nvmlDeviceGetHandleByUUID(uuid.as_ptr(), &mut by_uuid),
                code::SUCCESS
            );
            assert_eq!(by_uuid, dev);
            let (mut major, mut minor) = (0, 0);
            assert_eq!(
                nvmlDeviceGetCudaComputeCapability(dev, &mut major, &mut minor),
                0
            );
            assert_eq!((major, minor), (7, 0));
            let mut stray = 0u8;
            let stray: NvmlDevice = std::ptr::from_mut(&mut stray).cast();
            assert_eq!(
                nvmlDeviceGetName(stray, name.as_mut_ptr(), 64),
                code::INVALID_ARGUMENT
            );
        }

        // A process of the node holds 256 MiB of device 0 and runs 50 ms of kernels on it.
        let node = simgpu::node::Node::open_from_env().unwrap();
        let process = Box::leak(Box::new(node)).attach().unwrap();
        process.reserve_memory(0, 256 << 20).unwrap();
        let engine = process.engine(0);
        let start = simgpu::clock::now_ns();
        engine.run(start, 50_000_000);
        engine.idle();
        let pid = std::process::id();

        // SAFETY: as above.
        unsafe {
            assert_eq!(nvmlDeviceGetHandleByIndex(0, &mut dev), code::SUCCESS);
            let mut memory = Memory::default();
            assert_eq!(nvmlDeviceGetMemoryInfo(dev, &mut memory), code::SUCCESS);
            assert_eq!((memory.total, memory.used), (16 << 30, 256 << 20));
            assert_eq!(memory.free, memory.total - memory.used);
            let mut v2 = MemoryV2 {
                version: MEMORY_V2_VERSION,
                ..Default::default()
            };
            assert_eq!(nvmlDeviceGetMemoryInfo_v2(dev, &mut v2), code::SUCCESS);
            assert_eq!(v2.used, 256 << 20);
            v2.version = 1;
            assert_eq!(
                nvmlDeviceGetMemoryInfo_v2(dev, &mut v2),
                code::ARGUMENT_VERSION_MISMATCH
            );

            let mut n = 0u32;
            let r = nvmlDeviceGetComputeRunningProcesses_v3(dev, &mut n, std::ptr::null_mut());
            assert_eq!((r, n), (code::INSUFFICIENT_SIZE, 1));
            let mut infos = [ProcessInfoV2::default(); 4];
            n = 4;
            let r = nvmlDeviceGetComputeRunningProcesses_v3(dev, &mut n, infos.as_mut_ptr());
            assert_eq!((r, n, infos[0].pid), (code::SUCCESS, 1, pid));
            assert_eq!(infos[0].used_gpu_memory, 256 << 20);
            assert_eq!(infos[0].gpu_instance_id, INSTANCE_ID_NONE);

            let mut util = Utilization::default();
            assert_eq!(nvmlDeviceGetUtilizationRates(dev, &mut util), code::SUCCESS);
            assert!(util.gpu > 0 && util.gpu <= 100, "gpu {}", util.gpu);
            let mut samples = [ProcessUtilizationSample::default(); 4];
            n = 4;
            let r = nvmlDeviceGetProcessUtilization(dev, samples.as_mut_ptr(), &mut n, 0);
            assert_eq!((r, n, samples[0].pid), (code::SUCCESS, 1, pid));
            assert!(samples[0].sm_util > 0);
            // Nothing ran since that sample.
            let seen = samples[0].time_stamp;
            std::thread::sleep(std::time::Duration::from_millis(20));
            let r = nvmlDeviceGetProcessUtilization(dev, samples.as_mut_ptr(), &mut n, seen);
            assert_eq!(r, code::NOT_FOUND);

            // Device 1 is idle and unheld.
            assert_eq!(nvmlDeviceGetHandleByIndex(1, &mut dev), code::SUCCESS);
            n = 0;
            let r = nvmlDeviceGetComputeRunningProcesses(dev, &mut n, std::ptr::null_mut());
            assert_eq!((r, n), (code::SUCCESS, 0));

            let mut version = [0 as c_char; buffer::SYSTEM_DRIVER_VERSION];
            assert_eq!(
                nvmlSystemGetDriverVersion(version.as_mut_ptr(), 80),
                code::SUCCESS
            );
            assert_eq!(text(&version), DRIVER_VERSION);
            assert_eq!(nvmlShutdown(), code::SUCCESS);
            assert_eq!(nvmlShutdown(), code::UNINITIALIZED);
            assert_eq!(nvmlDeviceGetCount(&mut count), code::UNINITIALIZED);
        }
        let _ = std::fs::remove_file(&state);
    }
}
