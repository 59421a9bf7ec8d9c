//! Device enumeration and identity: count, handles, name, UUID, PCI location, memory.

use crate::ffi::{
    buffer, c_field, code, write_out, write_str, Memory, MemoryV2, NvmlDevice, NvmlResult,
    NvmlReturn, PciInfo, PciInfoV1, MEMORY_V2_VERSION,
};
use crate::session::{self, handle, Session};
use simgpu::node::DeviceInfo;
use std::ffi::{c_char, c_int, c_uint, CStr};
use std::sync::Arc;

/// NVIDIA's PCI vendor id; NVML puts it in the low half of `pciDeviceId`.
const PCI_VENDOR_NVIDIA: u32 = 0x10de;

/// The PCI device id of a preset's board, so that tools keyed on it recognise the model; 0
/// for a custom device.
fn pci_device(name: &str) -> u32 {
    match name {
        "Tesla T4" => 0x1eb8,
        "NVIDIA A100-SXM4-40GB" => 0x20b0,
        "NVIDIA A100-SXM4-80GB" => 0x20b2,
        "NVIDIA H100 80GB HBM3" => 0x2330,
        "NVIDIA H200" => 0x2335,
        _ => 0,
    }
}

/// The PCI location of a device: domain 0, its bus, device 0, function 0.
fn pci_info(info: &DeviceInfo) -> PciInfo {
    PciInfo {
        bus_id_legacy: c_field(&format!("0000:{:02X}:00.0", info.pci_bus)),
        domain: 0,
        bus: info.pci_bus,
        device: 0,
        pci_device_id: (pci_device(&info.name) << 16) | PCI_VENDOR_NVIDIA,
        pci_sub_system_id: 0,
        bus_id: c_field(&format!("{:08X}:{:02X}:00.0", 0, info.pci_bus)),
    }
}

/// A PCI bus id as `[domain:]bus:device[.function]` in hex, like `00000000:07:00.0`.
fn parse_bus_id(text: &str) -> Option<(u32, u32, u32, u32)> {
    let hex = |s: &str| u32::from_str_radix(s, 16).ok().filter(|_| !s.is_empty());
    let fields: Vec<&str> = text.trim().split(':').collect();
    let (domain, bus, slot) = match fields.as_slice() {
        [domain, bus, slot] => (hex(domain)?, hex(bus)?, *slot),
        [bus, slot] => (0, hex(bus)?, *slot),
        _ => return None,
    };
    let (device, function) = match slot.split_once('.') {
        Some((d, f)) => (hex(d)?, hex(f)?),
        None => (hex(slot)?, 0),
    };
    Some((domain, bus, device, function))
}

/// `nvmlDeviceAttributes_t`: what `nvmlDeviceGetAttributes_v2` fills.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct DeviceAttributes {
    pub multiprocessor_count: c_uint,
    pub shared_copy_engine_count: c_uint,
    pub shared_decoder_count: c_uint,
    pub shared_encoder_count: c_uint,
    pub shared_jpeg_count: c_uint,
    pub shared_ofa_count: c_uint,
    pub gpu_instance_slice_count: c_uint,
    pub compute_instance_slice_count: c_uint,
    pub memory_size_mb: u64,
}

const _: () = assert!(std::mem::size_of::<DeviceAttributes>() == 40);

/// The session and the device a handle names.
fn device(handle: NvmlDevice) -> Result<(Arc<Session>, usize), NvmlReturn> {
    let session = session::session()?;
    let index = session.device(handle)?;
    crate::faults::check(index)?;
    Ok((session, index))
}

/// A caller's C string.
///
/// # Safety
/// `text` must be null or point to a NUL-terminated string.
unsafe fn c_text<'a>(text: *const c_char) -> Result<&'a str, NvmlReturn> {
    if text.is_null() {
        return Err(code::INVALID_ARGUMENT);
    }
    // SAFETY: non-null, and the caller promises a NUL-terminated string that outlives the call.
    let text = unsafe { CStr::from_ptr(text) };
    text.to_str().map_err(|_| code::INVALID_ARGUMENT)
}

fn device_count(count: *mut c_uint) -> NvmlResult {
    let session = session::session()?;
    // SAFETY: NVML's contract: `count` is null or writable.
    unsafe { write_out(count, session.shown().len() as c_uint) }
}

fn handle_by_index(index: c_uint, device: *mut NvmlDevice) -> NvmlResult {
    let session = session::session()?;
    let &node_index = session
        .shown()
        .get(index as usize)
        .ok_or(code::INVALID_ARGUMENT)?;
    // SAFETY: NVML's contract: `device` is null or writable.
    unsafe { write_out(device, handle(node_index)) }
}

