//! Modules, libraries and their kernels. Modules are PTX text or cubins: simgpu reads each
//! kernel's parameter layout from its `.entry` declaration or its cubin's attributes, as a
//! driver does, and simulates the kernels it knows by name (see [`Behaviour`]); the others
//! take the node's default kernel time.

pub(crate) mod cubin;
pub(crate) mod image;
pub(crate) mod lz4;
pub(crate) mod ptx;

use crate::ffi::{code, write_out, CUfunction, CUmodule, CUresult, DriverResult};
use crate::model::context::{self, Context};
use crate::model::driver;
use crate::model::exec::registry::Registry;
use image::Code;
use ptx::{Entry, Param};
use std::ffi::{c_char, CStr, CString};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

pub use tessera_cuda_abi::CUkernel;
pub use tessera_cuda_abi::CUlibrary;

/// What a kernel does when it runs here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Behaviour {
    /// `tessera_spin(.u64 ns)`: busy for `ns`.
    Spin,
    /// `tessera_fill_u32(.u64 ptr, .u64 count, .u32 value)`: writes `count` words.
    FillU32,
    /// Any other kernel: the node's default kernel time, no effect on memory.
    Default,
}

impl Behaviour {
    fn of(entry: &Entry) -> Behaviour {
        let sizes: Vec<usize> = entry.params.iter().map(|p| p.size).collect();
        match (entry.name.as_str(), sizes.as_slice()) {
            ("tessera_spin", [8]) => Behaviour::Spin,
            ("tessera_fill_u32", [8, 8, 4]) => Behaviour::FillU32,
            _ => Behaviour::Default,
        }
    }
}

/// `CUfunction_attribute` values.
mod attr {
    pub const MAX_THREADS_PER_BLOCK: i32 = 0;
    pub const SHARED_SIZE_BYTES: i32 = 1;
    pub const CONST_SIZE_BYTES: i32 = 2;
    pub const LOCAL_SIZE_BYTES: i32 = 3;
    pub const NUM_REGS: i32 = 4;
    pub const PTX_VERSION: i32 = 5;
    pub const BINARY_VERSION: i32 = 6;
    pub const CACHE_MODE_CA: i32 = 7;
    pub const MAX_DYNAMIC_SHARED_SIZE_BYTES: i32 = 8;
    pub const PREFERRED_SHARED_MEMORY_CARVEOUT: i32 = 9;
    /// Attributes 10..=15 are the cluster ones.
    pub const FIRST_CLUSTER: i32 = 10;
    pub const LAST: i32 = 15;
}

/// Static shared memory a kernel may use without opting in.
const DEFAULT_SHARED_BYTES: u64 = 48 << 10;
/// Registers per thread reported for kernels that do not bound them.
const DEFAULT_REGISTERS: i32 = 32;

/// The most dynamic shared memory per block a kernel may opt in to, by compute capability.
pub(crate) fn shared_optin_limit(cc: (u32, u32)) -> u64 {
    match cc {
        (7, 0) | (7, 2) => 96 << 10,
        (7, 5) => 64 << 10,
        (8, 0) | (8, 7) => 163 << 10,
        (8, _) => 99 << 10,
        (9, _) | (10, _) => 227 << 10,
        _ => DEFAULT_SHARED_BYTES,
    }
}

/// A kernel of a loaded module.
pub(crate) struct Function {
    /// Its name.
    pub name: CString,
    /// Its parameters' places in the argument buffer.
    pub params: Vec<Param>,
    /// The argument buffer's size.
    pub params_size: usize,
    /// What it does here.
    pub behaviour: Behaviour,
    /// The most threads per block it may be launched with.
    pub max_threads: u32,
    pub(crate) static_shared: u64,
    pub(crate) registers: i32,
    ptx_version: i32,
    /// The device whose properties it reports.
    pub(crate) device: usize,
    /// Whether its module has code for that device: a library loaded without any (its
    /// kernels known by name only) fails their first use instead, as lazy loading does.
    pub(crate) runnable: bool,
    pub(crate) module: Weak<Module>,
    attrs: Mutex<FunctionAttrs>,
}

pub(crate) struct FunctionAttrs {
    max_dynamic_shared: i32,
    carveout: i32,
    pub(crate) cluster: [i32; 6],
    pub(crate) cache_config: u32,
}

impl Function {
    pub(crate) fn attrs(&self) -> MutexGuard<'_, FunctionAttrs> {
        self.attrs.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn compute_capability(&self) -> (u32, u32) {
        device_cc(self.device)
    }

    /// The device it was loaded for.
    pub(crate) fn device(&self) -> usize {
        self.device
    }

    /// The dynamic shared memory a launch may ask for.
    pub(crate) fn max_dynamic_shared(&self) -> u64 {
        self.attrs().max_dynamic_shared as u64
    }

