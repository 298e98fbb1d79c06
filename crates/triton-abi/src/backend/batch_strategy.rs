//! Custom batching libraries (Triton's `TRITONBACKEND_ModelBatch*` and
//! `TRITONBACKEND_ModelBatcher*` functions) as the core's [`BatchStrategy`]: the batcher
//! object is made once per model version from its `TRITONBACKEND_Model`, each batch the
//! dynamic batcher decides gets its own user pointer, and each queued request it
//! considers is shown to the library as a `TRITONBACKEND_Request`. Works for every model
//! the dynamic batcher serves, native or hosted.
#![allow(unsafe_code)]

use std::ffi::c_void;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicPtr};
use std::sync::Arc;

use libloading::os::unix::Library;
use nereid_core::config::config_to_json;
use nereid_core::model::ModelSpec;
use nereid_core::request::InferRequest;
use nereid_core::scheduler::{BatchCut, BatchStrategy, BatchStrategyLoader};
use nereid_core::{Error, Result};
use parking_lot::Mutex;

use super::exchange::Exchange;
use super::objects::TRITONBACKEND_Model;
use super::request::{c_text, TRITONBACKEND_Request};
use crate::dl::{dlerror_text, optional_entry_point};
use crate::error::{callee_result, ErrorPtr};

/// The object behind `TRITONBACKEND_Batcher*`: the library's own, opaque here.
#[repr(C)]
pub struct TRITONBACKEND_Batcher {
    _opaque: [u8; 0],
}

/// `TRITONBACKEND_ModelBatchIncludeRequest`.
type IncludeFn =
    unsafe extern "C" fn(*mut TRITONBACKEND_Request, *mut c_void, *mut bool) -> ErrorPtr;
/// `TRITONBACKEND_ModelBatchInitialize`.
type BatchInitFn = unsafe extern "C" fn(*const TRITONBACKEND_Batcher, *mut *mut c_void) -> ErrorPtr;
/// `TRITONBACKEND_ModelBatchFinalize`.
type BatchFiniFn = unsafe extern "C" fn(*mut c_void) -> ErrorPtr;
/// `TRITONBACKEND_ModelBatcherInitialize`.
type BatcherInitFn =
    unsafe extern "C" fn(*mut *mut TRITONBACKEND_Batcher, *mut TRITONBACKEND_Model) -> ErrorPtr;
/// `TRITONBACKEND_ModelBatcherFinalize`.
type BatcherFiniFn = unsafe extern "C" fn(*mut TRITONBACKEND_Batcher) -> ErrorPtr;

/// The five functions; a library defines all of them or none.
struct Functions {
    include: IncludeFn,
    batch_init: BatchInitFn,
    batch_fini: BatchFiniFn,
    batcher_init: BatcherInitFn,
    batcher_fini: BatcherFiniFn,
}

impl Functions {
    /// The library's functions: `None` when it defines none of them, an error naming the
    /// library when it defines only some (Triton's words).
    fn resolve(library: &Library, path: &Path, model: &str) -> Result<Option<Self>> {
        // SAFETY: each name is paired with its signature from tritonbackend.h.
        let (include, batch_init, batch_fini, batcher_init, batcher_fini) = unsafe {
            (
                optional_entry_point::<IncludeFn>(
                    library,
                    "TRITONBACKEND_ModelBatchIncludeRequest",
                ),
                optional_entry_point::<BatchInitFn>(library, "TRITONBACKEND_ModelBatchInitialize"),
                optional_entry_point::<BatchFiniFn>(library, "TRITONBACKEND_ModelBatchFinalize"),
                optional_entry_point::<BatcherInitFn>(
                    library,
                    "TRITONBACKEND_ModelBatcherInitialize",
                ),
                optional_entry_point::<BatcherFiniFn>(
                    library,
                    "TRITONBACKEND_ModelBatcherFinalize",
                ),
            )
        };
        match (include, batch_init, batch_fini, batcher_init, batcher_fini) {
            (
                Some(include),
                Some(batch_init),
                Some(batch_fini),
                Some(batcher_init),
                Some(batcher_fini),
            ) => Ok(Some(Self {
                include,
                batch_init,
                batch_fini,
                batcher_init,
                batcher_fini,
            })),
            (None, None, None, None, None) => Ok(None),
            _ => Err(Error::invalid_arg(format!(
                "{} does not define all required custom batching functions for model {model}",
                path.display()
            ))),
        }
    }
}

/// A model version's custom batching library with its batcher object.
pub struct LibraryStrategy {
    functions: Functions,
    batcher: *mut TRITONBACKEND_Batcher,
    /// The model object the batcher was made from; libraries may keep its pointer.
    model: Box<TRITONBACKEND_Model>,
    spec: Arc<ModelSpec>,
    // Last: unloaded after the batcher is finalized.
    _library: Library,
}

// SAFETY: the batcher object belongs to the library, which Triton calls from its one
// batcher thread per model; here only the model's batcher task calls it, one call at a
// time, and the model object's mutable parts are locks and atomics.
unsafe impl Send for LibraryStrategy {}
// SAFETY: as for Send: calls on a strategy never overlap.
unsafe impl Sync for LibraryStrategy {}

