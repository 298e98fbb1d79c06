#!/usr/bin/env python3
"""Census of Triton's QA suites (qa/L0_*) against what Nereid can run on a CPU machine.

Usage: scripts/triton_qa_census.py [SERVER_REPO] [--commit REV] [--check-docs | --list-runnable]

  SERVER_REPO   a checkout of triton-inference-server/server, or its bare git mirror
                (default /work/.mirror/triton-inference-server+server/repo)
  --commit REV  the commit to read from a git repository (default HEAD); a plain
                directory without .git is read as it is
  --check-docs  also compare the result counts recorded below with the "Triton QA
                suites" table of docs/src/compatibility.md and report any difference
  --list-runnable  print instead, one a line, the suite arguments of
                scripts/run_triton_qa.sh for every suite that runs here ("yes" or
                "partly"), with the environment recorded for it (RUN below), e.g.
                L0_repoagent_checksum:QA_TRITON_DEFAULTS=1; what the runner's SUITE
                `all-runnable` runs

Prints markdown: a summary and one row per qa/L0_* folder. Each row joins
  (a) markers found in the suite's test.sh and the Python/shell files beside it (what
      it copies, starts and runs), computed at run time;
  (b) FACTS: what the suite needs, whether it can run on this machine and why, as
      established by reading each test.sh (kept by hand, below);
  (c) RESULTS: the counts recorded in docs/src/compatibility.md and docs/src/features/.
A folder with no FACTS entry is listed under "Not classified" and the script exits 1,
so a suite Triton adds shows up instead of being missed. Standard library only.
"""

import os
import re
import subprocess
import sys

DEFAULT_REPO = "/work/.mirror/triton-inference-server+server/repo"

# What a suite needs. The codes, in the order they are shown.
NEEDS = {
    "gpu": "a GPU (nvidia-smi, CUDA shared memory, KIND_GPU with no CPU path, GPU memory)",
    "trt": "TensorRT (plan models, trtexec, the tensorrt backend)",
    "tf": "TensorFlow models (graphdef/savedmodel)",
    "torch": "libtorch models (Triton's pytorch backend; here the CPU build of scripts/build_pytorch_backend.sh)",
    "ov": "OpenVINO models (Triton's openvino backend; here the CPU build)",
    "py": "Triton's python backend (here from the nvidia-pytriton wheel)",
    "custom": "Triton's C++ test/custom backends (here from scripts/build_triton_backends.sh)",
    "capi": "C API programs built in Triton's image (simple, memory_alloc, multi_server, *_api_test ...)",
    "unit": "unit tests of Triton's own C++ code (gtests of core/common internals, no server)",
    "internal": "C API tests that cast one object type to another (the TRITONSERVER_InferenceRequest or Response a test holds, used as the TRITONBACKEND_Request or Response): the header declares them distinct, the tests call the cast unsupported, and it holds only where both are Triton's one internal object",
    "cc": "C++ client programs of Triton's client repository (simple_*_client, image_client ...)",
    "pa": "perf_analyzer",
    "nginx": "nginx",
    "redis": "redis",
    "valgrind": "valgrind",
    "cloud": "cloud storage (S3, GCS, Azure, MinIO)",
    "vllm": "vLLM",
    "trtllm": "TensorRT-LLM",
    "java": "Java (Maven, JavaCPP presets)",
    "other": "another tool or language (Go, Node.js, Docker, conda, Kaldi, mkdocs, MLflow ...)",
    "onnx": "ONNX models (Nereid's built-in ONNX Runtime backend)",
    "memory": "more memory than this machine's 24 GiB (perf_analyzer's 16 MB trials at concurrency 16 outgrow it, against Triton 2.51 too)",
}

