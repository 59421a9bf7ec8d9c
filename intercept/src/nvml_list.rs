//! NVML's running-process lists (`nvmlDeviceGet*RunningProcesses*`), read whatever entry size
//! the driver really writes.
//!
//! Every entry starts with the pid (`unsigned int`) and, at offset 8, the process's memory
//! (`unsigned long long`), but the entry's size is not the header's promise: the `_v3` query
//! of the 535 drivers writes 32-byte entries (`nvmlProcessInfo_t` then carried
//! `usedGpuCcProtectedMemory`), later drivers 24, the unversioned query 16. A reader that
//! assumes one size reads every entry after the first at the wrong place, and a buffer sized
//! for the smaller entries overflows. So the list is read into a buffer with room for the
//! largest entries, filled beforehand with a pattern, and the entry size is the span NVML
//! wrote divided by the number of entries.

use std::ffi::{c_uint, c_void};
use tessera_cuda_abi::nvml::{code, VALUE_NOT_AVAILABLE};

/// The largest entry this reader makes room for: twice the largest NVML has written.
const MAX_ENTRY: usize = 64;
/// What the buffer holds before NVML writes; no field NVML writes is this pattern all along
/// (pids and sizes are not, instance ids are 0xFFFFFFFF or small, reserved words 0).
const PATTERN: u8 = 0xA5;
/// Tries at most this often when processes keep starting between NVML's count and its list.
const TRIES: usize = 4;
/// The room asked for first: a node runs far fewer processes on one GPU.
const FIRST_ROOM: usize = 64;

/// A running-process query's C signature.
pub(crate) type Query = unsafe extern "C" fn(*mut c_void, *mut c_uint, *mut c_void) -> u32;

/// One list as NVML wrote it.
pub(crate) struct ProcessList {
    bytes: Vec<u8>,
    count: usize,
    /// The size of one entry, as NVML wrote them.
    pub(crate) entry: usize,
}

/// What NVML says a process holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Held {
    Bytes(u64),
    /// `NVML_VALUE_NOT_AVAILABLE`.
    NotAvailable,
}

impl ProcessList {
    /// The entries, each `entry` bytes as NVML wrote it.
    pub(crate) fn entries(&self) -> impl Iterator<Item = &[u8]> {
        self.bytes.chunks_exact(self.entry).take(self.count)
    }

    /// The pids listed.
    pub(crate) fn pids(&self) -> impl Iterator<Item = u32> + '_ {
        self.entries().map(pid)
    }

    /// What the list says process `wanted` holds, if it lists it.
    pub(crate) fn held_by(&self, wanted: u32) -> Option<Held> {
        let e = self.entries().find(|e| pid(e) == wanted)?;
        let bytes = u64::from_ne_bytes(e[8..16].try_into().expect("8 bytes"));
        Some(if bytes == VALUE_NOT_AVAILABLE {
            Held::NotAvailable
        } else {
            Held::Bytes(bytes)
        })
    }
}

/// The pid an entry starts with.
pub(crate) fn pid(entry: &[u8]) -> u32 {
    u32::from_ne_bytes(entry[0..4].try_into().expect("an entry holds a pid"))
}

/// The size of the entries NVML wrote into `buffer` (filled with [`PATTERN`] before): the span
/// up to the last byte it changed, divided by `count` and rounded up to whole 8-byte words,
/// never less than `nominal`, the size the caller's header gives.
fn entry_size(buffer: &[u8], count: usize, nominal: usize) -> usize {
    if count == 0 {
        return nominal;
    }
    let written = buffer
        .iter()
        .rposition(|&b| b != PATTERN)
        .map_or(0, |i| i + 1);
    let per_entry = written.div_ceil(count).div_ceil(8) * 8;
    per_entry.clamp(nominal, MAX_ENTRY)
}

/// Reads the list of `query` for `device`; `nominal` is the entry size its header gives
/// (16 for the unversioned queries, 24 for `_v2` and `_v3`). `Err` is NVML's code.
///
/// # Safety
/// `query` is one of NVML's running-process queries and `device` a handle NVML accepts or
/// refuses with an error.
pub(crate) unsafe fn read(
    query: Query,
    device: *mut c_void,
    nominal: usize,
) -> Result<ProcessList, u32> {
    let mut room = FIRST_ROOM;
    for _ in 0..TRIES {
        let mut bytes = vec![PATTERN; room * MAX_ENTRY];
        let mut count = room as c_uint;
        // SAFETY: `bytes` holds `room` entries of up to MAX_ENTRY bytes, more than NVML writes
        // for `room` entries of any size it has used; it writes the number to our local.
        let rc = unsafe { query(device, &mut count, bytes.as_mut_ptr().cast()) };
        match rc {
            code::SUCCESS => {
                let count = (count as usize).min(room);
                let entry = entry_size(&bytes, count, nominal);
                bytes.truncate(count * entry);
                return Ok(ProcessList {
                    bytes,
                    count,
                    entry,
                });
            }
            code::INSUFFICIENT_SIZE => room = count as usize + 8,
            e => return Err(e),
        }
    }
    Err(code::INSUFFICIENT_SIZE)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Entries as a driver writes them: pid, 4 bytes of padding as the driver leaves it,
    /// memory, instance ids, and `extra` zero bytes after (8 for the 535 drivers' `_v3`).
    fn written(entries: &[(u32, u64)], extra: usize, room: usize) -> Vec<u8> {
        let mut buf = vec![PATTERN; room * MAX_ENTRY];
        let size = 24 + extra;
        for (i, &(pid, memory)) in entries.iter().enumerate() {
            let e = &mut buf[i * size..(i + 1) * size];
            e[0..4].copy_from_slice(&pid.to_ne_bytes());
            e[8..16].copy_from_slice(&memory.to_ne_bytes());
            e[16..24].copy_from_slice(&[0xff; 8]);
            e[24..].fill(0);
        }
        buf
    }

    #[test]
    fn the_entry_size_is_what_the_driver_wrote() {
        let two = [(7, 100), (9, 200)];
        assert_eq!(entry_size(&written(&two, 0, 4), 2, 24), 24);
        assert_eq!(entry_size(&written(&two, 8, 4), 2, 24), 32);
        assert_eq!(entry_size(&written(&two[..1], 8, 4), 1, 24), 32);
        assert_eq!(entry_size(&written(&[], 8, 4), 0, 24), 24);
        // Never less than the header's size, never more than the room made.
        assert_eq!(entry_size(&[0; 8], 1, 24), 24);
        assert_eq!(entry_size(&[0; 256], 1, 24), MAX_ENTRY);
    }

    #[test]
    fn every_entry_is_read_at_the_driver_s_size() {
        for extra in [0, 8] {
            let mut bytes = written(&[(7, 100), (9, VALUE_NOT_AVAILABLE), (11, 300)], extra, 4);
            let entry = entry_size(&bytes, 3, 24);
            bytes.truncate(3 * entry);
            let list = ProcessList {
                bytes,
                count: 3,
                entry,
            };
            assert_eq!(list.pids().collect::<Vec<_>>(), [7, 9, 11], "extra {extra}");
            assert_eq!(list.held_by(11), Some(Held::Bytes(300)), "extra {extra}");
            assert_eq!(list.held_by(9), Some(Held::NotAvailable));
            assert_eq!(list.held_by(8), None);
        }
    }
}
