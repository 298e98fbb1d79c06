"""The generate extension (POST .../generate and .../generate_stream) over raw HTTP.
Response shapes and messages were measured on Triton 2.51 (python-backend models of the
same inputs and outputs) unless a comment says otherwise."""

import json

import pytest

GENERATE = "/v2/models/{}/generate"
STREAM = "/v2/models/{}/generate_stream"


class Answer:
    """The parts of an answer these tests read."""

    def __init__(self, resp):
        self.status_code = resp.status
        self.headers = resp.headers
        self.text = resp.body.decode()

    def json(self):
        return json.loads(self.text)


def post(server, path, body, headers=None):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return Answer(server.request("POST", path, data, headers))


def test_fields_map_to_inputs_and_outputs_come_back_by_name(server):
    resp = post(server, GENERATE.format("add_sub"), {"INPUT0": [1, 2, 3, 4], "INPUT1": [1, 1, 1, 1]})
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"] == "application/json"
    # Triton's exact text: keys in byte order, floats as JSON numbers.
    assert resp.text == (
        '{"OUTPUT0":[2.0,3.0,4.0,5.0],"OUTPUT1":[0.0,1.0,2.0,3.0],'
        '"model_name":"add_sub","model_version":"1"}'
    )


def test_versioned_path_id_parameters_and_single_elements(server):
    body = {"id": "42", "INPUT0": 7, "parameters": {"temperature": 0.5, "stream": False}}
    resp = post(server, "/v2/models/identity_int32/versions/1/generate", body)
    assert resp.status_code == 200, resp.text
    # One element stands alone instead of in an array.
    assert resp.json() == {
        "id": "42",
        "model_name": "identity_int32",
        "model_version": "1",
        "OUTPUT0": 7,
    }


def test_string_input_and_output(server):
    resp = post(server, GENERATE.format("identity_string"), {"INPUT0": ["hello", "world"]})
    assert resp.status_code == 200, resp.text
    assert resp.json()["OUTPUT0"] == ["hello", "world"]


def test_stream_is_one_server_sent_event(server):
    resp = post(server, STREAM.format("identity_string"), {"INPUT0": "hi"})
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert resp.text == (
        'data: {"OUTPUT0":"hi","model_name":"identity_string","model_version":"1"}\n\n'
    )


@pytest.mark.parametrize("path", [GENERATE, STREAM])
def test_errors_before_inference_are_json(server, path):
    resp = post(server, path.format("add_sub"), {"INPUT0": [1, 2, 3, 4]})
    assert resp.status_code == 400
    assert resp.headers["content-type"] == "application/json"
    assert resp.json() == {
        "error": "[request id: <id_unknown>] expected 2 inputs but got 1 inputs for model "
        "'add_sub'. Got input(s) ['INPUT0'], but missing required input(s) ['INPUT1']. "
        "Please provide all required input(s)."
    }
    resp = post(server, path.format("nope"), {})
    assert resp.status_code == 404
    assert resp.json() == {"error": "Request for unknown model: 'nope' is not found"}


@pytest.mark.parametrize(
    "body, status, message",
    [
        (
            {"INPUT0": [1, 2, 3], "INPUT1": [1, 1, 1, 1]},
            400,
            "The schema can not convert input 'INPUT0' to tensor with proper shape",
        ),
        (
            {"INPUT0": [1, 2, 3, 4], "INPUT1": [1, 1, 1, 1], "q": [1]},
            400,
            "parameter 'q' has invalid type. It should be either 'int', 'bool', or 'string'.",
        ),
        (
            {"INPUT0": [1, 2, 3, 4], "parameters": {"INPUT0": [1, 2, 3, 4]}},
            400,
            "Converting keyword: 'parameters': [request id: <id_unknown>] "
            "input 'INPUT0' already exists in request",
        ),
        (
            {"parameters": 3},
            500,
            "Expected JSON object for keyword: 'parameters': "
            "attempt to access JSON non-object as object",
        ),
        ([1], 500, "attempt to get members for non-object"),
        ({"id": 5}, 500, "Unable to parse 'id': attempt to access JSON non-string as string"),
    ],
)
def test_triton_messages(server, body, status, message):
    resp = post(server, GENERATE.format("add_sub"), body)
    assert (resp.status_code, resp.json()) == (status, {"error": message})


def test_inputs_in_parameters_and_compressed_bodies(server):
    body = {"INPUT0": [1, 2, 3, 4], "parameters": {"INPUT1": [1, 1, 1, 1]}}
    resp = post(server, GENERATE.format("add_sub"), body)
    assert resp.status_code == 200, resp.text
    assert resp.json()["OUTPUT1"] == [0.0, 1.0, 2.0, 3.0]
    resp = post(server, GENERATE.format("add_sub"), b"{}", headers={"Content-Encoding": "gzip"})
    assert (resp.status_code, resp.json()) == (
        400,
        {"error": "Unsupported content-encoding, only 'identity' is supported."},
    )


def test_generate_is_not_listed_among_extensions(server):
    # Triton serves the endpoint without listing it in the server metadata.
    metadata = json.loads(server.request("GET", "/v2").body)
    assert "generate" not in metadata["extensions"]
