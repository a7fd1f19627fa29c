//! The launch fast path: bind arguments, find the compiled specialisation, pack the
//! parameters and call the driver's `cuLaunchKernel`, all without running Python code.
//!
//! The key of a specialisation is computed here and only here, from the actual arguments:
//! per parameter its kind, dtype (pointers), 16-byte alignment or divisibility by 16 and
//! equality to 1 (integers), and the exact value of constexprs. A key that was never seen,
//! an argument this path does not understand, or the interpreter being on, sends the call to
//! the Python launcher, which compiles, launches and then teaches this dispatcher the key.

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyString, PyTuple};
use std::collections::HashMap;
use std::ffi::c_void;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// Set while a launch hook (the profiler) must see every launch: the fast path steps aside.
static HOOKED: AtomicBool = AtomicBool::new(false);

/// `set_launch_hooked(on)`: while on, every launch takes the Python path (and its hooks).
#[pyfunction]
pub fn set_launch_hooked(on: bool) {
    HOOKED.store(on, Ordering::Relaxed);
}

/// Bumped when a setting that changes compiled code (debug mode, the target) changes: every
/// dispatcher then forgets what it learned before launching anything by itself.
static EPOCH: AtomicU64 = AtomicU64::new(0);

/// `forget_learned_launches()`: every dispatcher drops its learned specialisations, so the
/// next launch of each takes the Python path, which compiles under the current settings.
#[pyfunction]
pub fn forget_learned_launches() {
    EPOCH.fetch_add(1, Ordering::Relaxed);
}

/// `CUresult cuLaunchKernel(CUfunction, gx, gy, gz, bx, by, bz, shared, CUstream, void**, void**)`.
type LaunchFn = unsafe extern "C" fn(
    *mut c_void,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    *mut c_void,
    *mut *mut c_void,
    *mut *mut c_void,
) -> i32;

/// Calls `launch` (the driver's `cuLaunchKernel`) for `function` with one parameter per word of
/// `storage` (each value in the word's low bytes, little-endian). The caller keeps the function's
/// module loaded for the call.
fn launch_packed(
    launch: LaunchFn,
    function: usize,
    grid: [u32; 3],
    threads: u32,
    shared: u32,
    stream: u64,
    storage: &mut [u64],
) -> PyResult<()> {
    let mut ptrs: Vec<*mut c_void> = storage
        .iter_mut()
        .map(|s| s as *mut u64 as *mut c_void)
        .collect();
    // SAFETY: `launch` is the driver's cuLaunchKernel (from cuGetProcAddress); `function` is a
    // CUfunction of a loaded module; `ptrs` holds one pointer per kernel parameter, each to 8
    // bytes alive for the call.
    let err = unsafe {
        launch(
            function as *mut c_void,
            grid[0],
            grid[1],
            grid[2],
            threads,
            1,
            1,
            shared,
            stream as *mut c_void,
            ptrs.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    };
    if err != 0 {
        return Err(crate::errors::BackendError::new_err(format!(
            "cuLaunchKernel failed with CUresult {err}"
        )));
    }
    Ok(())
}

/// How one kernel parameter's value is passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    Ptr,
    I1,
    I32,
    I64,
    U64,
    F32,
}

impl Slot {
    /// The slot a kind names: `ptr`, `i1`, `i32`, `i64`, `u64`, `fp32`.
    fn parse(kind: &str) -> Option<Slot> {
        Some(match kind {
            "ptr" => Slot::Ptr,
            "i1" => Slot::I1,
            "i32" => Slot::I32,
            "i64" => Slot::I64,
            "u64" => Slot::U64,
            "fp32" => Slot::F32,
            _ => return None,
        })
    }

    /// The parameter word (its value in the low bytes) of `v` passed in this slot, or None
    /// where the value is not of the slot's kind.
    fn word(self, v: ArgValue) -> Option<u64> {
        Some(match (self, v) {
            (Slot::Ptr, ArgValue::Ptr(a)) => a,
            (Slot::I32, ArgValue::Int(x)) => (x as i32) as u32 as u64,
            (Slot::I64 | Slot::U64, ArgValue::Int(x)) => x as u64,
            (Slot::F32, ArgValue::Float(x)) => (x as f32).to_bits() as u64,
            (Slot::I1, ArgValue::Bool(b)) => b as u64,
            _ => return None,
        })
    }
}

