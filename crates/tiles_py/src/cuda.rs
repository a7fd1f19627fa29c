//! The CUDA driver API, loaded at run time from `libcuda.so.1` (the driver; no toolkit):
//! primary context, PTX -> cubin with the driver's JIT linker, module load (of a cubin, or of
//! PTX the JIT compiles as a whole program), function
//! attributes, the assert flag, and the address of `cuLaunchKernel` for the launch fast path.
//!
//! Loading it here rather than through cuda-python keeps a fresh process's first launch from a
//! warm cache free of cuda-python's import (measured at 27 ms next to torch on the H200 host).
//! Every call checks its `CUresult` and turns failures into `CudaError` values with the
//! driver's error name.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::sync::OnceLock;

extern "C" {
    fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
}

const RTLD_NOW: c_int = 2;
const RTLD_GLOBAL: c_int = 0x100;

type CuResult = c_int;

/// A driver call that failed, or a driver that could not be loaded.
#[derive(Debug, Clone)]
pub struct CudaError(pub String);

type R<T> = Result<T, CudaError>;

macro_rules! api {
    ($( $field:ident : $sym:literal => fn($($arg:ty),*) ),* $(,)?) => {
        /// The driver entry points tiles uses.
        pub struct Api {
            $( $field: unsafe extern "C" fn($($arg),*) -> CuResult, )*
        }

        impl Api {
            fn load() -> R<Api> {
                let lib = CString::new("libcuda.so.1").expect("no NUL");
                // SAFETY: dlopen with a valid C string; a null result is handled.
                let h = unsafe { dlopen(lib.as_ptr(), RTLD_NOW | RTLD_GLOBAL) };
                if h.is_null() {
                    return Err(CudaError("the CUDA driver (libcuda.so.1) could not be loaded".into()));
                }
                Ok(Api {
                    $( $field: {
                        let name = CString::new($sym).expect("no NUL");
                        // SAFETY: dlsym on a live handle; a null result is handled.
                        let p = unsafe { dlsym(h, name.as_ptr()) };
                        if p.is_null() {
                            return Err(CudaError(format!("the CUDA driver has no {}", $sym)));
                        }
                        // SAFETY: the symbol is the driver function with this C signature
                        // (from cuda.h for the API versions named in the symbol).
                        unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) -> CuResult>(p) }
                    }, )*
                })
            }
        }
    };
}

api! {
    init: "cuInit" => fn(c_uint),
    device_get_count: "cuDeviceGetCount" => fn(*mut c_int),
    device_get: "cuDeviceGet" => fn(*mut c_int, c_int),
    device_get_attribute: "cuDeviceGetAttribute" => fn(*mut c_int, c_int, c_int),
    primary_ctx_retain: "cuDevicePrimaryCtxRetain" => fn(*mut *mut c_void, c_int),
    ctx_set_current: "cuCtxSetCurrent" => fn(*mut c_void),
    ctx_get_current: "cuCtxGetCurrent" => fn(*mut *mut c_void),
    ctx_get_device: "cuCtxGetDevice" => fn(*mut c_int),
    ctx_synchronize: "cuCtxSynchronize" => fn(),
    get_error_name: "cuGetErrorName" => fn(CuResult, *mut *const c_char),
    module_load_data: "cuModuleLoadData" => fn(*mut *mut c_void, *const c_void),
    module_load_data_ex: "cuModuleLoadDataEx" => fn(*mut *mut c_void, *const c_void, c_uint, *mut c_int, *mut *mut c_void),
    module_unload: "cuModuleUnload" => fn(*mut c_void),
    module_get_function: "cuModuleGetFunction" => fn(*mut *mut c_void, *mut c_void, *const c_char),
    module_get_global: "cuModuleGetGlobal_v2" => fn(*mut u64, *mut usize, *mut c_void, *const c_char),
    func_get_attribute: "cuFuncGetAttribute" => fn(*mut c_int, c_int, *mut c_void),
    func_set_attribute: "cuFuncSetAttribute" => fn(*mut c_void, c_int, c_int),
    link_create: "cuLinkCreate_v2" => fn(c_uint, *mut c_int, *mut *mut c_void, *mut *mut c_void),
    link_add_data: "cuLinkAddData_v2" => fn(*mut c_void, c_int, *mut c_void, usize, *const c_char, c_uint, *mut c_int, *mut *mut c_void),
    link_complete: "cuLinkComplete" => fn(*mut c_void, *mut *mut c_void, *mut usize),
    link_destroy: "cuLinkDestroy" => fn(*mut c_void),
    memcpy_dtoh: "cuMemcpyDtoH_v2" => fn(*mut c_void, u64, usize),
    memset_d32: "cuMemsetD32_v2" => fn(u64, c_uint, usize),
    launch_kernel: "cuLaunchKernel" => fn(*mut c_void, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, *mut c_void, *mut *mut c_void, *mut *mut c_void),
    event_create: "cuEventCreate" => fn(*mut *mut c_void, c_uint),
    event_record: "cuEventRecord" => fn(*mut c_void, *mut c_void),
    event_synchronize: "cuEventSynchronize" => fn(*mut c_void),
    event_elapsed_time: "cuEventElapsedTime" => fn(*mut f32, *mut c_void, *mut c_void),
    event_destroy: "cuEventDestroy_v2" => fn(*mut c_void),
    launch_kernel_ex: "cuLaunchKernelEx" => fn(*const LaunchConfig, *mut c_void, *mut *mut c_void, *mut *mut c_void),
    pointer_get_attribute: "cuPointerGetAttribute" => fn(*mut c_void, c_int, u64),
}

