//! `witness gpu`: what NVML sees, the quick check a user runs first; and [`gpu_sampler`], which
//! turns `--gpu auto|on|off` into a sampler (or a clear refusal) for wrap, load and soak.

use std::fmt::Write as _;

use crate::cli::{GpuArgs, GpuCmdArgs, GpuMode};
use crate::error::refuse;
use crate::journal::{Event, Journal};
use crate::report::bytes;
use crate::sample::gpu::{self, DeviceReading, DriverInfo, NoGpu, Reading};
use crate::sample::{PidSource, Sampler};

/// The GPU sampler `--gpu` asks for (load and soak). `auto` without a driver journals why and
/// returns None, printing nothing: a machine without a GPU needs no GPU words on its terminal (the
/// report still says "not sampled"); `on` without one is a refusal (exit 3); `off` journals that and
/// returns None. The fake backend in use is said. A bad `WITNESS_FAKE_GPU` script is a usage error
/// naming the variable.
pub fn gpu_sampler(
    args: &GpuArgs,
    pids: PidSource,
    journal: &Journal,
) -> anyhow::Result<Option<Box<dyn Sampler>>> {
    let choice = choose(args, pids, journal)?;
    if let (Some(m), Some(_)) = (&choice.message, &choice.sampler) {
        crate::errln!("{m}");
    }
    Ok(choice.sampler)
}

/// What `--gpu` came to: the sampler, if any, and the line to tell the user.
pub struct GpuChoice {
    pub sampler: Option<Box<dyn Sampler>>,
    /// "witness: GPU: …" — no driver under `auto`, or the fake backend in use.
    pub message: Option<String>,
}

/// [`gpu_sampler`] without the printing, for `wrap`, which must not write before the server's own
/// output (it stays transparent) and shows the same fact in its end-of-run `gpu` line instead.
pub fn choose(args: &GpuArgs, pids: PidSource, journal: &Journal) -> anyhow::Result<GpuChoice> {
    if args.gpu == GpuMode::Off {
        journal.emit(Event::GpuUnavailable {
            reason: "turned off (--gpu off)".into(),
            device: None,
        });
        return Ok(GpuChoice {
            sampler: None,
            message: None,
        });
    }
    let no = match gpu::open() {
        Ok(backend) => {
            let message = std::env::var_os(gpu::FAKE_ENV).is_some().then(|| {
                format!(
                    "witness: GPU: {} (for tests and demos; unset {} to read real GPUs)",
                    backend.driver().backend,
                    gpu::FAKE_ENV
                )
            });
            return Ok(GpuChoice {
                sampler: Some(Box::new(gpu::GpuSampler::new(backend, pids))),
                message,
            });
        }
        Err(e) => e.downcast::<NoGpu>()?,
    };
    journal.emit(Event::GpuUnavailable {
        reason: no.summary.clone(),
        device: None,
    });
    if args.gpu == GpuMode::On {
        return Err(refuse(format!(
            "--gpu on, but there is no GPU to sample: {}.\n{}",
            no.summary, no.explanation
        )));
    }
    Ok(GpuChoice {
        sampler: None,
        message: Some(format!("witness: GPU: {}", no.summary)),
    })
}

pub fn run(_args: GpuCmdArgs) -> anyhow::Result<i32> {
    let mut backend = match gpu::open() {
        Ok(b) => b,
        Err(e) => {
            let no = e.downcast::<NoGpu>()?;
            return Err(refuse(format!(
                "no GPU: {}.\n{}",
                no.summary, no.explanation
            )));
        }
    };
    let info = backend.driver();
    let reading = backend
        .read(None)
        .map_err(|e| refuse(format!("NVML loaded but reading the GPUs failed: {e}")))?;
    crate::out!("{}", describe(&info, &reading, process_name));
    Ok(0)
}

/// The command name of a pid as seen from here, or why it cannot be seen.
fn process_name(pid: u32) -> String {
    match std::fs::read_to_string(format!("/proc/{pid}/comm")) {
        Ok(n) => n.trim().to_string(),
        Err(_) => "(not visible here: NVML reports host pids; is witness in a container?)".into(),
    }
}

