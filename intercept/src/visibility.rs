//! What a container sees of the node: only the GPUs it was given, and only its own
//! processes.
//!
//! The GPUs come from the region (`controld` writes them with the caps, from `exec --gpus`
//! or the config, and each device's UUID from the node's NVML). The driver is told through
//! `CUDA_VISIBLE_DEVICES`, set at the process's first `cuInit`, before the driver reads it:
//! a real driver and simgpu both honour it, so device count, ordinals and every
//! driver-internal view of the devices (the CUDA runtime checks the driver's own enumeration
//! against its) agree. An application's own `CUDA_VISIBLE_DEVICES` (ordinals, as it would
//! write them on a machine of the container's GPUs) picks among the container's GPUs.
//! Filtering the driver's answers in this library instead would leave the driver's internal
//! enumeration out of step with the runtime's, and the runtime refuses to start then.
//!
//! The devices are named to the driver by UUID where the region has them: a container
//! runtime (NVIDIA's) shows a container only the cards it was given, renumbered from 0, so
//! the node index of a card is no ordinal the container's driver knows (GPU 1 of the node is
//! its device 0). A UUID names the same card inside and out. Only a region without UUIDs (a
//! daemon without NVML) names them by node index, right where the process sees the node's
//! devices as they are.
//!
//! The caps and `controld`'s accounts are kept by the node's GPU index; [`account`] maps a
//! CUDA ordinal to it. NVML ignores `CUDA_VISIBLE_DEVICES` (as it does on a GPU node), so its
//! device count and handles are translated here, by UUID where the region has them (NVML's
//! own indexes are renumbered in a container, as the driver's are), and its running-process
//! queries list the container's own processes only (the pids of its region's live slots,
//! and this process): another container's processes and their memory are none of its
//! business. Pids are compared as each process recorded its own, so this holds where the
//! container's processes and NVML share a pid namespace, as on simgpu and on a host without
//! one.

use crate::container;
use crate::hooks::real;
use std::ffi::{c_char, c_uint, c_void, CString};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Once;
use tessera_cuda_abi::nvml::code;
use tessera_region::MAX_DEVICES;

/// The driver's variable of the devices a process sees.
const VISIBLE_DEVICES: &str = "CUDA_VISIBLE_DEVICES";

/// The node index of each CUDA ordinal, plus one; 0 where the ordinal is the node index.
static ORDINALS: [AtomicU32; MAX_DEVICES] = [const { AtomicU32::new(0) }; MAX_DEVICES];
static COMPOSED: Once = Once::new();

/// The node index (the index of the caps and accounts) of CUDA ordinal `ordinal`.
pub(crate) fn account(ordinal: usize) -> usize {
    // Acquire: pairs with the Release stores in `compose`, made before the driver's first
    // cuInit returned; every ordinal a driver call gives out comes after it.
    match ORDINALS.get(ordinal).map(|o| o.load(Ordering::Acquire)) {
        Some(n) if n != 0 => n as usize - 1,
        _ => ordinal,
    }
}

/// The node devices the process sees: the container's GPUs (all when it names none), and
/// among them those the application's own `CUDA_VISIBLE_DEVICES` picks by ordinal; `None`
/// where that variable names devices otherwise (by UUID), which is then left to the driver.
fn chosen(given: Option<u32>, app: Option<&str>) -> Option<Vec<u32>> {
    let container: Option<Vec<u32>> =
        given.map(|mask| (0..32).filter(|d| mask & 1 << d != 0).collect());
    let Some(app) = app else {
        return container;
    };
    let mut out = Vec::new();
    for entry in app.split(',').map(str::trim) {
        let Ok(k) = entry.parse::<usize>() else {
            return if out.is_empty() { None } else { Some(out) };
        };
        let device = match &container {
            Some(list) => match list.get(k) {
                Some(&d) => d,
                None => break,
            },
            None => k as u32,
        };
        if out.contains(&device) {
            break;
        }
        out.push(device);
    }
    Some(out)
}

