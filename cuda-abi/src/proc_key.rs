//! The key `cuGetProcAddress` knows each revision of an entry point by: declared below both
//! the entry list (`entry`), which gives each symbol its key, and the lookup
//! (`proc_address`), which reads the table made from that list.

/// What `cuGetProcAddress` knows a symbol by: the base name, the first CUDA version
/// (`1000 × major + 10 × minor`) with this ABI, and whether it is the
/// per-thread-default-stream variant (`_ptsz`/`_ptds`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcKey {
    pub base: &'static str,
    pub since: u32,
    pub per_thread: bool,
}

/// One revision of an entry point: the symbol and its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcEntry {
    pub symbol: &'static str,
    pub key: ProcKey,
}
