//! Wire types of the KServe v2 / Triton protocol: the `inference` package (gRPC service,
//! inference messages and `ModelConfig`) and the standard gRPC health service.
//!
//! The wire types are generated at build time from `proto/*.proto`; the descriptor set is
//! kept so that `config.pbtxt` can be parsed as protobuf text format and printed as
//! protobuf JSON against exactly the same schema. [`DataType`], the protocol's tensor
//! element type, is the one hand-written type: it lives here, below the server and the
//! load generator alike, so that the two cannot disagree on names or sizes.

use std::sync::OnceLock;

mod datatype;

pub use datatype::DataType;

/// Generated types of the `inference` package.
#[allow(missing_docs, clippy::all)]
pub mod inference {
    tonic::include_proto!("inference");
}

/// Generated types of the `grpc.health.v1` package.
#[allow(missing_docs, clippy::all)]
pub mod health {
    tonic::include_proto!("grpc.health.v1");
}

/// Encoded `FileDescriptorSet` of every compiled .proto file.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/descriptors.bin"));

/// The descriptor pool for reflection (text format, JSON), decoded once.
pub fn descriptor_pool() -> &'static prost_reflect::DescriptorPool {
    static POOL: OnceLock<prost_reflect::DescriptorPool> = OnceLock::new();
    POOL.get_or_init(|| {
        prost_reflect::DescriptorPool::decode(FILE_DESCRIPTOR_SET)
            .expect("the descriptor set was produced by this crate's own build script")
    })
}
