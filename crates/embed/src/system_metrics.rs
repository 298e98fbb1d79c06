//! Server-wide gauges Triton exports beside the per-model ones: CPU utilization and the
//! machine's memory, read from `/proc`, and the GPUs' gauges through NVML
//! (`nereid_gpu`). As tritonserver does, they are polled every `--metrics-interval-ms`
//! (default 2000), and a scrape reads the latest poll: utilization covers the interval
//! between the last two polls.

use std::sync::Arc;
use std::time::Duration;

use nereid_core::metrics::text::{Family, Kind};
use nereid_gpu::GpuMetrics;
use parking_lot::Mutex;

/// tritonserver's default `--metrics-interval-ms`.
pub const DEFAULT_METRICS_INTERVAL: Duration = Duration::from_millis(2000);

/// CPU time counters from the first line of `/proc/stat`: (busy, total) jiffies.
fn cpu_times(stat: &str) -> Option<(u64, u64)> {
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let values: Vec<u64> = line
        .split_whitespace()
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal ...
    let idle = values.get(3)? + values.get(4).copied().unwrap_or(0);
    let total: u64 = values.iter().take(8).sum();
    Some((total.saturating_sub(idle), total))
}

/// (total, used) bytes from `/proc/meminfo` (used = MemTotal - MemAvailable).
fn memory(meminfo: &str) -> Option<(u64, u64)> {
    let field = |name: &str| {
        meminfo
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kib| kib.parse::<u64>().ok())
            .map(|kib| kib * 1024)
    };
    let total = field("MemTotal:")?;
    let available = field("MemAvailable:")?;
    Some((total, total.saturating_sub(available)))
}

/// The latest poll of `/proc/stat` and `/proc/meminfo`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Reading {
    /// (busy, total) jiffies at the last poll.
    cpu: Option<(u64, u64)>,
    /// Busy share of the time between the last two polls.
    utilization: f64,
    /// (total, used) bytes.
    memory: Option<(u64, u64)>,
}

/// The system gauges as of the latest poll.
pub struct SystemMetrics {
    /// Whether the CPU gauges are polled (`--allow-cpu-metrics`).
    cpu: bool,
    // Written once per poll, read once per scrape.
    latest: Mutex<Reading>,
    /// The GPUs' gauges: `None` with `--allow-gpu-metrics=false` or where NVML shows no GPU.
    gpu: Option<GpuMetrics>,
}

impl SystemMetrics {
    /// The CPU gauges where `cpu`, and the GPU gauges where `gpu` and NVML shows a GPU
    /// (the reason it does not is logged once).
    pub fn new(cpu: bool, gpu: bool) -> Self {
        Self {
            cpu,
            latest: Mutex::default(),
            gpu: gpu.then(GpuMetrics::open).flatten(),
        }
    }

    /// Polls the `/proc` files every `interval`, the first one an interval from now
    /// ([`Self::poll_now`] made the one at start), until the task is dropped or aborted.
    /// Polling again at once would measure utilization over a few microseconds: 0 or 1.
    pub async fn poll_every(self: Arc<Self>, interval: Duration) {
        self.poll_with(interval, read_proc).await;
    }

    /// Polls once, now: a server calls it before it serves, so the gauges are there for
    /// the first scrape (Triton registers them at start).
    pub fn poll_now(&self) {
        self.poll_once(&read_proc);
    }

    /// One poll: the CPU files' texts from `read`, then the GPUs.
    fn poll_once(&self, read: &impl Fn() -> (Option<String>, Option<String>)) {
        if self.cpu {
            let (stat, meminfo) = read();
            self.sample(stat.as_deref(), meminfo.as_deref());
        }
        if let Some(gpu) = &self.gpu {
            gpu.poll();
        }
    }

    /// [`Self::poll_every`] reading the files' texts from `read`.
    async fn poll_with(
        &self,
        interval: Duration,
        read: impl Fn() -> (Option<String>, Option<String>),
    ) {
        let first = tokio::time::Instant::now() + interval;
        let mut ticker = tokio::time::interval_at(first, interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            self.poll_once(&read);
        }
    }

