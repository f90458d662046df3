//! The GPU sampler: each NVIDIA GPU's memory, utilisation, temperature and power through NVML, and
//! the GPU memory held by the server's own processes, on the run's clock.
//!
//! NVML is reached through [`GpuBackend`], a small synchronous trait with two implementations:
//! - [`NvmlGpu`], the real one (nvml-wrapper). NVML is loaded at run time from `libnvidia-ml.so.1`,
//!   which ships with the NVIDIA driver, so a machine without one gets a clean [`NoGpu`], never a
//!   panic or a link error. `WITNESS_NVML_LIB=/path/to/libnvidia-ml.so.1` loads it from elsewhere.
//! - [`FakeGpu`], scripted from JSON, for tests and demos: the binary uses it instead of NVML when
//!   `WITNESS_FAKE_GPU=/path/to/script.json` is set (see [`FakeGpu`] for the format). It is never
//!   chosen otherwise, and witness says so on stderr whenever it is.
//!
//! NVML reports host pids. The server's GPU memory is the sum over the server's pid and its
//! descendants (read from /proc), so for a container target the pid given must be the container's
//! host pid, and witness itself must see the host's pid namespace for the match to find anything.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};

use anyhow::Context;
use futures_util::future::BoxFuture;

use super::{PidSource, Sampler};
use crate::journal::Event;

/// The library NVML is loaded from: the name the NVIDIA driver installs (`libnvidia-ml.so` without
/// the `.1` exists only where the CUDA development files are installed).
pub const NVML_LIB: &str = "libnvidia-ml.so.1";
/// Environment variable that replaces NVML with a scripted [`FakeGpu`] (tests and demos only).
pub const FAKE_ENV: &str = "WITNESS_FAKE_GPU";
/// Environment variable naming another path for the NVML library.
pub const LIB_ENV: &str = "WITNESS_NVML_LIB";

/// One process's use of one GPU.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuProcess {
    pub pid: u32,
    /// None where NVML cannot tell (it reports "not available" under some drivers).
    pub used_bytes: Option<u64>,
}

/// One GPU's figures at one reading.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceReading {
    pub index: u32,
    pub name: String,
    pub uuid: Option<String>,
    pub mem_used_bytes: u64,
    pub mem_free_bytes: u64,
    pub mem_total_bytes: u64,
    pub gpu_util_pct: Option<f64>,
    pub mem_util_pct: Option<f64>,
    pub temperature_c: Option<f64>,
    pub power_w: Option<f64>,
    /// Compute and graphics processes; None when NVML could not list them.
    pub processes: Option<Vec<GpuProcess>>,
}

/// Everything one reading saw: the devices that answered, and those that did not (with why).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Reading {
    pub devices: Vec<DeviceReading>,
    pub lost: Vec<(u32, String)>,
}

/// What the backend is and which driver it talks to.
#[derive(Clone, Debug, PartialEq)]
pub struct DriverInfo {
    /// "NVML (libnvidia-ml.so.1)", or the fake and its script.
    pub backend: String,
    pub driver_version: Option<String>,
    pub cuda_version: Option<String>,
}

/// A source of GPU readings. Synchronous: NVML calls block (briefly), so the sampler runs them on
/// tokio's blocking pool, away from the load driver's workers.
pub trait GpuBackend: Send {
    fn driver(&self) -> DriverInfo;
    /// Reads every device. `server_pid` is the server's root pid if known: NVML has no use for it;
    /// the fake uses it to resolve its symbolic pid "server". Err: the backend itself failed.
    fn read(&mut self, server_pid: Option<u32>) -> Result<Reading, String>;
}

/// There is no GPU to sample here, and why; `summary` is one line, `explanation` says what it means.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{summary}")]
pub struct NoGpu {
    pub summary: String,
    pub explanation: String,
}

/// Opens the backend the environment calls for: the fake when `WITNESS_FAKE_GPU` is set, NVML
/// otherwise. No GPU is an `Err` holding a [`NoGpu`] (downcast it); a bad fake script is an error
/// naming the variable.
pub fn open() -> anyhow::Result<Box<dyn GpuBackend>> {
    let early = EARLY
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
        .and_then(|t| t.join().ok());
    early.unwrap_or_else(open_now)
}