/// Sets `CUDA_VISIBLE_DEVICES` to the container's choice and records the ordinals' node
/// indexes, once, before the driver's first `cuInit` reads the variable.
fn compose() {
    COMPOSED.call_once(|| {
        let given = given();
        let app = std::env::var(VISIBLE_DEVICES).ok();
        let Some(devices) = chosen(given, app.as_deref()) else {
            if given.is_some() {
                crate::tlog!(
                    warn,
                    "{VISIBLE_DEVICES}={} names devices by UUID; the container's GPUs are not applied",
                    app.unwrap_or_default()
                );
            }
            return;
        };
        for (ordinal, &device) in devices.iter().take(MAX_DEVICES).enumerate() {
            // Release: pairs with the Acquire loads in `account`.
            ORDINALS[ordinal].store(device + 1, Ordering::Release);
        }
        if given.is_none() {
            return;
        }
        let region = container::get().map(|c| c.region());
        let uuids: Option<Vec<[u8; 16]>> = devices
            .iter()
            .map(|&d| region.and_then(|r| r.uuid(d as usize)))
            .collect();
        let value = match uuids {
            Some(uuids) => uuids
                .iter()
                .map(tessera_region::uuid::to_string)
                .collect::<Vec<_>>()
                .join(","),
            None => devices.iter().map(u32::to_string).collect::<Vec<_>>().join(","),
        };
        if let (Ok(name), Ok(value)) = (CString::new(VISIBLE_DEVICES), CString::new(value)) {
            // SAFETY: both strings are NUL-terminated. The environment is changed once, at the
            // process's first cuInit, before the driver reads it; a thread of the application
            // reading the environment at that very moment is the one race left, as with any
            // program that sets a variable at run time.
            unsafe { libc::setenv(name.as_ptr(), value.as_ptr(), 1) };
        }
    });
}

/// # Safety
/// `real` is the driver's `cuInit`; the argument is the caller's.
pub(crate) unsafe fn init(real: real::cuInit::Real, flags: u32) -> u32 {
    compose();
    // SAFETY: the caller's argument, passed on.
    unsafe { real(flags) }
}

/// The container's GPUs as a bit per device; `None` when it sees every device (no region
/// from a daemon, or no container state).
fn given() -> Option<u32> {
    container::get()?.region().gpus()
}

/// The UUIDs of the container's GPUs, in node order, where the region has every one.
fn given_uuids(mask: u32) -> Option<([[u8; 16]; MAX_DEVICES], usize)> {
    let region = container::get()?.region();
    let mut out = [[0u8; 16]; MAX_DEVICES];
    let mut n = 0;
    for d in (0..MAX_DEVICES as u32).filter(|&d| mask & 1 << d != 0) {
        out[n] = region.uuid(d as usize)?;
        n += 1;
    }
    Some((out, n))
}

/// NVML's handle of the device of `uuid`, by the real lookup.
fn nvml_handle_of(uuid: &[u8; 16]) -> Option<*mut c_void> {
    let find = real::nvmlDeviceGetHandleByUUID::real()?;
    let text = tessera_region::uuid::text(uuid);
    let mut handle = std::ptr::null_mut();
    // SAFETY: a NUL-terminated string; writes one handle to our local.
    (unsafe { find(text.as_ptr().cast(), &mut handle) } == code::SUCCESS).then_some(handle)
}

/// The UUID NVML gives `device`.
fn nvml_uuid_of(device: *mut c_void) -> Option<[u8; 16]> {
    let get = real::nvmlDeviceGetUUID::real()?;
    let mut text = [0u8; 96];
    // SAFETY: device is a handle NVML gave; NVML writes at most `len` bytes, NUL included.
    if unsafe { get(device, text.as_mut_ptr().cast(), text.len() as c_uint) } != code::SUCCESS {
        return None;
    }
    let end = text.iter().position(|&b| b == 0)?;
    tessera_region::uuid::parse(std::str::from_utf8(&text[..end]).ok()?)
}

/// The account (node index) of an NVML device: by its UUID among the container's GPUs where
/// the region has their UUIDs (NVML's index is the container runtime's renumbering there),
/// else NVML's index. `None` for a device that is not the container's.
pub(crate) fn nvml_account(device: *mut c_void) -> Option<usize> {
    if let Some(mask) = given() {
        if let Some((uuids, n)) = given_uuids(mask) {
            let uuid = nvml_uuid_of(device)?;
            let k = uuids[..n].iter().position(|u| *u == uuid)?;
            return nth_visible(mask, k as u32).map(|d| d as usize);
        }
    }
    nvml_node_index(device).map(|i| i as usize)
}

/// How many of the first `count` node devices the container has.
fn visible_count(mask: u32, count: u32) -> u32 {
    (0..count.min(32)).filter(|&d| mask & 1 << d != 0).count() as u32
}

/// The node index of the container's `ordinal`-th GPU.
fn nth_visible(mask: u32, ordinal: u32) -> Option<u32> {
    (0..32)
        .filter(|&d| mask & 1 << d != 0)
        .nth(ordinal as usize)
}