fn handle_by_pci_bus_id(bus_id: *const c_char, device: *mut NvmlDevice) -> NvmlResult {
    let session = session::session()?;
    // SAFETY: NVML's contract: `bus_id` is null or a C string.
    let wanted = parse_bus_id(unsafe { c_text(bus_id)? }).ok_or(code::INVALID_ARGUMENT)?;
    let node = session.node();
    let index = session
        .shown()
        .iter()
        .copied()
        .find(|&i| wanted == (0, node.device(i).pci_bus, 0, 0))
        .ok_or(code::NOT_FOUND)?;
    // SAFETY: NVML's contract: `device` is null or writable.
    unsafe { write_out(device, handle(index)) }
}

fn pci_info_v2(handle: NvmlDevice, pci: *mut PciInfo) -> NvmlResult {
    let (session, index) = device(handle)?;
    // SAFETY: NVML's contract: `pci` is null or writable.
    unsafe { write_out(pci, pci_info(&session.node().device(index))) }
}

nvml_entry! {
    fn nvmlDeviceGetCount(count: *mut c_uint) {
        device_count(count)
    }
    fn nvmlDeviceGetCount_v2(count: *mut c_uint) {
        device_count(count)
    }
    fn nvmlDeviceGetHandleByIndex(index: c_uint, device: *mut NvmlDevice) {
        handle_by_index(index, device)
    }
    fn nvmlDeviceGetHandleByIndex_v2(index: c_uint, device: *mut NvmlDevice) {
        handle_by_index(index, device)
    }
    fn nvmlDeviceGetHandleByUUID(uuid: *const c_char, device: *mut NvmlDevice) {
        let session = session::session()?;
        // SAFETY: NVML's contract: `uuid` is null or a C string.
        let wanted = unsafe { c_text(uuid)? }.trim();
        let node = session.node();
        let index = session
            .shown()
            .iter()
            .copied()
            .find(|&i| node.device(i).uuid_string().eq_ignore_ascii_case(wanted))
            .ok_or(code::NOT_FOUND)?;
        // SAFETY: NVML's contract: `device` is null or writable.
        unsafe { write_out(device, handle(index)) }
    }
    fn nvmlDeviceGetHandleByPciBusId(bus_id: *const c_char, device: *mut NvmlDevice) {
        handle_by_pci_bus_id(bus_id, device)
    }
    fn nvmlDeviceGetHandleByPciBusId_v2(bus_id: *const c_char, device: *mut NvmlDevice) {
        handle_by_pci_bus_id(bus_id, device)
    }
    fn nvmlDeviceGetIndex(device: NvmlDevice, index: *mut c_uint) {
        let (session, node_index) = self::device(device)?;
        let i = session.index_of(node_index).ok_or(code::INVALID_ARGUMENT)?;
        // SAFETY: NVML's contract: `index` is null or writable.
        unsafe { write_out(index, i as c_uint) }
    }
    /// The minor number of `/dev/nvidiaN`; the simulated node numbers them by ordinal.
    fn nvmlDeviceGetMinorNumber(device: NvmlDevice, minor: *mut c_uint) {
        let (_, i) = self::device(device)?;
        // SAFETY: NVML's contract: `minor` is null or writable.
        unsafe { write_out(minor, i as c_uint) }
    }
    fn nvmlDeviceGetName(device: NvmlDevice, name: *mut c_char, length: c_uint) {
        let (session, i) = self::device(device)?;
        // SAFETY: NVML's contract: `name` is null or holds `length` writable bytes.
        unsafe { write_str(name, length, &session.node().device(i).name) }
    }
    fn nvmlDeviceGetUUID(device: NvmlDevice, uuid: *mut c_char, length: c_uint) {
        let (session, i) = self::device(device)?;
        let text = session.node().device(i).uuid_string();
        debug_assert!(text.len() < buffer::DEVICE_UUID);
        // SAFETY: NVML's contract: `uuid` is null or holds `length` writable bytes.
        unsafe { write_str(uuid, length, &text) }
    }
    fn nvmlDeviceGetPciInfo(device: NvmlDevice, pci: *mut PciInfoV1) {
        let (session, i) = self::device(device)?;
        let info = pci_info(&session.node().device(i));
        let v1 = PciInfoV1 {
            bus_id: info.bus_id_legacy,
            domain: info.domain,
            bus: info.bus,
            device: info.device,
            pci_device_id: info.pci_device_id,
            pci_sub_system_id: info.pci_sub_system_id,
            reserved: [0; 4],
        };
        // SAFETY: NVML's contract: `pci` is null or writable.
        unsafe { write_out(pci, v1) }
    }
    fn nvmlDeviceGetPciInfo_v2(device: NvmlDevice, pci: *mut PciInfo) {
        pci_info_v2(device, pci)
    }
    fn nvmlDeviceGetPciInfo_v3(device: NvmlDevice, pci: *mut PciInfo) {
        pci_info_v2(device, pci)
    }
    fn nvmlDeviceGetCudaComputeCapability(device: NvmlDevice, major: *mut c_int, minor: *mut c_int) {
        let (session, i) = self::device(device)?;
        if major.is_null() || minor.is_null() {
            return Err(code::INVALID_ARGUMENT);
        }
        let (ma, mi) = session.node().device(i).compute_capability;
        // SAFETY: both checked non-null; NVML's contract makes them writable.
        unsafe {
            write_out(major, ma as c_int)?;
            write_out(minor, mi as c_int)
        }
    }
    /// The device's SM count and memory; the shared-engine and MIG slice counts, which a
    /// simulated device does not have, are 0.
    fn nvmlDeviceGetAttributes_v2(device: NvmlDevice, attributes: *mut DeviceAttributes) {
        let (session, i) = self::device(device)?;
        let info = session.node().device(i);
        let a = DeviceAttributes {
            multiprocessor_count: info.sms,
            memory_size_mb: info.memory >> 20,
            ..DeviceAttributes::default()
        };
        // SAFETY: NVML's contract: `attributes` is null or writable.
        unsafe { write_out(attributes, a) }
    }
    /// Memory of the whole device, all processes of the node together (contexts included).
    fn nvmlDeviceGetMemoryInfo(device: NvmlDevice, memory: *mut Memory) {
        let (session, i) = self::device(device)?;
        let (total, used) = memory_of(&session, i);
        let m = Memory { total, free: total - used, used };
        // SAFETY: NVML's contract: `memory` is null or writable.
        unsafe { write_out(memory, m) }
    }
    /// As `nvmlDeviceGetMemoryInfo`; the simulated driver reserves nothing beyond contexts,
    /// which count as used.
    fn nvmlDeviceGetMemoryInfo_v2(device: NvmlDevice, memory: *mut MemoryV2) {
        let (session, i) = self::device(device)?;
        if memory.is_null() {
            return Err(code::INVALID_ARGUMENT);
        }
        // SAFETY: non-null; NVML's contract makes it a readable nvmlMemory_v2_t.
        let version = unsafe { std::ptr::addr_of!((*memory).version).read_unaligned() };
        if version != MEMORY_V2_VERSION {
            return Err(code::ARGUMENT_VERSION_MISMATCH);
        }
        let (total, used) = memory_of(&session, i);
        let m = MemoryV2 { version, total, reserved: 0, free: total - used, used };
        // SAFETY: non-null and writable, as above.
        unsafe { write_out(memory, m) }
    }
}