/// `CUlaunchAttribute`: an attribute id, padding to 8 bytes, then a 64-byte value union (only
/// its first `int` is used here).
#[repr(C)]
struct LaunchAttribute {
    id: c_int,
    pad: [u8; 4],
    value: [u32; 16],
}

/// `CUlaunchConfig`, the argument of `cuLaunchKernelEx`.
#[repr(C)]
pub struct LaunchConfig {
    grid: [c_uint; 3],
    block: [c_uint; 3],
    shared: c_uint,
    stream: *mut c_void,
    attrs: *const LaunchAttribute,
    num_attrs: c_uint,
}

/// `CU_LAUNCH_ATTRIBUTE_COOPERATIVE`.
const LAUNCH_ATTRIBUTE_COOPERATIVE: c_int = 2;
/// `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`.
const LAUNCH_ATTRIBUTE_PROGRAMMATIC_SERIALIZATION: c_int = 6;
/// Launch flags: a cooperative grid (`launch_cooperative_grid=True`).
pub const LAUNCH_COOPERATIVE: u32 = 1;
/// Launch flags: programmatic dependent launch (`launch_pdl=True`).
pub const LAUNCH_PDL: u32 = 2;

// Attribute numbers from cuda.h.
/// `CU_DEVICE_ATTRIBUTE_*` numbers tiles reads.
pub mod attr {
    pub const WARP_SIZE: i32 = 10;
    pub const MAX_REGISTERS_PER_BLOCK: i32 = 12;
    pub const CLOCK_RATE: i32 = 13;
    pub const MULTIPROCESSOR_COUNT: i32 = 16;
    pub const MEMORY_CLOCK_RATE: i32 = 36;
    pub const GLOBAL_MEMORY_BUS_WIDTH: i32 = 37;
    pub const MAX_THREADS_PER_MULTIPROCESSOR: i32 = 39;
    pub const COMPUTE_CAPABILITY_MAJOR: i32 = 75;
    pub const COMPUTE_CAPABILITY_MINOR: i32 = 76;
    pub const MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: i32 = 97;
}
/// `CU_POINTER_ATTRIBUTE_DEVICE_POINTER`.
const POINTER_ATTRIBUTE_DEVICE_POINTER: c_int = 3;
/// `CUDA_ERROR_INVALID_VALUE`: what the driver answers for an address it does not know.
const ERROR_INVALID_VALUE: CuResult = 1;
const FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: c_int = 3;
const FUNC_ATTRIBUTE_NUM_REGS: c_int = 4;
const FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: c_int = 8;
const JIT_INPUT_PTX: c_int = 1;
/// `CU_JIT_ERROR_LOG_BUFFER` and `CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES`.
const JIT_ERROR_LOG_BUFFER: c_int = 5;
const JIT_ERROR_LOG_BUFFER_SIZE_BYTES: c_int = 6;