type Opened = std::thread::JoinHandle<anyhow::Result<Box<dyn GpuBackend>>>;

/// A look for the driver begun by [`open_early`], taken by the next [`open`].
static EARLY: std::sync::Mutex<Option<Opened>> = std::sync::Mutex::new(None);

/// Begins looking for the driver on a thread of its own, so that [`open`] finds the answer ready:
/// where there is none, the dynamic loader's search of every library folder takes about half a
/// millisecond that `wrap` would otherwise spend before its server starts.
pub fn open_early() {
    let asked = |v: &str| std::env::var_os(v).is_some();
    if !asked(FAKE_ENV) && !asked(LIB_ENV) && no_kernel_driver(DRIVER_NODES).is_some() {
        // Two looks at the file system: [`open`] answers at once, no thread is worth starting.
        return;
    }
    if let Ok(t) = std::thread::Builder::new()
        .name("gpu-open".into())
        .spawn(open_now)
    {
        *EARLY.lock().unwrap_or_else(|e| e.into_inner()) = Some(t);
    }
}

fn open_now() -> anyhow::Result<Box<dyn GpuBackend>> {
    if let Some(path) = std::env::var_os(FAKE_ENV) {
        let fake = FakeGpu::from_file(Path::new(&path)).map_err(|e| {
            crate::error::usage(format!("{FAKE_ENV}={}: {e:#}", Path::new(&path).display()))
        })?;
        return Ok(Box::new(fake));
    }
    let lib = match std::env::var(LIB_ENV) {
        Ok(lib) => lib,
        Err(_) => {
            // The default library: where no NVIDIA kernel driver exists at all, NVML could not
            // start even if it were installed, and the dynamic loader's search of every library
            // folder for it (half a millisecond, most of what `wrap` spends on GPUs) is not made.
            if let Some(no) = no_kernel_driver(DRIVER_NODES) {
                return Err(no.into());
            }
            NVML_LIB.to_string()
        }
    };
    Ok(Box::new(NvmlGpu::open(&lib)?))
}

/// What the NVIDIA kernel driver makes when it is loaded: its control device (also what the
/// container toolkit mounts into a container given GPUs) and its /proc folder.
const DRIVER_NODES: &[&str] = &["/dev/nvidiactl", "/proc/driver/nvidia"];

/// "No NVIDIA driver" when none of `nodes` exists; `None` when any does (NVML is then asked).
fn no_kernel_driver(nodes: &[&str]) -> Option<NoGpu> {
    if nodes.iter().any(|n| Path::new(n).exists()) {
        return None;
    }
    Some(NoGpu {
        summary: format!("no NVIDIA driver — no {}", nodes.join(" or ")),
        explanation: format!(
            "witness reads GPUs through NVML ({NVML_LIB}), which talks to the NVIDIA kernel driver; \
             this machine has none loaded ({} absent). This is expected on a machine without an \
             NVIDIA GPU (CI runners, laptops, most containers): `--gpu auto` skips GPU sampling \
             there, `--gpu on` refuses to run. In a container, run it with the NVIDIA container \
             toolkit (`docker run --gpus all`) so the driver's devices are mounted.",
            nodes.join(" and ")
        ),
    })
}

// ---- NVML ---------------------------------------------------------------------------------------

/// The real backend: NVML through nvml-wrapper, loaded at run time.
pub struct NvmlGpu {
    nvml: nvml_wrapper::Nvml,
    lib: String,
}

