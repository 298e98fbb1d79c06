//! `--shared-memory system`: inputs and outputs in POSIX shared memory that the benchmark
//! creates and registers with the server (the system shared memory extension).
//!
//! Each region is one shared-memory object, named `nereid_bench_<pid>_<i>` with the key
//! `/nereid_bench_<pid>_<i>`, holding every input (written once from the generated data)
//! followed by room for every output, each 64-byte aligned. Requests then carry only
//! `shared_memory_region` / `shared_memory_offset` / `shared_memory_byte_size` parameters.
//!
//! Closed loop: one region per worker (as many as the sweep's largest concurrency), so no
//! two requests in flight share memory. Open loop: a small pool of regions
//! ([`OPEN_LOOP_REGIONS`], at most `--max-in-flight`) handed out round-robin, so requests in
//! flight at once may share one. That is harmless here: the inputs are only read, and the
//! outputs, which concurrent requests may overwrite, are never read by the benchmark.
//! (`perf_analyzer` goes further and shares one region per tensor across all requests.)
//!
//! At exit, on error paths too, every registered region is unregistered and every object
//! unmapped and unlinked ([`ShmRegions::release`], and `Drop` of [`posix::ShmObject`]).

mod posix;

use anyhow::Context as _;

use self::posix::ShmObject;
use crate::client::{Client, InferRequest, ShmPlacement, ShmRef};

/// Regions in the open loop's round-robin pool (fewer if `--max-in-flight` is smaller).
pub const OPEN_LOOP_REGIONS: usize = 4;

/// Alignment of every tensor inside a region.
const ALIGN: usize = 64;

/// Lays out inputs then outputs, each aligned to [`ALIGN`]; returns the placements and the
/// region's total size.
pub fn layout(inputs: &[u64], outputs: &[u64]) -> (Vec<ShmRef>, Vec<ShmRef>, u64) {
    let mut end = 0u64;
    let mut place = |size: u64| {
        let offset = end.next_multiple_of(ALIGN as u64);
        end = offset + size;
        ShmRef {
            offset,
            byte_size: size,
        }
    };
    let ins = inputs.iter().map(|&s| place(s)).collect();
    let outs = outputs.iter().map(|&s| place(s)).collect();
    (ins, outs, end.max(1))
}

/// The region name of region `i` of this process; the key is the same with a leading `/`.
pub fn region_name(i: usize) -> String {
    format!("nereid_bench_{}_{i}", std::process::id())
}

/// The regions this run created and registered.
#[derive(Default)]
pub struct ShmRegions {
    /// Created objects; dropping one unmaps and unlinks it.
    objects: Vec<ShmObject>,
    /// Names registered with the server, to unregister.
    registered: Vec<String>,
}

impl ShmRegions {
    /// Creates and registers `count` regions, each holding `request`'s inputs and room for
    /// its outputs (`output_sizes[j]` bytes for output `j`), and returns one request per
    /// region that refers to it. On failure everything made so far is released.
    pub async fn create(
        control: &mut Client,
        count: usize,
        request: &InferRequest,
        output_sizes: &[u64],
    ) -> anyhow::Result<(Self, Vec<InferRequest>)> {
        let mut regions = Self::default();
        match regions
            .create_all(control, count, request, output_sizes)
            .await
        {
            Ok(requests) => Ok((regions, requests)),
            Err(e) => {
                regions.release(control).await;
                Err(e)
            }
        }
    }

    async fn create_all(
        &mut self,
        control: &mut Client,
        count: usize,
        request: &InferRequest,
        output_sizes: &[u64],
    ) -> anyhow::Result<Vec<InferRequest>> {
        let input_sizes: Vec<u64> = request.inputs.iter().map(|i| i.data.len() as u64).collect();
        let (inputs, outputs, total) = layout(&input_sizes, output_sizes);
        let total = usize::try_from(total).context("shared memory region too large")?;
        let mut requests = Vec::with_capacity(count);
        for i in 0..count {
            let name = region_name(i);
            let key = format!("/{name}");
            let mut object = ShmObject::create(&key, total).with_context(|| {
                format!("creating shared memory object '{key}' ({total} bytes)")
            })?;
            let memory = object.as_mut_slice();
            for (input, place) in request.inputs.iter().zip(&inputs) {
                let start = place.offset as usize;
                memory[start..start + input.data.len()].copy_from_slice(&input.data);
            }
            let size = object.len() as u64;
            self.objects.push(object);
            control
                .register_system_shm(&name, &key, 0, size)
                .await
                .with_context(|| format!("registering shared memory region '{name}'"))?;
            self.registered.push(name.clone());
            let mut req = request.clone();
            req.shm = Some(ShmPlacement {
                region: name,
                inputs: inputs.clone(),
                outputs: outputs.clone(),
            });
            requests.push(req);
        }
        Ok(requests)
    }

    /// Unregisters every registered region (warning about failures), then unmaps and
    /// unlinks every object.
    pub async fn release(mut self, control: &mut Client) {
        for name in std::mem::take(&mut self.registered) {
            if let Err(e) = control.unregister_system_shm(&name).await {
                eprintln!("warning: unregistering shared memory region '{name}': {e:#}");
            }
        }
        // Dropping the objects unmaps and unlinks them.
        self.objects.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_aligns_inputs_then_outputs() {
        let (ins, outs, total) = layout(&[10, 64], &[3]);
        assert_eq!(
            ins,
            vec![
                ShmRef {
                    offset: 0,
                    byte_size: 10
                },
                ShmRef {
                    offset: 64,
                    byte_size: 64
                }
            ]
        );
        assert_eq!(
            outs,
            vec![ShmRef {
                offset: 128,
                byte_size: 3
            }]
        );
        assert_eq!(total, 131);
    }

    #[test]
    fn region_names_are_per_process() {
        let name = region_name(3);
        assert_eq!(name, format!("nereid_bench_{}_3", std::process::id()));
    }
}