# (needs, runnable, note). runnable: "yes" (every trial can run here, given the builds
# named in docs/src/features/backends.md), "partly" (the note says which trials),
# "no" (the note says why). Established by reading each test.sh and what it runs.
FACTS = {
    "L0_additional_dependency_dirs": ("trt", "no", "tensorrt backend's additional-dependency-dirs with a plan model"),
    "L0_async_work_queue": ("unit", "no", "gtest of Triton common's AsyncWorkQueue; no server involved"),
    "L0_backend_bls": ("custom py tf", "partly", "bls example backend built from source; its addsub_tf is a SavedModel (replaced by ONNX by hand)"),
    "L0_backend_config": ("onnx", "yes", "--backend-config defaults and overrides read from the server log, ONNX models"),
    "L0_backend_fastertransformer": ("gpu other", "no", "clones and runs the FasterTransformer backend (GPU)"),
    "L0_backend_identity": ("custom", "yes", "Triton's identity backend"),
    "L0_backend_onnxruntime": ("onnx", "yes", "an ONNX BF16 model over HTTP and gRPC"),
    "L0_backend_output_detail": ("capi py internal", "no", "backend_output_detail_test (C API gtest, built by scripts/build_triton_capi_tests.sh) runs its one test on a python add_sub model and reads the outputs by casting the TRITONSERVER_InferenceResponse to a TRITONBACKEND_Response; against Nereid that cast reads another object (run 2026-11-30: 1 run, 0 pass)"),
    "L0_backend_python": ("py torch gpu other", "partly", "subtests run one by one; bls/io/ensemble need torch or GPU tensors, env/variants need conda and a python_backend build"),
    "L0_backend_release": ("cc onnx", "no", "only C++ clients (simple_http_infer_client, simple_grpc_sequence_stream_infer_client), not built here"),
    "L0_backend_tutorial": ("custom", "yes", "minimal and recommended example backends built from source and their clients"),
    "L0_batch_custom": ("onnx custom", "yes", "volume/single batching libraries over onnx_zero_1_float16; its KIND_GPU group kept on the CPU by the runner"),
    "L0_batch_input": ("onnx torch trt", "partly", "onnx and libtorch trials of BACKENDS; plan needs TensorRT"),
    "L0_batcher": ("onnx torch trt py custom gpu unit", "partly", "onnx, custom and python trials; plan, CUDA shared memory and instance_queue_test (unit test) not"),
    "L0_buffer_attributes": ("py gpu", "no", "python models on KIND_GPU with CUDA shared memory buffers"),
    "L0_client_build_variants": ("other", "no", "builds Triton's client repository in several configurations; no server"),
    "L0_client_java": ("java cc", "no", "Java/Scala clients built with Maven"),
    "L0_client_memory_growth": ("custom cc valgrind", "partly", "memory_growth_test.py (Triton's python client examples, EXAMPLES_DIR) under valgrind massif over HTTP and gRPC against Triton's identity backend; the C++ memory_leak_test is not built here"),
    "L0_client_nobatch": ("onnx", "yes", ""),
    "L0_client_timeout": ("custom cc", "partly", "python timeout tests; client_timeout_test (C++) not built here"),
    "L0_client_valgrind": ("custom cc valgrind", "no", "only the C++ memory_leak_test under valgrind"),
    "L0_cmdline_trace": ("onnx", "yes", "trace flags and trace files (Triton trace and OpenTelemetry)"),
    "L0_compute_capability": ("gpu trt torch", "no", "--min-supported-compute-capability against KIND_GPU models"),
    "L0_config_json": ("onnx custom", "yes", "model configuration JSON over HTTP"),
    "L0_cuda_graph": ("trt gpu", "no", "TensorRT CUDA graphs"),
    "L0_cuda_shared_memory": ("gpu py", "no", "CUDA shared memory"),
    "L0_custom_model_config": ("onnx", "yes", "--model-config-name and custom config files"),
    "L0_custom_ops": ("torch onnx other", "no", "custom-op libraries built in Triton's image (libtorch modulo/vision ops, ONNX Runtime's test op library)"),
    "L0_data_compression": ("unit cc onnx", "partly", "python clients with deflate/gzip; data_compressor_test (unit test) and the C++ client not"),
    "L0_decoupled": ("py custom torch", "partly", "python and custom trials; fan_repeat is a libtorch ensemble"),
    "L0_device_memory_tracker": ("gpu trt", "no", "GPU memory accounting with TensorRT models"),
    "L0_dlpack_multi_gpu": ("gpu py torch", "no", "DLPack between GPUs (torch and CuPy on CUDA)"),
    "L0_doc_links": ("other", "no", "mkdocs link check of Triton's own documentation; no server"),
    "L0_dyna_implicit_state": ("onnx trt custom", "partly", "L0_dyna_sequence_batcher with implicit state; onnx trial (plan needs TensorRT)"),
    "L0_dyna_sequence_batcher": ("onnx torch trt custom", "partly", "onnx, libtorch and custom trials; plan not"),
    "L0_grpc": ("onnx py custom cc nginx", "partly", "python tests and the nginx step; C++ clients not built here"),
    "L0_grpc_state_cleanup": ("custom", "yes", "repeat backend and custom_zero_1_float32"),
    "L0_http": ("onnx py custom cc nginx", "partly", "python tests and the nginx step; C++ clients not built here"),
    "L0_http_fuzz": ("onnx other", "yes", "boofuzz 0.3.0 over HTTP on 20 endpoints (the runner installs it in the client's Python instead of conda's Python 3.8)"),
    "L0_https": ("nginx cc onnx", "partly", "python clients through an nginx TLS proxy (root for /etc/nginx); the C++ client not built here"),
    "L0_implicit_state": ("onnx torch trt custom gpu", "partly", "onnx, libtorch and implicit_state trials; plan and the GPU state-buffer tests not"),
    "L0_infer": ("onnx torch trt ov py custom gpu", "partly", "with TRITON_SERVER_CPU_ONLY=1: onnx, libtorch, openvino, python, custom; plan and the CUDA shared-memory variant not"),
    "L0_infer_reshape": ("onnx torch trt custom", "partly", "onnx, libtorch and custom models; plan not"),
    "L0_infer_variable": ("onnx torch trt gpu", "partly", "the cpu pass with onnx and libtorch; plan and the KIND_GPU pass not"),
    "L0_infer_zero": ("onnx torch custom", "yes", "onnx, libtorch and identity models (libtorch ones need TORCH_PYTHON)"),
    "L0_initializer_as_input": ("onnx", "yes", "an ONNX model with an initializer as input"),
    "L0_input_validation": ("onnx trt py unit capi", "partly", "python input/shape/name validation with onnx models; the suite stops at its plan shape-tensor models before input_byte_size_test (C API gtest, built by scripts/build_triton_capi_tests.sh); tensor_size_test (unit test) not"),
    "L0_io": ("capi onnx torch trt py gpu", "no", "its gen_libtorch_model.py stops the suite before any trial on a machine with fewer than two GPUs (run 2026-11-30: \"Need at least 2 GPUs to run this test\"); memory_alloc builds here (scripts/build_triton_capi_tests.sh with CUDA_RUNTIME_DIR) for a GPU machine"),
    "L0_iterative_sequence": ("custom", "yes", "iterative_sequence backend, generate_stream"),
    "L0_java_memory_growth": ("java", "no", "Java bindings of the C API built with JavaCPP"),
    "L0_java_resnet": ("java torch", "no", "Java bindings of the C API built with JavaCPP"),
    "L0_java_sequence_batcher": ("java torch", "no", "Java bindings of the C API built with JavaCPP"),
    "L0_java_simple_example": ("java", "no", "Java bindings of the C API built with JavaCPP"),
    "L0_json": ("unit", "no", "gtest of Triton common's JSON wrapper; no server involved"),
    "L0_large_payload": ("onnx torch trt py", "partly", "onnx, libtorch and python trials; plan not"),
    "L0_libtorch_disable_cudnn": ("torch", "yes", "the backend logs the cuDNN setting on a CPU too"),
    "L0_libtorch_inference_mode": ("torch", "yes", ""),
    "L0_libtorch_instance_group_kind_model": ("torch gpu", "no", "KIND_MODEL across several GPUs (cuda:0..3)"),
    "L0_libtorch_io_names": ("torch", "yes", ""),
    "L0_libtorch_io_types": ("torch", "yes", "load errors for unsupported types, from the server log"),
    "L0_libtorch_optimized_execution": ("torch", "yes", ""),
    "L0_libtorch_shared_weights": ("torch gpu", "partly", "the KIND_CPU trial; KIND_GPU not"),
    "L0_lifecycle": ("onnx torch trt ov py custom gpu", "partly", "onnx, libtorch, openvino, python, identity trials; plan and the KIND_GPU trial not"),
    "L0_logging": ("onnx unit", "partly", "log settings over HTTP/gRPC and log formats; logging_test (unit test) not"),
    "L0_long_running_stress": ("onnx torch custom", "no", "one stress.py run of about 7 hours (TEST_DURATION 25,000 s) whose scenarios include resnet_v1_50 from Triton's onnx_model_store, a prebuilt model not published"),
    "L0_memory": ("unit py", "partly", "four streams of 256 responses of 190 MB from python_backend's repeat model with --grpc-max-response-pool-size 1, 25, 50 and unset, and their peak memory compared; memory_test and pinned_memory_manager_test are unit tests of Triton's memory managers"),
    "L0_memory_growth": ("trt pa valgrind py torch", "no", "it first builds a resnet50 plan with trtexec and exits when it cannot, before any trial (the python busy_op trial comes last); its resnet50 models come from Triton's perf_model_store"),
    "L0_metrics": ("onnx py custom gpu unit", "partly", "CPU and model metrics tests; GPU and peer-memory trials and metrics_api_test (unit test) not"),
    "L0_mlflow": ("onnx cloud other", "partly", "the MLflow plugin (server's deploy/mlflow-triton-plugin) on a local repository; its S3 trial needs AWS"),
    "L0_model_config": ("onnx torch trt ov py custom", "partly", "autofill and config checks for onnx, pytorch, openvino, python, custom; tensorrt cases not"),
    "L0_model_namespacing": ("py", "yes", "python models in several repositories"),
    "L0_model_queue": ("custom", "yes", "custom_zero_1_float32 with queue policies"),
    "L0_model_update": ("py gpu", "partly", "instance updates of a python model; the tests with KIND_GPU groups not"),
    "L0_multi_server": ("capi onnx trt", "partly", "multi_server (built by scripts/build_triton_capi_tests.sh) starts 33 in-process servers at once, 22 of them on plan models: its one check needs TensorRT"),
    "L0_nan_inf": ("py", "yes", ""),
    "L0_nullchar_string": ("py torch", "yes", "a python string model and a libtorch identity model"),
    "L0_onnx_optimization": ("onnx gpu", "partly", "CPU optimization settings and unknown accelerators; CUDA and TensorRT execution providers not"),
    "L0_openai": ("vllm trtllm gpu", "partly", "its test.sh needs a vLLM or TensorRT-LLM model; the same tests run on Triton's CPU mock models by tests/python/test_triton_openai_suite.py"),
    "L0_optional_input": ("custom py", "yes", "identity, ensembles and a python model"),
    "L0_orca": ("trtllm gpu", "no", "ORCA load reporting with a TensorRT-LLM engine"),
    "L0_output_name": ("onnx torch trt", "partly", "onnx and libtorch identity models; plan not"),
    "L0_output_validation": ("torch", "no", "models from Triton's prebuilt libtorch_model_store2"),
    "L0_parallel_copy": ("trt", "no", "a plan identity model"),
    "L0_parameters": ("custom py", "yes", "request parameters through identity, ensemble and python models"),
    "L0_passive_instance": ("custom pa gpu", "no", "distributed_addsub backend with a passive KIND_GPU group; the backend refuses a passive CPU instance"),
    "L0_perf_deeprecommender": ("trt pa torch", "no", "models from Triton's perf_model_store and a TensorRT build"),
    "L0_perf_kaldi": ("other gpu", "no", "the Kaldi backend in a docker image"),
    "L0_perf_nomodel": ("pa custom onnx torch trt py gpu memory", "partly", "perf_analyzer (../shared/triton/perf-analyzer.sh) over gRPC, HTTP and the C API on onnx_zero_1_float32 (BACKENDS=onnx; its KIND_GPU instances kept on the CPU); plan and CUDA shared memory not"),
    "L0_perf_pyclients": ("custom", "yes", "python simple_perf_client against custom_zero_1_int32"),
    "L0_perf_resnet": ("trt pa torch", "no", "resnet50 from Triton's perf_model_store and a TensorRT build"),
    "L0_perf_tensorrt_llm": ("trtllm pa gpu", "no", ""),
    "L0_perf_vllm": ("vllm pa gpu", "no", ""),
    "L0_pinned_memory": ("pa custom torch gpu", "partly", "perf_analyzer on its libtorch ensemble with and without a pinned pool (its KIND_GPU instance kept on the CPU); the point (host/GPU copies) needs a GPU"),
    "L0_priority": ("trt", "no", "CUDA stream priority of plan models"),
    "L0_python_api": ("py", "yes", "Triton's tritonserver/tritonfrontend Python packages on Nereid's libtritonserver.so"),
    "L0_python_client_unit_tests": ("other", "no", "unit tests of the tritonclient package; no server"),
    "L0_pytorch_python_runtime": ("torch py unit other", "no", "unit_test.py tests the pytorch backend's own model.py inside a conda-packed environment (pytorch_backend's gen_pb_exec_env.sh), no server; infer.py's models (neuralnet, resnet50_libtorch) come from Triton's pytorch_model_store and libtorch_model_store, prebuilt and not published"),
    "L0_query": ("custom capi gpu", "partly", "query backend with query_test (C API gtest, built by scripts/build_triton_capi_tests.sh) and query_e2e.py over HTTP and gRPC; its four CUDA shared-memory cases need a GPU"),
    "L0_rate_limiter": ("custom", "yes", "custom models whose KIND_GPU groups the runner keeps on the CPU"),
    "L0_register": ("capi", "yes", "register_api_test (C API gtest, built by scripts/build_triton_capi_tests.sh against Nereid's libtritonserver.so)"),
    "L0_repoagent_checksum": ("custom", "yes", "the checksum repository agent (built into Nereid) over identity"),
    "L0_request_cancellation": ("capi cc custom torch py", "partly", "python cancellation and scheduler tests; request_cancellation_test (C API gtest) casts the TRITONSERVER_InferenceRequest to a TRITONBACKEND_Request (internal) and is not counted; grpc_cancellation_test (C++ client) not"),
    "L0_response_cache": ("unit redis pa onnx custom", "partly", "local and redis cache with onnx, identity, ensembles; response_cache_test (unit test) not"),
    "L0_response_statistics": ("custom", "yes", "the square backend's per-response statistics"),
    "L0_sagemaker": ("onnx py", "yes", "through Triton's serve script (docker/sagemaker/serve of the server repository)"),
    "L0_scalar_io": ("onnx", "yes", ""),
    "L0_sdk": ("other java cc pa", "no", "checks the contents of Triton's SDK image"),
    "L0_secure_grpc": ("onnx cc", "partly", "python clients over gRPC TLS; the C++ client not built here"),
    "L0_sequence_batcher": ("onnx torch trt py custom gpu", "partly", "onnx, python, custom trials; plan and CUDA shared memory not"),
    "L0_sequence_corrid_batcher": ("onnx torch trt py gpu", "partly", "onnx and libtorch dyna models (KIND_GPU count 4 kept on the CPU), python corrid types; plan not"),
    "L0_sequence_stress": ("custom", "yes", "custom_sequence_int32 (KIND_GPU groups kept on the CPU)"),
    "L0_server_status": ("onnx torch trt", "partly", "metadata of onnx and libtorch models; plan not"),
    "L0_shared_memory": ("onnx py torch trt ov", "partly", "python, onnx, libtorch, openvino models; plan not"),
    "L0_simple_ensemble": ("onnx py", "yes", "ensembles and back-pressure with python models"),
    "L0_simple_example": ("cc onnx", "partly", "the python client; the C++ simple_http_infer_client not built here"),
    "L0_simple_go_client": ("other", "no", "a Go client generated from a clone of Triton's repositories"),
    "L0_simple_lib": ("capi onnx torch trt gpu", "partly", "simple (built by scripts/build_triton_capi_tests.sh) on onnx and libtorch models in system memory; its pinned and gpu memory modes need a CUDA build of simple, its plan trial and plan ensemble TensorRT"),
    "L0_simple_nodejs_client": ("other", "no", "a Node.js client (npm install, clone of Triton's common repository)"),
    "L0_socket": ("onnx", "yes", "port and address flags (uses ports 8000-8007)"),
    "L0_storage_S3": ("cloud torch trt gpu", "no", "AWS S3"),
    "L0_storage_S3_local": ("cloud onnx torch trt", "no", "MinIO downloaded from dl.min.io"),
    "L0_storage_azure": ("cloud", "no", "Azure blob storage"),
    "L0_storage_swiftstack": ("cloud gpu", "no", "an S3-compatible SwiftStack endpoint"),
    "L0_string_io": ("onnx py", "yes", "string_identity is a python model"),
    "L0_torch_aoti": ("torch", "no", "AOTInductor models need a newer pytorch backend than the r24.10 build"),
    "L0_torch_aoti_hstu": ("torch gpu other", "no", "HSTU AOTI models with a FlexKV server"),
    "L0_trace": ("onnx py cc", "partly", "trace settings, OpenTelemetry with python clients; C++ clients not built here"),
    "L0_triton_repo_agent": ("unit capi", "no", "repo_agent_test (unit test) and Triton's relocation agent library, which Nereid does not host"),
    "L0_trt_bf16_dtype": ("trt gpu", "no", ""),
    "L0_trt_compat": ("trt gpu", "no", ""),
    "L0_trt_data_dependent_shape": ("trt gpu", "no", ""),
    "L0_trt_dla": ("trt gpu", "no", "DLA (Jetson)"),
    "L0_trt_dynamic_shape": ("trt gpu pa", "no", ""),
    "L0_trt_error_propagation": ("trt", "no", "error messages of the tensorrt backend for a bad plan"),
    "L0_trt_plugin": ("trt gpu", "no", ""),
    "L0_trt_reformat_free": ("trt gpu", "no", ""),
    "L0_trt_shape_tensors": ("trt gpu", "no", ""),
    "L0_vertex_ai": ("onnx py", "yes", "the Vertex AI endpoint (--allow-vertex-ai)"),
    "L0_warmup": ("onnx torch trt py gpu cc", "partly", "warmup of onnx, libtorch, python models; plan, the KIND_GPU trial and the C++ image_client not"),
}

