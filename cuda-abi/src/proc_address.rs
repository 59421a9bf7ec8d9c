//! `cuGetProcAddress`: how a base name, the CUDA version the caller was built for and the
//! per-thread-default-stream flag select one symbol among an entry point's revisions.
//!
//! A request resolves to the highest revision not newer than the caller's version; the
//! per-thread flag picks the per-thread variant of that revision where one exists (never the
//! per-thread variant of an older ABI). No allocation: the table is static and lookups scan
//! it.

use crate::entry::PROC_ADDRESS;
pub use crate::proc_key::{ProcEntry, ProcKey};

/// `CUdriverProcAddressQueryResult`: why a lookup did (not) resolve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum QueryResult {
    Success = 0,
    SymbolNotFound = 1,
    VersionNotSufficient = 2,
}

/// `CU_GET_PROC_ADDRESS_DEFAULT`: the default stream the program was built for (legacy).
pub const CU_GET_PROC_ADDRESS_DEFAULT: u64 = 0;
/// `CU_GET_PROC_ADDRESS_LEGACY_STREAM`.
pub const CU_GET_PROC_ADDRESS_LEGACY_STREAM: u64 = 1;
/// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`: the `_ptsz`/`_ptds` variants.
pub const CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM: u64 = 2;

/// Every revision of every entry point the ABI declares.
pub fn table() -> &'static [ProcEntry] {
    PROC_ADDRESS
}

/// The revision of `base` a caller built for `version` gets, with `per_thread` asking for
/// the per-thread-default-stream variant.
pub fn resolve(
    base: &[u8],
    version: u32,
    per_thread: bool,
) -> Result<&'static ProcEntry, QueryResult> {
    resolve_in(PROC_ADDRESS, base, version, per_thread)
}

/// [`resolve`] in `table`.
pub fn resolve_in(
    table: &'static [ProcEntry],
    base: &[u8],
    version: u32,
    per_thread: bool,
) -> Result<&'static ProcEntry, QueryResult> {
    let newest = |pt: bool| {
        table
            .iter()
            .filter(|e| {
                e.key.base.as_bytes() == base && e.key.since <= version && e.key.per_thread == pt
            })
            .max_by_key(|e| e.key.since)
    };
    let legacy = newest(false);
    if per_thread {
        if let Some(pt) = newest(true) {
            if legacy.is_none_or(|l| pt.key.since >= l.key.since) {
                return Ok(pt);
            }
        }
    }
    match legacy {
        Some(e) => Ok(e),
        None if table.iter().any(|e| e.key.base.as_bytes() == base) => {
            Err(QueryResult::VersionNotSufficient)
        }
        None => Err(QueryResult::SymbolNotFound),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry;

    fn r(base: &str, version: u32, per_thread: bool) -> Result<&'static str, QueryResult> {
        resolve(base.as_bytes(), version, per_thread).map(|e| e.symbol)
    }

    #[test]
    fn picks_the_newest_revision_the_caller_knows() {
        assert_eq!(r("cuMemAlloc", 2000, false), Ok("cuMemAlloc"));
        assert_eq!(r("cuMemAlloc", 3019, false), Ok("cuMemAlloc"));
        assert_eq!(r("cuMemAlloc", 12000, false), Ok("cuMemAlloc_v2"));
        assert_eq!(r("cuCtxCreate", 12080, false), Ok("cuCtxCreate_v4"));
        assert_eq!(r("cuCtxCreate", 12000, false), Ok("cuCtxCreate_v3"));
        assert_eq!(
            r("cuGetProcAddress", 12000, false),
            Ok("cuGetProcAddress_v2")
        );
        assert_eq!(r("cuGetProcAddress", 11030, false), Ok("cuGetProcAddress"));
        assert_eq!(r("cuDeviceGetUuid", 12080, false), Ok("cuDeviceGetUuid_v2"));
        assert_eq!(
            r("cuGraphInstantiate", 11040, false),
            Ok("cuGraphInstantiateWithFlags")
        );
        assert_eq!(
            r("cuGraphInstantiateWithFlags", 12000, false),
            Ok("cuGraphInstantiateWithFlags")
        );
    }

    #[test]
    fn per_thread_flag_picks_ptds_and_ptsz() {
        assert_eq!(r("cuLaunchKernel", 12000, true), Ok("cuLaunchKernel_ptsz"));
        assert_eq!(r("cuLaunchKernel", 12000, false), Ok("cuLaunchKernel"));
        assert_eq!(r("cuMemcpyHtoD", 12000, true), Ok("cuMemcpyHtoD_v2_ptds"));
        assert_eq!(
            r("cuMemcpyHtoDAsync", 12000, true),
            Ok("cuMemcpyHtoDAsync_v2_ptsz")
        );
        assert_eq!(
            r("cuStreamGetCaptureInfo", 11080, true),
            Ok("cuStreamGetCaptureInfo_v2_ptsz")
        );
        // Before per-thread streams existed, the legacy revision is all there is.
        assert_eq!(r("cuMemcpyHtoD", 6050, true), Ok("cuMemcpyHtoD_v2"));
        // Functions without a stream have no per-thread variant.
        assert_eq!(r("cuMemAlloc", 12000, true), Ok("cuMemAlloc_v2"));
    }

    #[test]
    fn unknown_names_and_old_versions() {
        assert_eq!(
            r("cuNoSuchThing", 12000, false),
            Err(QueryResult::SymbolNotFound)
        );
        assert_eq!(
            r("cuMemAllocAsync", 11000, false),
            Err(QueryResult::VersionNotSufficient)
        );
        assert_eq!(
            r("cuCtxCreate_v2", 12000, false),
            Err(QueryResult::SymbolNotFound)
        );
    }

    #[test]
    fn table_is_well_formed() {
        for e in table() {
            let k = e.key;
            let alias = e.symbol == "cuGraphInstantiateWithFlags" && k.base == "cuGraphInstantiate";
            assert!(
                alias || e.symbol.starts_with(k.base),
                "{} does not extend {}",
                e.symbol,
                k.base
            );
            let suffix = &e.symbol[k.base.len().min(e.symbol.len())..];
            assert_eq!(
                suffix.ends_with("_ptds") || suffix.ends_with("_ptsz"),
                k.per_thread,
                "{}",
                e.symbol
            );
            let twins = table().iter().filter(|o| o.key == k);
            assert_eq!(
                twins.count(),
                1,
                "{} has two revisions at {}",
                k.base,
                k.since
            );
            // Every symbol is what a lookup of its own key answers.
            assert_eq!(r(k.base, k.since, k.per_thread), Ok(e.symbol), "{k:?}");
        }
    }

    #[test]
    fn entry_modules_carry_their_key() {
        assert_eq!(entry::cuMemAlloc_v2::SYMBOL, "cuMemAlloc_v2");
        assert_eq!(
            entry::cuLaunchKernel_ptsz::KEY,
            ProcKey {
                base: "cuLaunchKernel",
                since: 7000,
                per_thread: true
            }
        );
        let f: Option<entry::cuLaunchKernel::Pfn> = None;
        assert!(f.is_none());
    }
}