impl NvmlGpu {
    /// Loads NVML from `lib` and checks it sees at least one device.
    pub fn open(lib: &str) -> Result<Self, NoGpu> {
        use nvml_wrapper::error::NvmlError;
        let expected = "This is expected on a machine without an NVIDIA GPU or driver (CI runners, \
                        laptops, most containers): `--gpu auto` skips GPU sampling there, `--gpu on` \
                        refuses to run.";
        let nvml = nvml_wrapper::Nvml::builder()
            .lib_path(std::ffi::OsStr::new(lib))
            .init()
            .map_err(|e| match e {
                NvmlError::LibloadingError(le) => NoGpu {
                    summary: format!("no NVIDIA driver — {lib} not found"),
                    explanation: format!(
                        "witness reads GPUs through NVML, the library the NVIDIA driver installs as \
                         {lib}; loading it failed ({le}). {expected} In a container, run it with the \
                         NVIDIA container toolkit (`docker run --gpus all`) so the library is mounted."
                    ),
                },
                NvmlError::FailedToLoadSymbol(s) => NoGpu {
                    summary: format!("{lib} is too old for witness (a symbol is missing)"),
                    explanation: format!("NVML was found but lacks a function witness needs ({s}); \
                                          update the NVIDIA driver."),
                },
                NvmlError::DriverNotLoaded => NoGpu {
                    summary: "NVIDIA driver not loaded".into(),
                    explanation: format!(
                        "{lib} is installed but the NVIDIA kernel driver is not running (is the \
                         module loaded? does `nvidia-smi` work?). {expected}"
                    ),
                },
                NvmlError::NoPermission => NoGpu {
                    summary: "no permission to talk to the NVIDIA driver".into(),
                    explanation: "NVML refused access; check the permissions of /dev/nvidia*.".into(),
                },
                other => NoGpu {
                    summary: format!("NVML could not start: {other}"),
                    explanation: format!("{lib} loaded but nvmlInit failed ({other}). {expected}"),
                },
            })?;
        match nvml.device_count() {
            Ok(0) => Err(NoGpu {
                summary: "NVML sees no GPU".into(),
                explanation: "the NVIDIA driver is loaded but reports no device (are the GPUs \
                              hidden by CUDA_VISIBLE_DEVICES or the container runtime?)"
                    .into(),
            }),
            Ok(_) => Ok(Self {
                nvml,
                lib: lib.to_string(),
            }),
            Err(e) => Err(NoGpu {
                summary: format!("NVML could not count GPUs: {e}"),
                explanation:
                    "the driver answered but could not list its devices; see `nvidia-smi`.".into(),
            }),
        }
    }

    fn device(&self, index: u32) -> Result<DeviceReading, String> {
        use nvml_wrapper::enum_wrappers::device::TemperatureSensor;
        use nvml_wrapper::enums::device::UsedGpuMemory;
        let dev = self
            .nvml
            .device_by_index(index)
            .map_err(|e| e.to_string())?;
        // Memory is the one figure every supported board reports: failing it means the device is
        // gone (GpuLost) or unusable, not that a feature is missing.
        let mem = dev.memory_info().map_err(|e| e.to_string())?;
        let util = dev.utilization_rates().ok();
        let mut procs: BTreeMap<u32, Option<u64>> = BTreeMap::new();
        let compute = dev.running_compute_processes();
        let graphics = dev.running_graphics_processes();
        let listed = compute.is_ok() || graphics.is_ok();
        for p in compute
            .into_iter()
            .flatten()
            .chain(graphics.into_iter().flatten())
        {
            let used = match p.used_gpu_memory {
                UsedGpuMemory::Used(b) => Some(b),
                UsedGpuMemory::Unavailable => None,
            };
            // A process with compute and graphics contexts is listed twice, with the same memory.
            let e = procs.entry(p.pid).or_insert(used);
            *e = (*e).max(used);
        }
        Ok(DeviceReading {
            index,
            name: dev.name().unwrap_or_else(|_| format!("GPU {index}")),
            uuid: dev.uuid().ok(),
            mem_used_bytes: mem.used,
            mem_free_bytes: mem.free,
            mem_total_bytes: mem.total,
            gpu_util_pct: util.as_ref().map(|u| u.gpu as f64),
            mem_util_pct: util.as_ref().map(|u| u.memory as f64),
            temperature_c: dev
                .temperature(TemperatureSensor::Gpu)
                .ok()
                .map(|c| c as f64),
            power_w: dev.power_usage().ok().map(|mw| mw as f64 / 1000.0),
            processes: listed.then(|| {
                procs
                    .into_iter()
                    .map(|(pid, used_bytes)| GpuProcess { pid, used_bytes })
                    .collect()
            }),
        })
    }
}

