//! The GPU gauges: one set per visible device, updated by each poll and read by each
//! scrape, as Triton's metrics thread and Prometheus registry do.

use std::fmt::Write;

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

/// A family's name, help text, type and the value of one device's series.
type Family = (
    &'static str,
    &'static str,
    &'static str,
    fn(&Gauges) -> String,
);

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

    /// Appends the six GPU families in Prometheus text, one series per device.
    pub fn render(&self, out: &mut String) {
        let devices = self.devices.lock();
        let families: [Family; 6] = [
            (
                "nv_gpu_utilization",
                "GPU utilization rate [0.0 - 1.0)",
                "gauge",
                |g| g.utilization.to_string(),
            ),
            (
                "nv_gpu_memory_total_bytes",
                "GPU total memory, in bytes",
                "gauge",
                |g| g.memory_total_bytes.to_string(),
            ),
            (
                "nv_gpu_memory_used_bytes",
                "GPU used memory, in bytes",
                "gauge",
                |g| g.memory_used_bytes.to_string(),
            ),
            (
                "nv_gpu_power_usage",
                "GPU power usage in watts",
                "gauge",
                |g| g.power_watts.to_string(),
            ),
            (
                "nv_gpu_power_limit",
                "GPU power management limit in watts",
                "gauge",
                |g| g.power_limit_watts.to_string(),
            ),
            (
                "nv_energy_consumption",
                "GPU energy consumption in joules since the Triton Server started",
                "counter",
                |g| g.energy_joules.to_string(),
            ),
        ];
        for (name, help, kind, value) in families {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            for (uuid, gauges) in devices.iter() {
                let _ = writeln!(out, "{name}{{gpu_uuid=\"{uuid}\"}} {}", value(gauges));
            }
        }
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

    fn rendered(metrics: &GpuMetrics) -> String {
        let mut text = String::new();
        metrics.render(&mut text);
        text
    }

    #[test]
    fn renders_one_series_per_device_with_tritons_names() {
        let metrics = GpuMetrics::with_source(
            Box::<Scripted>::default(),
            vec!["GPU-a".into(), "GPU-b".into()],
        );
        let text = rendered(&metrics);
        for line in [
            "# HELP nv_gpu_utilization GPU utilization rate [0.0 - 1.0)\n",
            "# TYPE nv_gpu_utilization gauge\n",
            "nv_gpu_utilization{gpu_uuid=\"GPU-a\"} 0.25\n",
            "nv_gpu_utilization{gpu_uuid=\"GPU-b\"} 0.5\n",
            "nv_gpu_memory_total_bytes{gpu_uuid=\"GPU-a\"} 85899345920\n",
            "nv_gpu_memory_used_bytes{gpu_uuid=\"GPU-b\"} 2097152\n",
            "nv_gpu_power_usage{gpu_uuid=\"GPU-a\"} 70.5\n",
            "nv_gpu_power_limit{gpu_uuid=\"GPU-a\"} 700\n",
            "# TYPE nv_energy_consumption counter\n",
            "nv_energy_consumption{gpu_uuid=\"GPU-a\"} 0\n",
        ] {
            assert!(text.contains(line), "{line:?} missing from\n{text}");
        }
    }

    #[test]
    fn energy_counts_from_start_and_a_failed_field_keeps_its_value() {
        let metrics = GpuMetrics::with_source(Box::<Scripted>::default(), vec!["GPU-a".into()]);
        metrics.poll();
        metrics.poll();
        let text = rendered(&metrics);
        // Three reads: 1 000 000, 1 001 500, 1 003 000 mJ; the counter started at the first.
        assert!(
            text.contains("nv_energy_consumption{gpu_uuid=\"GPU-a\"} 3\n"),
            "{text}"
        );
        // The third read's power failed: the gauge keeps 70.5 and the failure is noted once.
        assert!(
            text.contains("nv_gpu_power_usage{gpu_uuid=\"GPU-a\"} 70.5\n"),
            "{text}"
        );
        assert_eq!(metrics.devices.lock()[0].1.failing, [Field::Power]);
    }
}