    pub(crate) fn attribute(&self, which: i32) -> Result<i32, CUresult> {
        let a = self.attrs();
        Ok(match which {
            attr::MAX_THREADS_PER_BLOCK => self.max_threads as i32,
            attr::SHARED_SIZE_BYTES => self.static_shared as i32,
            attr::CONST_SIZE_BYTES | attr::LOCAL_SIZE_BYTES | attr::CACHE_MODE_CA => 0,
            attr::NUM_REGS => self.registers,
            attr::PTX_VERSION => self.ptx_version,
            attr::BINARY_VERSION => {
                let (major, minor) = self.compute_capability();
                (major * 10 + minor) as i32
            }
            attr::MAX_DYNAMIC_SHARED_SIZE_BYTES => a.max_dynamic_shared,
            attr::PREFERRED_SHARED_MEMORY_CARVEOUT => a.carveout,
            attr::FIRST_CLUSTER..=attr::LAST => a.cluster[(which - attr::FIRST_CLUSTER) as usize],
            _ => return Err(code::CUDA_ERROR_INVALID_VALUE),
        })
    }

    pub(crate) fn set_attribute(&self, which: i32, value: i32) -> DriverResult {
        let limit =
            shared_optin_limit(self.compute_capability()).saturating_sub(self.static_shared);
        let mut a = self.attrs();
        match which {
            attr::MAX_DYNAMIC_SHARED_SIZE_BYTES if (0..=limit as i64).contains(&(value as i64)) => {
                a.max_dynamic_shared = value
            }
            attr::PREFERRED_SHARED_MEMORY_CARVEOUT if (-1..=100).contains(&value) => {
                a.carveout = value
            }
            attr::FIRST_CLUSTER..=attr::LAST if value >= 0 => {
                a.cluster[(which - attr::FIRST_CLUSTER) as usize] = value
            }
            _ => return Err(code::CUDA_ERROR_INVALID_VALUE),
        }
        Ok(())
    }
}

/// A module-scope variable.
struct Global {
    name: String,
    size: u64,
    /// Its device memory, when the module has some for it.
    address: Option<u64>,
}

/// A loaded module.
pub(crate) struct Module {
    /// The context it was loaded in; None for a library's module.
    ctx: Option<u64>,
    pub(crate) functions: Vec<Arc<Function>>,
    globals: Vec<Global>,
    /// The device memory of its variables, if it has any.
    memory: Option<u64>,
    /// The library it belongs to, if it was loaded as one.
    library: OnceLock<usize>,
}

impl Module {
    pub(crate) fn function(&self, name: &CStr) -> Result<&Arc<Function>, CUresult> {
        self.functions
            .iter()
            .find(|f| f.name.as_c_str() == name)
            .ok_or(code::CUDA_ERROR_NOT_FOUND)
    }

    pub(crate) fn global(&self, name: &CStr, dptr: *mut u64, bytes: *mut usize) -> DriverResult {
        let name = name.to_str().map_err(|_| code::CUDA_ERROR_NOT_FOUND)?;
        let g = self.globals.iter().find(|g| g.name == name);
        let (address, size) = g
            .and_then(|g| Some((g.address?, g.size)))
            .ok_or(code::CUDA_ERROR_NOT_FOUND)?;
        if !dptr.is_null() {
            // SAFETY: non-null; the caller provides a CUdeviceptr to write.
            unsafe { write_out(dptr, address)? };
        }
        if !bytes.is_null() {
            // SAFETY: non-null; the caller provides a size_t to write.
            unsafe { write_out(bytes, size as usize)? };
        }
        Ok(())
    }
}

impl Function {
    fn new(
        entry: &Entry,
        module: Weak<Module>,
        device: usize,
        ptx_version: i32,
        runnable: bool,
    ) -> Function {
        Function {
            name: CString::new(entry.name.as_str()).unwrap_or_default(),
            params: entry.params.clone(),
            params_size: entry.params_size(),
            behaviour: Behaviour::of(entry),
            max_threads: entry.max_threads.unwrap_or(1024).clamp(1, 1024),
            static_shared: entry.shared_bytes,
            registers: entry.max_registers.map_or(DEFAULT_REGISTERS, |r| r as i32),
            ptx_version,
            device,
            runnable,
            module,
            attrs: Mutex::new(FunctionAttrs {
                max_dynamic_shared: DEFAULT_SHARED_BYTES.saturating_sub(entry.shared_bytes) as i32,
                carveout: -1,
                cluster: [0; 6],
                cache_config: 0,
            }),
        }
    }

    pub(crate) fn module_handle(&self) -> CUmodule {
        self.module.as_ptr() as CUmodule
    }

    pub(crate) fn library_handle(&self) -> Option<CUlibrary> {
        let module = self.module.upgrade()?;
        module.library.get().map(|l| *l as CUlibrary)
    }
}

