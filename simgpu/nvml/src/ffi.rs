//! The C ABI: handle and struct layouts, return codes, and the macro that declares each export
//! once. Layouts are declared here from NVML's documented types; each has a size assert.

use std::ffi::{c_char, c_void};

/// A device handle: an address inside [`crate::session::HANDLES`], one per ordinal.
pub type NvmlDevice = *mut c_void;

pub use tessera_cuda_abi::nvml::{code, NvmlReturn};

/// What an entry's body returns: `Ok` becomes `NVML_SUCCESS`.
pub type NvmlResult = Result<(), NvmlReturn>;

/// Buffer sizes NVML documents as always large enough; callers size their buffers by them.
pub mod buffer {
    pub const DEVICE_NAME: usize = 64;
    pub const DEVICE_UUID: usize = 80;
    pub const SYSTEM_DRIVER_VERSION: usize = 80;
    pub const SYSTEM_NVML_VERSION: usize = 80;
    pub const PCI_BUS_ID: usize = 32;
    pub const PCI_BUS_ID_LEGACY: usize = 16;
}

/// `nvmlMemory_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Memory {
    pub total: u64,
    pub free: u64,
    pub used: u64,
}

/// `nvmlMemory_v2_t`: the caller sets `version` to [`MEMORY_V2_VERSION`].
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct MemoryV2 {
    pub version: u32,
    pub total: u64,
    pub reserved: u64,
    pub free: u64,
    pub used: u64,
}

/// NVML versions its structs as `size | (version << 24)`.
pub const fn struct_version<T>(version: u32) -> u32 {
    std::mem::size_of::<T>() as u32 | (version << 24)
}
/// The version a caller of `nvmlDeviceGetMemoryInfo_v2` writes into [`MemoryV2::version`].
pub const MEMORY_V2_VERSION: u32 = struct_version::<MemoryV2>(2);

/// `nvmlUtilization_t`, in percent.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Utilization {
    pub gpu: u32,
    pub memory: u32,
}

/// `nvmlProcessInfo_v1_t`, filled by the unversioned `nvmlDeviceGetComputeRunningProcesses`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessInfoV1 {
    pub pid: u32,
    pub used_gpu_memory: u64,
}

/// `nvmlProcessInfo_v2_t` and `_v3_t` (the same layout), filled by the `_v2` and `_v3` entries.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessInfoV2 {
    pub pid: u32,
    pub used_gpu_memory: u64,
    pub gpu_instance_id: u32,
    pub compute_instance_id: u32,
}

/// `nvmlProcessInfo_t` as the `_v3` query of the 535 drivers wrote it, with
/// `usedGpuCcProtectedMemory` (see [`crate::processes`]).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessInfoCc {
    pub pid: u32,
    pub used_gpu_memory: u64,
    pub gpu_instance_id: u32,
    pub compute_instance_id: u32,
    pub used_gpu_cc_protected_memory: u64,
}

/// What NVML reports for a GPU or compute instance id when MIG is off.
pub const INSTANCE_ID_NONE: u32 = u32::MAX;

/// `nvmlProcessUtilizationSample_t`: percentages over the sample period, `time_stamp` in
/// microseconds of the CPU's wall clock.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessUtilizationSample {
    pub pid: u32,
    pub time_stamp: u64,
    pub sm_util: u32,
    pub mem_util: u32,
    pub enc_util: u32,
    pub dec_util: u32,
}

/// `nvmlPciInfo_t` as the `_v2` and `_v3` entries fill it.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PciInfo {
    pub bus_id_legacy: [c_char; buffer::PCI_BUS_ID_LEGACY],
    pub domain: u32,
    pub bus: u32,
    pub device: u32,
    pub pci_device_id: u32,
    pub pci_sub_system_id: u32,
    pub bus_id: [c_char; buffer::PCI_BUS_ID],
}

/// The older `nvmlPciInfo_t` that the unversioned `nvmlDeviceGetPciInfo` fills.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PciInfoV1 {
    pub bus_id: [c_char; buffer::PCI_BUS_ID_LEGACY],
    pub domain: u32,
    pub bus: u32,
    pub device: u32,
    pub pci_device_id: u32,
    pub pci_sub_system_id: u32,
    pub reserved: [u32; 4],
}