impl GpuBackend for NvmlGpu {
    fn driver(&self) -> DriverInfo {
        let cuda = self.nvml.sys_cuda_driver_version().ok().map(|v| {
            format!(
                "{}.{}",
                nvml_wrapper::cuda_driver_version_major(v),
                nvml_wrapper::cuda_driver_version_minor(v)
            )
        });
        DriverInfo {
            backend: format!("NVML ({})", self.lib),
            driver_version: self.nvml.sys_driver_version().ok(),
            cuda_version: cuda,
        }
    }

    fn read(&mut self, _server_pid: Option<u32>) -> Result<Reading, String> {
        let count = self
            .nvml
            .device_count()
            .map_err(|e| format!("NVML could not count GPUs: {e}"))?;
        let mut r = Reading::default();
        for i in 0..count {
            match self.device(i) {
                Ok(d) => r.devices.push(d),
                Err(e) => r.lost.push((i, e)),
            }
        }
        Ok(r)
    }
}

// ---- the fake -----------------------------------------------------------------------------------

/// A scripted GPU backend, for tests and demos (`WITNESS_FAKE_GPU=/path/to/script.json`).
///
/// The script is a JSON object: `driver_version` (optional) and `steps`, a list. Each reading takes
/// the next step; after the last, the last one repeats. A step is either a list of devices or
/// `{"error": "why"}` (the backend fails at that reading). A device is an object with `index`,
/// `mem_used_bytes`, `mem_total_bytes`, and optionally `name`, `uuid`, `mem_free_bytes` (default
/// total − used), `gpu_util_pct`, `mem_util_pct`, `temperature_c`, `power_w`, and `processes`: a list
/// of `{"pid": N or "server", "used_bytes": N}`, where "server" stands for the server's own pid at
/// that reading. A device present in one step and missing from the next has disappeared.
///
/// ```json
/// {"driver_version": "550.54.15", "steps": [
///   [{"index": 0, "name": "Fake H100", "mem_used_bytes": 1000000000, "mem_total_bytes": 80000000000,
///     "gpu_util_pct": 35, "processes": [{"pid": "server", "used_bytes": 600000000}]}],
///   [{"index": 0, "name": "Fake H100", "mem_used_bytes": 2000000000, "mem_total_bytes": 80000000000}]
/// ]}
/// ```
pub struct FakeGpu {
    source: String,
    driver_version: Option<String>,
    steps: Vec<FakeStep>,
    next: usize,
}

enum FakeStep {
    Devices(Vec<FakeDevice>),
    Error(String),
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct FakeScript {
    #[serde(default)]
    driver_version: Option<String>,
    steps: Vec<serde_json::Value>,
}

#[derive(Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct FakeDevice {
    index: u32,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    uuid: Option<String>,
    mem_used_bytes: u64,
    mem_total_bytes: u64,
    #[serde(default)]
    mem_free_bytes: Option<u64>,
    #[serde(default)]
    gpu_util_pct: Option<f64>,
    #[serde(default)]
    mem_util_pct: Option<f64>,
    #[serde(default)]
    temperature_c: Option<f64>,
    #[serde(default)]
    power_w: Option<f64>,
    #[serde(default)]
    processes: Option<Vec<FakeProcess>>,
}

#[derive(Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct FakeProcess {
    pid: serde_json::Value,
    #[serde(default)]
    used_bytes: Option<u64>,
}

impl FakeGpu {
    pub fn from_file(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the fake GPU script {}", path.display()))?;
        let mut f = Self::from_json(&text)?;
        f.source = format!("fake, scripted by {FAKE_ENV}={}", path.display());
        Ok(f)
    }