/// A loaded library: a context-independent module.
pub(crate) struct Library {
    pub(crate) module: Arc<Module>,
}

pub(crate) static MODULES: Registry<Module> = Registry::new();
static FUNCTIONS: Registry<Function> = Registry::new();
pub(crate) static LIBRARIES: Registry<Library> = Registry::new();

/// The live function (or kernel) behind a handle, ready to run:
/// `CUDA_ERROR_NO_BINARY_FOR_GPU` for a kernel its module has no code for.
pub(crate) fn function(handle: CUfunction) -> Result<Arc<Function>, CUresult> {
    let f = registered(handle)?;
    if !f.runnable {
        return Err(image::NO_BINARY_FOR_GPU);
    }
    Ok(f)
}

/// The live function (or kernel) behind a handle, whether or not it can run: for what is
/// known of it without its code (name, parameters, module).
pub(crate) fn registered(handle: CUfunction) -> Result<Arc<Function>, CUresult> {
    driver::process()?;
    FUNCTIONS.get(handle).ok_or(code::CUDA_ERROR_INVALID_HANDLE)
}

pub(crate) fn module(handle: CUmodule) -> Result<Arc<Module>, CUresult> {
    driver::process()?;
    MODULES.get(handle).ok_or(code::CUDA_ERROR_INVALID_HANDLE)
}

pub(crate) fn library(handle: CUlibrary) -> Result<Arc<Library>, CUresult> {
    driver::process()?;
    LIBRARIES.get(handle).ok_or(code::CUDA_ERROR_INVALID_HANDLE)
}

