//! The GPU section of the analysis: per device, memory and utilisation as min / median / max and
//! before / after (first and last reading), the GPU memory the server itself held, the memory trend,
//! and when a device disappeared. A run that sampled no GPU says why ("not sampled: …").

use std::collections::BTreeMap;

use serde::Serialize;

use super::trend::{classify, median, Trend};
use crate::journal::{Event, Record};

/// Summary of one figure over the run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Stat {
    pub min: f64,
    pub median: f64,
    pub max: f64,
    /// The first reading.
    pub before: f64,
    /// The last reading.
    pub after: f64,
}

impl Stat {
    fn of(values: &[f64]) -> Option<Self> {
        Some(Self {
            min: values.iter().copied().fold(f64::INFINITY, f64::min),
            median: median(values),
            max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            before: *values.first()?,
            after: *values.last()?,
        })
    }
}

/// One reading of one device, as charts need it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GpuPoint {
    pub t_s: f64,
    pub mem_used_bytes: u64,
    pub gpu_util_pct: Option<f64>,
    pub mem_util_pct: Option<f64>,
    pub server_mem_bytes: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GpuDevice {
    pub device: u32,
    pub name: String,
    pub samples: usize,
    pub first_t_s: f64,
    pub last_t_s: f64,
    pub mem_total_bytes: u64,
    pub mem_used_bytes: Stat,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_util_pct: Option<Stat>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mem_util_pct: Option<Stat>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature_c: Option<Stat>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub power_w: Option<Stat>,
    /// GPU memory held by the server's own process tree, over the readings where it was running.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_mem_bytes: Option<Stat>,
    /// The device's used memory: flat, sawtooth or growth.
    pub mem_trend: Trend,
    /// The server's own GPU memory, classified the same way.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_mem_trend: Option<Trend>,
    /// When the device stopped answering, if it did (and did not come back).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disappeared_at_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disappeared_reason: Option<String>,
    /// Every reading, for the HTML charts; kept out of the JSON report (it grows with the run).
    #[serde(skip)]
    pub series: Vec<GpuPoint>,
}

/// A moment GPU sampling was not possible: no driver, turned off, a device or the driver gone.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GpuOutage {
    pub t_s: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<u32>,
    pub reason: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GpuSection {
    /// "not sampled: <reason>" when the run holds no GPU reading.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_sampled: Option<String>,
    pub devices: Vec<GpuDevice>,
    pub unavailable: Vec<GpuOutage>,
}

impl GpuSection {
    /// Whether a view has anything to say: readings, or a reason there are none.
    pub fn is_empty(&self) -> bool {
        self.devices.is_empty() && self.unavailable.is_empty()
    }
}

pub fn section(recs: &[Record]) -> GpuSection {
    let mut devices: BTreeMap<u32, (String, u64, Vec<Sample>)> = BTreeMap::new();
    let mut unavailable = Vec::new();
    for r in recs {
        match &r.event {
            Event::GpuSample {
                device,
                name,
                mem_used_bytes,
                mem_total_bytes,
                gpu_util_pct,
                mem_util_pct,
                temperature_c,
                power_w,
                server_mem_bytes,
                ..
            } => {
                let d = devices
                    .entry(*device)
                    .or_insert_with(|| (name.clone(), *mem_total_bytes, Vec::new()));
                d.0.clone_from(name);
                d.1 = *mem_total_bytes;
                d.2.push(Sample {
                    t_s: r.t_s,
                    mem: *mem_used_bytes,
                    gpu: *gpu_util_pct,
                    memu: *mem_util_pct,
                    temp: *temperature_c,
                    power: *power_w,
                    server: *server_mem_bytes,
                });
            }
            Event::GpuUnavailable { reason, device } => unavailable.push(GpuOutage {
                t_s: r.t_s,
                device: *device,
                reason: reason.clone(),
            }),
            _ => {}
        }
    }
    let devices: Vec<GpuDevice> = devices
        .into_iter()
        .filter_map(|(index, (name, total, samples))| {
            device(index, name, total, samples, &unavailable)
        })
        .collect();
    let not_sampled = devices.is_empty().then(|| {
        let why = unavailable
            .iter()
            .find(|u| u.device.is_none())
            .map(|u| u.reason.clone())
            .unwrap_or_else(|| "this run took no GPU readings".into());
        format!("not sampled: {why}")
    });
    GpuSection {
        not_sampled,
        devices,
        unavailable,
    }
}

struct Sample {
    t_s: f64,
    mem: u64,
    gpu: Option<f64>,
    memu: Option<f64>,
    temp: Option<f64>,
    power: Option<f64>,
    server: Option<u64>,
}