static API: OnceLock<Result<Api, CudaError>> = OnceLock::new();

/// The loaded driver (loaded once per process).
pub fn api() -> R<&'static Api> {
    API.get_or_init(Api::load).as_ref().map_err(|e| e.clone())
}

fn check(a: &Api, r: CuResult, what: &str) -> R<()> {
    if r == 0 {
        return Ok(());
    }
    let mut name: *const c_char = std::ptr::null();
    // SAFETY: cuGetErrorName writes a pointer to a static string (or leaves it null).
    unsafe { (a.get_error_name)(r, &mut name) };
    let name = if name.is_null() {
        format!("CUDA error {r}")
    } else {
        // SAFETY: the driver returns a NUL-terminated static string.
        unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned()
    };
    Err(CudaError(format!("{what} failed: {name}")))
}

/// Initialises the driver; returns the number of CUDA devices (an error where there is none).
pub fn device_count() -> R<i32> {
    let a = api()?;
    let mut n = 0;
    // SAFETY: plain driver calls with a valid out-pointer.
    unsafe {
        check(a, (a.init)(0), "cuInit")?;
        check(a, (a.device_get_count)(&mut n), "cuDeviceGetCount")?;
    }
    if n == 0 {
        return Err(CudaError("no CUDA GPU found".into()));
    }
    Ok(n)
}

/// The CUdevice of device ordinal `device` (the device count is read only to explain a
/// refusal).
fn device_handle(a: &Api, device: i32) -> R<c_int> {
    let mut dev = 0;
    // SAFETY: plain driver calls with a valid out-pointer; cuDeviceGet checks the ordinal.
    let r = unsafe {
        check(a, (a.init)(0), "cuInit")?;
        (a.device_get)(&mut dev, device)
    };
    if r != 0 {
        let n = device_count()?;
        if !(0..n).contains(&device) {
            return Err(CudaError(format!(
                "no CUDA device {device}: this machine has {n} (0 to {})",
                n - 1
            )));
        }
        check(a, r, "cuDeviceGet")?;
    }
    Ok(dev)
}

/// Initialises the driver and retains `device`'s primary context; returns the context.
pub fn primary_context(device: i32) -> R<usize> {
    let a = api()?;
    let dev = device_handle(a, device)?;
    let mut ctx = std::ptr::null_mut();
    // SAFETY: valid out-pointer; `dev` came from cuDeviceGet.
    unsafe {
        check(
            a,
            (a.primary_ctx_retain)(&mut ctx, dev),
            "cuDevicePrimaryCtxRetain",
        )?;
    }
    Ok(ctx as usize)
}

/// Makes `ctx` current on this thread.
pub fn set_current(ctx: usize) -> R<()> {
    let a = api()?;
    // SAFETY: ctx came from `primary_context`.
    unsafe {
        check(
            a,
            (a.ctx_set_current)(ctx as *mut c_void),
            "cuCtxSetCurrent",
        )
    }
}

/// The context current on this thread (0 for none, or before the driver is initialised).
pub fn current_context() -> R<usize> {
    let a = api()?;
    let mut ctx = std::ptr::null_mut();
    // SAFETY: valid out-pointer. Before cuInit the call fails, which means no context.
    let r = unsafe { (a.ctx_get_current)(&mut ctx) };
    Ok(if r == 0 { ctx as usize } else { 0 })
}

/// The device ordinal of the context current on this thread, or None without one.
pub fn current_device() -> R<Option<i32>> {
    let a = api()?;
    let mut dev: c_int = 0;
    // SAFETY: valid out-pointer; without a current context the call fails, which is None.
    let r = unsafe { (a.ctx_get_device)(&mut dev) };
    Ok((r == 0).then_some(dev))
}

/// An attribute (`attr::*`) of device ordinal `device`.
pub fn device_attribute(which: i32, device: i32) -> R<i32> {
    let a = api()?;
    let dev = device_handle(a, device)?;
    let mut v = 0;
    // SAFETY: valid out-pointer; `dev` came from cuDeviceGet.
    unsafe {
        check(
            a,
            (a.device_get_attribute)(&mut v, which, dev),
            "cuDeviceGetAttribute",
        )?;
    }
    Ok(v)
}