# Results recorded in docs/src/compatibility.md ("Triton QA suites", and "Triton's OpenAI
# frontend tests" for L0_openai) and docs/src/features/ (embedding.md for L0_python_api,
# backends.md for L0_backend_tutorial): suite -> (tests, passed, how).
RESULTS = {
    "L0_batcher": (88, 88, "44/44 with onnx models, 44/44 with libtorch"),
    "L0_shared_memory": (36, 36, ""),
    "L0_dyna_sequence_batcher": (10, 10, ""),
    "L0_sequence_batcher": (270, 270, "90/90 onnx, 90/90 libtorch, 90/90 libtorch with implicit state"),
    "L0_batch_custom": (5, 5, ""),
    "L0_decoupled": (7, 7, "python trial; test_one_to_multi_many run by hand in the suite's folder"),
    "L0_backend_python": (84, 78, "subtests run one by one"),
    "L0_backend_identity": (2, 2, ""),
    "L0_backend_bls": (1, 1, "bls_client by hand"),
    "L0_client_nobatch": (4, 4, ""),
    "L0_scalar_io": (1, 1, ""),
    "L0_implicit_state": (14, 10, "7/5 onnx, 7/5 libtorch"),
    "L0_infer": (142, 142, "onnx and libtorch: 42/42 each, and 29/29 each with system shared memory"),
    "L0_infer_zero": (28, 28, ""),
    "L0_infer_reshape": (8, 6, ""),
    "L0_infer_variable": (42, 16, ""),
    "L0_string_io": (1, 1, ""),
    "L0_http": (75, 72, "unittest cases of its python files; shell checks not counted"),
    "L0_grpc": (27, 26, "unittest cases; most checks are shell"),
    "L0_python_api": (92, 92, "embedding.md: binding 62/62, api 20/20, kserve 6/6 as Triton's CI runs it (its 19 xfail(run=False) cases not counted; forced, 23/25), logging callback 4/4"),
    "L0_openai": (67, 65, "python/openai/tests on CPU mock models, not its test.sh"),
    "L0_backend_tutorial": (2, 2, "minimal_client and recommended_client by hand"),
    "L0_libtorch_inference_mode": (1, 1, ""),
    "L0_libtorch_optimized_execution": (1, 1, ""),
    "L0_libtorch_disable_cudnn": (1, 1, ""),
    "L0_libtorch_io_names": (8, 8, ""),
    "L0_libtorch_io_types": (3, 3, "three start-up checks"),
    "L0_libtorch_shared_weights": (1, 1, "KIND_CPU passes"),
    "L0_backend_onnxruntime": (2, 0, "no BF16 Add in ONNX Runtime's CPU build"),
    "L0_initializer_as_input": (2, 2, ""),
    "L0_custom_model_config": (6, 6, "shell checks"),
    "L0_backend_config": (14, 14, "shell checks"),
    "L0_socket": (44, 44, "shell checks, unmodified"),
    "L0_config_json": (25, 25, "shell checks"),
    "L0_repoagent_checksum": (3, 3, "shell checks"),
    "L0_response_statistics": (2, 2, ""),
    "L0_iterative_sequence": (6, 5, ""),
    "L0_grpc_state_cleanup": (18, 17, ""),
    "L0_model_queue": (7, 6, ""),
    "L0_nan_inf": (3, 3, "client with numpy < 2"),
    "L0_optional_input": (10, 10, ""),
    "L0_parameters": (7, 7, ""),
    "L0_model_namespacing": (8, 8, ""),
    "L0_simple_ensemble": (11, 11, "with the backpressure client; Triton's image adds `simple`"),
    "L0_cmdline_trace": (76, 76, "shell checks"),
    "L0_rate_limiter": (7, 5, ""),
    "L0_register": (23, 23, ""),
    "L0_simple_lib": (16, 4, "shell checks"),
    "L0_perf_nomodel": (12, 9, "perf_analyzer runs"),
    "L0_memory": (7, 6, "4 client runs, 3 peak-memory comparisons"),
    "L0_http_fuzz": (1, 1, ""),
    "L0_client_memory_growth": (2, 2, "the python client; the C++ one is not built here"),
    "L0_mlflow": (4, 4, "the CLI check and plugin_test.py's 3 tests, local repository"),
    "L0_pinned_memory": (17, 16, "shell checks"),
    "L0_multi_server": (1, 0, "shell check"),
    "L0_query": (9, 3, ""),
    "L0_sequence_stress": (10, 10, "shell checks"),
    "L0_perf_pyclients": (4, 4, "shell checks"),
    "L0_nullchar_string": (4, 4, "shell checks"),
    "L0_vertex_ai": (36, 36, "unmodified"),
    "L0_sagemaker": (32, 32, ""),
    "L0_passive_instance": (1, 0, ""),
    "L0_batch_input": (16, 16, "8/8 onnx, 8/8 libtorch"),
    "L0_output_name": (1, 0, ""),
    "L0_server_status": (5, 3, ""),
    "L0_large_payload": (2, 2, ""),
    "L0_input_validation": (5, 5, ""),
    "L0_logging": (16, 16, "unmodified"),
    "L0_trace": (0, 0, "driven by C++ clients not built here"),
    "L0_metrics": (8, 8, ""),
    "L0_warmup": (13, 12, "shell checks"),
    "L0_model_config": (492, 432, "shell cases"),
    "L0_data_compression": (12, 12, "shell checks, python clients"),
    "L0_https": (8, 8, "shell checks, python clients"),
    "L0_secure_grpc": (0, 0, "no server starts"),
    "L0_client_timeout": (25, 24, "in a copy past its C++ case"),
    "L0_simple_example": (7, 7, "shell checks, python client"),
    "L0_dyna_implicit_state": (9, 9, ""),
    "L0_sequence_corrid_batcher": (6, 5, ""),
    "L0_model_update": (69, 51, "its three rate-limit modes"),
    "L0_onnx_optimization": (13, 4, "shell checks"),
    "L0_request_cancellation": (16, 15, ""),
    "L0_lifecycle": (4, 4, ""),
    "L0_response_cache": (4, 4, ""),
}

