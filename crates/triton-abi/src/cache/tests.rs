//! The entry, allocator and buffer-attribute functions as a plugin calls them: Triton's
//! checks and messages, and the copies in both directions.
#![allow(unsafe_code)]

use std::ffi::{c_void, CStr};
use std::ptr::null_mut;

use super::allocator::{TRITONCACHE_Allocator, TRITONCACHE_Copy};
use super::entry::*;
use crate::buffer_attributes::*;
use crate::error::{ErrorPtr, TRITONSERVER_ErrorDelete, TRITONSERVER_ErrorMessage};
use crate::types::memory_type;

/// The message of `error` (which must be one), freed.
fn message(error: ErrorPtr) -> String {
    assert!(!error.is_null(), "expected an error");
    // SAFETY: a live error this library created; deleted right after reading.
    unsafe {
        let text = CStr::from_ptr(TRITONSERVER_ErrorMessage(error))
            .to_string_lossy()
            .into_owned();
        TRITONSERVER_ErrorDelete(error);
        text
    }
}

fn attributes(byte_size: usize, memory: u32) -> Box<TRITONSERVER_BufferAttributes> {
    Box::new(TRITONSERVER_BufferAttributes {
        byte_size,
        memory_type: memory,
        ..Default::default()
    })
}

#[test]
fn entry_functions_check_like_triton() {
    let mut entry = TRITONCACHE_CacheEntry::default();
    let mut data = [1u8, 2, 3];
    let base = data.as_mut_ptr().cast::<c_void>();
    let mut attrs = attributes(3, memory_type::GPU);
    // SAFETY: valid pointers or deliberate nulls, as a plugin passes them.
    unsafe {
        assert_eq!(
            message(TRITONCACHE_CacheEntryAddBuffer(
                null_mut(),
                base,
                &mut *attrs
            )),
            "entry, base, or attrs was nullptr"
        );
        assert_eq!(
            message(TRITONCACHE_CacheEntryAddBuffer(
                &mut entry,
                base,
                &mut *attrs
            )),
            "Only buffers in CPU memory are allowed in cache currently"
        );
        let mut empty = attributes(0, memory_type::CPU);
        assert_eq!(
            message(TRITONCACHE_CacheEntryAddBuffer(
                &mut entry,
                base,
                &mut *empty
            )),
            "Buffer byte size was zero"
        );
        attrs.memory_type = memory_type::CPU_PINNED;
        assert!(TRITONCACHE_CacheEntryAddBuffer(&mut entry, base, &mut *attrs).is_null());

        let mut count = 0;
        assert!(TRITONCACHE_CacheEntryBufferCount(&mut entry, &mut count).is_null());
        assert_eq!(count, 1);
        assert_eq!(
            message(TRITONCACHE_CacheEntryBufferCount(null_mut(), &mut count)),
            "entry was nullptr"
        );

        let mut got = null_mut();
        let mut out = attributes(0, memory_type::GPU);
        assert!(TRITONCACHE_CacheEntryGetBuffer(&mut entry, 0, &mut got, &mut *out).is_null());
        assert_eq!(
            (got, out.byte_size, out.memory_type),
            (base, 3, memory_type::CPU)
        );
        assert_eq!(
            message(TRITONCACHE_CacheEntryGetBuffer(
                &mut entry, 1, &mut got, &mut *out
            )),
            "index was greater than count"
        );
        assert_eq!(
            message(TRITONCACHE_CacheEntrySetBuffer(
                &mut entry,
                1,
                base,
                null_mut()
            )),
            "index was greater than count"
        );
        assert_eq!(
            message(TRITONCACHE_CacheEntrySetBuffer(
                null_mut(),
                0,
                base,
                null_mut()
            )),
            "entry was nullptr"
        );

        let (mut major, mut minor) = (9, 9);
        assert!(TRITONCACHE_ApiVersion(&mut major, &mut minor).is_null());
        assert_eq!((major, minor), (0, 1));
        assert!(!TRITONCACHE_ApiVersion(null_mut(), &mut minor).is_null());
    }
}

#[test]
fn copy_fills_the_plugins_buffers_on_insert_and_nereids_on_lookup() {
    let source = vec![7u8; 4];
    let mut entry = TRITONCACHE_CacheEntry {
        buffers: vec![Buffer {
            base: source.as_ptr().cast_mut().cast(),
            byte_size: 4,
        }],
    };
    let mut allocator = TRITONCACHE_Allocator::Insert(vec![source.clone()]);
    let mut plugin_memory = [0u8; 4];
    // SAFETY: entry, allocator and buffers live for every call.
    unsafe {
        let plugin = plugin_memory.as_mut_ptr().cast();
        assert!(TRITONCACHE_CacheEntrySetBuffer(&mut entry, 0, plugin, null_mut()).is_null());
        assert!(TRITONCACHE_Copy(&mut allocator, &mut entry).is_null());
        assert_eq!(plugin_memory, [7; 4]);

        let mut short = attributes(2, memory_type::CPU);
        assert!(TRITONCACHE_CacheEntrySetBuffer(&mut entry, 0, plugin, &mut *short).is_null());
        assert_eq!(
            message(TRITONCACHE_Copy(&mut allocator, &mut entry)),
            "Expected size of buffer in cache does not match. Expected: 4, received: 2"
        );
        assert_eq!(
            message(TRITONCACHE_Copy(null_mut(), &mut entry)),
            "allocator or entry was nullptr"
        );

        let mut lookup = TRITONCACHE_Allocator::Lookup(None);
        let mut found = TRITONCACHE_CacheEntry::default();
        let mut attrs = attributes(4, memory_type::CPU);
        assert!(TRITONCACHE_CacheEntryAddBuffer(&mut found, plugin, &mut *attrs).is_null());
        assert!(TRITONCACHE_Copy(&mut lookup, &mut found).is_null());
        plugin_memory = [0; 4];
        let TRITONCACHE_Allocator::Lookup(Some(copied)) = lookup else {
            panic!("copied on lookup");
        };
        assert_eq!((copied, plugin_memory), (vec![vec![7u8; 4]], [0; 4]));
    }
}

#[test]
fn buffer_attributes_round_trip() {
    let mut attrs = null_mut();
    // SAFETY: the object is created, used and deleted here.
    unsafe {
        assert!(TRITONSERVER_BufferAttributesNew(&mut attrs).is_null());
        let (mut size, mut memory, mut id) = (9, 9, 9);
        assert!(TRITONSERVER_BufferAttributesByteSize(attrs, &mut size).is_null());
        assert!(TRITONSERVER_BufferAttributesMemoryType(attrs, &mut memory).is_null());
        assert!(TRITONSERVER_BufferAttributesMemoryTypeId(attrs, &mut id).is_null());
        assert_eq!((size, memory, id), (0, memory_type::CPU, 0));
        assert!(TRITONSERVER_BufferAttributesSetByteSize(attrs, 64).is_null());
        assert!(TRITONSERVER_BufferAttributesSetMemoryTypeId(attrs, 2).is_null());
        assert!(TRITONSERVER_BufferAttributesByteSize(attrs, &mut size).is_null());
        assert!(TRITONSERVER_BufferAttributesMemoryTypeId(attrs, &mut id).is_null());
        assert_eq!((size, id), (64, 2));
        assert!(!TRITONSERVER_BufferAttributesByteSize(null_mut(), &mut size).is_null());
        assert!(!TRITONSERVER_BufferAttributesByteSize(attrs, null_mut()).is_null());
        assert!(TRITONSERVER_BufferAttributesDelete(attrs).is_null());
    }
}
