#!/usr/bin/env bash
# Run Triton's own QA suites (qa/L0_*/test.sh of the triton-inference-server/server
# repository), unmodified, against a Nereid binary, and print a pass/fail table.
#
# Usage: scripts/run_triton_qa.sh SERVER_CHECKOUT NEREID_BIN WORK_DIR [SUITE...]
#
#   SERVER_CHECKOUT  a checkout (or `git archive`) of triton-inference-server/server
#                    holding qa/common and the qa/L0_* suites (not kept in this
#                    repository; with docker/sagemaker/serve too for L0_sagemaker)
#   NEREID_BIN       the server binary to test
#   WORK_DIR         where the suites are copied, models generated and logs kept
#   SUITE            suites to run (default: those of the "Triton QA suites" table
#                    in docs/src/compatibility.md, less L0_batch_custom, L0_decoupled
#                    and the L0_backend_* suites, which are named explicitly); a
#                    suite name may carry extra environment for its test.sh after a
#                    colon, e.g.
#                    L0_infer:TEST_SYSTEM_SHARED_MEMORY=1; a subtest of a suite
#                    that runs others (L0_backend_python/lifecycle) runs alone,
#                    with the environment its parent's test.sh gives it;
#                    `all-runnable` alone runs every suite the census marks as
#                    runnable here, as `scripts/triton_qa_census.py SERVER_CHECKOUT
#                    --list-runnable` lists them (with the environment recorded for
#                    each, e.g. L0_repoagent_checksum:QA_TRITON_DEFAULTS=1, and
#                    L0_backend_python as its subtests; hours of work on 2 cores):
#                    DRY_RUN=1 prints that list and stops
#
# Each test.sh runs as Triton's CI runs it, with BACKENDS=onnx (L0_pinned_memory: libtorch,
# the only backend it has an ensemble for) and its paths under
# /opt/tritonserver and /data/inferenceserver moved under WORK_DIR: its
# `tritonserver` is a wrapper that starts NEREID_BIN with the same arguments, so the
# suites use their fixed ports 8000-8002 (keep them free). Unless a suite sets them
# itself, the wrapper adds --allow-client-shm=true (Triton 2.51 serves client shared
# memory unasked) and --exit-on-error=false --strict-readiness=false: models
# for Triton's own C++ test backends (identity, sequence, dyna_sequence,
# implicit_state) or other frameworks then fail alone, and the tests that use them
# count as failures, instead of stopping the whole suite at start-up; a suite given
# QA_TRITON_DEFAULTS=1 after its colon keeps Triton's defaults
# (L0_backend_python/lifecycle:QA_TRITON_DEFAULTS=1 waits for a server whose model fails
# to initialize to exit). Models come from Triton's own
# qa/common/gen_qa_* generators; their ONNX files are rewritten to IR version 10 and
# opset 21 at most, which the bundled ONNX Runtime reads (the generators write what
# the installed `onnx` package defaults to), and on a machine without a GPU their
# KIND_GPU instance groups become KIND_CPU and the suites get TRITON_SERVER_CPU_ONLY=1.
# Suites run one after another; a suite may take tens of minutes (L0_sequence_batcher
# runs for hours in Triton's CI).
#
# Environment: PYTHON (default: <repo>/.venv/bin/python with tritonclient[all],
# numpy and onnx), TRITON_BACKENDS (the OUT_DIR of scripts/build_triton_backends.sh:
# Triton's C++ backends built from source, which the suites then load from their
# backend directory), SUITE_TIMEOUT (seconds per suite, default 3600; L0_decoupled 7200), EXAMPLES_DIR
# (Triton's python client examples, which some suites run from qa/clients),
# ORT_DYLIB_PATH (default: the onnxruntime library in <repo>/.venv),
# TRITON_PYTHON_BACKEND (a folder with Triton's python backend: libtriton_python.so, its
# stub and triton_python_backend_utils.py, e.g. the nvidia-pytriton wheel's as
# tests/python/triton_wheel.py unpacks it), with
# TRITON_PYTHON_STUB_PATH (a bin folder whose python3 the stubs use: Python 3.11 with
# numpy < 2; with a CPU torch too, the python models that import torch load) and TRITON_PYTHON_EXAMPLES (python_backend's examples folder, for the
# python models some suites take from it), TORCH_PYTHON (a python whose `torch` can
# script models, e.g. the CPU one scripts/torch_cpu_python.sh prints: the libtorch models
# are then generated too, as Triton's gen_qa_model_repository has its PyTorch image
# generate them, into the same repositories), TRITON_PYTORCH_BACKEND (a folder with
# Triton's pytorch backend and the libtorch it loads, e.g. the pytorch folder of
# scripts/build_pytorch_backend.sh's OUT_DIR; linked as the suites' backends/pytorch),
# OPENVINO_PYTHON (a python with the `openvino` package, numpy < 2 and ml_dtypes: the
# OpenVINO models of qa_model_repository are then generated too) and
# TRITON_OPENVINO_BACKEND (the openvino folder of scripts/build_openvino_backend.sh's
# OUT_DIR; linked as the suites' backends/openvino), TRITON_CAPI_TESTS (the OUT_DIR of
# scripts/build_triton_capi_tests.sh: Triton's C API gtests, and its in-process programs
# simple and multi_server, built against Nereid's libtritonserver.so, each copied beside
# its suite's test.sh as Dockerfile.QA copies it)
# with NEREID_LIBTRITONSERVER_DIR (the folder of that libtritonserver.so, default
# NEREID_BIN's; it becomes the suites' /opt/tritonserver/lib). A suite given a C API test
# runs in a mount namespace of its own whose /opt holds only tritonserver, a link to
# WORK_DIR's Triton tree: the tests start the server in-process with Triton's default
# backend directory, /opt/tritonserver/backends.
# When SERVER_CHECKOUT also holds src/test/models, the models Triton's QA image
# (Dockerfile.QA) adds to L0_backend_identity and L0_decoupled are added the same way.
# Where Triton's image differs from this machine: scripts run by path whose first line
# names /usr/bin/python take PATH's python; /opt/tritonserver/qa is the copied qa folder;
# SageMaker's `serve` is on PATH (after the client's Python); `pip install torch` lines
# are skipped (PyPI's torch is a CUDA build of GBs; L0_input_validation scripts its model
# with TORCH_PYTHON instead), other pip steps run, `go install` lines are skipped (no Go
# proxy offline), L0_http_fuzz's conda Python 3.8 is replaced by boofuzz 0.3.0 in the
# client's Python, L0_mlflow's venv keeps SQLAlchemy below 2.1 (for mlflow 2); a suite that runs or copies from a sibling suite
# (`../L0_...`: L0_dyna_implicit_state, L0_trace) gets a fresh copy of it, and the
# client logs of a sibling it runs in count for it; the server runs under the name
# tritonserver (`ps | grep tritonserver`), with TRITON_SERVER_VERSION set to the version
# it reports, as in Triton's image; the version folders and backend libraries
# Dockerfile.QA adds beside some suites are added (empty version folders where the
# backend comes from the backend directory), and its example `simple` model to
# L0_https, L0_secure_grpc, L0_data_compression, L0_simple_example and L0_socket, python
# backend's decoupled repeat example to L0_memory, the repeat model to
# L0_grpc_state_cleanup and the server's MLflow plugin
# (deploy/mlflow-triton-plugin, when SERVER_CHECKOUT has it) to L0_mlflow. The ragged
# models (gen_qa_ragged_models.py, for L0_batch_input) are generated with the rest.
# nginx and redis-server come from PATH, perf_analyzer too unless PERF_ANALYZER names the
# command to run as perf_analyzer (../shared/triton/perf-analyzer.sh with PA_MODE=ldso:
# without a chroot it sees WORK_DIR, so its triton_c_api mode loads Nereid's library).
# Counts come from the unittest (or pytest) summaries in each suite's client logs: a
# test counts once per run, so a test.sh that runs a test under several configurations
# counts each run; pytest's skipped tests are not counted.

