#!/usr/bin/env python3
"""Drive the stateful example model `accumulate_fp32` over a gRPC stream, like the
client of Triton's stateful backend: several sequences, several segments each,
interleaved on one stream, every response checked against a simulation.

Each request sends Input of shape [1, 4, 1, 5] (Triton's batch dimension, then the
model's [4, -1, 5] with the batch axis at 1). The model keeps, per sequence, a
running state of 5 values: at a START it is zero, and each step adds Input summed over
its 4 rows. Output is Input plus the new state.

When the model has `infer_end_requests` "0" (as the example has), END requests are not
run: each sequence ends with an extra END request with dummy data, whose answer must be
empty.

Usage: examples/clients/stateful_accumulate.py [--url localhost:8001] [--sequences 2]
       [--segments 3] [--model accumulate_fp32]
Prints PASSED and exits 0 when every response matched.
"""

import argparse
import queue
import sys

import numpy as np
import tritonclient.grpc as grpcclient


def simulate(state, segment, start):
    """(new state, expected output) for one step."""
    previous = np.zeros(5, np.float32) if start else state
    new_state = previous + segment.sum(axis=0)
    return new_state, segment + new_state


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="localhost:8001")
    parser.add_argument("--model", default="accumulate_fp32")
    parser.add_argument("--sequences", type=int, default=2)
    parser.add_argument("--segments", type=int, default=3)
    parser.add_argument("--first-id", type=int, default=1)
    args = parser.parse_args(argv)

    client = grpcclient.InferenceServerClient(args.url)
    config = client.get_model_config(args.model, as_json=True)["config"]
    infer_end = config.get("parameters", {}).get("infer_end_requests", {}).get("string_value", "1") != "0"

    rng = np.random.default_rng(7)
    ids = [args.first_id + i for i in range(args.sequences)]
    segments = {s: rng.uniform(-1, 1, (args.segments, 4, 5)).astype(np.float32) for s in ids}
    states = {s: np.zeros(5, np.float32) for s in ids}
    expected = {}

    results = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    sent = 0
    for step in range(args.segments):
        for s in ids:
            segment = segments[s][step]
            start, last = step == 0, step == args.segments - 1
            states[s], output = simulate(states[s], segment, start)
            inp = grpcclient.InferInput("Input", [1, 4, 1, 5], "FP32")
            inp.set_data_from_numpy(segment.reshape(1, 4, 1, 5))
            request_id = f"{s}-{step}"
            expected[request_id] = output
            client.async_stream_infer(
                args.model,
                [inp],
                request_id=request_id,
                sequence_id=s,
                sequence_start=start,
                sequence_end=last and infer_end,
            )
            sent += 1
    if not infer_end:
        for s in ids:
            dummy = grpcclient.InferInput("Input", [1, 4, 1, 5], "FP32")
            dummy.set_data_from_numpy(np.zeros((1, 4, 1, 5), np.float32))
            request_id = f"{s}-end"
            expected[request_id] = None
            client.async_stream_infer(args.model, [dummy], request_id=request_id, sequence_id=s, sequence_end=True)
            sent += 1

    failures = 0
    for _ in range(sent):
        result, error = results.get(timeout=30)
        if error is not None:
            print(f"error: {error}")
            failures += 1
            continue
        request_id = result.get_response().id
        output = result.as_numpy("Output")
        want = expected[request_id]
        if want is None:
            ok = output.size == 0
        else:
            ok = output.shape == (1, 4, 1, 5) and np.allclose(output.reshape(4, 5), want, atol=1e-5)
        if not ok:
            print(f"request {request_id}: got {output.tolist()}, expected {None if want is None else want.tolist()}")
            failures += 1
    client.stop_stream()
    client.close()
    if failures:
        print(f"FAILED: {failures} of {sent} responses wrong")
        return 1
    print("PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