/// PTX -> cubin with the driver's JIT linker.
pub fn link_ptx(ptx: &str, name: &str) -> R<Vec<u8>> {
    let a = api()?;
    let mut data = ptx.as_bytes().to_vec();
    data.push(0);
    let cname = CString::new(name).map_err(|_| CudaError("kernel name has a NUL".into()))?;
    // SAFETY: the link state is created, used and destroyed here; the cubin is copied out
    // before the state (which owns it) is destroyed.
    unsafe {
        let mut state = std::ptr::null_mut();
        check(
            a,
            (a.link_create)(0, std::ptr::null_mut(), std::ptr::null_mut(), &mut state),
            "cuLinkCreate",
        )?;
        let r = (a.link_add_data)(
            state,
            JIT_INPUT_PTX,
            data.as_mut_ptr() as *mut c_void,
            data.len(),
            cname.as_ptr(),
            0,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        );
        if let Err(e) = check(a, r, "cuLinkAddData") {
            (a.link_destroy)(state);
            return Err(CudaError(format!(
                "the driver rejected the PTX of {name}: {}",
                e.0
            )));
        }
        let mut cubin = std::ptr::null_mut();
        let mut size = 0usize;
        let r = (a.link_complete)(state, &mut cubin, &mut size);
        let out = check(a, r, "cuLinkComplete")
            .map(|_| std::slice::from_raw_parts(cubin as *const u8, size).to_vec());
        (a.link_destroy)(state);
        out
    }
}

/// A loaded kernel: module and function handles and the resources ptxas reported.
pub struct Loaded {
    pub module: usize,
    pub function: usize,
    pub n_regs: i32,
    /// Local memory per thread in 32-bit words (Triton's `n_spills`: the local bytes / 4).
    pub n_spills: i32,
}

/// Loads a cubin and finds `name` in it; allows `shared` bytes of dynamic shared memory.
pub fn load(cubin: &[u8], name: &str, shared: u32) -> R<Loaded> {
    let a = api()?;
    let cname = CString::new(name).map_err(|_| CudaError("kernel name has a NUL".into()))?;
    let mut module = std::ptr::null_mut();
    // SAFETY: the cubin buffer outlives the call (the driver copies it); out-pointer valid.
    unsafe {
        check(
            a,
            (a.module_load_data)(&mut module, cubin.as_ptr() as *const c_void),
            "cuModuleLoadData",
        )?;
    }
    function(a, module, &cname, shared)
}

/// Loads a module from PTX, which the driver's JIT compiles as a whole program, as ptxas does
/// by default. The linker (`link_ptx`) compiles PTX as relocatable code instead, and took more
/// registers for 46 of 167 test kernels on the 580 drivers (Liger's SwiGLU 132 against 48).
/// The 580 drivers compile one such load at a time: loads on several threads do not overlap,
/// where links do. The JIT's error log is in the error.
pub fn load_ptx(ptx: &[u8], name: &str, shared: u32) -> R<Loaded> {
    let a = api()?;
    let cname = CString::new(name).map_err(|_| CudaError("kernel name has a NUL".into()))?;
    let mut data = ptx.to_vec();
    data.push(0);
    let mut log = vec![0u8; 16 * 1024];
    let mut keys = [JIT_ERROR_LOG_BUFFER, JIT_ERROR_LOG_BUFFER_SIZE_BYTES];
    let mut values = [log.as_mut_ptr() as *mut c_void, log.len() as *mut c_void];
    let mut module = std::ptr::null_mut();
    // SAFETY: the PTX (NUL-terminated) and the log buffer outlive the call; the option arrays
    // hold two entries each, as the count says; the size option is passed by value in the
    // pointer, as the driver's API has it.
    let r = unsafe {
        (a.module_load_data_ex)(
            &mut module,
            data.as_ptr() as *const c_void,
            keys.len() as c_uint,
            keys.as_mut_ptr(),
            values.as_mut_ptr(),
        )
    };
    if let Err(e) = check(a, r, "cuModuleLoadDataEx") {
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        let text = String::from_utf8_lossy(&log[..end]);
        return Err(CudaError(format!(
            "the driver rejected the PTX of {name}: {}{}{}",
            e.0,
            if text.trim().is_empty() { "" } else { "\n" },
            text.trim()
        )));
    }
    function(a, module, &cname, shared)
}