struct Entry {
    function: usize,
    threads: u32,
    shared: u32,
    slots: Vec<(usize, Slot)>,
    compiled: Py<PyAny>,
    /// The device of the context it was learned under (the key holds the context): whose
    /// torch stream a launch takes.
    device: i32,
}

/// One parameter's declaration.
struct ParamDecl {
    name: Py<PyString>,
    constexpr: bool,
    default: Option<Py<PyAny>>,
    /// What the key notes of an int or pointer: 2 its value 1 and divisibility (or alignment)
    /// by 16, 1 only its value 1 (`do_not_specialize_on_alignment`), 0 nothing.
    specialize: u8,
}

/// Key parts and the values to pass, computed from one call's arguments.
struct BoundArgs {
    key: Vec<u64>,
    values: Vec<ArgValue>,
}

#[derive(Clone, Copy)]
enum ArgValue {
    Ptr(u64),
    Int(i64),
    Float(f64),
    Bool(bool),
    Skip,
}

/// Hashes a key of argument facts (a few u64s) with one multiply-rotate step per word: the
/// keys come from the program, not from an adversary, so SipHash's few percent of a launch's
/// own cost bought nothing.
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_usize(&mut self, x: usize) {
        self.write_u64(x as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

type Entries = HashMap<Vec<u64>, Entry, BuildHasherDefault<KeyHasher>>;

/// Per-kernel dispatcher: a cache of specialisations keyed by argument facts.
#[pyclass(module = "tiles._tiles")]
pub struct Dispatcher {
    params: Vec<ParamDecl>,
    entries: Mutex<Entries>,
    /// The [`EPOCH`] the entries were learned in.
    epoch: AtomicU64,
    launch: Option<LaunchFn>,
    stream_fn: Option<Py<PyAny>>,
    fallback: Py<PyAny>,
    /// Globals (or closure cells) the kernel was compiled with: (module dict or cell, name,
    /// value). A launch whose names no longer hold those very objects takes the Python path,
    /// which says what changed.
    guards: Vec<(Py<PyAny>, Py<PyString>, Py<PyAny>)>,
}

fn hash_str(s: &str) -> u64 {
    // FNV-1a, 64-bit; the length is mixed in separately by the caller.
    let mut h: u64 = 0xcbf29ce484222325;
    for b in s.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

impl Dispatcher {
    /// Drops the learned entries if a setting changed since they were learned.
    fn forget_if_stale(&self) -> PyResult<()> {
        let now = EPOCH.load(Ordering::Relaxed);
        if self.epoch.load(Ordering::Relaxed) != now {
            self.entries
                .lock()
                .map_err(|_| PyRuntimeError::new_err("dispatcher lock poisoned"))?
                .clear();
            self.epoch.store(now, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Binds positional and keyword arguments to parameters and computes the key.
    /// `None` means "not for the fast path".
    fn bind(
        &self,
        py: Python<'_>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Option<BoundArgs>> {
        let n = self.params.len();
        if args.len() > n {
            return Ok(None);
        }
        let mut key = Vec::with_capacity(2 * n + 2);
        let mut values = Vec::with_capacity(n);
        let mut used_kwargs = 0usize;
        for (i, p) in self.params.iter().enumerate() {
            let owned;
            let v: Bound<'_, PyAny> = if i < args.len() {
                args.get_item(i)?
            } else {
                let found = match kwargs {
                    Some(kw) => kw.get_item(p.name.bind(py))?,
                    None => None,
                };
                match found {
                    Some(v) => {
                        used_kwargs += 1;
                        owned = v;
                        owned
                    }
                    None => match &p.default {
                        Some(d) => d.bind(py).clone(),
                        None => return Ok(None),
                    },
                }
            };
            if p.constexpr {
                if !self.constexpr_key(&v, &mut key)? {
                    return Ok(None);
                }
                values.push(ArgValue::Skip);
                continue;
            }
            if v.is_none() {
                key.push(7);
                values.push(ArgValue::Skip);
            } else if v.is_instance_of::<PyBool>() {
                key.push(4);
                values.push(ArgValue::Bool(v.extract::<bool>()?));
            } else if v.is_instance_of::<PyInt>() {
                let Ok(x) = v.extract::<i64>() else {
                    return Ok(None);
                };
                let ty = if (-(1i64 << 31)..(1i64 << 31)).contains(&x) {
                    0
                } else {
                    1
                };
                let spec = if p.specialize == 0 {
                    0
                } else if x == 1 {
                    1
                } else if p.specialize == 2 && x % 16 == 0 {
                    16
                } else {
                    0
                };
                key.push(2 | (ty << 8) | (spec << 16));
                values.push(ArgValue::Int(x));
            } else if v.is_instance_of::<PyFloat>() {
                key.push(3);
                values.push(ArgValue::Float(v.extract::<f64>()?));
            } else if let Ok(ptr) = v.call_method0(pyo3::intern!(py, "data_ptr")) {
                // A torch tensor, or another object with `data_ptr()` and a `dtype` (FlagGems'
                // StridedBuffer), which passes as a device pointer: dtype object identity,
                // device (where it tells one) and alignment.
                // Anything not plainly on a CUDA device takes the Python path, which accepts
                // pinned host memory and raises for the rest.
                if !plainly_on_gpu(py, &v) {
                    return Ok(None);
                }
                let (Ok(addr), Ok(dtype)) =
                    (ptr.extract::<u64>(), v.getattr(pyo3::intern!(py, "dtype")))
                else {
                    return Ok(None);
                };
                let align = if p.specialize == 2 && addr % 16 == 0 {
                    16
                } else {
                    1
                };
                key.push(5 | (align << 8));
                key.push(dtype.as_ptr() as u64);
                values.push(ArgValue::Ptr(addr));
            } else {
                return Ok(None);
            }
        }
        let nkw = kwargs.map_or(0, |k| k.len());
        if used_kwargs != nkw {
            // Launch options (num_warps, ...) or unknown keywords.
            let Some(kw) = kwargs else { return Ok(None) };
            for (k, v) in kw.iter() {
                // Keyword names at call sites are interned, as are the parameters' names and
                // the options' here: identity settles most without reading the text.
                if self.params.iter().any(|p| k.is(p.name.bind(py))) {
                    continue;
                }
                let option = if k.is(pyo3::intern!(py, "num_warps")) {
                    Some("num_warps")
                } else if k.is(pyo3::intern!(py, "num_stages")) {
                    Some("num_stages")
                } else {
                    None
                };
                let name: std::borrow::Cow<'_, str> = match option {
                    Some(o) => o.into(),
                    None => k.extract::<String>()?.into(),
                };
                if option.is_none()
                    && self
                        .params
                        .iter()
                        .any(|p| p.name.bind(py).to_cow().map(|s| s == name).unwrap_or(false))
                {
                    continue;
                }
                match &*name {
                    // Accepted and ignored, as the Python launcher does: one CTA per cluster,
                    // libdevice built in. (Tutorial 05's launch passes `num_ctas=1`.)
                    "num_ctas" | "extern_libs" => {}
                    "num_warps" | "num_stages" => {
                        let Ok(x) = v.extract::<i64>() else {
                            return Ok(None);
                        };
                        key.push(if name == "num_warps" { 100 } else { 101 });
                        key.push(x as u64);
                    }
                    // Options that change only the code: the key tells the learned kernels
                    // apart. (A change of the fusion settings makes every dispatcher forget.)
                    "enable_fp_fusion" => {
                        key.push(102);
                        key.push(if v.is_none() {
                            2
                        } else if v.is_instance_of::<PyBool>() {
                            u64::from(v.extract::<bool>()?)
                        } else {
                            return Ok(None);
                        });
                    }
                    "maxnreg" => {
                        key.push(103);
                        key.push(if v.is_none() {
                            u64::MAX
                        } else if let Ok(x) = v.extract::<u32>() {
                            u64::from(x)
                        } else {
                            return Ok(None);
                        });
                    }
                    _ => return Ok(None),
                }
            }
        }
        // Modules belong to a context: the kernels learned under one (a device's, where torch
        // or `set_current_device` made it current) launch only under it.
        let ctx = crate::cuda::current_context().unwrap_or(0);
        if ctx == 0 {
            return Ok(None);
        }
        key.push(ctx as u64);
        Ok(Some(BoundArgs { key, values }))
    }

    fn constexpr_key(&self, v: &Bound<'_, PyAny>, key: &mut Vec<u64>) -> PyResult<bool> {
        if v.is_none() {
            key.push(10);
        } else if v.is_instance_of::<PyBool>() {
            key.push(11);
            key.push(v.extract::<bool>()? as u64);
        } else if v.is_instance_of::<PyInt>() {
            let Ok(x) = v.extract::<i64>() else {
                return Ok(false);
            };
            key.push(12);
            key.push(x as u64);
        } else if v.is_instance_of::<PyFloat>() {
            key.push(13);
            key.push(v.extract::<f64>()?.to_bits());
        } else if let Ok(s) = v.cast::<PyString>() {
            let s = s.to_cow()?;
            key.push(14);
            key.push(s.len() as u64);
            key.push(hash_str(&s));
        } else {
            return Ok(false);
        }
        Ok(true)
    }

    fn grid(
        &self,
        py: Python<'_>,
        grid: &Bound<'_, PyAny>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Option<[u32; 3]>> {
        let g = if grid.is_callable() {
            let meta = PyDict::new(py);
            for (i, p) in self.params.iter().enumerate() {
                let v = if i < args.len() {
                    Some(args.get_item(i)?)
                } else {
                    match kwargs.and_then(|k| k.get_item(p.name.bind(py)).ok().flatten()) {
                        Some(v) => Some(v),
                        None => p.default.as_ref().map(|d| d.bind(py).clone()),
                    }
                };
                if let Some(v) = v {
                    meta.set_item(p.name.bind(py), v)?;
                }
            }
            grid.call1((meta,))?
        } else {
            grid.clone()
        };
        let mut out = [1u32; 3];
        if let Ok(t) = g.cast::<PyTuple>() {
            if t.is_empty() || t.len() > 3 {
                return Ok(None);
            }
            for (i, x) in t.iter().enumerate() {
                let Ok(x) = x.extract::<i64>() else {
                    return Ok(None);
                };
                if x < 0 || x > u32::MAX as i64 {
                    return Ok(None);
                }
                out[i] = x as u32;
            }
        } else if let Ok(x) = g.extract::<i64>() {
            if x < 0 || x > u32::MAX as i64 {
                return Ok(None);
            }
            out[0] = x as u32;
        } else {
            return Ok(None);
        }
        Ok(Some(out))
    }

    /// The interpreter or debug mode (asserts checked after each launch) take the Python path.
    /// Read on every launch (a program may set them at any time) with the C library's `getenv`:
    /// `std::env::var_os` copies the value into a new allocation under a lock that Python's own
    /// `os.environ` writes never take.
    fn interpreter_on() -> bool {
        extern "C" {
            fn getenv(name: *const std::ffi::c_char) -> *const std::ffi::c_char;
        }
        let on = |name: &std::ffi::CStr| {
            // SAFETY: `name` is NUL-terminated; the value is read at once, as a C string.
            let v = unsafe { getenv(name.as_ptr()) };
            if v.is_null() {
                return false;
            }
            // SAFETY: getenv returned a NUL-terminated string.
            let v = unsafe { std::ffi::CStr::from_ptr(v) }.to_bytes();
            !(v.is_empty() || v == b"0")
        };
        on(c"TILES_INTERPRET") || on(c"TILES_DEBUG")
    }

    fn try_launch(
        &self,
        py: Python<'_>,
        grid: &Bound<'_, PyAny>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Option<Py<PyAny>>> {
        let Some(launch) = self.launch else {
            return Ok(None);
        };
        if HOOKED.load(Ordering::Relaxed) || Self::interpreter_on() {
            return Ok(None);
        }
        if self.epoch.load(Ordering::Relaxed) != EPOCH.load(Ordering::Relaxed) {
            self.forget_if_stale()?;
            return Ok(None);
        }
        for (place, name, value) in &self.guards {
            let place = place.bind(py);
            let now = match place.cast::<PyDict>() {
                Ok(d) => d.get_item(name.bind(py))?,
                Err(_) => place.getattr(pyo3::intern!(py, "cell_contents")).ok(),
            };
            if !now.is_some_and(|n| n.is(value.bind(py))) {
                return Ok(None);
            }
        }
        let Some(bound) = self.bind(py, args, kwargs)? else {
            return Ok(None);
        };
        // The parameters' values are packed under the lock, from the entry's own slot list.
        let mut storage: Vec<u64>;
        let (function, threads, shared, compiled, device) = {
            let entries = self
                .entries
                .lock()
                .map_err(|_| PyRuntimeError::new_err("dispatcher lock poisoned"))?;
            let Some(e) = entries.get(&bound.key) else {
                return Ok(None);
            };
            storage = vec![0; e.slots.len().max(1)];
            for (k, &(i, slot)) in e.slots.iter().enumerate() {
                let Some(w) = slot.word(bound.values[i]) else {
                    return Ok(None);
                };
                storage[k] = w;
            }
            (
                e.function,
                e.threads,
                e.shared,
                e.compiled.clone_ref(py),
                e.device,
            )
        };
        let Some(g) = self.grid(py, grid, args, kwargs)? else {
            return Ok(None);
        };
        if g.contains(&0) {
            return Ok(Some(compiled));
        }
        let stream: u64 = match &self.stream_fn {
            Some(f) => f.bind(py).call1((device,))?.extract()?,
            None => 0,
        };
        // `compiled` keeps the function's module loaded.
        launch_packed(launch, function, g, threads, shared, stream, &mut storage)?;
        Ok(Some(compiled))
    }
}

#[pymethods]
impl Dispatcher {
    /// `params`: (name, is_constexpr, has_default, default, specialize: 0, 1 or 2, see
    /// `ParamDecl`) per parameter;
    /// `fallback(grid, args, kwargs)`: the Python launcher.
    #[new]
    fn new(
        py: Python<'_>,
        params: Vec<(String, bool, bool, Py<PyAny>, u8)>,
        fallback: Py<PyAny>,
    ) -> Self {
        let params = params
            .into_iter()
            .map(
                |(name, constexpr, has_default, default, specialize)| ParamDecl {
                    name: PyString::intern(py, &name).unbind(),
                    constexpr,
                    default: has_default.then_some(default),
                    specialize,
                },
            )
            .collect();
        Dispatcher {
            params,
            entries: Mutex::new(Entries::default()),
            epoch: AtomicU64::new(EPOCH.load(Ordering::Relaxed)),
            launch: None,
            stream_fn: None,
            fallback,
            guards: Vec::new(),
        }
    }

    /// The globals the kernel was compiled with: (module dict or closure cell, name, value).
    fn set_guards(&mut self, py: Python<'_>, guards: Vec<(Py<PyAny>, String, Py<PyAny>)>) {
        self.guards = guards
            .into_iter()
            .map(|(place, name, value)| (place, PyString::intern(py, &name).unbind(), value))
            .collect();
    }

    /// Gives the dispatcher the driver's `cuLaunchKernel` address and the function that returns
    /// the current stream for a device index (or None for the default stream).
    fn set_driver(&mut self, launch_address: usize, stream_fn: Option<Py<PyAny>>) {
        if launch_address != 0 {
            // SAFETY: the address comes from cuGetProcAddress("cuLaunchKernel") and has that signature.
            self.launch = Some(unsafe { std::mem::transmute::<usize, LaunchFn>(launch_address) });
        }
        self.stream_fn = stream_fn;
    }

    /// Records the specialisation that these arguments select. `slots` lists, per kernel
    /// parameter in order, (parameter index, kind) with kind one of
    /// `ptr`, `i1`, `i32`, `i64`, `u64`, `fp32`.
    #[pyo3(signature = (args, kwargs, function, threads, shared, slots, compiled))]
    #[allow(clippy::too_many_arguments)]
    fn learn(
        &self,
        py: Python<'_>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
        function: usize,
        threads: u32,
        shared: u32,
        slots: Vec<(usize, String)>,
        compiled: Py<PyAny>,
    ) -> PyResult<bool> {
        let Some(bound) = self.bind(py, args, kwargs)? else {
            return Ok(false);
        };
        let Ok(Some(device)) = crate::cuda::current_device() else {
            return Ok(false);
        };
        let mut s = Vec::with_capacity(slots.len());
        for (i, kind) in slots {
            let Some(slot) = Slot::parse(&kind) else {
                return Ok(false);
            };
            s.push((i, slot));
        }
        self.forget_if_stale()?;
        let mut entries = self
            .entries
            .lock()
            .map_err(|_| PyRuntimeError::new_err("dispatcher lock poisoned"))?;
        entries.insert(
            bound.key,
            Entry {
                function,
                threads,
                shared,
                slots: s,
                compiled,
                device,
            },
        );
        Ok(true)
    }

    /// Drops every learned specialisation.
    fn clear(&self) -> PyResult<()> {
        self.entries
            .lock()
            .map_err(|_| PyRuntimeError::new_err("dispatcher lock poisoned"))?
            .clear();
        Ok(())
    }

    fn __getitem__(slf: Bound<'_, Self>, grid: Py<PyAny>) -> BoundLauncher {
        BoundLauncher {
            dispatcher: slf.unbind(),
            grid,
        }
    }
}

/// `kernel[grid]`: calling it launches.
#[pyclass(module = "tiles._tiles")]
pub struct BoundLauncher {
    dispatcher: Py<Dispatcher>,
    grid: Py<PyAny>,
}

#[pymethods]
impl BoundLauncher {
    #[pyo3(signature = (*args, **kwargs))]
    fn __call__(
        &self,
        py: Python<'_>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        let d = self.dispatcher.bind(py).borrow();
        let grid = self.grid.bind(py);
        if let Some(r) = d.try_launch(py, grid, args, kwargs)? {
            return Ok(r);
        }
        let fallback = d.fallback.clone_ref(py);
        drop(d);
        Ok(fallback.bind(py).call1((grid, args, kwargs))?.unbind())
    }
}

/// The launch of one compiled kernel with Triton's launcher arguments (`CompiledKernel.run`, as
/// Triton's own `kernel[grid]` and torch's inductor call it): `(grid_0, grid_1, grid_2, stream,
/// *args)` with `args` every parameter in order, constexprs included. The parameters' kinds
/// are fixed when the kernel loads, so a call only reads each value and calls the driver.
#[pyclass(frozen)]
pub struct KernelLauncher {
    launch: LaunchFn,
    function: usize,
    threads: u32,
    shared: u32,
    /// The number of arguments a call passes.
    nargs: usize,
    /// Per kernel parameter in order: (argument index, kind, name).
    slots: Vec<(usize, Slot, String)>,
}

/// Whether a tensor-like argument says it is on a CUDA device: `is_cuda`, else a `device` of
/// type "cuda" (FlagGems' StridedBuffer). The launchers leave the rest to the Python path,
/// which accepts pinned host memory, asks the driver about other objects and raises for host
/// memory, rather than let a kernel fault on it.
fn plainly_on_gpu(py: Python<'_>, v: &Bound<'_, PyAny>) -> bool {
    match v.getattr(pyo3::intern!(py, "is_cuda")) {
        Ok(c) => matches!(c.extract::<bool>(), Ok(true)),
        Err(_) => v
            .getattr(pyo3::intern!(py, "device"))
            .and_then(|d| d.getattr(pyo3::intern!(py, "type")))
            .is_ok_and(|t| t.eq(pyo3::intern!(py, "cuda")).unwrap_or(false)),
    }
}

impl KernelLauncher {
    /// Reads argument `v` (parameter `name`) as a value of `slot`'s kind.
    fn read(py: Python<'_>, v: &Bound<'_, PyAny>, slot: Slot, name: &str) -> PyResult<ArgValue> {
        let wrong = |what: &str| {
            pyo3::exceptions::PyTypeError::new_err(format!(
                "argument '{name}' must be {what}, got {}",
                v.get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ))
        };
        Ok(match slot {
            Slot::Ptr if v.is_none() => ArgValue::Ptr(0),
            Slot::Ptr if v.is_instance_of::<PyInt>() => ArgValue::Ptr(v.extract::<u64>()?),
            Slot::Ptr => match v.call_method0(pyo3::intern!(py, "data_ptr")) {
                // A TypeError sends the launch to the Python path, which checks the memory.
                Ok(_) if !plainly_on_gpu(py, v) => return Err(wrong("a CUDA tensor")),
                Ok(p) => ArgValue::Ptr(p.extract::<u64>()?),
                Err(_) => return Err(wrong("a device tensor")),
            },
            Slot::I1 => ArgValue::Bool(v.is_truthy()?),
            Slot::I32 => {
                let x: i64 = v.extract().map_err(|_| wrong("an int"))?;
                if !(i64::from(i32::MIN)..=i64::from(u32::MAX)).contains(&x) {
                    return Err(pyo3::exceptions::PyOverflowError::new_err(format!(
                        "argument '{name}' = {x} does not fit the kernel's 32-bit parameter"
                    )));
                }
                ArgValue::Int(x)
            }
            Slot::I64 => ArgValue::Int(v.extract::<i64>().map_err(|_| wrong("an int"))?),
            Slot::U64 => ArgValue::Int(
                v.extract::<u64>()
                    .map_err(|_| wrong("a non-negative int"))? as i64,
            ),
            Slot::F32 => ArgValue::Float(v.extract::<f64>().map_err(|_| wrong("a float"))?),
        })
    }
}

#[pymethods]
impl KernelLauncher {
    /// `slots`: per kernel parameter in order, (argument index, kind, name), kinds as
    /// `Dispatcher.learn` takes them; `nargs`: how many arguments a call passes.
    #[new]
    fn new(
        launch_address: usize,
        function: usize,
        threads: u32,
        shared: u32,
        nargs: usize,
        slots: Vec<(usize, String, String)>,
    ) -> PyResult<Self> {
        if launch_address == 0 {
            return Err(PyRuntimeError::new_err(
                "the driver's cuLaunchKernel is unknown",
            ));
        }
        let mut s = Vec::with_capacity(slots.len());
        for (i, kind, name) in slots {
            let Some(slot) = Slot::parse(&kind) else {
                return Err(PyRuntimeError::new_err(format!(
                    "parameter '{name}' of kind {kind} has no native launch"
                )));
            };
            s.push((i, slot, name));
        }
        Ok(KernelLauncher {
            // SAFETY: the address comes from cuGetProcAddress("cuLaunchKernel") and has that signature.
            launch: unsafe { std::mem::transmute::<usize, LaunchFn>(launch_address) },
            function,
            threads,
            shared,
            nargs,
            slots: s,
        })
    }

    #[pyo3(signature = (grid_0, grid_1, grid_2, stream, *args))]
    fn __call__(
        &self,
        py: Python<'_>,
        grid_0: i64,
        grid_1: i64,
        grid_2: i64,
        stream: &Bound<'_, PyAny>,
        args: &Bound<'_, PyTuple>,
    ) -> PyResult<()> {
        if args.len() != self.nargs {
            return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                "the kernel takes {} arguments, got {}",
                self.nargs,
                args.len()
            )));
        }
        let mut storage = vec![0u64; self.slots.len().max(1)];
        for (k, (i, slot, name)) in self.slots.iter().enumerate() {
            let v = Self::read(py, &args.get_item(*i)?, *slot, name)?;
            // `read` gives each slot a value of its kind.
            storage[k] = slot.word(v).unwrap_or_default();
        }
        if grid_0 <= 0 || grid_1 <= 0 || grid_2 <= 0 {
            return Ok(());
        }
        let grid = |g: i64| {
            u32::try_from(g).map_err(|_| {
                pyo3::exceptions::PyValueError::new_err(format!("grid dimension {g} is too large"))
            })
        };
        let (gx, gy, gz) = (grid(grid_0)?, grid(grid_1)?, grid(grid_2)?);
        let stream: u64 = if stream.is_none() {
            0
        } else {
            stream.extract()?
        };
        // The loaded kernel that owns this launcher keeps the function's module loaded.
        launch_packed(
            self.launch,
            self.function,
            [gx, gy, gz],
            self.threads,
            self.shared,
            stream,
            &mut storage,
        )
    }
}

/// `CompiledKernel.run` itself for one loaded kernel: Triton's launcher call, `(grid_0, grid_1,
/// grid_2, stream, function, metadata, launch_metadata, launch_enter_hook, launch_exit_hook,
/// *args)`, launched by `launcher` while its kernel's context is current and no hook is given.
/// Anything else (hooks, another context, an argument the launcher refuses with a TypeError)
/// goes to `fallback`, the Python `run`, with the same arguments.
#[pyclass(frozen)]
pub struct RunLauncher {
    launcher: Py<KernelLauncher>,
    context: usize,
    fallback: Py<PyAny>,
}

#[pymethods]
impl RunLauncher {
    #[new]
    fn new(launcher: Py<KernelLauncher>, context: usize, fallback: Py<PyAny>) -> Self {
        RunLauncher {
            launcher,
            context,
            fallback,
        }
    }

    #[pyo3(signature = (grid_0, grid_1, grid_2, stream, function, metadata, launch_metadata,
                        launch_enter_hook, launch_exit_hook, *args))]
    #[allow(clippy::too_many_arguments)]
    fn __call__(
        &self,
        py: Python<'_>,
        grid_0: &Bound<'_, PyAny>,
        grid_1: &Bound<'_, PyAny>,
        grid_2: &Bound<'_, PyAny>,
        stream: &Bound<'_, PyAny>,
        function: &Bound<'_, PyAny>,
        metadata: &Bound<'_, PyAny>,
        launch_metadata: &Bound<'_, PyAny>,
        launch_enter_hook: &Bound<'_, PyAny>,
        launch_exit_hook: &Bound<'_, PyAny>,
        args: &Bound<'_, PyTuple>,
    ) -> PyResult<()> {
        let plain = launch_enter_hook.is_none()
            && launch_exit_hook.is_none()
            && crate::cuda::current_context().unwrap_or(0) == self.context;
        if plain {
            if let (Ok(g0), Ok(g1), Ok(g2)) = (
                grid_0.extract::<i64>(),
                grid_1.extract::<i64>(),
                grid_2.extract::<i64>(),
            ) {
                match self.launcher.get().__call__(py, g0, g1, g2, stream, args) {
                    Err(e) if e.is_instance_of::<pyo3::exceptions::PyTypeError>(py) => {}
                    done => return done,
                }
            }
        }
        let mut all = vec![
            grid_0.clone(),
            grid_1.clone(),
            grid_2.clone(),
            stream.clone(),
            function.clone(),
            metadata.clone(),
            launch_metadata.clone(),
            launch_enter_hook.clone(),
            launch_exit_hook.clone(),
        ];
        all.extend(args.iter());
        self.fallback.bind(py).call1(PyTuple::new(py, all)?)?;
        Ok(())
    }

    /// The fallback (the kernel's Python `run`) refers back to the kernel that holds this
    /// launcher: the garbage collector sees that edge, so a dropped kernel is freed.
    fn __traverse__(&self, visit: pyo3::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
        visit.call(&self.fallback)
    }
}
