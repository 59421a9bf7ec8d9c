//! What runs on a device: utilization, the processes that hold it, and their share of it.

use crate::ffi::{
    code, write_out, NvmlDevice, NvmlResult, ProcessInfoCc, ProcessInfoV1, ProcessInfoV2,
    ProcessUtilizationSample, Utilization, INSTANCE_ID_NONE,
};
use crate::processes::Behaviour;
use crate::sampling::{window, Sample, MIN_WINDOW_NS};
use crate::session::{self, Session};
use simgpu::clock::sleep_until;
use std::ffi::{c_uint, c_ulonglong};

/// The window that ends now: from the newest kept sample at least [`MIN_WINDOW_NS`] old, or,
/// with `since_wall_us`, from the newest sample at or before that wall-clock time. Right after
/// init no sample is old enough yet, so the call waits until the init sample is.
fn measure(session: &Session, since_wall_us: Option<u64>) -> (Sample, Sample) {
    let (_, now) = session.sample();
    let base = {
        let history = session.history();
        since_wall_us
            .and_then(|t| history.base_at_wall(t))
            .or_else(|| history.base(now.taken_ns))
            .cloned()
            .ok_or_else(|| history.oldest().cloned().unwrap_or_else(|| now.clone()))
    };
    match base {
        Ok(base) => (base, now),
        Err(young) => {
            sleep_until(young.taken_ns + MIN_WINDOW_NS);
            let (_, now) = session.sample();
            (young, now)
        }
    }
}

/// The processes holding memory (a context, at least) on a device, by pid.
fn holders(session: &Session, device: usize) -> Vec<(u32, u64)> {
    let mut list: Vec<(u32, u64)> = session
        .node()
        .snapshot()
        .processes
        .iter()
        .filter_map(|p| {
            let memory = p.devices.get(device)?.memory;
            (memory > 0).then_some((p.pid, memory))
        })
        .collect();
    list.sort_unstable();
    list
}

/// Hands a list to a caller the NVML way: `*count` says how many entries `buf` holds; too few
/// gets `NVML_ERROR_INSUFFICIENT_SIZE` with `*count` set to the number needed.
///
/// # Safety
/// `count` must be null or valid for reads and writes; `buf` null or valid for writes of
/// `*count` entries.
unsafe fn write_list<T>(items: &[T], buf: *mut T, count: *mut c_uint) -> NvmlResult
where
    T: Copy,
{
    if count.is_null() {
        return Err(code::INVALID_ARGUMENT);
    }
    // SAFETY: non-null; the caller promises it is readable and writable.
    let room = unsafe { count.read_unaligned() } as usize;
    // SAFETY: as above.
    unsafe { count.write_unaligned(items.len() as c_uint) };
    if room < items.len() {
        return Err(code::INSUFFICIENT_SIZE);
    }
    if items.is_empty() {
        return Ok(());
    }
    if buf.is_null() {
        return Err(code::INVALID_ARGUMENT);
    }
    // SAFETY: `buf` is non-null and holds `room >= items.len()` entries (the caller's
    // promise); a slice of ours never overlaps it.
    unsafe { std::ptr::copy_nonoverlapping(items.as_ptr(), buf, items.len()) };
    Ok(())
}

fn compute_processes<T: Copy>(
    device: NvmlDevice,
    infos: *mut T,
    count: *mut c_uint,
    info: impl Fn(u32, u64) -> T,
) -> NvmlResult {
    let session = session::session()?;
    let index = session.device(device)?;
    let behaviour = Behaviour::from_env();
    let list: Vec<T> = holders(&session, index)
        .into_iter()
        .filter(|&(pid, _)| behaviour.lists(pid))
        .map(|(pid, memory)| info(pid, behaviour.memory(memory)))
        .collect();
    // SAFETY: NVML's contract for the running-process queries matches `write_list`'s.
    unsafe { write_list(&list, infos, count) }
}

fn v1(pid: u32, memory: u64) -> ProcessInfoV1 {
    ProcessInfoV1 {
        pid,
        used_gpu_memory: memory,
    }
}

fn v2(pid: u32, memory: u64) -> ProcessInfoV2 {
    ProcessInfoV2 {
        pid,
        used_gpu_memory: memory,
        gpu_instance_id: INSTANCE_ID_NONE,
        compute_instance_id: INSTANCE_ID_NONE,
    }
}

fn v3_cc(pid: u32, memory: u64) -> ProcessInfoCc {
    ProcessInfoCc {
        pid,
        used_gpu_memory: memory,
        gpu_instance_id: INSTANCE_ID_NONE,
        compute_instance_id: INSTANCE_ID_NONE,
        used_gpu_cc_protected_memory: 0,
    }
}

/// Graphics and MPS queries: the simulated node runs compute work only, without MPS.
fn no_processes<T: Copy>(device: NvmlDevice, infos: *mut T, count: *mut c_uint) -> NvmlResult {
    let session = session::session()?;
    session.device(device)?;
    // SAFETY: as for `compute_processes`.
    unsafe { write_list::<T>(&[], infos, count) }
}