/// Total and used memory of a device; used never exceeds total.
fn memory_of(session: &Session, index: usize) -> (u64, u64) {
    let node = session.node();
    let total = node.device(index).memory;
    (total, node.memory_used(index).min(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_ids_parse_in_every_spelling() {
        assert_eq!(parse_bus_id("00000000:07:00.0"), Some((0, 7, 0, 0)));
        assert_eq!(parse_bus_id("0000:1a:00.0"), Some((0, 0x1a, 0, 0)));
        assert_eq!(parse_bus_id("1A:00.0"), Some((0, 0x1a, 0, 0)));
        assert_eq!(parse_bus_id("07:00"), Some((0, 7, 0, 0)));
        assert_eq!(parse_bus_id(""), None);
        assert_eq!(parse_bus_id("zz:00.0"), None);
        assert_eq!(parse_bus_id("0:1:2:3"), None);
    }

    #[test]
    fn pci_info_spells_the_bus_both_ways() {
        let info = DeviceInfo {
            index: 0,
            name: "NVIDIA A100-SXM4-80GB".into(),
            uuid: [0; 16],
            memory: 80 << 30,
            sms: 108,
            compute_capability: (8, 0),
            pci_bus: 0x1b,
        };
        let pci = pci_info(&info);
        // SAFETY: c_field always NUL-terminates inside the array.
        let bus_id = unsafe { CStr::from_ptr(pci.bus_id.as_ptr()) };
        // SAFETY: as above.
        let legacy = unsafe { CStr::from_ptr(pci.bus_id_legacy.as_ptr()) };
        assert_eq!(bus_id, c"00000000:1B:00.0");
        assert_eq!(legacy, c"0000:1B:00.0");
        assert_eq!(pci.pci_device_id, 0x20b2_10de);
        let parsed = parse_bus_id(bus_id.to_str().unwrap()).unwrap();
        assert_eq!(parsed, (0, 0x1b, 0, 0));
    }
}
