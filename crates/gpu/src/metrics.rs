//! The GPU gauges: one set per visible device, updated by each poll and read by each
//! scrape, as Triton's metrics thread and Prometheus registry do. The metrics port writes
//! them (this crate only reads devices).

use parking_lot::Mutex;

use crate::nvml::{Device, Nvml};
use crate::reading::{Field, Gauges, Reading};
use crate::visible::visible;

/// Where readings come from: NVML, or a test's stand-in.
trait Source: Send + Sync {
    /// Reads the device at `index` of the list the metrics were opened with.
    fn read(&self, index: usize) -> Reading;
}

/// NVML and the devices chosen from its list.
struct NvmlSource {
    nvml: Nvml,
    devices: Vec<Device>,
}

impl Source for NvmlSource {
    fn read(&self, index: usize) -> Reading {
        self.nvml.read(self.devices[index])
    }
}

/// One GPU family as of the latest poll, with Triton's name, help text and kind, and
/// one value per device.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuFamily {
    /// Triton's family name (`nv_gpu_utilization`, ...).
    pub name: &'static str,
    /// Triton's help text.
    pub help: &'static str,
    /// Whether the family is a counter (energy) rather than a gauge.
    pub counter: bool,
    /// Per device, in the order the metrics were opened with: its UUID and value.
    pub series: Vec<(String, f64)>,
}

/// A family's name, help text, whether it counts, and one device's value.
type Definition = (&'static str, &'static str, bool, fn(&Gauges) -> f64);

/// The six families Triton exports per GPU.
const FAMILIES: [Definition; 6] = [
    (
        "nv_gpu_utilization",
        "GPU utilization rate [0.0 - 1.0)",
        false,
        |g| g.utilization,
    ),
    (
        "nv_gpu_memory_total_bytes",
        "GPU total memory, in bytes",
        false,
        |g| g.memory_total_bytes as f64,
    ),
    (
        "nv_gpu_memory_used_bytes",
        "GPU used memory, in bytes",
        false,
        |g| g.memory_used_bytes as f64,
    ),
    (
        "nv_gpu_power_usage",
        "GPU power usage in watts",
        false,
        |g| g.power_watts,
    ),
    (
        "nv_gpu_power_limit",
        "GPU power management limit in watts",
        false,
        |g| g.power_limit_watts,
    ),
    (
        "nv_energy_consumption",
        "GPU energy consumption in joules since the Triton Server started",
        true,
        |g| g.energy_joules,
    ),
];

/// The GPU gauges of the devices the server reports.
pub struct GpuMetrics {
    source: Box<dyn Source>,
    /// Per device, in the source's order: its UUID and gauges.
    devices: Mutex<Vec<(String, Gauges)>>,
}

impl GpuMetrics {
    /// Loads NVML and takes the devices `CUDA_VISIBLE_DEVICES` lets CUDA see, read once
    /// so the energy counter starts at 0 now. `None`, with one log line saying why, where
    /// NVML cannot be loaded or shows no GPU: the server then exports no GPU families,
    /// as a Triton that finds no GPU does.
    pub fn open() -> Option<Self> {
        let opened = Nvml::load().and_then(|nvml| {
            let all = nvml.devices()?;
            let chosen = visible(&all, std::env::var("CUDA_VISIBLE_DEVICES").ok().as_deref());
            let uuids: Vec<String> = chosen.iter().map(|(_, uuid)| uuid.clone()).collect();
            let devices = chosen.into_iter().map(|(device, _)| device).collect();
            Ok((NvmlSource { nvml, devices }, uuids))
        });
        match opened {
            Ok((_, uuids)) if uuids.is_empty() => {
                tracing::info!("GPU metrics: NVML shows no GPU this server may use");
                None
            }
            Ok((source, uuids)) => {
                let metrics = Self::with_source(Box::new(source), uuids);
                tracing::info!(gpus = metrics.device_count(), "GPU metrics through NVML");
                Some(metrics)
            }
            Err(why) => {
                tracing::info!("GPU metrics unavailable: NVML could not be used ({why})");
                None
            }
        }
    }

    fn with_source(source: Box<dyn Source>, uuids: Vec<String>) -> Self {
        let metrics = Self {
            source,
            devices: Mutex::new(
                uuids
                    .into_iter()
                    .map(|uuid| (uuid, Gauges::default()))
                    .collect(),
            ),
        };
        metrics.poll();
        metrics
    }

    /// How many GPUs are reported.
    pub fn device_count(&self) -> usize {
        self.devices.lock().len()
    }