# Failing tests of a runnable suite that cannot pass on a CPU machine whatever the server
# does, by what they need (codes of NEEDS), each established from the suite's own output
# as the compatibility.md row says: they are counted in RESULTS as run and not passed, and
# left out of "runnable on a CPU" in the summary. A test that could pass here (a model the
# runner does not generate yet, a tool not installed) is not listed.
NEEDS_MISSING_HARDWARE = {
    # 18 autofill_noplatform/tensorrt, 13 of its success cases, 7 custom_parameters/tensorrt;
    # 16 auto-completed configs expecting KIND_GPU, 6 negative_gpu trials.
    "L0_model_config": {"trt": 38, "gpu": 22},
    # 5 cases of the CPU pass on plan models; the second pass makes KIND_GPU instances.
    "L0_infer_variable": {"trt": 5, "gpu": 21},
    # 6 tests per rate-limit mode load KIND_GPU groups.
    "L0_model_update": {"gpu": 18},
    # CUDA and TensorRT execution accelerators, read only for a GPU instance.
    "L0_onnx_optimization": {"gpu": 9},
    # The plan trial and the plan ensemble, 4 runs each; `-m pinned` and `-m gpu` on onnx
    # and libtorch (simple built without GPU support refuses any memory type but system).
    "L0_simple_lib": {"trt": 8, "gpu": 4},
    # The three 16 MB throughput runs: perf_analyzer outgrows 24 GiB within a minute, as
    # it does against Triton 2.51 (measured beside it, 2026-11-30).
    "L0_perf_nomodel": {"memory": 3},
    # "Pinned memory pool is created" is logged only where CUDA allocates the pool
    # (Triton's CPU build does not log it either).
    "L0_pinned_memory": {"gpu": 1},
    # Two of every three of its 33 servers load plan models.
    "L0_multi_server": {"trt": 1},
    # query_e2e.py's four tests that register CUDA shared-memory regions for the outputs.
    "L0_query": {"gpu": 4},
    # test_implicit_state_growable_memory and test_no_update (GPU state buffers), per backend.
    "L0_implicit_state": {"gpu": 4},
    # test_ff2 and test_ff4 on plan models.
    "L0_infer_reshape": {"trt": 2},
    # its one test loops into the plan trial.
    "L0_output_name": {"trt": 1},
    # test_model_latest_infer and test_model_specific_infer on plan models.
    "L0_server_status": {"trt": 2},
    # test_skip_batch starts with plan models.
    "L0_sequence_corrid_batcher": {"trt": 1},
    # BF16 Add has no kernel in ONNX Runtime's CPU build; Triton's CI runs it on CUDA.
    "L0_backend_onnxruntime": {"gpu": 2},
    # test_grpc_register_cuda_shared_memory: the client creates a CUDA shared-memory region.
    "L0_client_timeout": {"gpu": 1},
    # decoupled's test_decoupled_bls: GPU tensors through BLS.
    "L0_backend_python": {"gpu": 1},
    # bls_onnx_warmup asserts its BLS outputs are in GPU memory.
    "L0_warmup": {"gpu": 1},
}

