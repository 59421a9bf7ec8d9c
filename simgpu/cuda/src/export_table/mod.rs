//! `cuGetExportTable`: the driver's private interfaces to NVIDIA's own libraries.
//!
//! The CUDA runtime (`libcudart`, shared or static) does not live on the documented driver
//! API alone: it asks the driver for tables of function pointers, each named by a 16-byte
//! UUID, and refuses to start without several of them. Nothing about them is documented;
//! what is known comes from public reverse-engineering work that observed the runtime's
//! requests and the arguments it passes. The tables here serve what the runtimes of CUDA
//! 11.8, 12.x and 13.x need to initialize, manage contexts, load the fat binaries that
//! programs register and launch their kernels. The 12.x and 13.x runtimes first ask for one
//! more table (f8cff951-2146-8b4e-b9e2-fb469e7c0dd9, purpose unknown) and carry on without
//! it; any table not listed here is refused the same way. The 13.x runtime refuses to start
//! without a table of its own (21318c60-…) and calls one more slot of the runtime interface
//! (12) as it starts. cuBLASLt 13, choosing a matrix product's kernel, asks slot 2 of the
//! tools thread state for a context and slot 4 of the 13.x table for that context's id, the
//! key of its per-context state: seen from its calls and what it does with the answers.
//!
//! A table is an array of pointer-sized slots; most start with their own size in bytes.
//! Slots whose purpose nobody has established answer `CUDA_ERROR_NOT_SUPPORTED` (and say
//! so when `SIMGPU_TRACE_EXPORT_TABLES` is set), so that a runtime that starts to depend on
//! one fails visibly rather than by reading garbage.

mod integrity;
mod runtime;
mod storage;
mod tools;

use crate::ffi::{code, CUresult, DriverResult};
use std::ffi::c_void;
use std::sync::OnceLock;

/// The environment variable that makes the tables report requests they cannot serve.
const ENV_TRACE: &str = "SIMGPU_TRACE_EXPORT_TABLES";

/// Whether to report table requests and calls of unknown slots on stderr.
fn tracing() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os(ENV_TRACE).is_some_and(|v| !v.is_empty() && v != "0"))
}

/// A table: pointer-sized slots holding a size, a function or nothing.
#[repr(transparent)]
pub(crate) struct Table<const N: usize>([*const c_void; N]);

// SAFETY: a table is never written after it is built; its slots are integers and pointers
// to functions, which any thread may read.
unsafe impl<const N: usize> Sync for Table<N> {}

impl<const N: usize> Table<N> {
    /// A table whose first slot holds its own size in bytes, as most tables begin.
    const fn sized(mut slots: [*const c_void; N]) -> Table<N> {
        slots[0] = std::ptr::without_provenance(N * std::mem::size_of::<usize>());
        Table(slots)
    }

    fn start(&'static self) -> *const c_void {
        self.0.as_ptr().cast()
    }
}

/// A slot that is deliberately empty.
const NONE: *const c_void = std::ptr::null();

/// The UUID of a table, from its usual text form (hex digits, dashes ignored).
const fn uuid(text: &str) -> [u8; 16] {
    let text = text.as_bytes();
    let mut out = [0u8; 16];
    let (mut i, mut n) = (0, 0);
    while i < text.len() {
        let digit = match text[i] {
            b'0'..=b'9' => text[i] - b'0',
            b'a'..=b'f' => text[i] - b'a' + 10,
            b'-' => {
                i += 1;
                continue;
            }
            _ => panic!("not a UUID"),
        };
        out[n / 2] |= digit << (if n % 2 == 0 { 4 } else { 0 });
        n += 1;
        i += 1;
    }
    assert!(n == 32, "not a UUID");
    out
}

/// Stands in for a slot whose purpose is unknown: it refuses, whatever the arguments (the
/// C calling convention lets a callee ignore them).
unsafe extern "C" fn unknown_slot<const TABLE: usize, const SLOT: usize>() -> CUresult {
    if tracing() {
        eprintln!(
            "simgpu: export table {}: slot {SLOT} is not provided",
            TABLES[TABLE].name
        );
    }
    code::CUDA_ERROR_NOT_SUPPORTED
}

/// The unknown slot `SLOT` of table number `TABLE` (its index in [`TABLES`]).
const fn unknown<const TABLE: usize, const SLOT: usize>() -> *const c_void {
    unknown_slot::<TABLE, SLOT> as *const c_void
}

/// Index of each table in [`TABLES`], for [`unknown`].
mod index {
    pub const RUNTIME: usize = 0;
    pub const TOOLS_THREAD_STATE: usize = 1;
    pub const TOOLS_CALLBACKS: usize = 2;
    pub const INTEGRITY: usize = 5;
    pub const CONTEXT_CHECKS: usize = 6;
    pub const RUNTIME_13: usize = 7;
}

/// A table this driver has.
struct Known {
    /// What it is for, in messages.
    name: &'static str,
    uuid: [u8; 16],
    start: fn() -> *const c_void,
}

