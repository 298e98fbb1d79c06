"""instance_group count 2: both instances serve concurrent requests."""

import concurrent.futures

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from conftest import add_sub_config

TWO_INSTANCES = add_sub_config(count=2)

REQUESTS = 16


def test_two_instances_concurrent_requests(make_repo, start_server, add_sub_io):
    repo = make_repo([], {"add_sub": TWO_INSTANCES})
    server = start_server(repo)
    http = server.http_client()
    try:
        group = http.get_model_config("add_sub")["instance_group"]
        assert [(g["name"], g["kind"], g["count"]) for g in group] == [("add_sub_0", "KIND_CPU", 2)]

        def one(i):
            # A client per call: tritonclient's sync clients are not shared across threads.
            a = np.full((1 + i % 8, 4), float(i), np.float32)
            b = np.arange(4, dtype=np.float32) * np.ones_like(a)
            if i % 2:
                client = grpcclient.InferenceServerClient(server.grpc_url)
                result = client.infer("add_sub", add_sub_io(grpcclient, a, b), request_id=str(i))
            else:
                client = httpclient.InferenceServerClient(server.http_url)
                result = client.infer("add_sub", add_sub_io(httpclient, a, b), request_id=str(i))
            client.close()
            return i, a, b, result

        with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
            done = list(pool.map(one, range(REQUESTS)))
        for i, a, b, result in done:
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)

        s = http.get_inference_statistics("add_sub")["model_stats"][0]
        assert s["inference_stats"]["success"]["count"] == REQUESTS
        assert s["execution_count"] == REQUESTS  # no dynamic batching: one execution each
        assert s["inference_count"] == sum(1 + i % 8 for i in range(REQUESTS))
    finally:
        http.close()