# Failing tests, among those runnable on a CPU, where Nereid differs from Triton on purpose
# (docs/src/differences.md says why; each suite's compatibility.md row names the test).
# They count as failures in every rate; the summary names them apart from the gaps.
DIFFERS_ON_PURPOSE = {
    # test_negative_dimensions: 400, not 500, for a client's bad shape; two
    # http_request_many_chunks.py cases: no limit on a chunked body's chunk count.
    "L0_http": 3,
    # test_register_system_shared_memory: INVALID_ARGUMENT, not INTERNAL, for a key that
    # names no shared-memory object.
    "L0_grpc": 1,
    # --load-model names leaving the repository are not followed; finish_reason 'length'.
    "L0_openai": 2,
    # test_policy_reject: a rejected ensemble request counts once, not twice.
    "L0_model_queue": 1,
    # test_reschedule_error: a sequence whose request the backend reschedules is not idle.
    "L0_iterative_sequence": 1,
    # test_decoupled_infer_shutdownserver: responses of a stream accepted before a
    # shutdown are delivered, not cut.
    "L0_grpc_state_cleanup": 1,
    # The default --grpc-max-response-pool-size holds 32 responses, Triton's any number:
    # the peak memory by default is not above a pool of 50's.
    "L0_memory": 1,
}