// The layouts callers compiled against; a change here would corrupt their memory.
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<Memory>() == 24);
    assert!(size_of::<MemoryV2>() == 40);
    assert!(MEMORY_V2_VERSION == 0x0200_0028);
    assert!(size_of::<Utilization>() == 8);
    assert!(size_of::<ProcessInfoV1>() == 16);
    assert!(size_of::<ProcessInfoV2>() == 24);
    assert!(offset_of!(ProcessInfoV2, gpu_instance_id) == 16);
    assert!(size_of::<ProcessUtilizationSample>() == 32);
    assert!(offset_of!(ProcessUtilizationSample, time_stamp) == 8);
    assert!(size_of::<PciInfo>() == 68);
    assert!(offset_of!(PciInfo, bus_id) == 36);
    assert!(size_of::<PciInfoV1>() == 52);
};

/// Runs an entry's body, turning a panic into `NVML_ERROR_UNKNOWN` so that no unwind crosses
/// into the caller's C frames.
pub fn guard(body: impl FnOnce() -> NvmlResult) -> NvmlReturn {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(Ok(())) => code::SUCCESS,
        Ok(Err(e)) => e,
        Err(_) => code::UNKNOWN,
    }
}

/// Writes `value` through an out-pointer, or fails with `NVML_ERROR_INVALID_ARGUMENT` when the
/// caller passed null.
///
/// # Safety
/// `out` must be null or valid for a write of `T`.
pub unsafe fn write_out<T>(out: *mut T, value: T) -> NvmlResult {
    if out.is_null() {
        return Err(code::INVALID_ARGUMENT);
    }
    // SAFETY: non-null, and the caller promises it is valid for a write of T.
    unsafe { out.write_unaligned(value) };
    Ok(())
}

/// Copies `text` and a terminating NUL into a caller's buffer of `length` bytes:
/// `NVML_ERROR_INVALID_ARGUMENT` for null, `NVML_ERROR_INSUFFICIENT_SIZE` when it does not fit.
///
/// # Safety
/// `buf` must be null or valid for writes of `length` bytes.
pub unsafe fn write_str(buf: *mut c_char, length: u32, text: &str) -> NvmlResult {
    if buf.is_null() {
        return Err(code::INVALID_ARGUMENT);
    }
    let bytes = text.as_bytes();
    if bytes.len() + 1 > length as usize {
        return Err(code::INSUFFICIENT_SIZE);
    }
    // SAFETY: the caller promises `length` writable bytes at `buf`, and we write
    // `bytes.len() + 1 <= length` of them; a `&str` never overlaps a caller's buffer.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast::<u8>(), bytes.len());
        buf.add(bytes.len()).write(0);
    }
    Ok(())
}

/// `text` as a NUL-terminated fixed-size C field (truncated to fit).
pub fn c_field<const N: usize>(text: &str) -> [c_char; N] {
    let mut field = [0 as c_char; N];
    for (dst, src) in field.iter_mut().zip(text.bytes().take(N - 1)) {
        *dst = src as c_char;
    }
    field
}

/// Declares NVML entry points, each once: the exported `extern "C"` function whose body is a
/// block returning [`NvmlResult`], run under [`guard`].
#[macro_export]
macro_rules! nvml_entry {
    ($( $(#[$meta:meta])* fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? ) $body:block )*) => {
        $(
            $(#[$meta])*
            /// # Safety
            /// Called from C with NVML's contract for this entry point.
            #[no_mangle]
            #[allow(non_snake_case, clippy::missing_safety_doc)]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> $crate::ffi::NvmlReturn {
                $crate::ffi::guard(|| $body)
            }
        )*
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_fit_or_fail() {
        let mut buf = [0x7f as c_char; 8];
        // SAFETY: `buf` holds 8 writable bytes.
        assert_eq!(unsafe { write_str(buf.as_mut_ptr(), 8, "1234567") }, Ok(()));
        assert_eq!(buf[7], 0);
        // SAFETY: as above; the text needs 9 bytes, so nothing is written.
        let too_long = unsafe { write_str(buf.as_mut_ptr(), 8, "12345678") };
        assert_eq!(too_long, Err(code::INSUFFICIENT_SIZE));
        // SAFETY: null is refused before any write.
        let null = unsafe { write_str(std::ptr::null_mut(), 8, "x") };
        assert_eq!(null, Err(code::INVALID_ARGUMENT));
    }

    #[test]
    fn fields_truncate() {
        let f: [c_char; 4] = c_field("abcdef");
        assert_eq!(f, [b'a' as c_char, b'b' as c_char, b'c' as c_char, 0]);
    }

    #[test]
    fn panics_become_unknown() {
        assert_eq!(guard(|| panic!("boom")), code::UNKNOWN);
        assert_eq!(guard(|| Err(code::NOT_FOUND)), code::NOT_FOUND);
    }
}