/// Every table: a name for messages, its UUID, and where it starts.
static TABLES: [Known; 8] = [
    Known {
        name: "runtime interface",
        uuid: uuid("6bd5fb6c-5bf4-e74a-8987-d93912fd9df9"),
        start: || runtime::RUNTIME.start(),
    },
    Known {
        name: "tools thread state",
        uuid: uuid("42d85a81-23f6-cb47-8298-f6e78a3aecdc"),
        start: || tools::TOOLS_THREAD_STATE.start(),
    },
    Known {
        name: "tools callbacks",
        uuid: uuid("a094798c-2e74-2e74-93f2-0800200c0a66"),
        start: || tools::TOOLS_CALLBACKS.start(),
    },
    Known {
        name: "context-local storage",
        uuid: uuid("c693336e-1121-df11-a8c3-68f355d89593"),
        start: || storage::CONTEXT_STORAGE.start(),
    },
    Known {
        name: "context creation",
        uuid: uuid("0ca50b8c-1004-929a-89a7-d0df10e77286"),
        start: || runtime::CONTEXT_CREATE.start(),
    },
    Known {
        name: "integrity check",
        uuid: uuid("d4082055-bde6-704b-8d34-ba123c66e1f2"),
        start: || integrity::INTEGRITY.start(),
    },
    Known {
        name: "context checks",
        uuid: uuid("263e8860-7cd2-6143-92f6-bbd5006dfa7e"),
        start: || runtime::CONTEXT_CHECKS.start(),
    },
    Known {
        name: "runtime 13 interface",
        uuid: uuid("21318c60-9714-3248-8ca6-41ff7324c8f2"),
        start: || runtime::RUNTIME_13.start(),
    },
];

/// Text form of a UUID, as the reverse-engineering notes write them.
fn uuid_text(id: &[u8; 16]) -> String {
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// Runs a slot's body the way entry points run: a panic becomes `CUDA_ERROR_UNKNOWN`.
fn slot(body: impl FnOnce() -> DriverResult) -> CUresult {
    crate::ffi::guard(body)
}

cuda_entry! {
    fn cuGetExportTable(table: *mut *const c_void, id: *const [u8; 16]) {
        if table.is_null() || id.is_null() {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: non-null; a UUID is 16 bytes, by the contract.
        let id = unsafe { id.read_unaligned() };
        let found = TABLES.iter().find(|t| t.uuid == id);
        if tracing() {
            let name = found.map_or("unknown, refused", |t| t.name);
            eprintln!("simgpu: export table {} ({name})", uuid_text(&id));
        }
        let start = found.map_or(std::ptr::null(), |t| (t.start)());
        // SAFETY: non-null, and valid for a write of a pointer by the contract.
        unsafe { table.write(start) };
        // The driver refuses tables it does not have as an invalid argument.
        if start.is_null() {
            Err(code::CUDA_ERROR_INVALID_VALUE)
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_parse_in_text_order() {
        assert_eq!(
            uuid("6bd5fb6c-5bf4-e74a-8987-d93912fd9df9"),
            [
                0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd,
                0x9d, 0xf9
            ]
        );
        assert_eq!(
            uuid_text(&TABLES[index::INTEGRITY].uuid),
            "d4082055-bde6-704b-8d34-ba123c66e1f2"
        );
    }

    #[test]
    fn tables_are_found_by_uuid_and_start_with_their_size() {
        for t in &TABLES {
            let mut start = std::ptr::null();
            // SAFETY: valid out-pointer and UUID.
            let rc = unsafe { cuGetExportTable(&mut start, &t.uuid) };
            assert_eq!(rc, code::CUDA_SUCCESS, "{}", t.name);
            assert!(!start.is_null(), "{}", t.name);
        }
        let mut start = std::ptr::null();
        // SAFETY: as above.
        let rc = unsafe { cuGetExportTable(&mut start, &runtime_uuid()) };
        assert_eq!(rc, code::CUDA_SUCCESS);
        // SAFETY: the runtime table's first slot holds its size.
        let size = unsafe { *start.cast::<usize>() };
        assert_eq!(size, 16 * std::mem::size_of::<usize>());
        let unknown_id = [7u8; 16];
        // SAFETY: as above.
        let rc = unsafe { cuGetExportTable(&mut start, &unknown_id) };
        assert_eq!(rc, code::CUDA_ERROR_INVALID_VALUE);
        assert!(start.is_null());
    }

    fn runtime_uuid() -> [u8; 16] {
        TABLES[index::RUNTIME].uuid
    }

    #[test]
    fn the_indexes_name_their_tables() {
        assert_eq!(TABLES[index::RUNTIME].name, "runtime interface");
        assert_eq!(TABLES[index::TOOLS_CALLBACKS].name, "tools callbacks");
        assert_eq!(TABLES[index::INTEGRITY].name, "integrity check");
        assert_eq!(TABLES[index::CONTEXT_CHECKS].name, "context checks");
        assert_eq!(TABLES[index::RUNTIME_13].name, "runtime 13 interface");
    }
}