    /// Parses a script; errors name the step and field at fault.
    pub fn from_json(text: &str) -> anyhow::Result<Self> {
        let script: FakeScript = serde_json::from_str(text).context(
            "the fake GPU script is not {\"steps\": [...]} as documented in sample/gpu.rs",
        )?;
        if script.steps.is_empty() {
            anyhow::bail!("the fake GPU script has no steps");
        }
        let mut steps = Vec::new();
        for (i, v) in script.steps.into_iter().enumerate() {
            let step = match v {
                serde_json::Value::Array(_) => {
                    let devs: Vec<FakeDevice> = serde_json::from_value(v)
                        .with_context(|| format!("fake GPU script, step {i}"))?;
                    for d in &devs {
                        for p in d.processes.iter().flatten() {
                            let ok = p.pid.as_u64().is_some_and(|n| n <= u32::MAX as u64)
                                || p.pid.as_str() == Some("server");
                            if !ok {
                                anyhow::bail!(
                                    "fake GPU script, step {i}, device {}: pid {} is neither a \
                                     number nor \"server\"",
                                    d.index,
                                    p.pid
                                );
                            }
                        }
                    }
                    FakeStep::Devices(devs)
                }
                serde_json::Value::Object(ref o) if o.len() == 1 && o.contains_key("error") => {
                    FakeStep::Error(o["error"].as_str().unwrap_or("error").to_string())
                }
                _ => anyhow::bail!(
                    "fake GPU script, step {i}: expected a list of devices or {{\"error\": \"why\"}}"
                ),
            };
            steps.push(step);
        }
        Ok(Self {
            source: "fake (scripted)".into(),
            driver_version: script.driver_version,
            steps,
            next: 0,
        })
    }
}

impl GpuBackend for FakeGpu {
    fn driver(&self) -> DriverInfo {
        DriverInfo {
            backend: self.source.clone(),
            driver_version: self.driver_version.clone(),
            cuda_version: None,
        }
    }

    fn read(&mut self, server_pid: Option<u32>) -> Result<Reading, String> {
        let step = &self.steps[self.next.min(self.steps.len() - 1)];
        self.next += 1;
        let devs = match step {
            FakeStep::Error(e) => return Err(e.clone()),
            FakeStep::Devices(d) => d,
        };
        let devices = devs
            .iter()
            .map(|d| DeviceReading {
                index: d.index,
                name: d
                    .name
                    .clone()
                    .unwrap_or_else(|| format!("Fake GPU {}", d.index)),
                uuid: d.uuid.clone(),
                mem_used_bytes: d.mem_used_bytes,
                mem_free_bytes: d
                    .mem_free_bytes
                    .unwrap_or(d.mem_total_bytes.saturating_sub(d.mem_used_bytes)),
                mem_total_bytes: d.mem_total_bytes,
                gpu_util_pct: d.gpu_util_pct,
                mem_util_pct: d.mem_util_pct,
                temperature_c: d.temperature_c,
                power_w: d.power_w,
                processes: d.processes.as_ref().map(|ps| {
                    ps.iter()
                        .filter_map(|p| {
                            let pid = match p.pid.as_u64() {
                                Some(n) => n as u32,
                                None => server_pid?,
                            };
                            Some(GpuProcess {
                                pid,
                                used_bytes: p.used_bytes,
                            })
                        })
                        .collect()
                }),
            })
            .collect();
        Ok(Reading {
            devices,
            lost: vec![],
        })
    }
}

// ---- the sampler --------------------------------------------------------------------------------

/// Samples every GPU the backend sees; one `GpuSample` per device per reading, and one
/// `GpuUnavailable` when a device disappears or the backend fails (not one per reading).
pub struct GpuSampler {
    backend: Arc<Mutex<Box<dyn GpuBackend>>>,
    pids: Arc<PidSource>,
    /// Devices seen so far, by index, with their names.
    known: BTreeMap<u32, String>,
    /// Devices already reported gone (until they answer again).
    down: BTreeSet<u32>,
    /// The backend's failure has been reported (until it answers again).
    failing: bool,
}

impl GpuSampler {
    pub fn new(backend: Box<dyn GpuBackend>, pids: PidSource) -> Self {
        Self {
            backend: Arc::new(Mutex::new(backend)),
            pids: Arc::new(pids),
            known: BTreeMap::new(),
            down: BTreeSet::new(),
            failing: false,
        }
    }