/// Loads `ptx` (a tiny module) and unloads it: a process's first JIT compile pays the JIT's
/// start.
pub fn warm_jit(ptx: &str, name: &str) -> R<()> {
    let l = load_ptx(ptx.as_bytes(), name, 0)?;
    let a = api()?;
    // SAFETY: the module was loaded just above and nothing else holds it.
    unsafe {
        check(
            a,
            (a.module_unload)(l.module as *mut c_void),
            "cuModuleUnload",
        )
    }
}

/// `name`'s function in a loaded module, with its registers and local memory; allows `shared`
/// bytes of dynamic shared memory.
fn function(a: &Api, module: *mut c_void, cname: &CStr, shared: u32) -> R<Loaded> {
    // SAFETY: module is a loaded module; out-pointers valid.
    unsafe {
        let mut f = std::ptr::null_mut();
        check(
            a,
            (a.module_get_function)(&mut f, module, cname.as_ptr()),
            "cuModuleGetFunction",
        )?;
        let (mut regs, mut local) = (0, 0);
        check(
            a,
            (a.func_get_attribute)(&mut regs, FUNC_ATTRIBUTE_NUM_REGS, f),
            "cuFuncGetAttribute",
        )?;
        check(
            a,
            (a.func_get_attribute)(&mut local, FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, f),
            "cuFuncGetAttribute",
        )?;
        if shared > 48 * 1024 {
            check(
                a,
                (a.func_set_attribute)(
                    f,
                    FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    shared as c_int,
                ),
                "cuFuncSetAttribute",
            )?;
        }
        Ok(Loaded {
            module: module as usize,
            function: f as usize,
            n_regs: regs,
            n_spills: local / 4,
        })
    }
}

/// The device address of a module global, or 0 if the module has none by that name.
pub fn global_address(module: usize, name: &str) -> R<u64> {
    let a = api()?;
    let cname = CString::new(name).map_err(|_| CudaError("global name has a NUL".into()))?;
    let (mut ptr, mut size) = (0u64, 0usize);
    // SAFETY: module from `load`; out-pointers valid.
    let r = unsafe {
        (a.module_get_global)(&mut ptr, &mut size, module as *mut c_void, cname.as_ptr())
    };
    Ok(if r == 0 { ptr } else { 0 })
}

/// Synchronises, reads a `u32` at `addr` and zeroes it.
pub fn read_and_clear_u32(addr: u64) -> R<u32> {
    let a = api()?;
    let mut v: u32 = 0;
    // SAFETY: addr is a live 4-byte device global; the host buffer is 4 bytes.
    unsafe {
        check(a, (a.ctx_synchronize)(), "cuCtxSynchronize")?;
        check(
            a,
            (a.memcpy_dtoh)(&mut v as *mut u32 as *mut c_void, addr, 4),
            "cuMemcpyDtoH",
        )?;
        if v != 0 {
            check(a, (a.memset_d32)(addr, 0, 1), "cuMemsetD32")?;
        }
    }
    Ok(v)
}

/// Whether the GPU can reach `addr`: device memory, managed memory or registered (pinned) host
/// memory. Plain host memory is `false`, which a kernel would otherwise fault on.
pub fn device_accessible(addr: u64) -> R<bool> {
    let a = api()?;
    let mut dev: u64 = 0;
    // SAFETY: the out-pointer is a live u64, the size DEVICE_POINTER writes.
    let r = unsafe {
        (a.pointer_get_attribute)(
            &mut dev as *mut u64 as *mut c_void,
            POINTER_ATTRIBUTE_DEVICE_POINTER,
            addr,
        )
    };
    if r == ERROR_INVALID_VALUE {
        return Ok(false);
    }
    check(a, r, "cuPointerGetAttribute").map(|()| true)
}

/// Waits for the current context's work.
pub fn synchronize() -> R<()> {
    let a = api()?;
    // SAFETY: no arguments.
    unsafe { check(a, (a.ctx_synchronize)(), "cuCtxSynchronize") }
}

/// A new timing event.
pub fn event_create() -> R<usize> {
    let a = api()?;
    let mut e: *mut c_void = std::ptr::null_mut();
    // SAFETY: writes one event handle (flags 0: default, with timing).
    unsafe { check(a, (a.event_create)(&mut e, 0), "cuEventCreate")? };
    Ok(e as usize)
}