set -u

usage() { sed -n '2,/^$/s/^# \{0,1\}//p' "$0" >&2; exit 2; }
[ $# -ge 3 ] || usage
SRC=$(cd "$1" && pwd) || exit 2
NEREID=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
[ -x "$NEREID" ] || { echo "not executable: $NEREID" >&2; exit 2; }
mkdir -p "$3" && WORK=$(cd "$3" && pwd) || exit 2
shift 3
SUITES=("$@")
ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [ "${SUITES[*]}" = all-runnable ]; then
  mapfile -t SUITES < <(python3 "$ROOT/scripts/triton_qa_census.py" "$SRC" --list-runnable)
  [ ${#SUITES[@]} -gt 0 ] || { echo "no runnable suites listed for $SRC" >&2; exit 2; }
  if [ -n "${DRY_RUN:-}" ]; then printf '%s\n' "${SUITES[@]}"; exit 0; fi
elif [ ${#SUITES[@]} -eq 0 ]; then
  SUITES=(L0_infer_variable L0_infer_reshape L0_infer_zero L0_scalar_io L0_client_nobatch
    L0_string_io L0_implicit_state L0_dyna_sequence_batcher L0_batcher L0_shared_memory
    L0_http L0_grpc L0_infer L0_infer:TEST_SYSTEM_SHARED_MEMORY=1 L0_sequence_batcher)
fi

PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
PYBIN=$(dirname "$PYTHON")
# The suites start the server in their own directories, away from <repo>/.venv.
if [ -z "${ORT_DYLIB_PATH:-}" ]; then
  for lib in "$ROOT"/.venv/lib/python3*/site-packages/onnxruntime/capi/libonnxruntime.so.1*; do
    [ -f "$lib" ] && export ORT_DYLIB_PATH=$lib
  done
fi
MODELS=$WORK/models

# Fresh copies of the suites: each test.sh writes its models and logs beside itself.
rm -rf "$WORK/qa" && mkdir -p "$WORK/qa" && cp -r "$SRC/qa/common" "$WORK/qa/" || exit 1
# Model folders some suites copy from beside themselves.
for shared in ensemble_models python_models custom_models; do
  [ -d "$SRC/qa/$shared" ] && cp -r "$SRC/qa/$shared" "$WORK/qa/"
done
# Triton's image puts the sequence backends into these two models' version folders; here
# the backends come from the backend directory, and the folders are made empty.
mkdir -p "$WORK/qa/custom_models/custom_sequence_int32/1" "$WORK/qa/custom_models/custom_dyna_sequence_int32/1"
# Triton's hand-written custom models ask for GPU instances; without a GPU they run on
# the CPU, like the generated models below.
command -v nvidia-smi > /dev/null ||
  grep -rlZ --include=config.pbtxt KIND_GPU "$WORK/qa/custom_models" | xargs -0r sed -i 's/KIND_GPU/KIND_CPU/g'

for s in "${SUITES[@]}"; do
  name=${s%%:*}
  [ -d "$WORK/qa/$name" ] || cp -r "$SRC/qa/${name%%/*}" "$WORK/qa/" || exit 1
done

generate() { # repository generator-args...
  local dir=$MODELS/$1
  shift
  [ -d "$dir" ] && return 0
  (cd "$WORK/qa/common" && "$PYTHON" "$@" --models_dir="$dir") > "$dir.gen.log" 2>&1 ||
    { echo "model generation failed: $* (see $dir.gen.log)" >&2; exit 1; }
}
mkdir -p "$MODELS" "$WORK/data" && ln -sfn "$MODELS" "$WORK/data/nereid"
generate qa_model_repository gen_qa_models.py --onnx
generate qa_variable_model_repository gen_qa_models.py --onnx --variable
generate qa_identity_model_repository gen_qa_identity_models.py --onnx
generate qa_reshape_model_repository gen_qa_reshape_models.py --onnx --variable
generate qa_sequence_model_repository gen_qa_sequence_models.py --onnx
generate qa_variable_sequence_model_repository gen_qa_sequence_models.py --onnx --variable
generate qa_sequence_initial_state_implicit_model_repository gen_qa_implicit_models.py --onnx --initial-state zero
generate qa_variable_sequence_initial_state_implicit_model_repository gen_qa_implicit_models.py --onnx --initial-state zero --variable
generate qa_sequence_implicit_model_repository gen_qa_implicit_models.py --onnx
generate qa_variable_sequence_implicit_model_repository gen_qa_implicit_models.py --onnx --variable
generate qa_dyna_sequence_model_repository gen_qa_dyna_sequence_models.py --onnx
generate qa_dyna_sequence_implicit_model_repository gen_qa_dyna_sequence_implicit_models.py --onnx
generate qa_scalar_models gen_qa_ort_scalar_models.py
generate qa_ragged_model_repository gen_qa_ragged_models.py --onnx
mkdir -p "$MODELS/qa_ensemble_model_repository"
for r in qa_model_repository:gen_qa_models.py qa_variable_model_repository:"gen_qa_models.py --variable" \
  qa_reshape_model_repository:gen_qa_reshape_models.py qa_identity_model_repository:gen_qa_identity_models.py \
  qa_sequence_model_repository:gen_qa_sequence_models.py \
  qa_variable_sequence_model_repository:"gen_qa_sequence_models.py --variable"; do
  # shellcheck disable=SC2086 # the generator and its flags split on purpose
  generate "qa_ensemble_model_repository/${r%%:*}" ${r#*:} --ensemble
done
"$PYTHON" - "$MODELS" <<'EOF' || exit 1
import glob, sys
import onnx
for path in glob.glob(sys.argv[1] + "/**/*.onnx", recursive=True):
    model = onnx.load(path)
    changed = model.ir_version > 10
    model.ir_version = min(model.ir_version, 10)
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx") and opset.version > 21:
            opset.version, changed = 21, True
    if changed:
        onnx.save(model, path)
EOF
# The libtorch and OpenVINO models, after the ONNX ones (generate skips a repository
# that exists), each by the python that has its framework.
generate_for() { # framework python repository generator-args...
  local framework=$1 python=$2 dir=$MODELS/$3
  shift 3
  [ -f "$dir.$framework.done" ] && return 0
  (cd "$WORK/qa/common" && "$python" "$@" "--$framework" --models_dir="$dir") > "$dir.$framework.gen.log" 2>&1 ||
    { echo "model generation failed: $* --$framework (see $dir.$framework.gen.log)" >&2; exit 1; }
  touch "$dir.$framework.done"
}
if [ -n "${TORCH_PYTHON:-}" ]; then
  generate_for libtorch "$TORCH_PYTHON" qa_model_repository gen_qa_models.py
  generate_for libtorch "$TORCH_PYTHON" qa_variable_model_repository gen_qa_models.py --variable
  generate_for libtorch "$TORCH_PYTHON" qa_identity_model_repository gen_qa_identity_models.py
  generate_for libtorch "$TORCH_PYTHON" qa_reshape_model_repository gen_qa_reshape_models.py --variable
  generate_for libtorch "$TORCH_PYTHON" qa_sequence_model_repository gen_qa_sequence_models.py
  generate_for libtorch "$TORCH_PYTHON" qa_variable_sequence_model_repository gen_qa_sequence_models.py --variable
  generate_for libtorch "$TORCH_PYTHON" qa_sequence_implicit_model_repository gen_qa_implicit_models.py
  generate_for libtorch "$TORCH_PYTHON" qa_variable_sequence_implicit_model_repository gen_qa_implicit_models.py --variable
  generate_for libtorch "$TORCH_PYTHON" qa_dyna_sequence_model_repository gen_qa_dyna_sequence_models.py
  generate_for libtorch "$TORCH_PYTHON" qa_ragged_model_repository gen_qa_ragged_models.py
fi
# Triton's image has the OpenVINO models of qa_model_repository too (L0_model_config and
# L0_lifecycle copy some); Triton's hand-made IR models (qa/openvino_models) beside the suites.
if [ -n "${OPENVINO_PYTHON:-}" ]; then
  generate_for openvino "$OPENVINO_PYTHON" qa_model_repository gen_qa_models.py
fi
[ -d "$SRC/qa/openvino_models" ] && cp -r "$SRC/qa/openvino_models" "$WORK/qa/"
# Some generators write KIND_GPU instance groups for ONNX models outright (they fall back
# to KIND_CPU only for their torch models); without a GPU those become CPU instances.
if ! command -v nvidia-smi > /dev/null; then
  grep -rlZ --include=config.pbtxt KIND_GPU "$MODELS" | xargs -0r sed -i 's/KIND_GPU/KIND_CPU/g'
fi

# Triton's QA image adds the example models (docs/examples/model_repository; here
# their ONNX stand-ins from make_triton_examples.py) to some suites, and its client
# examples to qa/clients (EXAMPLES_DIR: a copy of the client repository's
# src/python/examples; without it the suites' example-client steps fail).
"$PYTHON" "$ROOT/scripts/make_triton_examples.py" "$WORK/examples" > /dev/null || exit 1
add_examples() { # suite model...
  local dir=$WORK/qa/$1/models
  shift
  mkdir -p "$dir" && for m in "$@"; do cp -r "$WORK/examples/model_repository/$m" "$dir/"; done
}
# Triton's examples have served simple_identity from a python model since 2025; L0_http
# edits a copy of it to INT64 (simple_identity_int64), which only a python model takes.
python_simple_identity() { # suite
  local dir=$WORK/qa/$1/models/simple_identity
  rm -rf "$dir" && mkdir -p "$dir/1"
  cat > "$dir/config.pbtxt" <<'PBTXT'
name: "simple_identity"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0", data_type: TYPE_STRING, dims: [ -1 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_STRING, dims: [ -1 ] } ]
PBTXT
  cat > "$dir/1/model.py" <<'PY'
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]
            )
            for r in requests
        ]
PY
}
mkdir -p "$WORK/qa/clients"
[ -n "${EXAMPLES_DIR:-}" ] && cp "$EXAMPLES_DIR"/*.py "$WORK/qa/clients/"

# The suites start $TRITON_DIR/bin/tritonserver (some name /opt/tritonserver outright).
# Triton's image also has the QA folder there (/opt/tritonserver/qa, which
# L0_model_namespacing and L0_parameters read by default).
mkdir -p "$WORK/triton/bin" "$WORK/triton/backends" && ln -sfn "$WORK/qa" "$WORK/triton/qa"
if [ -n "${TRITON_BACKENDS:-}" ]; then
  for lib in "$TRITON_BACKENDS"/*/libtriton_*.so; do
    [ -e "$lib" ] || continue
    name=$(basename "$(dirname "$lib")")
    rm -rf "$WORK/triton/backends/$name" && mkdir -p "$WORK/triton/backends/$name"
    cp "$lib" "$WORK/triton/backends/$name/"
  done
fi
# Links: libtriton_pytorch.so and libtriton_openvino.so load their frameworks' libraries
# from beside themselves ($ORIGIN).
for backend in pytorch:"${TRITON_PYTORCH_BACKEND:-}" openvino:"${TRITON_OPENVINO_BACKEND:-}"; do
  [ -n "${backend#*:}" ] || continue
  rm -rf "$WORK/triton/backends/${backend%%:*}" &&
    ln -s "$(cd "${backend#*:}" && pwd)" "$WORK/triton/backends/${backend%%:*}"
done
stub_path=
if [ -n "${TRITON_PYTHON_BACKEND:-}" ]; then
  # A link, not a copy: the backend finds its libraries relative to its own folder.
  rm -rf "$WORK/triton/backends/python" &&
    ln -s "$(cd "$TRITON_PYTHON_BACKEND" && pwd)" "$WORK/triton/backends/python"
  stub_path=${TRITON_PYTHON_STUB_PATH:-}
fi
# Nereid's libtritonserver.so, which the C API tests load from /opt/tritonserver/lib.
LIBTRITONSERVER_DIR=${NEREID_LIBTRITONSERVER_DIR:-$(dirname "$NEREID")}
if [ -f "$LIBTRITONSERVER_DIR/libtritonserver.so" ]; then
  mkdir -p "$WORK/triton/lib" && cp "$LIBTRITONSERVER_DIR/libtritonserver.so" "$WORK/triton/lib/"
fi
# The server runs under the name tritonserver (a link to NEREID_BIN), as suites find it
# with `ps | grep tritonserver` (L0_sagemaker).
mkdir -p "$WORK/triton/bin/.nereid" && ln -sfn "$NEREID" "$WORK/triton/bin/.nereid/tritonserver"
if [ -n "${PERF_ANALYZER:-}" ]; then
  printf '#!/bin/bash\nexec %q "$@"\n' "$PERF_ANALYZER" > "$WORK/triton/bin/perf_analyzer"
  chmod +x "$WORK/triton/bin/perf_analyzer"
fi
cat > "$WORK/triton/bin/tritonserver" <<EOF
#!/bin/bash
# The python backend's stubs take the first python3 on PATH.
[ -n "$stub_path" ] && export PATH="$stub_path:\$PATH"
extra=(--exit-on-error=false --strict-readiness=false)
[ "\${QA_TRITON_DEFAULTS:-0}" = 1 ] && extra=()
# Triton's default backend directory, /opt/tritonserver/backends, moved like the rest.
directory=(--backend-directory=$WORK/triton/backends)
# Triton 2.51 serves client shared memory without being asked; Nereid needs the switch.
shm=(--allow-client-shm=true)
for a in "\$@"; do
  case "\$a" in
    --exit-on-error*|--strict-readiness*) extra=() ;;
    --backend-directory*) directory=() ;;
    --allow-client-shm*) shm=() ;;
  esac
done
echo \$\$ >> "$WORK/servers.pids"
exec "$WORK/triton/bin/.nereid/tritonserver" "\${extra[@]}" "\${directory[@]}" "\${shm[@]}" "\$@"
EOF
chmod +x "$WORK/triton/bin/tritonserver"
# SageMaker's entry point (docker/sagemaker/serve, which L0_sagemaker runs as `serve`)
# starts `tritonserver` from PATH: both come from $WORK/triton/bin, last on the suites' PATH.
[ -f "$SRC/docker/sagemaker/serve" ] && install -m 755 "$SRC/docker/sagemaker/serve" "$WORK/triton/bin/serve"

# Prints "tests failed" summed over the unittest summaries of one suite's client
# logs, or of its test.sh output when its tests print there instead (test.sh also
# repeats a failed client log there, so the two are not added).
tally() { # test.sh-output suite-dir...
  "$PYTHON" - "$@" <<'EOF'
import glob, re, sys
def count(paths):
    ran = failed = 0
    for path in paths:
        text = open(path, errors="replace").read()
        # googletest's: "[==========] 23 tests from 3 test suites ran." then, when some
        # failed, "[  FAILED  ] 4 tests, listed below:".
        for n in re.findall(r"^\[=+\] (\d+) tests? from .* ran\.", text, re.M):
            ran += int(n)
        for n in re.findall(r"^\[  FAILED  \] (\d+) tests?, listed below:", text, re.M):
            failed += int(n)
        # Server logs hold no client summaries, only a C API test's (which runs the server).
        if ".server." in path or path.endswith("server.log"):
            continue
        for n, outcome in re.findall(r"^Ran (\d+) tests? in [^\n]*\n+(OK|FAILED[^\n]*)", text, re.M):
            ran += int(n)
            failed += sum(int(k) for k in re.findall(r"(?:failures|errors)=(\d+)", outcome))
        # pytest's last line: "==== 1 failed, 7 passed, 2 skipped in 3.10s ====".
        for summary in re.findall(r"^=+ (\d+ [a-z]+.*) in [\d.]+s(?: \([^)]*\))? =+$", text, re.M):
            counts = {kind: int(n) for n, kind in re.findall(r"(\d+) ([a-z]+)", summary)}
            bad = counts.get("failed", 0) + counts.get("error", 0) + counts.get("errors", 0)
            ran += counts.get("passed", 0) + bad
            failed += bad
    return ran, failed
ran, failed = count([p for d in sys.argv[2:] for pattern in ("/**/*.log", "/**/client.log_*", "/**/client.log.*")
                    for p in glob.glob(d + pattern, recursive=True)])
if ran == 0:
    ran, failed = count([sys.argv[1]])
print(ran, failed)
EOF
}

# L0_batch_custom installs CMake with apt, clones the backend repository and builds
# Triton's two batching examples; here they come prebuilt from TRITON_BACKENDS
# (scripts/build_triton_backends.sh builds volumebatching and singlebatching) and those
# steps are dropped. Its last case rebuilds volume_batching with a failing initialize,
# which this cannot do: that case's check fails (it is not a unittest, so not counted).
offline_batch_custom() {
  local script=$WORK/qa/L0_batch_custom/test.sh examples=backend/examples/batching_strategies
  local copy="for n in volume single; do mkdir -p $examples/\${n}_batching/build \&\& cp $TRITON_BACKENDS/\${n}batching/libtriton_\${n}batching.so $examples/\${n}_batching/build/; done"
  sed -i -e '/^apt update -q=2/,/rapidjson-dev$/d' \
    -e "/^git clone/,/backend.git\$/c\\$copy" \
    -e '/^ *(cd backend\/examples\/batching_strategies/,/make -j4 install)$/d' "$script"
  mkdir -p "$WORK/triton/backends/onnxruntime"
}

# What Triton's Dockerfile.QA adds to a suite beside its test.sh: models from the server's
# src/test/models with the backends built for them, and python_backend's examples.
image_models() { # suite
  local dir=$WORK/qa/$1 models=$SRC/src/test/models backends=$WORK/triton/backends
  # Version folders and backend libraries Dockerfile.QA adds beside a suite.
  case $1 in
    L0_perf_pyclients) mkdir -p "$dir/custom_models/custom_zero_1_int32/1" ;;
    L0_perf_nomodel) mkdir -p "$dir/custom_models/custom_zero_1_float32/1" ;;
    L0_lifecycle) cp "$backends/identity/libtriton_identity.so" "$dir/" 2> /dev/null ;;
    L0_model_config) cp "$backends/repeat/libtriton_repeat.so" "$dir/" 2> /dev/null ;;
    L0_repoagent_checksum)
      mkdir -p "$dir/models/identity_int32/1" &&
        cp "$backends/identity/libtriton_identity.so" "$dir/models/identity_int32/1/" 2> /dev/null ;;
    # python_backend's decoupled repeat example, as its python model.
    L0_memory)
      local repeat=${TRITON_PYTHON_EXAMPLES:-}/decoupled
      if [ -d "$repeat" ]; then
        mkdir -p "$dir/python_models/repeat_int32/1" &&
          cp "$repeat/repeat_model.py" "$dir/python_models/repeat_int32/1/model.py" &&
          cp "$repeat/repeat_config.pbtxt" "$dir/python_models/repeat_int32/config.pbtxt"
      fi ;;
    # The MLflow plugin from the server repository's deploy folder.
    L0_mlflow) [ -d "$SRC/deploy/mlflow-triton-plugin" ] && cp -r "$SRC/deploy/mlflow-triton-plugin" "$dir/" ;;
  esac
  # Triton's C API tests, built against Nereid's library (TRITON_CAPI_TESTS), and the
  # query backend L0_query's model carries in its version folder.
  local capi
  case $1 in
    L0_register) capi=register_api_test ;;
    L0_query)
      capi=query_test
      mkdir -p "$dir/models/query/1" &&
        cp "$backends/query/libtriton_query.so" "$dir/models/query/1/" 2> /dev/null ;;
    L0_backend_output_detail) capi=backend_output_detail_test ;;
    L0_input_validation) capi=input_byte_size_test ;;
    L0_request_cancellation) capi=request_cancellation_test ;;
    L0_simple_lib) capi=simple ;;
    L0_multi_server) capi=multi_server ;;
    L0_io) capi=memory_alloc ;;
    *) capi= ;;
  esac
  if [ -n "$capi" ] && [ -x "${TRITON_CAPI_TESTS:-}/$capi" ]; then
    cp "$TRITON_CAPI_TESTS/$capi" "$dir/"
  fi
  [ -d "$models" ] || return 0
  case $1 in
    # The repeat model with Triton's repeat backend in its version folder.
    L0_grpc_state_cleanup)
      mkdir -p "$dir/models" && cp -r "$models/repeat_int32" "$dir/models/" &&
        mkdir -p "$dir/models/repeat_int32/1" &&
        cp "$backends/repeat/libtriton_repeat.so" "$dir/models/repeat_int32/1/" 2> /dev/null ;;
    L0_backend_identity)
      mkdir -p "$dir/models" && cp -r "$models/identity_fp32" "$dir/models/" &&
        mkdir -p "$dir/models/identity_fp32/1" ;;
    L0_decoupled)
      cp -r "$models/repeat_int32" "$models/square_int32" "$dir/models/"
      for m in repeat_int32 square_int32 identity_int32 simple_repeat fan_repeat sequence_repeat \
        repeat_square nested_square; do
        mkdir -p "$dir/models/$m/1"
      done
      cp -r "$dir/models" "$dir/python_models"
      local examples=${TRITON_PYTHON_EXAMPLES:-}/decoupled
      if [ -d "$examples" ]; then
        for m in repeat square; do
          cp "$examples/${m}_model.py" "$dir/python_models/${m}_int32/1/model.py"
          cp "$examples/${m}_config.pbtxt" "$dir/python_models/${m}_int32/config.pbtxt"
        done
      fi ;;
  esac
}