# How scripts/run_triton_qa.sh runs a runnable suite (--list-runnable, the runner's SUITE
# `all-runnable`): its suite arguments, as the rows of compatibility.md record them. A
# runnable suite not named here runs once as it is; one named with no arguments is left
# out: another script runs it, or it runs for hours (the comment says which).
RUN = {
    "L0_backend_bls": (),  # scripts/run_triton_backend_examples.sh
    "L0_backend_tutorial": (),  # scripts/run_triton_backend_examples.sh
    "L0_openai": (),  # tests/python/test_triton_openai_suite.py
    "L0_python_api": (),  # scripts/run_triton_python_api_qa.sh
    "L0_backend_python": tuple("L0_backend_python/" + t for t in (
        "lifecycle:QA_TRITON_DEFAULTS=1", "response_sender", "decoupled", "async_execute",
        "request_rescheduling", "logging", "argument_validation", "model_control",
        "custom_metrics", "examples")),
    "L0_infer": ("L0_infer", "L0_infer:TEST_SYSTEM_SHARED_MEMORY=1", "L0_infer:BACKENDS=libtorch",
                 "L0_infer:BACKENDS=libtorch TEST_SYSTEM_SHARED_MEMORY=1"),
    "L0_batcher": ("L0_batcher", "L0_batcher:BACKENDS=libtorch"),
    "L0_batch_input": ("L0_batch_input", "L0_batch_input:BACKENDS=libtorch"),
    "L0_sequence_batcher": ("L0_sequence_batcher", "L0_sequence_batcher:BACKENDS=libtorch",
                            "L0_sequence_batcher:BACKENDS=libtorch IMPLICIT_STATE=1 ENSEMBLES=0"),
    "L0_implicit_state": ("L0_implicit_state", "L0_implicit_state:BACKENDS=libtorch"),
    "L0_repoagent_checksum": ("L0_repoagent_checksum:QA_TRITON_DEFAULTS=1",),
    "L0_libtorch_io_types": ("L0_libtorch_io_types:QA_TRITON_DEFAULTS=1",),
    "L0_model_config": ("L0_model_config:QA_TRITON_DEFAULTS=1",),
    "L0_response_cache": ("L0_response_cache:QA_TRITON_DEFAULTS=1",),
    # TEST_JETSON=1: no shared-memory leak probe (triton_shm_monitor is built in Triton's image).
    "L0_warmup": ("L0_warmup:QA_TRITON_DEFAULTS=1 TEST_JETSON=1",),
}