    /// Reads every device once. A field that stops reading is logged once (until it
    /// reads again) and keeps its last value. NVML's calls take microseconds, so the
    /// poll runs wherever the caller's timer fires.
    pub fn poll(&self) {
        let readings: Vec<Reading> = (0..self.device_count())
            .map(|index| self.source.read(index))
            .collect();
        let mut devices = self.devices.lock();
        for ((uuid, gauges), reading) in devices.iter_mut().zip(&readings) {
            gauges.update(reading);
            for field in Field::ALL {
                match reading.failure(field) {
                    Some(why) if !gauges.failing.contains(&field) => {
                        tracing::warn!("unable to read the {} of GPU {uuid}: {why}", field.name());
                        gauges.failing.push(field);
                    }
                    Some(_) => {}
                    None => gauges.failing.retain(|f| *f != field),
                }
            }
        }
    }

    /// The six GPU families as of the latest poll, one series per device.
    pub fn families(&self) -> Vec<GpuFamily> {
        let devices = self.devices.lock();
        FAMILIES
            .iter()
            .map(|(name, help, counter, value)| GpuFamily {
                name,
                help,
                counter: *counter,
                series: devices
                    .iter()
                    .map(|(uuid, gauges)| (uuid.clone(), value(gauges)))
                    .collect(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    /// A GPU whose energy total grows by 1500 mJ per read and whose power reading
    /// fails from the third read on.
    #[derive(Default)]
    struct Scripted {
        reads: AtomicU64,
    }

    impl Source for Scripted {
        fn read(&self, index: usize) -> Reading {
            let n = self.reads.fetch_add(1, Ordering::SeqCst);
            Reading {
                utilization: Ok(0.25 * (index + 1) as f64),
                memory: Ok((80 << 30, (index as u64 + 1) << 20)),
                power_watts: if n < 2 {
                    Ok(70.5)
                } else {
                    Err("Not Supported".into())
                },
                power_limit_watts: Ok(700.0),
                energy_millijoules: Ok(1_000_000 + 1500 * n),
            }
        }
    }

    /// Family `name`'s value for device `uuid`.
    fn value(metrics: &GpuMetrics, name: &str, uuid: &str) -> f64 {
        let families = metrics.families();
        let family = families.iter().find(|f| f.name == name).expect("family");
        family
            .series
            .iter()
            .find(|(u, _)| u == uuid)
            .map(|(_, v)| *v)
            .expect("series")
    }

    #[test]
    fn reads_one_series_per_device_with_tritons_names() {
        let metrics = GpuMetrics::with_source(
            Box::<Scripted>::default(),
            vec!["GPU-a".into(), "GPU-b".into()],
        );
        let families = metrics.families();
        let names: Vec<&str> = families.iter().map(|f| f.name).collect();
        assert_eq!(
            names,
            [
                "nv_gpu_utilization",
                "nv_gpu_memory_total_bytes",
                "nv_gpu_memory_used_bytes",
                "nv_gpu_power_usage",
                "nv_gpu_power_limit",
                "nv_energy_consumption"
            ]
        );
        assert_eq!(families[0].help, "GPU utilization rate [0.0 - 1.0)");
        assert!(families[5].counter && !families[0].counter);
        assert_eq!(value(&metrics, "nv_gpu_utilization", "GPU-a"), 0.25);
        assert_eq!(value(&metrics, "nv_gpu_utilization", "GPU-b"), 0.5);
        assert_eq!(
            value(&metrics, "nv_gpu_memory_total_bytes", "GPU-a"),
            85899345920.0
        );
        assert_eq!(
            value(&metrics, "nv_gpu_memory_used_bytes", "GPU-b"),
            2097152.0
        );
        assert_eq!(value(&metrics, "nv_gpu_power_usage", "GPU-a"), 70.5);
        assert_eq!(value(&metrics, "nv_gpu_power_limit", "GPU-a"), 700.0);
        assert_eq!(value(&metrics, "nv_energy_consumption", "GPU-a"), 0.0);
    }

    #[test]
    fn energy_counts_from_start_and_a_failed_field_keeps_its_value() {
        let metrics = GpuMetrics::with_source(Box::<Scripted>::default(), vec!["GPU-a".into()]);
        metrics.poll();
        metrics.poll();
        // Three reads: 1 000 000, 1 001 500, 1 003 000 mJ; the counter started at the first.
        assert_eq!(value(&metrics, "nv_energy_consumption", "GPU-a"), 3.0);
        // The third read's power failed: the gauge keeps 70.5 and the failure is noted once.
        assert_eq!(value(&metrics, "nv_gpu_power_usage", "GPU-a"), 70.5);
        assert_eq!(metrics.devices.lock()[0].1.failing, [Field::Power]);
    }
}