pub(crate) fn name_arg<'a>(name: *const c_char) -> Result<&'a CStr, CUresult> {
    if name.is_null() {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null; the caller passes a NUL-terminated name.
    Ok(unsafe { CStr::from_ptr(name) })
}

/// The kernels and variables of a module's code, and the version its kernels report as
/// their PTX version (the architecture, for a cubin).
fn contents(code: Code) -> Result<(Vec<Entry>, Vec<ptx::Variable>, i32), CUresult> {
    match code {
        Code::Ptx(text) => {
            let parsed = ptx::parse(&text).map_err(|_| code::CUDA_ERROR_INVALID_PTX)?;
            let version = (parsed.version.0 * 10 + parsed.version.1) as i32;
            Ok((parsed.entries, parsed.globals, version))
        }
        Code::Sass(cubin) => {
            let version = (cubin.arch.major * 10 + cubin.arch.minor) as i32;
            Ok((cubin.entries, cubin.globals, version))
        }
    }
}

/// Builds a module from its code and registers it with its functions. `ctx` owns it (None
/// for a library's); `device` is the one whose properties its kernels report.
fn load(
    code: Code,
    ctx: Option<u64>,
    device: usize,
    runnable: bool,
) -> Result<Arc<Module>, CUresult> {
    let (entries, variables, ptx_version) = contents(code)?;
    let (globals, memory) = place_variables(&variables, device, ctx.is_some())?;
    let module = Arc::new_cyclic(|me: &Weak<Module>| Module {
        ctx,
        functions: entries
            .iter()
            .map(|e| Arc::new(Function::new(e, me.clone(), device, ptx_version, runnable)))
            .collect(),
        globals,
        memory,
        library: OnceLock::new(),
    });
    for f in &module.functions {
        FUNCTIONS.insert(Arc::clone(f));
    }
    MODULES.insert(Arc::clone(&module));
    Ok(module)
}

/// Device memory for a module's variables, each at its alignment, with its first value
/// written; returns them with their addresses, and the memory's base (None for none).
fn place_variables(
    variables: &[ptx::Variable],
    device: usize,
    in_context: bool,
) -> Result<(Vec<Global>, Option<u64>), CUresult> {
    let mut offsets = Vec::with_capacity(variables.len());
    let mut total = 0u64;
    for v in variables {
        let align = v.align.clamp(1, 4096).next_power_of_two();
        let at = total.next_multiple_of(align);
        offsets.push(at);
        total = at
            .checked_add(v.size)
            .ok_or(code::CUDA_ERROR_OUT_OF_MEMORY)?;
    }
    if total == 0 {
        let globals = variables
            .iter()
            .map(|v| Global {
                name: v.name.clone(),
                size: v.size,
                address: None,
            })
            .collect();
        return Ok((globals, None));
    }
    let base = crate::model::memory::allocate_module_variables(device, total, in_context)?;
    let globals = variables
        .iter()
        .zip(offsets)
        .map(|(v, at)| {
            let address = base + at;
            let init = &v.init[..v.init.len().min(v.size as usize)];
            if let Some(p) = crate::model::memory::device_range(address, init.len() as u64) {
                // SAFETY: the range lies inside the allocation just made for the module, which
                // nothing else knows of yet; `init` is a separate host buffer.
                unsafe { std::ptr::copy_nonoverlapping(init.as_ptr(), p, init.len()) };
            }
            Global {
                name: v.name.clone(),
                size: v.size,
                address: Some(address),
            }
        })
        .collect();
    Ok((globals, Some(base)))
}

/// The compute capability of device `device`.
pub(crate) fn device_cc(device: usize) -> (u32, u32) {
    driver::devices()
        .ok()
        .and_then(|d| d.get(device))
        .map_or((8, 0), |d| d.compute_capability)
}

/// Unregisters a module and its functions, and gives back its variables.
pub(crate) fn unload(module: &Module) {
    for f in &module.functions {
        FUNCTIONS.remove(Registry::handle_of(f));
    }
    if let Some(base) = module.memory {
        crate::model::memory::free_module_variables(base);
    }
}

/// Unloads the modules of a destroyed context.
fn forget_context(ctx: &Context) {
    for m in MODULES.remove_where(|m| m.ctx == Some(ctx.id)) {
        unload(&m);
    }
}
context::teardown_step!(Modules, forget_context);

/// Loads a module in the current context from the code `code` finds for the context's
/// device (given its compute capability).
pub(crate) fn load_module(
    out: *mut CUmodule,
    code: impl FnOnce((u32, u32)) -> Result<Code, CUresult>,
) -> DriverResult {
    let ctx = context::current()?;
    if out.is_null() {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    let module = load(code(device_cc(ctx.device))?, Some(ctx.id), ctx.device, true)?;
    // SAFETY: checked non-null; the caller provides a CUmodule to write.
    unsafe { write_out(out, Registry::handle_of(&module)) }
}

pub(crate) fn read_file(path: *const c_char) -> Result<Vec<u8>, CUresult> {
    let path = name_arg(path)?;
    let path = std::path::Path::new(
        <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(path.to_bytes()),
    );
    std::fs::read(path).map_err(|_| code::CUDA_ERROR_FILE_NOT_FOUND)
}

/// Loads a library from the code `code` finds for the device of the current context (0
/// without one). As with lazy loading, a library without code for the device still loads:
/// its kernels are known by name and fail with `CUDA_ERROR_NO_BINARY_FOR_GPU` when used.
pub(crate) fn load_library(
    out: *mut CUlibrary,
    code: impl FnOnce((u32, u32)) -> Result<(Code, bool), CUresult>,
) -> DriverResult {
    driver::process()?;
    if out.is_null() {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    // A library belongs to no context; it reports the current device's properties, if any.
    let device = context::current().map_or(0, |c| c.device);
    let (code, runnable) = code(device_cc(device))?;
    let module = load(code, None, device, runnable)?;
    let library = Arc::new(Library {
        module: Arc::clone(&module),
    });
    let handle = LIBRARIES.insert(library);
    let _ = module.library.set(handle as usize);
    // SAFETY: checked non-null; the caller provides a CUlibrary to write.
    unsafe { write_out(out, handle) }
}

pub(crate) fn param_info(
    f: CUfunction,
    index: usize,
    offset: *mut usize,
    size: *mut usize,
) -> DriverResult {
    let f = registered(f)?;
    let p = f.params.get(index).ok_or(code::CUDA_ERROR_INVALID_VALUE)?;
    if !offset.is_null() {
        // SAFETY: non-null; the caller provides a size_t to write.
        unsafe { write_out(offset, p.offset)? };
    }
    if !size.is_null() {
        // SAFETY: non-null; the caller provides a size_t to write.
        unsafe { write_out(size, p.size)? };
    }
    Ok(())
}

pub(crate) fn write_name(out: *mut *const c_char, f: CUfunction) -> DriverResult {
    let f = registered(f)?;
    // The name lives as long as the function; the program reads it before unloading.
    // SAFETY: write_out checks null; the caller provides a const char * to write.
    unsafe { write_out(out, f.name.as_ptr()) }
}

/// Writes up to `n` handles of a module's functions.
pub(crate) fn enumerate(out: *mut CUfunction, n: u32, module: &Module) -> DriverResult {
    if out.is_null() || (n as usize) < module.functions.len() {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    for (i, f) in module.functions.iter().enumerate() {
        // SAFETY: the caller provides room for `n` handles, and i < len <= n.
        unsafe { out.add(i).write(Registry::handle_of(f)) };
    }
    Ok(())
}

/// `CU_FUNCTION_LOADING_STATE_UNLOADED`.
pub(crate) const UNLOADED: u32 = 0;
/// `CU_FUNCTION_LOADING_STATE_LOADED`.
pub(crate) const LOADED: u32 = 1;
/// `CU_MODULE_EAGER_LOADING`: every kernel is ready when its module loads.
pub(crate) const EAGER_LOADING: u32 = 1;
