//! The entry points of devices: counts, names, attributes, properties, PCI bus ids.
//!
//! They check and translate the C arguments, call into [`crate::model::device`], and
//! write its results out as the driver API does.

use crate::ffi::{code, write_out, CUdevice};
use crate::model::device::*;
use crate::model::driver::{check_device, device, devices};
use crate::model::memory::pool::{self, CUmemoryPool};
use std::ffi::{c_char, c_int, c_void};

cuda_entry! {
    fn cuDeviceGet(out: *mut CUdevice, ordinal: c_int) {
        check_device(ordinal)?;
        // SAFETY: the driver API's contract: out is null or points to a CUdevice.
        unsafe { write_out(out, ordinal) }
    }

    fn cuDeviceGetCount(count: *mut c_int) {
        let n = devices()?.len() as c_int;
        // SAFETY: count is null or points to an int.
        unsafe { write_out(count, n) }
    }

    fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: CUdevice) {
        let info = device(dev)?;
        // SAFETY: name is null or holds len bytes.
        unsafe { write_c_string(name, len, &info.name) }
    }

    fn cuDeviceGetUuid(uuid: *mut [u8; 16], dev: CUdevice) {
        let info = device(dev)?;
        // SAFETY: uuid is null or points to a CUuuid (16 bytes).
        unsafe { write_out(uuid, info.uuid) }
    }

    fn cuDeviceGetUuid_v2(uuid: *mut [u8; 16], dev: CUdevice) {
        let info = device(dev)?;
        // SAFETY: as for cuDeviceGetUuid.
        unsafe { write_out(uuid, info.uuid) }
    }

    fn cuDeviceGetLuid(_luid: *mut c_char, _node_mask: *mut u32, dev: CUdevice) {
        device(dev)?;
        // A LUID identifies adapters on Windows only.
        Err(code::CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) {
        let info = device(dev)?;
        // SAFETY: bytes is null or points to a size_t.
        unsafe { write_out(bytes, info.memory as usize) }
    }

    /// The 32-bit original: devices over 4 GiB report the largest value it can hold.
    fn cuDeviceTotalMem(bytes: *mut u32, dev: CUdevice) {
        let info = device(dev)?;
        // SAFETY: bytes is null or points to an unsigned int.
        unsafe { write_out(bytes, u32::try_from(info.memory).unwrap_or(u32::MAX)) }
    }

    fn cuDeviceGetAttribute(value: *mut c_int, attrib: c_int, dev: CUdevice) {
        let info = device(dev)?;
        if value.is_null() {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        let v = attribute(info, attrib).ok_or(code::CUDA_ERROR_INVALID_VALUE)?;
        // SAFETY: value is non-null and points to an int.
        unsafe { write_out(value, v) }
    }

    fn cuDeviceGetProperties(prop: *mut CUdevprop, dev: CUdevice) {
        let info = device(dev)?;
        let a = |n| attribute(info, n).unwrap_or(0);
        let p = CUdevprop {
            max_threads_per_block: a(1),
            max_threads_dim: [a(2), a(3), a(4)],
            max_grid_size: [a(5), a(6), a(7)],
            shared_mem_per_block: a(8),
            total_constant_memory: a(9),
            simd_width: a(10),
            mem_pitch: a(11),
            regs_per_block: a(12),
            clock_rate: a(13),
            texture_align: a(14),
        };
        // SAFETY: prop is null or points to a CUdevprop.
        unsafe { write_out(prop, p) }
    }

    fn cuDeviceComputeCapability(major: *mut c_int, minor: *mut c_int, dev: CUdevice) {
        let info = device(dev)?;
        if major.is_null() || minor.is_null() {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        let (ma, mi) = info.compute_capability;
        // SAFETY: both are non-null and point to ints.
        unsafe {
            write_out(major, ma as c_int)?;
            write_out(minor, mi as c_int)
        }
    }

    fn cuDeviceGetPCIBusId(bus_id: *mut c_char, len: c_int, dev: CUdevice) {
        let info = device(dev)?;
        // SAFETY: bus_id is null or holds len bytes.
        unsafe { write_c_string(bus_id, len, &pci_bus_id(info)) }
    }

    fn cuDeviceGetByPCIBusId(dev: *mut CUdevice, bus_id: *const c_char) {
        let all = devices()?;
        if dev.is_null() || bus_id.is_null() {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: bus_id is a NUL-terminated string, by the contract.
        let text = unsafe { std::ffi::CStr::from_ptr(bus_id) }.to_str().map_err(|_| code::CUDA_ERROR_INVALID_VALUE)?;
        let (domain, bus, slot) = parse_pci_bus_id(text.trim()).ok_or(code::CUDA_ERROR_INVALID_VALUE)?;
        let found = all
            .iter()
            .find(|d| domain == 0 && slot == 0 && d.pci_bus == bus)
            .ok_or(code::CUDA_ERROR_INVALID_DEVICE)?;
        // SAFETY: dev is non-null and points to a CUdevice.
        unsafe { write_out(dev, found.index as CUdevice) }
    }

    fn cuDeviceCanAccessPeer(can_access: *mut c_int, dev: CUdevice, peer: CUdevice) {
        let a = check_device(dev)?;
        let b = check_device(peer)?;
        // Every device's memory is this host's memory, so any two distinct devices are peers.
        // SAFETY: can_access is null or points to an int.
        unsafe { write_out(can_access, (a != b) as c_int) }
    }

    fn cuDeviceGetP2PAttribute(value: *mut c_int, attrib: c_int, src: CUdevice, dst: CUdevice) {
        let a = check_device(src)?;
        let b = check_device(dst)?;
        if a == b {
            return Err(code::CUDA_ERROR_INVALID_DEVICE);
        }
        let v = match attrib {
            1 => 0, // PERFORMANCE_RANK
            2 => 1, // ACCESS_SUPPORTED
            3 => 0, // NATIVE_ATOMIC_SUPPORTED
            4 => 0, // CUDA_ARRAY_ACCESS_SUPPORTED
            _ => return Err(code::CUDA_ERROR_INVALID_VALUE),
        };
        // SAFETY: value is null or points to an int.
        unsafe { write_out(value, v) }
    }

    fn cuDeviceGetDefaultMemPool(pool_out: *mut CUmemoryPool, dev: CUdevice) {
        let index = check_device(dev)?;
        // SAFETY: pool_out is null or points to a CUmemoryPool.
        unsafe { write_out(pool_out, pool::default_pool(index)) }
    }

    fn cuDeviceGetMemPool(pool_out: *mut CUmemoryPool, dev: CUdevice) {
        let index = check_device(dev)?;
        // SAFETY: pool_out is null or points to a CUmemoryPool.
        unsafe { write_out(pool_out, pool::current_pool(index)) }
    }

    fn cuDeviceSetMemPool(dev: CUdevice, pool: CUmemoryPool) {
        let index = check_device(dev)?;
        pool::set_current_pool(index, pool)
    }

    fn cuDeviceGetTexture1DLinearMaxWidth(max_width: *mut usize, _format: c_int, _channels: u32, dev: CUdevice) {
        device(dev)?;
        // SAFETY: max_width is null or points to a size_t.
        unsafe { write_out(max_width, 1 << 28) }
    }

    fn cuDeviceGetNvSciSyncAttributes(_list: *mut c_void, dev: CUdevice, _flags: c_int) {
        device(dev)?;
        Err(code::CUDA_ERROR_NOT_SUPPORTED)
    }
}