/// Records `event` on `stream` (0: the legacy default stream).
pub fn event_record(event: usize, stream: usize) -> R<()> {
    let a = api()?;
    // SAFETY: event from `event_create`; the stream is the caller's live stream or 0.
    unsafe {
        check(
            a,
            (a.event_record)(event as *mut c_void, stream as *mut c_void),
            "cuEventRecord",
        )
    }
}

/// Milliseconds between two recorded events (waits for `end`).
pub fn event_elapsed_ms(start: usize, end: usize) -> R<f32> {
    let a = api()?;
    let mut ms = 0f32;
    // SAFETY: both events from `event_create`, recorded by the caller.
    unsafe {
        check(
            a,
            (a.event_synchronize)(end as *mut c_void),
            "cuEventSynchronize",
        )?;
        check(
            a,
            (a.event_elapsed_time)(&mut ms, start as *mut c_void, end as *mut c_void),
            "cuEventElapsedTime",
        )?;
    }
    Ok(ms)
}

/// Frees an event.
pub fn event_destroy(event: usize) -> R<()> {
    let a = api()?;
    // SAFETY: event from `event_create`, not used afterwards.
    unsafe { check(a, (a.event_destroy)(event as *mut c_void), "cuEventDestroy") }
}

/// The address of `cuLaunchKernel`, for the launch paths.
pub fn launch_address() -> R<usize> {
    Ok(api()?.launch_kernel as usize)
}

/// Launches `function` with parameters at `params` (an array of pointers to values); `flags`
/// (`LAUNCH_COOPERATIVE`, `LAUNCH_PDL`) select `cuLaunchKernelEx` with those attributes.
#[allow(clippy::too_many_arguments)]
pub fn launch(
    function: usize,
    grid: (u32, u32, u32),
    threads: u32,
    shared: u32,
    stream: usize,
    params: usize,
    flags: u32,
) -> R<()> {
    let a = api()?;
    if flags != 0 {
        let attr = |id| LaunchAttribute {
            id,
            pad: [0; 4],
            value: {
                let mut v = [0u32; 16];
                v[0] = 1;
                v
            },
        };
        let mut attrs = Vec::with_capacity(2);
        if flags & LAUNCH_COOPERATIVE != 0 {
            attrs.push(attr(LAUNCH_ATTRIBUTE_COOPERATIVE));
        }
        if flags & LAUNCH_PDL != 0 {
            attrs.push(attr(LAUNCH_ATTRIBUTE_PROGRAMMATIC_SERIALIZATION));
        }
        let config = LaunchConfig {
            grid: [grid.0, grid.1, grid.2],
            block: [threads, 1, 1],
            shared,
            stream: stream as *mut c_void,
            attrs: attrs.as_ptr(),
            num_attrs: attrs.len() as c_uint,
        };
        // SAFETY: as below; `config` and `attrs` outlive the call.
        return unsafe {
            check(
                a,
                (a.launch_kernel_ex)(
                    &config,
                    function as *mut c_void,
                    params as *mut *mut c_void,
                    std::ptr::null_mut(),
                ),
                "cuLaunchKernelEx",
            )
        };
    }
    // SAFETY: function from `load`; params points at one pointer per kernel parameter, each to
    // a value of that parameter's type (packed by the caller).
    unsafe {
        check(
            a,
            (a.launch_kernel)(
                function as *mut c_void,
                grid.0,
                grid.1,
                grid.2,
                threads,
                1,
                1,
                shared,
                stream as *mut c_void,
                params as *mut *mut c_void,
                std::ptr::null_mut(),
            ),
            "cuLaunchKernel",
        )
    }
}

/// The Python functions over this module (`tiles._tiles.cuda_*`); `tiles.runtime.driver`
/// wraps them and raises `LaunchError` for a `CudaError` (raised here as `RuntimeError`).
pub mod py {
    use super::*;
    use pyo3::exceptions::PyRuntimeError;
    use pyo3::prelude::*;
    use pyo3::types::PyBytes;

    fn err(e: CudaError) -> PyErr {
        PyRuntimeError::new_err(e.0)
    }