# Markers read from the files at run time: (label, pattern). Shown in the table so a
# reader can see what a suite's files mention beside the hand-kept classification.
MARKERS = [
    ("nvidia-smi", r"nvidia-smi"),
    ("KIND_GPU", r"KIND_GPU"),
    ("cudashm", r"cuda_shared_memory|cudashm|CudaSharedMemory"),
    ("plan", r"\bplan\b|\bplan_|_plan\b|tensorrt|trtexec"),
    ("tf", r"graphdef|savedmodel|tensorflow"),
    ("libtorch", r"libtorch|pytorch"),
    ("openvino", r"openvino"),
    ("python", r"python_models|backend: *\\?\"python|backend_python|python_backend"),
    ("custom", r"custom_models|libtriton_\w+\.so|identity_backend"),
    ("C++ client", r"\.\./clients/[A-Za-z_]+(?![\w.])"),
    ("built test", r"\./\w+_test\b(?!\.)|LD_LIBRARY_PATH=/opt/tritonserver/lib"),
    ("perf_analyzer", r"perf_analyzer|perf_client"),
    ("nginx", r"nginx"),
    ("redis", r"redis-server"),
    ("valgrind", r"valgrind"),
    ("docker", r"\bdocker\b"),
    ("cloud", r"s3://|gs://|as://|\baz storage|minio"),
    ("vllm", r"vllm"),
    ("trtllm", r"tensorrt_llm|tensorrtllm|trtllm"),
    ("dali", r"\bdali\b"),
    ("java", r"\bmvn\b|\bjava\b"),
    ("CPU_ONLY", r"TRITON_SERVER_CPU_ONLY"),
]


def list_files(repo, commit):
    """{path: text} of test.sh and the .sh/.py files under qa/L0_*, and the L0 names."""
    if os.path.isdir(os.path.join(repo, ".git")) or not os.path.isdir(os.path.join(repo, "qa")):
        out = subprocess.run(["git", "-C", repo, "ls-tree", "-r", commit, "qa/"],
                             capture_output=True, text=True, check=True).stdout
        blobs = {}
        suites = set()
        for line in out.splitlines():
            meta, path = line.split("\t", 1)
            parts = path.split("/")
            if len(parts) < 3 or not parts[1].startswith("L0_"):
                continue
            suites.add(parts[1])
            if path.endswith((".sh", ".py")) and "/models/" not in path:
                blobs[path] = meta.split()[2]
        paths = sorted(blobs)
        data = "".join(blobs[p] + "\n" for p in paths).encode()
        raw = subprocess.run(["git", "-C", repo, "cat-file", "--batch"], input=data,
                             capture_output=True, check=True).stdout
        texts, pos = {}, 0
        for p in paths:
            end = raw.index(b"\n", pos)
            size = int(raw[pos:end].split()[2])
            texts[p] = raw[end + 1:end + 1 + size].decode("utf-8", "replace")
            pos = end + 1 + size + 1
        return sorted(suites), texts
    qa = os.path.join(repo, "qa")
    suites = sorted(d for d in os.listdir(qa) if d.startswith("L0_") and os.path.isdir(os.path.join(qa, d)))
    texts = {}
    for s in suites:
        for root, dirs, files in os.walk(os.path.join(qa, s)):
            dirs[:] = [d for d in dirs if d != "models"]
            for f in files:
                if f.endswith((".sh", ".py")):
                    full = os.path.join(root, f)
                    with open(full, encoding="utf-8", errors="replace") as fh:
                        texts[os.path.relpath(full, repo)] = fh.read()
    return suites, texts


def markers(suite, texts):
    body = "\n".join(t for p, t in texts.items() if p.startswith(f"qa/{suite}/"))
    # Drop comment lines (license headers, notes), and the boilerplate
    # CUDA_VISIBLE_DEVICES=0 nearly every test.sh sets.
    body = "\n".join(l for l in body.splitlines()
                     if not l.lstrip().startswith("#") and "CUDA_VISIBLE_DEVICES=0" not in l)
    return [label for label, pat in MARKERS if re.search(pat, body)]


def docs_counts(docs):
    """Counts of the "Triton QA suites" table of compatibility.md: {suite: (tests, passed)}."""
    path = os.path.join(docs, "src", "compatibility.md")
    counts = {}
    with open(path, encoding="utf-8") as f:
        section = False
        for line in f:
            if line.startswith("## "):
                section = line.strip() == "## Triton QA suites"
            m = re.match(r"\|\s*(L0_\w+)([^|]*)\|\s*(\d+)\s*\|\s*(\d+)\s*\|", line) if section else None
            if m:
                t, p = counts.get(m.group(1), (0, 0))
                counts[m.group(1)] = (t + int(m.group(3)), p + int(m.group(4)))
    return counts


def percent(part, whole):
    """`part` of `whole` as a percentage with one decimal, for the summary."""
    return f"{100 * part / whole:.1f} %" if whole else "—"


