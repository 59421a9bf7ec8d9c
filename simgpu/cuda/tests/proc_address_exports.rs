//! simgpu's `cuGetProcAddress` held to what its `libcuda.so.1` exports: every answer is an
//! exported symbol, the very revision the ABI crate declares for the request, and every
//! exported `cu*` function is in the ABI crate's table and is what a request for its own key
//! (base name, version, flavour) answers.
//!
//! The exports are read from the built library's dynamic symbol table, not from the source,
//! so that a symbol exported any way at all is held to the table.

use std::collections::BTreeSet;
use std::ffi::{c_char, c_int, c_void, CString};
use std::path::PathBuf;
use tessera_cuda_abi::proc_address::{self, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM};
use tessera_cuda_abi::{QueryResult, CUDA_SUCCESS};

/// The cdylib of this package, target/<profile>/libsimgpu_cuda.so, built as `cargo build`
/// builds it (`cargo test` builds no cdylib for a package's own tests).
fn library() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let (dir, profile) = tessera_tests::profile_dir();
            let mut build = std::process::Command::new(tessera_tests::cargo());
            build.current_dir(tessera_tests::workspace_root()).args([
                "build",
                "-q",
                "-p",
                "simgpu-cuda",
            ]);
            tessera_tests::cargo_build(&mut build, &profile, "simgpu's libcuda");
            dir.join("libsimgpu_cuda.so")
        })
        .clone()
}

fn u16_at(b: &[u8], at: usize) -> usize {
    u16::from_le_bytes(b[at..at + 2].try_into().unwrap()) as usize
}
fn u32_at(b: &[u8], at: usize) -> usize {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as usize
}
fn u64_at(b: &[u8], at: usize) -> usize {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap()) as usize
}

/// The defined functions of an ELF64 little-endian shared object's dynamic symbol table.
fn exported_functions(elf: &[u8]) -> BTreeSet<String> {
    assert_eq!(&elf[..4], b"\x7fELF", "not an ELF file");
    assert_eq!((elf[4], elf[5]), (2, 1), "not ELF64 little-endian");
    let (shoff, shentsize, shnum) = (u64_at(elf, 0x28), u16_at(elf, 0x3a), u16_at(elf, 0x3c));
    let section = |i: usize| shoff + i * shentsize;
    const SHT_DYNSYM: usize = 11;
    let dynsym = (0..shnum)
        .map(section)
        .find(|&s| u32_at(elf, s + 4) == SHT_DYNSYM)
        .expect("a dynamic symbol table");
    let strtab = section(u32_at(elf, dynsym + 0x28)); // sh_link
    let (str_off, sym_off) = (u64_at(elf, strtab + 0x18), u64_at(elf, dynsym + 0x18));
    let (sym_size, sym_ent) = (u64_at(elf, dynsym + 0x20), u64_at(elf, dynsym + 0x38));
    let mut out = BTreeSet::new();
    for sym in (sym_off..sym_off + sym_size).step_by(sym_ent) {
        let (name, info, shndx) = (u32_at(elf, sym), elf[sym + 4], u16_at(elf, sym + 6));
        const STT_FUNC: u8 = 2;
        if shndx == 0 || info & 0xf != STT_FUNC || info >> 4 == 0 {
            continue; // undefined, not a function, or local
        }
        let start = str_off + name;
        let end = start + elf[start..].iter().position(|&b| b == 0).unwrap();
        out.insert(String::from_utf8_lossy(&elf[start..end]).into_owned());
    }
    out
}

type GetProcAddress =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> u32;

struct Driver {
    handle: *mut c_void,
    get: GetProcAddress,
}

impl Driver {
    fn open() -> Driver {
        let path = CString::new(library().into_os_string().into_encoded_bytes()).unwrap();
        // SAFETY: dlopen of the library this package built; its constructors are ours.
        let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(!handle.is_null(), "dlopen of {path:?} failed");
        let get = Driver::dlsym(handle, "cuGetProcAddress_v2").expect("cuGetProcAddress_v2");
        // SAFETY: the export of that name has this C signature (the ABI crate's).
        let get = unsafe { std::mem::transmute::<*mut c_void, GetProcAddress>(get) };
        Driver { handle, get }
    }

