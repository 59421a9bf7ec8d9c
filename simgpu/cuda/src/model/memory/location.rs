//! Locations: where a memory pool, an access descriptor, a prefetch or an advice puts
//! memory (a device, or the host).

pub(crate) use tessera_cuda_abi::CUmemLocation;
pub(crate) use tessera_cuda_abi::CU_MEM_LOCATION_TYPE_DEVICE as LOCATION_DEVICE;