def main(argv):
    repo, commit, check, list_runnable = DEFAULT_REPO, "HEAD", False, False
    args = list(argv)
    while args:
        a = args.pop(0)
        if a == "--commit":
            commit = args.pop(0)
        elif a == "--check-docs":
            check = True
        elif a == "--list-runnable":
            list_runnable = True
        elif a in ("-h", "--help"):
            print(__doc__)
            return 0
        else:
            repo = a
    suites, texts = list_files(repo, commit)
    missing = [s for s in suites if s not in FACTS]
    stale = sorted(set(FACTS) - set(suites))
    if list_runnable:
        for s in suites:
            if s in FACTS and FACTS[s][1] != "no":
                for arg in RUN.get(s, (s,)):
                    print(arg)
        return 0

    rows, tally = [], {"yes": [], "partly": [], "no": []}
    need_count = {k: 0 for k in NEEDS}
    for s in suites:
        if s not in FACTS:
            continue
        needs, runnable, note = FACTS[s]
        tally[runnable].append(s)
        for n in needs.split():
            need_count[n] += 1
        if s in RESULTS:
            t, p, how = RESULTS[s]
            result = f"{t} / {p}" + (f" ({how})" if how else "")
            lacking = NEEDS_MISSING_HARDWARE.get(s)
            if lacking:
                result += "; " + ", ".join(
                    f"{n} need {NEEDS[k].split(' (')[0]}" for k, n in lacking.items())
        else:
            result = "not run" if runnable != "no" else "—"
        rows.append(f"| {s} | {needs} | {runnable}{': ' + note if note else ''} | {result} | "
                    f"{', '.join(markers(s, texts))} |")

    runnable = tally["yes"] + tally["partly"]
    run = [s for s in runnable if s in RESULTS]
    tests = sum(RESULTS[s][0] for s in run)
    passed = sum(RESULTS[s][1] for s in run)
    hardware = {s: sum(NEEDS_MISSING_HARDWARE.get(s, {}).values()) for s in run}
    for s, n in hardware.items():
        if n + DIFFERS_ON_PURPOSE.get(s, 0) > RESULTS[s][0] - RESULTS[s][1]:
            print(f"census: {s}: {n} tests need missing hardware, more than its "
                  f"{RESULTS[s][0] - RESULTS[s][1]} failures", file=sys.stderr)
            return 1
    label = commit
    if not os.path.isdir(os.path.join(repo, "qa")) or os.path.isdir(os.path.join(repo, ".git")):
        label = subprocess.run(["git", "-C", repo, "rev-parse", "--short=9", commit],
                               capture_output=True, text=True).stdout.strip() or commit
        label = f"commit {label}"
    else:
        label = f"the directory {repo}"
    print(f"Suites: **{len(suites)}** `qa/L0_*` folders at {label}.\n")
    print("| Runnable here | Suites | Run, with results | Not yet run | Tests run | Passed "
          "| Failing for want of TensorRT, a GPU or memory | Runnable on a CPU | Passed of those |")
    print("|---|---|---|---|---|---|---|---|---|")
    for k in ("yes", "partly"):
        r = [s for s in tally[k] if s in RESULTS]
        t, p = sum(RESULTS[s][0] for s in r), sum(RESULTS[s][1] for s in r)
        h = sum(hardware[s] for s in r)
        print(f"| {k} | {len(tally[k])} | {len(r)} | {len(tally[k]) - len(r)} | {t} | {p} | {h} "
              f"| {t - h} | {percent(p, t - h)} |")
    print(f"| no | {len(tally['no'])} | | | | | | | |")
    h = sum(hardware.values())
    print(f"| **all runnable** | **{len(runnable)}** | **{len(run)}** | **{len(runnable) - len(run)}** "
          f"| **{tests}** | **{passed}** | **{h}** | **{tests - h}** | **{percent(passed, tests - h)}** |")
    if missing:
        print(f"| not classified | {len(missing)} | | | | | | | |")
    by_need = {}
    for counts in (NEEDS_MISSING_HARDWARE.get(s, {}) for s in run):
        for need, n in counts.items():
            by_need[need] = by_need.get(need, 0) + n
    lacking = ", ".join(f"{n} need {NEEDS[k].split(' (')[0]}" for k, n in sorted(by_need.items(), reverse=True))
    print(f"\nOf the {tests} tests run, {h} fail only for want of hardware or software this "
          f"machine lacks ({lacking}), "
          f"each named in its suite's row: {passed} of the other {tests - h} pass "
          f"({percent(passed, tests - h)}); counted over all {tests}, {percent(passed, tests)}.")
    on_purpose = sum(DIFFERS_ON_PURPOSE.get(s, 0) for s in run)
    failing = tests - h - passed
    print(f"Of the {failing} that fail, {on_purpose} fail where Nereid differs from Triton on "
          f"purpose ([differences.md](differences.md); "
          + ", ".join(f"{s} {n}" for s, n in sorted(DIFFERS_ON_PURPOSE.items()) if s in run)
          + f") and {failing - on_purpose} are not done yet, each named in its suite's row.")
    print("\nWhat the suites need (a suite counts under each of its needs):\n")
    print("| Need | Suites | Meaning |")
    print("|---|---|---|")
    for k, meaning in NEEDS.items():
        print(f"| {k} | {need_count[k]} | {meaning} |")
    print("\n## All suites\n")
    print("| Suite | Needs | Runs here | Tests / passed | Markers in its files |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))
    status = 0
    if missing:
        print("\n**Not classified** (new suites: read their test.sh and add them to FACTS): "
              + ", ".join(missing))
        status = 1
    if stale:
        print("\nIn FACTS but not at this commit: " + ", ".join(stale), file=sys.stderr)
    if check:
        docs = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs")
        for s, (t, p) in sorted(docs_counts(docs).items()):
            if s not in RESULTS or RESULTS[s][:2] != (t, p):
                print(f"check-docs: {s}: compatibility.md has {t}/{p}, the census "
                      f"{RESULTS.get(s, ('none', 'none'))[:2]}", file=sys.stderr)
                status = 1
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