fn device(
    index: u32,
    name: String,
    total: u64,
    s: Vec<Sample>,
    outages: &[GpuOutage],
) -> Option<GpuDevice> {
    let stat = |f: &dyn Fn(&Sample) -> Option<f64>| {
        let v: Vec<f64> = s.iter().filter_map(f).collect();
        Stat::of(&v)
    };
    let last_t = s.last()?.t_s;
    let mem: Vec<(f64, f64)> = s.iter().map(|x| (x.t_s, x.mem as f64)).collect();
    let server: Vec<(f64, f64)> = s
        .iter()
        .filter_map(|x| Some((x.t_s, x.server? as f64)))
        .collect();
    let gone = outages
        .iter()
        .find(|o| o.device == Some(index) && o.t_s >= last_t);
    Some(GpuDevice {
        device: index,
        name,
        samples: s.len(),
        first_t_s: s.first()?.t_s,
        last_t_s: last_t,
        mem_total_bytes: total,
        mem_used_bytes: stat(&|x| Some(x.mem as f64))?,
        gpu_util_pct: stat(&|x| x.gpu),
        mem_util_pct: stat(&|x| x.memu),
        temperature_c: stat(&|x| x.temp),
        power_w: stat(&|x| x.power),
        server_mem_bytes: stat(&|x| x.server.map(|b| b as f64)),
        mem_trend: classify(&mem),
        server_mem_trend: (!server.is_empty()).then(|| classify(&server)),
        disappeared_at_s: gone.map(|o| o.t_s),
        disappeared_reason: gone.map(|o| o.reason.clone()),
        series: s
            .iter()
            .map(|x| GpuPoint {
                t_s: x.t_s,
                mem_used_bytes: x.mem,
                gpu_util_pct: x.gpu,
                mem_util_pct: x.memu,
                server_mem_bytes: x.server,
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyze::trend::TrendClass;

    fn sample(device: u32, used: u64, util: Option<f64>, server: Option<u64>) -> Event {
        Event::GpuSample {
            device,
            name: format!("GPU{device}"),
            mem_used_bytes: used,
            mem_free_bytes: 100 - used,
            mem_total_bytes: 100,
            gpu_util_pct: util,
            mem_util_pct: None,
            temperature_c: Some(50.0),
            power_w: None,
            server_mem_bytes: server,
        }
    }

    fn recs(events: Vec<(f64, Event)>) -> Vec<Record> {
        events
            .into_iter()
            .map(|(t_s, event)| Record {
                t_s,
                event,
                origin: None,
            })
            .collect()
    }

    #[test]
    fn figures_are_min_median_max_and_before_after() {
        let r = recs(vec![
            (0.0, sample(0, 30, Some(10.0), Some(5))),
            (1.0, sample(0, 10, Some(90.0), None)),
            (2.0, sample(0, 20, Some(40.0), Some(7))),
        ]);
        let g = section(&r);
        let d = &g.devices[0];
        assert_eq!(
            d.mem_used_bytes,
            Stat {
                min: 10.0,
                median: 20.0,
                max: 30.0,
                before: 30.0,
                after: 20.0
            }
        );
        assert_eq!(d.gpu_util_pct.as_ref().unwrap().median, 40.0);
        // Utilisation NVML did not report stays unreported, not 0.
        assert!(d.mem_util_pct.is_none() && d.power_w.is_none());
        assert_eq!(d.server_mem_bytes.as_ref().unwrap().max, 7.0);
        assert_eq!(d.mem_trend.class, TrendClass::TooFewSamples);
        assert_eq!(d.series.len(), 3);
    }

    #[test]
    fn no_readings_says_why_not() {
        let r = recs(vec![(
            0.0,
            Event::GpuUnavailable {
                reason: "no NVIDIA driver — libnvidia-ml.so.1 not found".into(),
                device: None,
            },
        )]);
        let g = section(&r);
        assert_eq!(
            g.not_sampled.as_deref(),
            Some("not sampled: no NVIDIA driver — libnvidia-ml.so.1 not found")
        );
        assert!(!g.is_empty());
        let g = section(&[]);
        assert_eq!(
            g.not_sampled.as_deref(),
            Some("not sampled: this run took no GPU readings")
        );
        assert!(g.is_empty());
    }

    #[test]
    fn a_device_that_went_away_and_came_back_has_not_disappeared() {
        let gone = |t| {
            (
                t,
                Event::GpuUnavailable {
                    reason: "GPU 0 disappeared".into(),
                    device: Some(0),
                },
            )
        };
        let g = section(&recs(vec![
            (0.0, sample(0, 1, None, None)),
            gone(1.0),
            (2.0, sample(0, 1, None, None)),
        ]));
        assert_eq!(g.devices[0].disappeared_at_s, None);
        assert_eq!(g.unavailable.len(), 1);
        let g = section(&recs(vec![(0.0, sample(0, 1, None, None)), gone(1.0)]));
        assert_eq!(g.devices[0].disappeared_at_s, Some(1.0));
    }
}