/// The container's ordinal of node device `index`, if it has it.
fn position(mask: u32, index: u32) -> Option<u32> {
    (index < 32 && mask & 1 << index != 0).then(|| visible_count(mask, index))
}

/// # Safety
/// `real` is NVML's `nvmlDeviceGetCount[_v2]`; the argument is the caller's.
pub(crate) unsafe fn nvml_count(real: real::nvmlDeviceGetCount::Real, count: *mut c_uint) -> u32 {
    // SAFETY: the caller's argument, passed on.
    let rc = unsafe { real(count) };
    if rc == code::SUCCESS && !count.is_null() {
        if let Some(mask) = given() {
            let visible = match given_uuids(mask) {
                // Those NVML knows: in a container, those the runtime shows it.
                Some((uuids, n)) => uuids[..n]
                    .iter()
                    .take_while(|u| nvml_handle_of(u).is_some())
                    .count() as u32,
                // SAFETY: non-null, and NVML has just written the count there.
                None => visible_count(mask, unsafe { count.read() }),
            };
            // SAFETY: as above.
            unsafe { count.write(visible) };
        }
    }
    rc
}

/// # Safety
/// `real` is NVML's `nvmlDeviceGetHandleByIndex[_v2]`; the arguments are the caller's.
pub(crate) unsafe fn nvml_handle_by_index(
    real: real::nvmlDeviceGetHandleByIndex::Real,
    index: c_uint,
    device: *mut *mut c_void,
) -> u32 {
    let Some(mask) = given() else {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real(index, device) };
    };
    if let Some((uuids, n)) = given_uuids(mask) {
        let found = uuids[..n].get(index as usize).and_then(nvml_handle_of);
        return match found {
            Some(handle) if !device.is_null() => {
                // SAFETY: non-null; the caller's out-pointer for one handle.
                unsafe { device.write(handle) };
                code::SUCCESS
            }
            _ => code::INVALID_ARGUMENT,
        };
    }
    match nth_visible(mask, index) {
        // SAFETY: the caller's out-pointer, with the node index of its index.
        Some(node_index) => unsafe { real(node_index, device) },
        None => code::INVALID_ARGUMENT,
    }
}

/// The node index NVML gives `device`.
fn nvml_node_index(device: *mut c_void) -> Option<u32> {
    let index = real::nvmlDeviceGetIndex::real()?;
    let mut i = 0u32;
    // SAFETY: device is a handle NVML just gave; writes one unsigned int to our local.
    (unsafe { index(device, &mut i) } == code::SUCCESS).then_some(i)
}

/// A handle NVML found by a name (UUID, PCI bus id): refused if the device is hidden.
///
/// # Safety
/// `device` is the caller's out-pointer, written by NVML when `rc` is success.
unsafe fn only_given(rc: u32, device: *mut *mut c_void) -> u32 {
    let Some(mask) = given() else { return rc };
    if rc != code::SUCCESS || device.is_null() {
        return rc;
    }
    // SAFETY: non-null, and NVML has just written the handle there.
    let handle = unsafe { device.read() };
    match nvml_account(handle) {
        Some(i) if position(mask, i as u32).is_some() => rc,
        _ => code::NOT_FOUND,
    }
}

/// # Safety
/// `real` is NVML's `nvmlDeviceGetHandleByUUID`; the arguments are the caller's.
pub(crate) unsafe fn nvml_handle_by_uuid(
    real: real::nvmlDeviceGetHandleByUUID::Real,
    uuid: *const c_char,
    device: *mut *mut c_void,
) -> u32 {
    // SAFETY: the caller's arguments, passed on; NVML writes the handle on success.
    unsafe { only_given(real(uuid, device), device) }
}

/// # Safety
/// `real` is NVML's `nvmlDeviceGetHandleByPciBusId[_v2]`; the arguments are the caller's.
pub(crate) unsafe fn nvml_handle_by_pci_bus_id(
    real: real::nvmlDeviceGetHandleByPciBusId::Real,
    bus_id: *const c_char,
    device: *mut *mut c_void,
) -> u32 {
    // SAFETY: the caller's arguments, passed on; NVML writes the handle on success.
    unsafe { only_given(real(bus_id, device), device) }
}