# What python_backend's umbrella test (L0_backend_python/test.sh) gives each subtest it
# runs, offline: its paths, CPU-only switches and, since pip and GitHub are out of reach,
# no `pip3 install` steps (the venv has what the CPU subtests import; torch is not there)
# and python_backend's examples from TRITON_PYTHON_EXAMPLES instead of a clone. The
# shared-memory leak probe stays off (TEST_JETSON=1): it needs `triton_shm_monitor`, a
# module built inside Triton's image. Prints the environment, one VAR=value a line.
python_subtest() { # parent-dir subtest-dir
  local examples=${TRITON_PYTHON_EXAMPLES:-}
  sed -i -E -e 's/^(\s*)pip3? install .*/\1true # offline: &/' "$2/test.sh"
  if [ -n "$examples" ]; then
    sed -i -E "s#^\s*git clone .*/python_backend( .*)?\$#mkdir -p python_backend \&\& cp -r $examples python_backend/#" "$2/test.sh"
  fi
  printf '%s\n' "MODELDIR=$1" "SERVER=$WORK/triton/bin/tritonserver" "BACKEND_DIR=$WORK/triton/backends" \
    TEST_WINDOWS=0 TEST_JETSON=1 PYTHON_ENV_VERSION=11
}

# A fresh copy of a suite, its test.sh adapted to this machine as described in the header.
prepare_suite() { # suite
  rm -rf "$WORK/qa/$1" && cp -r "$SRC/qa/$1" "$WORK/qa/$1"
  # The same paths in the suite's scripts (L0_perf_nomodel's run_test.sh) and in the
  # configuration files it hands to other programs (L0_http's nginx.conf names its
  # password file under /opt/tritonserver).
  find "$WORK/qa/$1" -maxdepth 1 \( -name '*.sh' -o -name '*.conf' \) -print0 |
    xargs -0 sed -i -e "s#/opt/tritonserver#$WORK/triton#g" -e "s#/data/inferenceserver#$WORK/data#g"
  # nginx's workers run as an unprivileged user, which cannot reach those files where
  # `/` itself is closed to other users (as on this machine, unlike Triton's image);
  # there a suite's nginx configuration that names no user gets the user starting it.
  if [ "$(stat -c %A / | cut -c10)" != x ]; then
    grep -lZ '^worker_processes' "$WORK/qa/$1"/*.conf 2>/dev/null | while IFS= read -r -d '' conf; do
      grep -q '^user ' "$conf" || sed -i "1i user $(id -un);" "$conf"
    done
  fi
  # Without a GPU, a test.sh that turns models to KIND_GPU itself (L0_sequence_batcher's
  # nop models, L0_batcher's and L0_batch_custom's instance groups) keeps them on the
  # CPU, as the generated models are kept above. A `sed` that looks for KIND_GPU (to add
  # a count beside it) stays: it finds nothing in those models, while its KIND_CPU twin
  # already adds the count.
  # A group a test.sh moves to the GPU without a count is one instance on Triton's
  # one-GPU CI machines (two on the CPU): L0_sequence_batcher's ensembles rely on their
  # single nop instance to keep a sequence's requests in order.
  command -v nvidia-smi > /dev/null ||
    sed -i -e 's#s/kind: KIND_CPU/kind: KIND_GPU/#s/kind: KIND_CPU/kind: KIND_CPU count: 1/#' \
      -e '/s\/kind: KIND_GPU\//!s/kind *: *KIND_GPU/kind: KIND_CPU/g' "$WORK/qa/$1/test.sh"
  image_models "$1"
  # `pip install torch` (L0_input_validation, L0_warmup) would bring PyPI's CUDA build of
  # torch and its GBs of CUDA wheels into the client's Python; it is skipped (what the
  # suites script with torch, TORCH_PYTHON's CPU torch does). Other pip steps run.
  sed -i -E 's/^(\s*)(pip3? (un)?install (-y )?torch( .*)?)$/\1true # skipped: \2/' "$WORK/qa/$1/test.sh"
  # `go install <module>@latest` (L0_grpc's health probe) needs the Go proxy: skipped
  # offline, so the checks that use the program fail and the suite goes on.
  sed -i -E 's/^(\s*)(go install .*)$/\1true # skipped (offline): \2/' "$WORK/qa/$1/test.sh"
  # Triton's image has /usr/bin/python, which scripts the suites run by path
  # (qa/common/trace_summary.py, ...) name in their first line; here they take PATH's.
  grep -rlZ --include='*.py' '^#!/usr/bin/python' "$WORK/qa/common" "$WORK/qa/$1" |
    xargs -0r sed -i '1s@^#!/usr/bin/python@#!/usr/bin/env python@'
}

# Triton's image sets TRITON_SERVER_VERSION, the version its server reports in the
# server metadata (L0_server_status compares the two); here, NEREID_BIN's.
server_version=$("$NEREID" --version | awk '{print $NF}')

status=0
printf '%-45s %6s %6s %6s\n' suite tests passed failed
for s in "${SUITES[@]}"; do
  name=${s%%:*}
  extra=()
  [ "$name" != "$s" ] && IFS=' ' read -r -a extra <<< "${s#*:}"
  log=$WORK/${s//[:= \/]/_}.log
  # A suite listed twice (other environment) runs in a fresh copy; a subtest in a fresh
  # copy of its own folder, beside its parent's files (which it uses) and its siblings'
  # logs.
  parent=${name%%/*}
  [ "$parent" = "$name" ] || [ -d "$WORK/qa/$parent" ] || cp -r "$SRC/qa/$parent" "$WORK/qa/"
  prepare_suite "$name"
  # A suite that runs or copies from a sibling suite (L0_dyna_implicit_state runs
  # L0_dyna_sequence_batcher's test.sh, L0_trace copies L0_decoupled's models) gets a
  # fresh copy of it beside it, prepared the same way; the logs of a sibling it runs in
  # (`cd ../L0_...`) count for it.
  siblings=() ran_in=()
  for sibling in $(grep -o '\.\./L0_[A-Za-z0-9_]*' "$WORK/qa/$name/test.sh" | sort -u); do
    sibling=${sibling#../}
    [ "$sibling" = "$name" ] || [ "$sibling" = "$parent" ] || siblings+=("$sibling")
  done
  for sibling in "${siblings[@]}"; do
    prepare_suite "$sibling"
    grep -q "cd \.\./$sibling" "$WORK/qa/$name/test.sh" && ran_in+=("$WORK/qa/$sibling")
  done
  # A subtest runs as its parent runs it: `bash -ex test.sh`.
  nested=() shell=(bash)
  case $name in
    L0_backend_python/*)
      mapfile -t nested < <(python_subtest "$WORK/qa/$parent" "$WORK/qa/$name")
      shell=(bash -ex) ;;
  esac
  case $name in
    L0_batch_custom) offline_batch_custom ;;
    L0_http)
      add_examples L0_http simple simple_dyna_sequence simple_sequence simple_string densenet_onnx
      python_simple_identity L0_http ;;
    L0_grpc) add_examples L0_grpc simple simple_dyna_sequence simple_int8 simple_identity simple_sequence simple_string densenet_onnx ;;
    L0_shared_memory | L0_https | L0_secure_grpc | L0_data_compression | L0_simple_example | L0_socket)
      add_examples "$name" simple ;;
    # It scripts an identity model with torch (skipped above): TORCH_PYTHON's does it.
    # mlflow-triton-plugin takes mlflow 2, which imports a pool class SQLAlchemy 2.1
    # removed, and does not bound SQLAlchemy: the suite's venv keeps it below 2.1.
    L0_mlflow)
      sed -i -E 's/^pip install mlflow onnx onnxruntime boto3$/& "sqlalchemy<2.1"/' "$WORK/qa/$name/test.sh" ;;
    # Its conda Python 3.8 (for boofuzz 0.3.0) is out of reach offline: the client's
    # Python gets boofuzz 0.3.0 with current releases of its dependencies (its own pins,
    # tornado 5 among them, do not run on Python 3.11). Later releases fuzz combinations
    # of mutations by default, which do not end.
    L0_http_fuzz)
      sed -i -E 's/^function_install_python38$/pip3 install --no-deps boofuzz==0.3.0 \&\& pip3 install attrs click colorama Flask funcy future impacket psutil pydot pyserial six tornado backports.shutil-get-terminal-size # instead of conda and Python 3.8/' "$WORK/qa/$name/test.sh" ;;
    # Without a GPU its onnx and libtorch identity models run on the CPU, as the
    # generated models do (the sed above finds `KIND="KIND_GPU"` there, not `kind:`).
    L0_perf_nomodel)
      command -v nvidia-smi > /dev/null ||
        sed -i 's/KIND="KIND_GPU" &&/KIND="KIND_CPU" \&\&/' "$WORK/qa/$name/run_test.sh" ;;
    # It scripts its libtorch models with torch, skipped above: TORCH_PYTHON's does it.
    L0_io)
      [ -n "${TORCH_PYTHON:-}" ] &&
        sed -i "s#^python3 gen_libtorch_model.py#$TORCH_PYTHON gen_libtorch_model.py#" "$WORK/qa/$name/test.sh" ;;
    L0_input_validation)
      [ -n "${TORCH_PYTHON:-}" ] &&
        sed -i "s#^res=\"\$(python3 -c #res=\"\$($TORCH_PYTHON -c #" "$WORK/qa/$name/test.sh" ;;
  esac
  # L0_pinned_memory has an ensemble for libtorch only.
  backends=onnx
  [ "$name" = L0_pinned_memory ] && backends=libtorch
  # Its trials print each of hundreds of streamed responses: about two hours here.
  limit=${SUITE_TIMEOUT:-3600}
  [ "$name" = L0_decoupled ] && [ -z "${SUITE_TIMEOUT:-}" ] && limit=7200
  # Triton's own switch for a machine without a GPU: suites skip their GPU passes.
  cpu_only=0
  command -v nvidia-smi > /dev/null || cpu_only=1
  # A suite with a C API test sees Triton's image layout under /opt (see the header);
  # the in-process python backend's stubs take the stub python, as the server wrapper's.
  image_opt=()
  if compgen -G "$WORK/qa/$name/*_test" > /dev/null || [ -x "$WORK/qa/$name/simple" ] ||
    [ -x "$WORK/qa/$name/multi_server" ] || [ -x "$WORK/qa/$name/memory_alloc" ]; then
    image_opt=(unshare --mount --propagation private sh -c
      "mount -t tmpfs nereid-opt /opt && ln -s '$WORK/triton' /opt/tritonserver && exec \"\$@\"" image-opt)
    case $name in L0_backend_output_detail | L0_io)
      [ -n "$stub_path" ] && nested+=(PATH="$stub_path:$PYBIN:$PATH:$WORK/triton/bin") ;;
    esac
    # Triton's image exports LD_LIBRARY_PATH, so a test.sh that prepends its lib folder
    # without `export` (L0_simple_lib) still reaches the programs it starts.
    nested+=(LD_LIBRARY_PATH="$WORK/triton/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
  fi
  (cd "$WORK/qa/$name" &&
    env PATH="$PYBIN:$PATH:$WORK/triton/bin" PYTHONPATH="$WORK/qa/common" REPO_VERSION=nereid TRITON_SERVER_VERSION="$server_version" \
      DATADIR="$MODELS" TRITON_DIR="$WORK/triton" BACKENDS=$backends TRITON_SERVER_CPU_ONLY=$cpu_only \
      "${nested[@]}" "${extra[@]}" "${image_opt[@]}" timeout "$limit" "${shell[@]}" ./test.sh nereid) > "$log" 2>&1
  # Some test.sh leave their server running when they stop early.
  [ -f "$WORK/servers.pids" ] && xargs kill 2> /dev/null < "$WORK/servers.pids"
  rm -f "$WORK/servers.pids"
  read -r ran failed < <(tally "$log" "$WORK/qa/$name" "${ran_in[@]}")
  [ "$failed" -eq 0 ] && [ "$ran" -gt 0 ] || status=1
  printf '%-45s %6s %6s %6s\n' "$s" "$ran" "$((ran - failed))" "$failed"
done
exit $status