nvml_entry! {
    /// Percent of the window the device's engine ran kernels; the memory figure (the memory
    /// controller's busy time) is not simulated and reads 0.
    fn nvmlDeviceGetUtilizationRates(device: NvmlDevice, utilization: *mut Utilization) {
        let session = session::session()?;
        let index = session.device(device)?;
        if utilization.is_null() {
            return Err(code::INVALID_ARGUMENT);
        }
        let (base, now) = measure(&session, None);
        let gpu = window(&base, &now, index).device_percent;
        // SAFETY: non-null; NVML's contract makes it writable.
        unsafe { write_out(utilization, Utilization { gpu, memory: 0 }) }
    }
    fn nvmlDeviceGetComputeRunningProcesses(device: NvmlDevice, count: *mut c_uint, infos: *mut ProcessInfoV1) {
        compute_processes(device, infos, count, v1)
    }
    fn nvmlDeviceGetComputeRunningProcesses_v2(device: NvmlDevice, count: *mut c_uint, infos: *mut ProcessInfoV2) {
        compute_processes(device, infos, count, v2)
    }
    /// Entries of 24 bytes, or of 32 as the 535 drivers wrote them (see [`crate::processes`]).
    fn nvmlDeviceGetComputeRunningProcesses_v3(device: NvmlDevice, count: *mut c_uint, infos: *mut ProcessInfoV2) {
        if Behaviour::from_env().entry_32 {
            compute_processes(device, infos.cast::<ProcessInfoCc>(), count, v3_cc)
        } else {
            compute_processes(device, infos, count, v2)
        }
    }
    fn nvmlDeviceGetGraphicsRunningProcesses(device: NvmlDevice, count: *mut c_uint, infos: *mut ProcessInfoV1) {
        no_processes(device, infos, count)
    }
    fn nvmlDeviceGetGraphicsRunningProcesses_v2(device: NvmlDevice, count: *mut c_uint, infos: *mut ProcessInfoV2) {
        no_processes(device, infos, count)
    }
    fn nvmlDeviceGetGraphicsRunningProcesses_v3(device: NvmlDevice, count: *mut c_uint, infos: *mut ProcessInfoV2) {
        no_processes(device, infos, count)
    }
    fn nvmlDeviceGetMPSComputeRunningProcesses_v3(device: NvmlDevice, count: *mut c_uint, infos: *mut ProcessInfoV2) {
        no_processes(device, infos, count)
    }
    /// One sample per process that ran kernels on the device in the window, with its share of
    /// the engine as `smUtil`. A null `utilization` asks for the number of samples.
    fn nvmlDeviceGetProcessUtilization(
        device: NvmlDevice,
        utilization: *mut ProcessUtilizationSample,
        count: *mut c_uint,
        last_seen_time_stamp: c_ulonglong,
    ) {
        let session = session::session()?;
        let index = session.device(device)?;
        if count.is_null() {
            return Err(code::INVALID_ARGUMENT);
        }
        let since = (last_seen_time_stamp > 0).then_some(last_seen_time_stamp);
        let (base, now) = measure(&session, since);
        if since.is_some_and(|t| now.wall_us <= t) {
            return Err(code::NOT_FOUND);
        }
        let samples: Vec<ProcessUtilizationSample> = window(&base, &now, index)
            .processes
            .into_iter()
            .map(|(pid, sm_util)| ProcessUtilizationSample {
                pid,
                time_stamp: now.wall_us,
                sm_util,
                ..Default::default()
            })
            .collect();
        if samples.is_empty() {
            return Err(code::NOT_FOUND);
        }
        if utilization.is_null() {
            // SAFETY: non-null, checked above; NVML's contract makes it writable.
            unsafe { count.write_unaligned(samples.len() as c_uint) };
            return Err(code::INSUFFICIENT_SIZE);
        }
        // SAFETY: NVML's contract: `utilization` holds `*count` entries.
        unsafe { write_list(&samples, utilization, count) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_report_the_size_they_need() {
        let items = [v1(1, 10), v1(2, 20)];
        let mut count: c_uint = 1;
        let mut buf = [ProcessInfoV1::default(); 2];
        // SAFETY: `count` and `buf` are valid locals; `buf` holds 2 >= `count` entries.
        let r = unsafe { write_list(&items, buf.as_mut_ptr(), &mut count) };
        assert_eq!((r, count), (Err(code::INSUFFICIENT_SIZE), 2));
        assert_eq!(buf[0].pid, 0);
        // SAFETY: as above; `count` is now 2.
        let r = unsafe { write_list(&items, buf.as_mut_ptr(), &mut count) };
        assert_eq!((r, count), (Ok(()), 2));
        assert_eq!((buf[1].pid, buf[1].used_gpu_memory), (2, 20));
        // Asking with no buffer and no room: the size, and no write.
        count = 0;
        // SAFETY: a null buffer is never written when it has no room.
        let r = unsafe { write_list(&items, std::ptr::null_mut(), &mut count) };
        assert_eq!((r, count), (Err(code::INSUFFICIENT_SIZE), 2));
        // An empty list fits anywhere.
        // SAFETY: nothing is written through the null buffer.
        let r = unsafe { write_list::<ProcessInfoV1>(&[], std::ptr::null_mut(), &mut count) };
        assert_eq!((r, count), (Ok(()), 0));
        // SAFETY: a null count is refused before any access.
        let r = unsafe { write_list(&items, buf.as_mut_ptr(), std::ptr::null_mut()) };
        assert_eq!(r, Err(code::INVALID_ARGUMENT));
    }
}