/// # Safety
/// `real` is NVML's `nvmlDeviceGetIndex`; the arguments are the caller's.
pub(crate) unsafe fn nvml_index(
    real: real::nvmlDeviceGetIndex::Real,
    device: *mut c_void,
    index: *mut c_uint,
) -> u32 {
    // SAFETY: the caller's arguments, passed on.
    let rc = unsafe { real(device, index) };
    let Some(mask) = given() else { return rc };
    if rc != code::SUCCESS || index.is_null() {
        return rc;
    }
    let node_index = match given_uuids(mask) {
        Some(_) => nvml_account(device).map_or(u32::MAX, |d| d as u32),
        // SAFETY: non-null, and NVML has just written the node index there.
        None => unsafe { index.read() },
    };
    match position(mask, node_index) {
        // SAFETY: as above.
        Some(p) => unsafe {
            index.write(p);
            rc
        },
        None => code::NOT_FOUND,
    }
}

/// The pids whose processes the container may see: its region's live processes, and this
/// one. `None` without container state (every process is shown).
fn own_pids() -> Option<Vec<u32>> {
    let c = container::get()?;
    let mut pids: Vec<u32> = c.region().processes().into_iter().map(|p| p.pid).collect();
    pids.push(std::process::id());
    Some(pids)
}

/// A running-process query whose entries are `SIZE` bytes by its header, each starting with
/// its pid (`nvmlProcessInfo_v1_t`: 16, `_v2_t`/`_v3_t`: 24), answered with the container's
/// own processes only, under NVML's contract: with room for them all, they are written and
/// their number; without (or a null list), their number and `NVML_ERROR_INSUFFICIENT_SIZE`.
/// Entries are copied at the size the driver wrote them (see [`crate::nvml_list`]), as the
/// caller would have had them from NVML itself.
///
/// # Safety
/// `real` is NVML's query of that entry size; the arguments are the caller's.
pub(crate) unsafe fn running_processes<const SIZE: usize>(
    real: real::nvmlDeviceGetComputeRunningProcesses::Real,
    device: *mut c_void,
    count: *mut c_uint,
    infos: *mut c_void,
) -> u32 {
    let Some(pids) = own_pids() else {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real(device, count, infos) };
    };
    if count.is_null() {
        return code::INVALID_ARGUMENT;
    }
    // SAFETY: `real` is NVML's query; the device is the caller's.
    let list = match unsafe { crate::nvml_list::read(real, device, SIZE) } {
        Ok(list) => list,
        Err(e) => return e,
    };
    let ours: Vec<&[u8]> = list
        .entries()
        .filter(|e| pids.contains(&crate::nvml_list::pid(e)))
        .collect();
    // SAFETY: checked non-null; the caller's count, readable and writable by the contract.
    let caller_room = unsafe { count.read() } as usize;
    // SAFETY: as above.
    unsafe { count.write(ours.len() as c_uint) };
    if ours.is_empty() {
        return code::SUCCESS;
    }
    if infos.is_null() || caller_room < ours.len() {
        return code::INSUFFICIENT_SIZE;
    }
    for (i, entry) in ours.iter().enumerate() {
        // SAFETY: the caller's list holds `caller_room >= ours.len()` entries of the size
        // NVML writes for this query (what it would have written there itself); ours is a
        // separate buffer.
        unsafe {
            std::ptr::copy_nonoverlapping(
                entry.as_ptr(),
                infos.cast::<u8>().add(i * list.entry),
                list.entry,
            )
        };
    }
    code::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_application_picks_among_the_container_s_gpus() {
        assert_eq!(chosen(None, None), None);
        assert_eq!(chosen(Some(0b1010), None), Some(vec![1, 3]));
        assert_eq!(chosen(Some(0b1010), Some("1")), Some(vec![3]));
        assert_eq!(chosen(Some(0b1010), Some("1,0,2")), Some(vec![3, 1]));
        assert_eq!(chosen(Some(0b1010), Some("0,0")), Some(vec![1]));
        assert_eq!(chosen(None, Some("2,0")), Some(vec![2, 0]));
        assert_eq!(chosen(Some(0b1), Some("GPU-1234")), None);
    }

    #[test]
    fn ordinals_walk_the_given_gpus_in_node_order() {
        let mask = 0b1010; // GPUs 1 and 3
        assert_eq!(visible_count(mask, 4), 2);
        assert_eq!(visible_count(mask, 2), 1, "GPU 3 is not on a 2-GPU node");
        assert_eq!(nth_visible(mask, 0), Some(1));
        assert_eq!(nth_visible(mask, 1), Some(3));
        assert_eq!(nth_visible(mask, 2), None);
        assert_eq!(position(mask, 3), Some(1));
        assert_eq!(position(mask, 1), Some(0));
        assert_eq!(position(mask, 0), None);
        assert_eq!(position(mask, 40), None);
    }
}