    /// Loads the driver and initialises it: the number of devices (an error for none).
    #[pyfunction]
    pub fn cuda_device_count(py: Python<'_>) -> PyResult<i32> {
        py.detach(device_count).map_err(err)
    }

    /// Loads the driver, initialises it and retains a device's primary context.
    #[pyfunction]
    #[pyo3(signature = (device = 0))]
    pub fn cuda_primary_context(py: Python<'_>, device: i32) -> PyResult<usize> {
        py.detach(move || primary_context(device)).map_err(err)
    }

    /// Makes a context current on the calling thread.
    #[pyfunction]
    pub fn cuda_set_current(ctx: usize) -> PyResult<()> {
        set_current(ctx).map_err(err)
    }

    /// The context current on the calling thread (0 for none).
    #[pyfunction]
    pub fn cuda_current_context() -> PyResult<usize> {
        current_context().map_err(err)
    }

    /// The device ordinal of the calling thread's current context (-1 for none).
    #[pyfunction]
    pub fn cuda_current_device() -> PyResult<i32> {
        Ok(current_device().map_err(err)?.unwrap_or(-1))
    }

    /// Whether the GPU can reach an address (false for plain host memory).
    #[pyfunction]
    pub fn cuda_device_accessible(addr: u64) -> PyResult<bool> {
        device_accessible(addr).map_err(err)
    }

    /// A device's attribute by its `CU_DEVICE_ATTRIBUTE_*` number.
    #[pyfunction]
    #[pyo3(signature = (which, device = 0))]
    pub fn cuda_device_attribute(which: i32, device: i32) -> PyResult<i32> {
        device_attribute(which, device).map_err(err)
    }