    fn dlsym(handle: *mut c_void, symbol: &str) -> Option<*mut c_void> {
        let c = CString::new(symbol).unwrap();
        // SAFETY: a live handle and a NUL-terminated name.
        let p = unsafe { libc::dlsym(handle, c.as_ptr()) };
        (!p.is_null()).then_some(p)
    }

    /// `cuGetProcAddress_v2(base, version, flags)`: the function and the status.
    fn lookup(&self, base: &str, version: u32, per_thread: bool) -> (u32, *mut c_void, c_int) {
        let c = CString::new(base).unwrap();
        let flags = if per_thread {
            CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
        } else {
            0
        };
        let (mut pfn, mut status) = (std::ptr::null_mut(), -1);
        // SAFETY: a NUL-terminated name and valid out-pointers.
        let rc = unsafe { (self.get)(c.as_ptr(), &mut pfn, version as c_int, flags, &mut status) };
        (rc, pfn, status)
    }
}

#[test]
fn the_table_and_the_exports_agree() {
    let elf = std::fs::read(library()).expect("the built libcuda (libsimgpu_cuda.so)");
    let exports: BTreeSet<String> = exported_functions(&elf)
        .into_iter()
        .filter(|s| s.starts_with("cu"))
        .collect();
    assert!(exports.len() > 300, "only {} cu* exports", exports.len());
    let table = proc_address::table();
    let driver = Driver::open();

    // Every exported cu* function is in the table, and a request for each key the table gives
    // it answers exactly that function.
    let mut missing = Vec::new();
    for symbol in &exports {
        let keys: Vec<_> = table.iter().filter(|e| e.symbol == symbol).collect();
        if keys.is_empty() {
            missing.push(symbol.clone());
        }
        let address = Driver::dlsym(driver.handle, symbol).expect("an export resolves");
        for e in keys {
            let (rc, pfn, status) = driver.lookup(e.key.base, e.key.since, e.key.per_thread);
            assert_eq!(
                (rc, status),
                (CUDA_SUCCESS, QueryResult::Success as c_int),
                "{symbol} at {:?}",
                e.key
            );
            assert_eq!(
                pfn, address,
                "{:?} answers another function than {symbol}",
                e.key
            );
        }
    }
    assert!(
        missing.is_empty(),
        "exported but not in the ABI table: {missing:?}"
    );

    // Every answer, for every revision the table declares and at the newest version, is an
    // export: the symbol the ABI crate resolves the request to, never another.
    let mut unimplemented = BTreeSet::new();
    for e in table {
        for version in [e.key.since, 12090] {
            let (rc, pfn, status) = driver.lookup(e.key.base, version, e.key.per_thread);
            let want = proc_address::resolve(e.key.base.as_bytes(), version, e.key.per_thread)
                .expect("the ABI resolves its own keys");
            if rc == CUDA_SUCCESS {
                assert!(
                    exports.contains(want.symbol),
                    "{} answered, not exported",
                    want.symbol
                );
                let address = Driver::dlsym(driver.handle, want.symbol);
                assert_eq!(Some(pfn), address, "{:?} at {version}", e.key);
            } else {
                // Only a revision this driver does not implement goes unanswered.
                assert!(
                    !exports.contains(want.symbol),
                    "{} exported, not answered",
                    want.symbol
                );
                assert_eq!(
                    status,
                    QueryResult::SymbolNotFound as c_int,
                    "{}",
                    want.symbol
                );
                assert!(pfn.is_null());
                unimplemented.insert(want.symbol);
            }
        }
    }
    // The revisions the ABI declares that simgpu leaves out: superseded 32-bit ones (their
    // `_v2` is implemented) and a few features it does not simulate.
    assert!(
        unimplemented.len() < 60,
        "{} revisions unimplemented: {unimplemented:?}",
        unimplemented.len()
    );
}
