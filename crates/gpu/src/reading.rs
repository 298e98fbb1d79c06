//! One poll of one GPU, and the gauges Triton exports from the polls.

/// What NVML answered for one device in one poll; each field fails on its own (a GPU
/// without power readings still reports its memory).
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    /// Busy share of the last sample period, 0.0 to 1.0.
    pub utilization: Result<f64, String>,
    /// (total, used) device memory in bytes.
    pub memory: Result<(u64, u64), String>,
    /// Power draw in watts.
    pub power_watts: Result<f64, String>,
    /// Power management limit in watts.
    pub power_limit_watts: Result<f64, String>,
    /// Energy used since the driver loaded, in millijoules.
    pub energy_millijoules: Result<u64, String>,
}

/// The readings, named for the log line when one cannot be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Field {
    Utilization,
    Memory,
    Power,
    PowerLimit,
    Energy,
}

impl Field {
    pub(crate) const ALL: [Field; 5] = [
        Field::Utilization,
        Field::Memory,
        Field::Power,
        Field::PowerLimit,
        Field::Energy,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Field::Utilization => "GPU utilization",
            Field::Memory => "memory usage",
            Field::Power => "power usage",
            Field::PowerLimit => "power limit",
            Field::Energy => "energy consumption",
        }
    }
}

impl Reading {
    /// Why `field` could not be read this time, if it could not.
    pub(crate) fn failure(&self, field: Field) -> Option<&str> {
        let failed = match field {
            Field::Utilization => self.utilization.as_ref().err(),
            Field::Memory => self.memory.as_ref().err(),
            Field::Power => self.power_watts.as_ref().err(),
            Field::PowerLimit => self.power_limit_watts.as_ref().err(),
            Field::Energy => self.energy_millijoules.as_ref().err(),
        };
        failed.map(String::as_str)
    }
}

/// One device's gauges as of the latest poll. As in Triton, a series exists from start-up
/// with 0 and a reading that fails keeps the last good value.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Gauges {
    pub(crate) utilization: f64,
    pub(crate) memory_total_bytes: u64,
    pub(crate) memory_used_bytes: u64,
    pub(crate) power_watts: f64,
    pub(crate) power_limit_watts: f64,
    /// Joules used since the server started: the counter `nv_energy_consumption`.
    pub(crate) energy_joules: f64,
    /// NVML's energy total at the previous poll, the base of the next increment.
    last_energy_millijoules: Option<u64>,
    /// The fields whose failure was logged and that have not been read since.
    pub(crate) failing: Vec<Field>,
}

impl Gauges {
    /// Applies one poll's reading.
    pub(crate) fn update(&mut self, reading: &Reading) {
        if let Ok(value) = reading.utilization {
            self.utilization = value;
        }
        if let Ok((total, used)) = reading.memory {
            self.memory_total_bytes = total;
            self.memory_used_bytes = used;
        }
        if let Ok(value) = reading.power_watts {
            self.power_watts = value;
        }
        if let Ok(value) = reading.power_limit_watts {
            self.power_limit_watts = value;
        }
        if let Ok(total) = reading.energy_millijoules {
            // The first reading is the base: the counter starts at 0 with the server.
            if let Some(last) = self.last_energy_millijoules {
                self.energy_joules += total.saturating_sub(last) as f64 / 1000.0;
            }
            self.last_energy_millijoules = Some(total);
        }
    }
}