impl LibraryStrategy {
    /// Opens `path` for `spec` (in `model_dir`) and makes its batcher object.
    fn open(path: &Path, spec: &Arc<ModelSpec>, model_dir: &Path) -> Result<Option<Self>> {
        super::soname::provide_core_libraries(path)?;
        // SAFETY: loading a library runs its initializers; a batching library is code
        // the operator chose to run in this process, as with Triton.
        let library = unsafe { crate::dl::open_plugin(path) }.map_err(|e| {
            Error::invalid_arg(format!(
                "unable to load custom batching library {}: {}",
                path.display(),
                dlerror_text(&e)
            ))
        })?;
        let Some(functions) = Functions::resolve(&library, path, &spec.name)? else {
            return Ok(None);
        };
        let mut model = Box::new(TRITONBACKEND_Model {
            name: c_text(&spec.name),
            version: u64::try_from(spec.version).unwrap_or_default(),
            repository: c_text(&model_dir.to_string_lossy()),
            config: Mutex::new(config_to_json(&spec.config)),
            auto_complete: false,
            initializing: AtomicBool::new(false),
            completed: Mutex::new(None),
            state: AtomicPtr::new(std::ptr::null_mut()),
            backend: None,
        });
        let mut batcher = std::ptr::null_mut();
        // SAFETY: the library's entry point with a place for its batcher and a model
        // object that lives (boxed) as long as the batcher.
        callee_result(unsafe { (functions.batcher_init)(&mut batcher, &mut *model) })?;
        Ok(Some(Self {
            functions,
            batcher,
            model,
            spec: spec.clone(),
            _library: library,
        }))
    }
}

impl Drop for LibraryStrategy {
    fn drop(&mut self) {
        // SAFETY: the library's entry point, once, with the batcher it made.
        let error = unsafe { (self.functions.batcher_fini)(self.batcher) };
        if let Err(e) = callee_result(error) {
            tracing::error!(
                "Custom batcher finalization failed for model {}: {e}",
                self.model.name()
            );
        }
    }
}

impl BatchStrategy for LibraryStrategy {
    fn start_batch(&self) -> Box<dyn BatchCut + '_> {
        let mut user = std::ptr::null_mut();
        // SAFETY: the library's entry point with its batcher and a place for the
        // batch's user pointer.
        let error = unsafe { (self.functions.batch_init)(self.batcher, &mut user) };
        if let Err(e) = callee_result(error) {
            tracing::error!(
                "Custom batching initialization function failed for model {}: {e}",
                self.spec.name
            );
        }
        Box::new(LibraryCut {
            strategy: self,
            user,
        })
    }
}

/// One batch's user pointer, finalized when the batch is decided.
struct LibraryCut<'a> {
    strategy: &'a LibraryStrategy,
    user: *mut c_void,
}

impl BatchCut for LibraryCut<'_> {
    fn include(&mut self, request: &InferRequest) -> bool {
        let strategy = self.strategy;
        let exchange = Arc::new(Exchange::collecting(strategy.spec.name.clone(), None));
        let view = Box::into_raw(TRITONBACKEND_Request::new(
            &strategy.spec,
            request,
            exchange,
        ));
        let mut include = false;
        // SAFETY: the library's entry point with a request view that lives until it
        // returns, the batch's user pointer and a place for the answer.
        let error = unsafe { (strategy.functions.include)(view, self.user, &mut include) };
        // SAFETY: `view` came from `Box::into_raw` above and the library does not own it.
        drop(unsafe { Box::from_raw(view) });
        if let Err(e) = callee_result(error) {
            tracing::error!(
                "Custom batching include function failed for model {}: {e}",
                strategy.spec.name
            );
        }
        include
    }
}

impl Drop for LibraryCut<'_> {
    fn drop(&mut self) {
        // Triton finalizes only a batch whose initialization set a user pointer.
        if self.user.is_null() {
            return;
        }
        // SAFETY: the library's entry point, once, with the pointer its initialize set.
        let error = unsafe { (self.strategy.functions.batch_fini)(self.user) };
        if let Err(e) = callee_result(error) {
            tracing::error!(
                "Custom batching finalization function failed for model {}: {e}",
                self.strategy.spec.name
            );
        }
    }
}

/// The core's loader of custom batching libraries.
#[derive(Debug)]
pub struct BatchLibraries {
    /// `--backend-directory`, whose `<backend>/batchstrategy.so` is the last looked for.
    backend_directory: PathBuf,
}

impl BatchLibraries {
    /// A loader for a server whose backends are in `backend_directory`.
    pub fn new(backend_directory: PathBuf) -> Self {
        Self { backend_directory }
    }
}

impl BatchStrategyLoader for BatchLibraries {
    fn backend_directory(&self, backend: &str) -> Option<PathBuf> {
        Some(self.backend_directory.join(backend))
    }

    fn load(
        &self,
        library: &Path,
        spec: &Arc<ModelSpec>,
        model_dir: &Path,
    ) -> Result<Option<Arc<dyn BatchStrategy>>> {
        let strategy = LibraryStrategy::open(library, spec, model_dir)?;
        Ok(strategy.map(|s| Arc::new(s) as Arc<dyn BatchStrategy>))
    }
}
