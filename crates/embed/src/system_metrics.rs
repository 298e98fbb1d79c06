//! Server-wide gauges Triton exports beside the per-model ones: CPU utilization since the
//! previous scrape and the machine's memory, read from `/proc`.

use std::fmt::Write;

use parking_lot::Mutex;

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

/// Keeps the previous CPU sample so utilization covers the time between two scrapes.
#[derive(Default)]
pub struct SystemMetrics {
    // Taken once per scrape.
    previous: Mutex<Option<(u64, u64)>>,
}

impl SystemMetrics {
    /// Appends `nv_cpu_utilization`, `nv_cpu_memory_total_bytes` and
    /// `nv_cpu_memory_used_bytes` to `out` (silently nothing where `/proc` is unreadable).
    pub fn render(&self, out: &mut String) {
        if let Some(now) = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|s| cpu_times(&s))
        {
            let previous = self.previous.lock().replace(now);
            let utilization = previous
                .filter(|p| now.1 > p.1)
                .map_or(0.0, |p| (now.0 - p.0) as f64 / (now.1 - p.1) as f64);
            let _ = writeln!(
                out,
                "# HELP nv_cpu_utilization CPU utilization rate [0.0 - 1.0]"
            );
            let _ = writeln!(out, "# TYPE nv_cpu_utilization gauge");
            let _ = writeln!(out, "nv_cpu_utilization {utilization}");
        }
        if let Some((total, used)) = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|s| memory(&s))
        {
            let _ = writeln!(
                out,
                "# HELP nv_cpu_memory_total_bytes CPU total memory (RAM), in bytes"
            );
            let _ = writeln!(out, "# TYPE nv_cpu_memory_total_bytes gauge");
            let _ = writeln!(out, "nv_cpu_memory_total_bytes {total}");
            let _ = writeln!(
                out,
                "# HELP nv_cpu_memory_used_bytes CPU used memory (RAM), in bytes"
            );
            let _ = writeln!(out, "# TYPE nv_cpu_memory_used_bytes gauge");
            let _ = writeln!(out, "nv_cpu_memory_used_bytes {used}");
        }
    }
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
}
