//! NVML memory queries: `nvidia-smi` and monitoring agents inside the container see the
//! container's slice of a limited device, as `cuMemGetInfo` does. NVML numbers devices
//! its own way; a device is matched to its CUDA ordinal (which the caps use) by UUID.

use super::query::limited;
use super::{real, SUCCESS};
use std::ffi::{c_char, c_void, CStr};

/// `nvmlMemory_t`.
#[repr(C)]
#[derive(Clone, Copy)]
struct Memory {
    total: u64,
    free: u64,
    used: u64,
}

/// `nvmlMemory_v2_t`.
#[repr(C)]
#[derive(Clone, Copy)]
struct MemoryV2 {
    version: u32,
    total: u64,
    reserved: u64,
    free: u64,
    used: u64,
}

/// NVML's buffer size for a UUID string.
const UUID_BUFFER: usize = 96;

/// The UUID of CUDA device `ordinal`, if the driver is initialised and has it.
pub(crate) fn cuda_uuid(ordinal: i32) -> Option<[u8; 16]> {
    let get = real::device_get_uuid()?;
    let mut uuid = [0u8; 16];
    // SAFETY: writes a CUuuid (16 bytes) to our local.
    (unsafe { get(&mut uuid, ordinal) } == SUCCESS).then_some(uuid)
}

/// A UUID as NVML spells it: `GPU-` and the 8-4-4-4-12 hex groups, NUL-terminated.
pub(crate) fn uuid_text(uuid: &[u8; 16]) -> Vec<u8> {
    let mut s = String::from("GPU-");
    for (i, b) in uuid.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            s.push('-');
        }
        s.push_str(&format!("{b:02x}"));
    }
    let mut bytes = s.into_bytes();
    bytes.push(0);
    bytes
}

/// The CUDA ordinal of an NVML device: the CUDA device with its UUID when the driver is
/// initialised in this process; else its NVML index, which is the ordinal unless
/// `CUDA_VISIBLE_DEVICES` reorders devices.
fn cuda_ordinal(device: *mut c_void) -> Option<usize> {
    if let Some(ordinal) = ordinal_by_uuid(device) {
        return Some(ordinal);
    }
    let index = real::nvml_device_index()?;
    let mut i = 0u32;
    // SAFETY: device is the caller's NVML handle, which NVML just accepted; writes one
    // unsigned int to our local.
    (unsafe { index(device, &mut i) } == SUCCESS).then_some(i as usize)
}

fn ordinal_by_uuid(device: *mut c_void) -> Option<usize> {
    let get = real::nvml_device_uuid()?;
    let mut text = [0 as c_char; UUID_BUFFER];
    // SAFETY: device is an NVML handle NVML accepted; the buffer holds UUID_BUFFER bytes.
    if unsafe { get(device, text.as_mut_ptr(), UUID_BUFFER as u32) } != SUCCESS {
        return None;
    }
    // SAFETY: NVML wrote a NUL-terminated string into the buffer, which ends with 0s.
    let wanted = unsafe { CStr::from_ptr(text.as_ptr()) }.to_bytes();
    let count = real::device_get_count()?;
    let mut n = 0;
    // SAFETY: writes one int to our local; fails if the driver is not initialised.
    if unsafe { count(&mut n) } != SUCCESS {
        return None;
    }
    (0..n).find_map(|ordinal| {
        let ours = uuid_text(&cuda_uuid(ordinal)?);
        let ours = &ours[..ours.len() - 1];
        ours.eq_ignore_ascii_case(wanted)
            .then(|| usize::try_from(ordinal).ok())
            .flatten()
    })
}

/// # Safety
/// `real` is NVML's `nvmlDeviceGetMemoryInfo`; the arguments are the caller's, unchanged.
pub(crate) unsafe fn memory_info(
    real: unsafe extern "C" fn(*mut c_void, *mut c_void) -> u32,
    device: *mut c_void,
    memory: *mut c_void,
) -> u32 {
    // SAFETY: the caller's arguments, passed on.
    let rc = unsafe { real(device, memory) };
    if rc != SUCCESS || memory.is_null() {
        return rc;
    }
    let memory = memory.cast::<Memory>();
    // SAFETY: non-null, and NVML has just written an nvmlMemory_t there.
    let mut m = unsafe { memory.read_unaligned() };
    if let Some(s) = cuda_ordinal(device).and_then(|d| limited(d, m.total, m.free)) {
        m = Memory {
            total: s.total,
            free: s.free,
            used: s.total - s.free,
        };
        // SAFETY: as above; the caller's nvmlMemory_t.
        unsafe { memory.write_unaligned(m) };
    }
    rc
}

/// # Safety
/// `real` is NVML's `nvmlDeviceGetMemoryInfo_v2`; the arguments are the caller's, unchanged.
pub(crate) unsafe fn memory_info_v2(
    real: unsafe extern "C" fn(*mut c_void, *mut c_void) -> u32,
    device: *mut c_void,
    memory: *mut c_void,
) -> u32 {
    // SAFETY: the caller's arguments, passed on.
    let rc = unsafe { real(device, memory) };
    if rc != SUCCESS || memory.is_null() {
        return rc;
    }
    let memory = memory.cast::<MemoryV2>();
    // SAFETY: non-null, and NVML has just written an nvmlMemory_v2_t there (it checked the
    // version).
    let mut m = unsafe { memory.read_unaligned() };
    if let Some(s) = cuda_ordinal(device).and_then(|d| limited(d, m.total, m.free)) {
        // What the driver reserves stays reserved, within the slice.
        let reserved = m.reserved.min(s.total - s.free);
        m.total = s.total;
        m.free = s.free;
        m.reserved = reserved;
        m.used = s.total - s.free - reserved;
        // SAFETY: as above; the caller's nvmlMemory_v2_t.
        unsafe { memory.write_unaligned(m) };
    }
    rc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_text_is_nvml_s_spelling() {
        let uuid: [u8; 16] = std::array::from_fn(|i| (i * 17) as u8);
        assert_eq!(
            uuid_text(&uuid),
            b"GPU-00112233-4455-6677-8899-aabbccddeeff\0".to_vec()
        );
    }
}