/// What `witness gpu` prints.
fn describe(info: &DriverInfo, r: &Reading, name_of: impl Fn(u32) -> String) -> String {
    let mut o = String::new();
    let n = r.devices.len() + r.lost.len();
    let _ = writeln!(
        o,
        "{}: driver {}{}, {} device{}",
        info.backend,
        info.driver_version.as_deref().unwrap_or("unknown"),
        info.cuda_version
            .as_deref()
            .map(|c| format!(", CUDA {c}"))
            .unwrap_or_default(),
        n,
        if n == 1 { "" } else { "s" }
    );
    for d in &r.devices {
        device(&mut o, d, &name_of);
    }
    for (i, why) in &r.lost {
        let _ = writeln!(o, "GPU {i}: not answering: {why}");
    }
    o
}

fn device(o: &mut String, d: &DeviceReading, name_of: &impl Fn(u32) -> String) {
    let pct = |x: Option<f64>| {
        x.map(|v| format!("{v:.0}%"))
            .unwrap_or_else(|| "n/a".into())
    };
    let _ = writeln!(
        o,
        "GPU {}: {}{}",
        d.index,
        d.name,
        d.uuid
            .as_deref()
            .map(|u| format!(" ({u})"))
            .unwrap_or_default()
    );
    let _ = writeln!(
        o,
        "  memory       {} used, {} free, {} total",
        bytes(d.mem_used_bytes as f64),
        bytes(d.mem_free_bytes as f64),
        bytes(d.mem_total_bytes as f64)
    );
    let _ = writeln!(
        o,
        "  utilisation  gpu {}, memory {}",
        pct(d.gpu_util_pct),
        pct(d.mem_util_pct)
    );
    let _ = writeln!(
        o,
        "  temperature  {}",
        d.temperature_c
            .map(|c| format!("{c:.0} C"))
            .unwrap_or_else(|| "n/a".into())
    );
    let _ = writeln!(
        o,
        "  power        {}",
        d.power_w
            .map(|w| format!("{w:.1} W"))
            .unwrap_or_else(|| "n/a".into())
    );
    match &d.processes {
        None => {
            let _ = writeln!(o, "  processes    (the driver could not list them)");
        }
        Some(ps) if ps.is_empty() => {
            let _ = writeln!(o, "  processes    none");
        }
        Some(ps) => {
            for (i, p) in ps.iter().enumerate() {
                let _ = writeln!(
                    o,
                    "  {:<12} pid {} {}: {}",
                    if i == 0 { "processes" } else { "" },
                    p.pid,
                    name_of(p.pid),
                    p.used_bytes
                        .map(|b| bytes(b as f64))
                        .unwrap_or_else(|| "memory n/a".into())
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::gpu::GpuProcess;

    #[test]
    fn the_description_has_every_figure_and_says_what_is_missing() {
        let info = DriverInfo {
            backend: "NVML (libnvidia-ml.so.1)".into(),
            driver_version: Some("550.54.15".into()),
            cuda_version: Some("12.4".into()),
        };
        let r = Reading {
            devices: vec![DeviceReading {
                index: 0,
                name: "NVIDIA H200".into(),
                uuid: Some("GPU-1234".into()),
                mem_used_bytes: 3 << 30,
                mem_free_bytes: 1 << 30,
                mem_total_bytes: 4 << 30,
                gpu_util_pct: Some(35.0),
                mem_util_pct: None,
                temperature_c: Some(41.0),
                power_w: Some(123.45),
                processes: Some(vec![GpuProcess {
                    pid: 42,
                    used_bytes: Some(2 << 30),
                }]),
            }],
            lost: vec![(1, "GPU is lost".into())],
        };
        let text = describe(&info, &r, |_| "python".into());
        assert!(
            text.starts_with("NVML (libnvidia-ml.so.1): driver 550.54.15, CUDA 12.4, 2 devices"),
            "{text}"
        );
        assert!(text.contains("GPU 0: NVIDIA H200 (GPU-1234)"), "{text}");
        assert!(
            text.contains("3.0 GiB used, 1.0 GiB free, 4.0 GiB total"),
            "{text}"
        );
        assert!(text.contains("gpu 35%, memory n/a"), "{text}");
        assert!(text.contains("41 C") && text.contains("123.5 W"), "{text}");
        assert!(text.contains("pid 42 python: 2.0 GiB"), "{text}");
        assert!(text.contains("GPU 1: not answering: GPU is lost"), "{text}");
    }
}
