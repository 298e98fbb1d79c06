//! Triton's GPU metrics (`nv_gpu_utilization`, `nv_gpu_memory_total_bytes`,
//! `nv_gpu_memory_used_bytes`, `nv_gpu_power_usage`, `nv_gpu_power_limit`,
//! `nv_energy_consumption`, each labelled `gpu_uuid`), read through NVIDIA's management
//! library loaded at run time. Triton reads the same values through DCGM; NVML ships with
//! every driver, so nothing beyond the driver is needed.
//!
//! - [`GpuMetrics`]: the devices to report, polled every `--metrics-interval-ms` and
//!   rendered as Prometheus text.
//! - `nvml`: the library's entry points (the only `unsafe` here).
//! - `visible`: `CUDA_VISIBLE_DEVICES` applied to NVML's device list, as Triton's list
//!   comes from CUDA.
#![allow(unsafe_code)]

mod metrics;
mod nvml;
mod reading;
mod visible;

pub use metrics::{GpuFamily, GpuMetrics};
pub use nvml::LIBRARY_ENV;
pub use reading::Reading;