    /// PTX -> cubin (the driver's JIT linker), without the GIL.
    #[pyfunction]
    pub fn cuda_link_ptx<'py>(
        py: Python<'py>,
        ptx: &str,
        name: &str,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let (ptx, name) = (ptx.to_string(), name.to_string());
        let cubin = py.detach(move || link_ptx(&ptx, &name)).map_err(err)?;
        Ok(PyBytes::new(py, &cubin))
    }

    /// Loads a cubin, or PTX (`ptx=True`: the driver's JIT compiles it as a whole program),
    /// without the GIL: `(module, function, n_regs, n_spills)`.
    #[pyfunction]
    #[pyo3(signature = (image, name, shared, ptx = false))]
    pub fn cuda_load(
        py: Python<'_>,
        image: &[u8],
        name: &str,
        shared: u32,
        ptx: bool,
    ) -> PyResult<(usize, usize, i32, i32)> {
        let (image, name) = (image.to_vec(), name.to_string());
        let l = py
            .detach(move || {
                if ptx {
                    load_ptx(&image, &name, shared)
                } else {
                    load(&image, &name, shared)
                }
            })
            .map_err(err)?;
        Ok((l.module, l.function, l.n_regs, l.n_spills))
    }

    /// Starts the driver's JIT (`ptx`, a tiny module, loaded and unloaded), without the GIL.
    #[pyfunction]
    pub fn cuda_warm_jit(py: Python<'_>, ptx: &str, name: &str) -> PyResult<()> {
        let (ptx, name) = (ptx.to_string(), name.to_string());
        py.detach(move || warm_jit(&ptx, &name)).map_err(err)
    }

    /// The device address of a module global (0 if absent).
    #[pyfunction]
    pub fn cuda_global_address(module: usize, name: &str) -> PyResult<u64> {
        global_address(module, name).map_err(err)
    }

    /// Synchronises, returns the `u32` at `addr` and zeroes it.
    #[pyfunction]
    pub fn cuda_read_and_clear_u32(py: Python<'_>, addr: u64) -> PyResult<u32> {
        py.detach(move || read_and_clear_u32(addr)).map_err(err)
    }

    /// Waits for the context's work.
    #[pyfunction]
    pub fn cuda_synchronize(py: Python<'_>) -> PyResult<()> {
        py.detach(synchronize).map_err(err)
    }

    /// A new timing event (a handle).
    #[pyfunction]
    pub fn cuda_event_create() -> PyResult<usize> {
        event_create().map_err(err)
    }

    /// Records the event on a stream.
    #[pyfunction]
    pub fn cuda_event_record(event: usize, stream: usize) -> PyResult<()> {
        event_record(event, stream).map_err(err)
    }

    /// Milliseconds from `start` to `end`, waiting for `end` without the GIL.
    #[pyfunction]
    pub fn cuda_event_elapsed_ms(py: Python<'_>, start: usize, end: usize) -> PyResult<f32> {
        py.detach(|| event_elapsed_ms(start, end)).map_err(err)
    }

    /// Frees an event.
    #[pyfunction]
    pub fn cuda_event_destroy(event: usize) -> PyResult<()> {
        event_destroy(event).map_err(err)
    }

    /// The address of `cuLaunchKernel`.
    #[pyfunction]
    pub fn cuda_launch_address() -> PyResult<usize> {
        launch_address().map_err(err)
    }

    /// Launches with pre-packed parameters (`params`: address of an array of pointers);
    /// `flags`: 1 a cooperative grid, 2 programmatic dependent launch.
    #[pyfunction]
    #[pyo3(signature = (function, gx, gy, gz, threads, shared, stream, params, flags=0))]
    #[allow(clippy::too_many_arguments)]
    pub fn cuda_launch(
        function: usize,
        gx: u32,
        gy: u32,
        gz: u32,
        threads: u32,
        shared: u32,
        stream: usize,
        params: usize,
        flags: u32,
    ) -> PyResult<()> {
        launch(
            function,
            (gx, gy, gz),
            threads,
            shared,
            stream,
            params,
            flags,
        )
        .map_err(err)
    }

    /// Registers the functions on the module.
    pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
        m.add_function(wrap_pyfunction!(cuda_device_count, m)?)?;
        m.add_function(wrap_pyfunction!(cuda_primary_context, m)?)?;
        m.add_function(wrap_pyfunction!(cuda_set_current, m)?)?;
        m.add_function(wrap_pyfunction!(cuda_current_context, m)?)?;
        m.add_function(wrap_pyfunction!(cuda_current_device, m)?)?;
        m.add_function(wrap_pyfunction!(cuda_device_attribute, m)?)?;
        m.add_function(wrap_pyfunction!(cuda_device_accessible, m)?)?;
        m.add_function(wrap_pyfunction!(cuda_link_ptx, m)?)?;
        m.add_function(wrap_pyfunction!(cuda_load, m)?)?;
        m.add_function(wrap_pyfunction!(cuda_warm_jit, m)?)?;
        m.add_function(wrap_pyfunction!(cuda_global_address, m)?)?;
        m.add_function(wrap_pyfunction!(cuda_read_and_clear_u32, m)?)?;
        m.add_function(wrap_pyfunction!(cuda_synchronize, m)?)?;
        m.add_function(wrap_pyfunction!(cuda_launch_address, m)?)?;
        m.add_function(wrap_pyfunction!(cuda_launch, m)?)?;
        for f in [
            wrap_pyfunction!(cuda_event_create, m)?,
            wrap_pyfunction!(cuda_event_record, m)?,
            wrap_pyfunction!(cuda_event_elapsed_ms, m)?,
            wrap_pyfunction!(cuda_event_destroy, m)?,
        ] {
            m.add_function(f)?;
        }
        let attrs = pyo3::types::PyDict::new(m.py());
        for (name, v) in [
            ("warpSize", attr::WARP_SIZE),
            ("max_num_regs", attr::MAX_REGISTERS_PER_BLOCK),
            ("sm_clock_rate", attr::CLOCK_RATE),
            ("multiprocessor_count", attr::MULTIPROCESSOR_COUNT),
            ("mem_clock_rate", attr::MEMORY_CLOCK_RATE),
            ("mem_bus_width", attr::GLOBAL_MEMORY_BUS_WIDTH),
            ("max_threads_per_sm", attr::MAX_THREADS_PER_MULTIPROCESSOR),
            ("cc_major", attr::COMPUTE_CAPABILITY_MAJOR),
            ("cc_minor", attr::COMPUTE_CAPABILITY_MINOR),
            ("max_shared_mem", attr::MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
        ] {
            attrs.set_item(name, v)?;
        }
        m.add("CUDA_DEVICE_ATTRIBUTES", attrs)?;
        Ok(())
    }
}