    /// Turns one reading into events. `tree` is the server's pid and its descendants' (None when
    /// the server is not running).
    fn events(&mut self, reading: Result<Reading, String>, tree: Option<Vec<u32>>) -> Vec<Event> {
        let reading = match reading {
            Ok(r) => r,
            Err(e) => {
                if self.failing {
                    return vec![];
                }
                self.failing = true;
                return vec![Event::GpuUnavailable {
                    reason: format!("GPU sampling failed mid-run: {e}"),
                    device: None,
                }];
            }
        };
        self.failing = false;
        let mut out = Vec::new();
        let present: BTreeSet<u32> = reading.devices.iter().map(|d| d.index).collect();
        for d in &reading.devices {
            self.known.insert(d.index, d.name.clone());
            self.down.remove(&d.index);
            out.push(Event::GpuSample {
                device: d.index,
                name: d.name.clone(),
                mem_used_bytes: d.mem_used_bytes,
                mem_free_bytes: d.mem_free_bytes,
                mem_total_bytes: d.mem_total_bytes,
                gpu_util_pct: d.gpu_util_pct,
                mem_util_pct: d.mem_util_pct,
                temperature_c: d.temperature_c,
                power_w: d.power_w,
                server_mem_bytes: server_memory(d.processes.as_deref(), tree.as_deref()),
            });
        }
        let lost: BTreeMap<u32, String> = reading.lost.into_iter().collect();
        let gone: Vec<u32> = self
            .known
            .keys()
            .chain(lost.keys())
            .copied()
            .collect::<BTreeSet<u32>>()
            .into_iter()
            .filter(|i| !present.contains(i) && !self.down.contains(i))
            .collect();
        for i in gone {
            self.down.insert(i);
            let name = self
                .known
                .get(&i)
                .map(|n| format!(" ({n})"))
                .unwrap_or_default();
            let why = lost
                .get(&i)
                .cloned()
                .unwrap_or_else(|| "no longer reported by the driver".into());
            out.push(Event::GpuUnavailable {
                reason: format!("GPU {i}{name} disappeared: {why}"),
                device: Some(i),
            });
        }
        out
    }
}

/// GPU memory held by the server's process tree: None when the server is not running or the
/// driver could not list processes; Some(0) when it holds none.
fn server_memory(procs: Option<&[GpuProcess]>, tree: Option<&[u32]>) -> Option<u64> {
    let (procs, tree) = (procs?, tree?);
    Some(
        procs
            .iter()
            .filter(|p| tree.contains(&p.pid))
            .filter_map(|p| p.used_bytes)
            .sum(),
    )
}