    /// Records one poll of the two files' texts (`None`: unreadable).
    fn sample(&self, stat: Option<&str>, meminfo: Option<&str>) {
        let cpu = stat.and_then(cpu_times);
        let mut latest = self.latest.lock();
        let utilization = match (latest.cpu, cpu) {
            (Some(p), Some(now)) if now.1 > p.1 => {
                now.0.saturating_sub(p.0) as f64 / (now.1 - p.1) as f64
            }
            _ => 0.0,
        };
        *latest = Reading {
            cpu,
            utilization,
            memory: meminfo.and_then(memory),
        };
    }

    /// Appends `nv_cpu_utilization`, `nv_cpu_memory_total_bytes` and
    /// `nv_cpu_memory_used_bytes` as of the latest poll (silently nothing where `/proc`
    /// was unreadable), then the GPU families.
    pub fn render(&self, out: &mut String) {
        self.render_cpu(out);
        if let Some(gpu) = &self.gpu {
            for family in gpu.families() {
                let kind = if family.counter {
                    Kind::Counter
                } else {
                    Kind::Gauge
                };
                let mut text = Family::start(out, family.name, family.help, kind);
                for (uuid, value) in &family.series {
                    text.sample(&[("gpu_uuid", uuid)], value);
                }
            }
        }
    }

    fn render_cpu(&self, out: &mut String) {
        let latest = *self.latest.lock();
        if latest.cpu.is_some() {
            let help = "CPU utilization rate [0.0 - 1.0]";
            Family::start(out, "nv_cpu_utilization", help, Kind::Gauge)
                .sample(&[], &latest.utilization);
        }
        if let Some((total, used)) = latest.memory {
            let help = "CPU total memory (RAM), in bytes";
            Family::start(out, "nv_cpu_memory_total_bytes", help, Kind::Gauge).sample(&[], &total);
            let help = "CPU used memory (RAM), in bytes";
            Family::start(out, "nv_cpu_memory_used_bytes", help, Kind::Gauge).sample(&[], &used);
        }
    }
}

/// The texts of `/proc/stat` and `/proc/meminfo` (`None`: unreadable).
fn read_proc() -> (Option<String>, Option<String>) {
    (
        std::fs::read_to_string("/proc/stat").ok(),
        std::fs::read_to_string("/proc/meminfo").ok(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_files() {
        let stat = "cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3\n";
        assert_eq!(cpu_times(stat), Some((150, 1000)));
        let meminfo = "MemTotal:       1000 kB\nMemFree:  10 kB\nMemAvailable:    400 kB\n";
        assert_eq!(memory(meminfo), Some((1_024_000, 614_400)));
        assert_eq!(memory("nothing"), None);
    }

    #[tokio::test(start_paused = true)]
    async fn polls_on_the_interval() {
        use std::sync::atomic::{AtomicU64, Ordering};
        let metrics = Arc::new(SystemMetrics::new(true, false));
        let polls = Arc::new(AtomicU64::new(0));
        let task = {
            let (metrics, polls) = (metrics.clone(), polls.clone());
            // Each poll: 100 more jiffies, 25 of them busy.
            let read = move || {
                let n = polls.fetch_add(1, Ordering::SeqCst) + 1;
                let stat = format!("cpu  {} 0 0 {} 0 0 0 0\n", 25 * n, 75 * n);
                (
                    Some(stat),
                    Some("MemTotal: 4 kB\nMemAvailable: 1 kB\n".into()),
                )
            };
            // As a server does: one poll at start, then the loop.
            metrics.poll_once(&read);
            tokio::spawn(async move {
                metrics.poll_with(Duration::from_millis(500), read).await;
            })
        };
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(
            polls.load(Ordering::SeqCst),
            1,
            "the loop waits an interval"
        );
        let mut text = String::new();
        metrics.render(&mut text);
        assert!(text.contains("nv_cpu_utilization 0\n"), "{text}");
        tokio::time::sleep(Duration::from_millis(1200)).await;
        assert_eq!(polls.load(Ordering::SeqCst), 3, "at 0, 500 and 1000 ms");
        let mut text = String::new();
        metrics.render(&mut text);
        assert!(text.contains("nv_cpu_utilization 0.25\n"), "{text}");
        assert!(text.contains("nv_cpu_memory_used_bytes 3072\n"), "{text}");
        task.abort();
    }

    #[test]
    fn unreadable_proc_renders_nothing() {
        let metrics = SystemMetrics::new(true, false);
        metrics.sample(None, None);
        let mut text = String::new();
        metrics.render(&mut text);
        assert!(text.is_empty());
    }
}