impl Sampler for GpuSampler {
    fn name(&self) -> &'static str {
        "gpu"
    }

    fn sample(&mut self) -> BoxFuture<'_, Vec<Event>> {
        Box::pin(async move {
            let backend = self.backend.clone();
            let pids = self.pids.clone();
            let read = tokio::task::spawn_blocking(move || {
                let root = (pids)();
                let tree = root.map(super::proc::tree_pids).filter(|t| !t.is_empty());
                let mut b = backend.lock().unwrap_or_else(|p| p.into_inner());
                (b.read(root), tree)
            })
            .await;
            match read {
                Ok((reading, tree)) => self.events(reading, tree),
                Err(e) => self.events(Err(format!("the NVML call panicked: {e}")), None),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyze::trend::TrendClass;
    use crate::journal::Record;

    const GB: u64 = 1_000_000_000;

    /// Device 0's memory climbs 100 MB per step, of which the server holds a growing share; device
    /// 1 is there for `keep` steps, then gone.
    fn script(steps: usize, keep: usize) -> String {
        let steps: Vec<serde_json::Value> = (0..steps)
            .map(|i| {
                let mut devs = vec![serde_json::json!({
                    "index": 0, "name": "Fake H100", "mem_total_bytes": 80 * GB,
                    "mem_used_bytes": 10 * GB + i as u64 * 100_000_000,
                    "gpu_util_pct": 50 + (i % 3) as u64, "mem_util_pct": 20, "temperature_c": 60,
                    "power_w": 300.5,
                    "processes": [
                        {"pid": "server", "used_bytes": GB + i as u64 * 100_000_000},
                        {"pid": 1, "used_bytes": 5 * GB}
                    ]
                })];
                if i < keep {
                    devs.push(serde_json::json!({
                        "index": 1, "name": "Fake A10", "mem_total_bytes": 24 * GB,
                        "mem_used_bytes": GB
                    }));
                }
                serde_json::Value::Array(devs)
            })
            .collect();
        serde_json::json!({"driver_version": "550.54.15", "steps": steps}).to_string()
    }

    /// Drives the sampler the way the sampling loop does, one reading a second.
    async fn run(sampler: &mut GpuSampler, readings: usize) -> Vec<Record> {
        let mut recs = Vec::new();
        for i in 0..readings {
            for event in sampler.sample().await {
                recs.push(Record {
                    t_s: i as f64,
                    event,
                    origin: None,
                });
            }
        }
        recs
    }

    fn me() -> PidSource {
        Box::new(|| Some(std::process::id()))
    }

    #[tokio::test]
    async fn climbing_memory_is_sampled_per_device_and_classified_as_growth() {
        let fake = FakeGpu::from_json(&script(30, 30)).unwrap();
        let mut s = GpuSampler::new(Box::new(fake), me());
        let recs = run(&mut s, 30).await;
        assert_eq!(recs.len(), 60, "one sample per device per reading");
        let Event::GpuSample {
            server_mem_bytes, ..
        } = &recs[0].event
        else {
            panic!("{:?}", recs[0])
        };
        // Our own pid is the server here; pid 1 (init) is not in our tree, so its 5 GB is not ours.
        assert_eq!(*server_mem_bytes, Some(GB));

        let a = crate::analyze::tests::loaded(recs.into_iter().map(|r| (r.t_s, r.event)).collect());
        let gpu = crate::analyze::gpu::section(&a.records);
        assert!(gpu.not_sampled.is_none());
        let d0 = &gpu.devices[0];
        assert_eq!(d0.mem_used_bytes.before, 10e9);
        assert_eq!(d0.mem_used_bytes.after, 12.9e9);
        assert_eq!(d0.mem_trend.class, TrendClass::Growth, "{:?}", d0.mem_trend);
        assert!((d0.mem_trend.slope_per_s - 1e8).abs() < 1.0);
        assert_eq!(gpu.devices[1].mem_trend.class, TrendClass::Flat);
    }

    #[tokio::test]
    async fn a_device_that_disappears_is_reported_once() {
        let fake = FakeGpu::from_json(&script(10, 4)).unwrap();
        let mut s = GpuSampler::new(Box::new(fake), me());
        let recs = run(&mut s, 10).await;
        let gone: Vec<&Record> = recs
            .iter()
            .filter(|r| matches!(r.event, Event::GpuUnavailable { .. }))
            .collect();
        assert_eq!(gone.len(), 1, "{gone:?}");
        assert_eq!(gone[0].t_s, 4.0);
        let Event::GpuUnavailable { reason, device } = &gone[0].event else {
            unreachable!()
        };
        assert_eq!(*device, Some(1));
        assert!(reason.contains("GPU 1 (Fake A10) disappeared"), "{reason}");

        let a =
            crate::analyze::tests::loaded(recs.iter().map(|r| (r.t_s, r.event.clone())).collect());
        let gpu = crate::analyze::gpu::section(&a.records);
        assert_eq!(gpu.devices[1].samples, 4);
        assert_eq!(gpu.devices[1].disappeared_at_s, Some(4.0));
        assert_eq!(gpu.devices[0].samples, 10);
    }

    #[tokio::test]
    async fn a_backend_that_fails_mid_run_is_reported_once_and_recovers() {
        let dev = r#"[{"index": 0, "mem_used_bytes": 1, "mem_total_bytes": 2}]"#;
        let text = format!(
            r#"{{"steps": [{dev}, {{"error": "GPU is lost"}}, {{"error": "GPU is lost"}}, {dev}]}}"#
        );
        let mut s = GpuSampler::new(Box::new(FakeGpu::from_json(&text).unwrap()), me());
        let recs = run(&mut s, 5).await;
        let kinds: Vec<&str> = recs.iter().map(|r| r.event.kind()).collect();
        assert_eq!(
            kinds,
            ["gpu_sample", "gpu_unavailable", "gpu_sample", "gpu_sample"]
        );
    }

    #[tokio::test]
    async fn without_a_running_server_there_is_no_server_memory() {
        let fake = FakeGpu::from_json(&script(2, 2)).unwrap();
        let mut s = GpuSampler::new(Box::new(fake), Box::new(|| None));
        let recs = run(&mut s, 1).await;
        assert!(recs.iter().all(|r| matches!(
            r.event,
            Event::GpuSample {
                server_mem_bytes: None,
                ..
            }
        )));
    }

    #[test]
    fn server_memory_sums_the_tree_and_nothing_else() {
        let procs = [
            GpuProcess {
                pid: 10,
                used_bytes: Some(3),
            },
            GpuProcess {
                pid: 11,
                used_bytes: Some(4),
            },
            GpuProcess {
                pid: 12,
                used_bytes: None,
            },
            GpuProcess {
                pid: 99,
                used_bytes: Some(100),
            },
        ];
        assert_eq!(server_memory(Some(&procs), Some(&[10, 11, 12])), Some(7));
        assert_eq!(server_memory(Some(&procs), Some(&[50])), Some(0));
        assert_eq!(server_memory(None, Some(&[10])), None);
        assert_eq!(server_memory(Some(&procs), None), None);
    }

    #[test]
    fn no_driver_node_is_no_driver_and_any_one_sends_witness_to_nvml() {
        let dir = std::env::temp_dir().join(format!("witness-gpu-nodes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (ctl, proc_dir) = (dir.join("nvidiactl"), dir.join("driver-nvidia"));
        let nodes = [ctl.to_str().unwrap(), proc_dir.to_str().unwrap()];
        let no = no_kernel_driver(&nodes).expect("neither exists: no driver");
        assert!(
            no.summary.starts_with("no NVIDIA driver — no "),
            "{}",
            no.summary
        );
        assert!(no.summary.contains("nvidiactl"), "{}", no.summary);
        assert!(no.explanation.contains("--gpu auto"), "{}", no.explanation);
        std::fs::write(&ctl, "").unwrap();
        assert!(
            no_kernel_driver(&nodes).is_none(),
            "the control device alone is enough"
        );
        std::fs::remove_file(&ctl).unwrap();
        std::fs::create_dir(&proc_dir).unwrap();
        assert!(
            no_kernel_driver(&nodes).is_none(),
            "the /proc folder alone is enough"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_bad_fake_script_names_the_step_and_field() {
        let e = FakeGpu::from_json(r#"{"steps": [[{"index": 0, "mem_total_bytes": 1}]]}"#)
            .err()
            .unwrap();
        let msg = format!("{e:#}");
        assert!(
            msg.contains("step 0") && msg.contains("mem_used_bytes"),
            "{msg}"
        );
        let e = FakeGpu::from_json(r#"{"steps": [[{"index": 0, "mem_total_bytes": 1, "mem_used_bytes": 0, "processes": [{"pid": "me"}]}]]}"#)
            .err()
            .unwrap();
        assert!(
            format!("{e:#}").contains("neither a number nor \"server\""),
            "{e:#}"
        );
        assert!(FakeGpu::from_json(r#"{"steps": []}"#).is_err());
    }

    #[test]
    fn a_missing_nvml_library_is_a_clean_no_gpu() {
        let dir = std::env::temp_dir().join(format!("witness-nonvml-{}", std::process::id()));
        let lib = dir.join("libnvidia-ml.so.1");
        let e = NvmlGpu::open(lib.to_str().unwrap()).err().unwrap();
        assert_eq!(
            e.summary,
            format!("no NVIDIA driver — {} not found", lib.display())
        );
        assert!(e
            .explanation
            .contains("expected on a machine without an NVIDIA GPU"));
    }
}
