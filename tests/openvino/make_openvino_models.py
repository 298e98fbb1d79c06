"""Writes the OpenVINO IR models the openvino backend tests serve, with the standard library
only: an IR is an XML graph (model.xml) plus a file of constant weights (model.bin), and
these graphs have no constants, so the .bin is empty. The XML is what OpenVINO 2024.4's own
serializer (openvino.save_model) writes for the same graph, IR version 11.

    python make_openvino_models.py OUT_DIR

writes OUT_DIR/add_sub_<type>.xml/.bin for each element type below: two inputs INPUT0 and
INPUT1 of shape [?, 4], OUTPUT0 = INPUT0 + INPUT1 and OUTPUT1 = INPUT0 - INPUT1; and
add_sub_<type>_dynamic.xml/.bin, the same of shape [?, ?], for the types in DYNAMIC.
"""

import os
import sys

# OpenVINO element type -> the precision name the IR's ports carry.
TYPES = {"f32": "FP32", "f16": "FP16", "i64": "I64", "i32": "I32", "i8": "I8", "u8": "U8"}
DYNAMIC = ("f32", "i32")


def port(port_id, precision, dims, names=None):
    named = f' names="{names}"' if names else ""
    return (f'<port id="{port_id}" precision="{precision}"{named}>'
            + "".join(f"<dim>{d}</dim>" for d in dims) + "</port>")


def add_sub(element_type, dims=(-1, 4)):
    """The IR of add_sub; dims: its tensors' shape, -1 for a dynamic dimension."""
    p = TYPES[element_type]
    shape = ",".join("?" if d == -1 else str(d) for d in dims)
    layers = []
    for layer_id, name in ((0, "INPUT0"), (1, "INPUT1")):
        layers.append(f'<layer id="{layer_id}" name="{name}" type="Parameter" version="opset1">'
                      f'<data shape="{shape}" element_type="{element_type}"/>'
                      f"<output>{port(0, p, dims, name)}</output></layer>")
    for layer_id, op, out in ((2, "Add", "OUTPUT0"), (3, "Subtract", "OUTPUT1")):
        layers.append(f'<layer id="{layer_id}" name="{op}" type="{op}" version="opset1">'
                      '<data auto_broadcast="numpy"/>'
                      f"<input>{port(0, p, dims)}{port(1, p, dims)}</input>"
                      f"<output>{port(2, p, dims, out)}</output></layer>")
    for layer_id, out in ((4, "OUTPUT0"), (5, "OUTPUT1")):
        layers.append(f'<layer id="{layer_id}" name="{out}/sink_port_0" type="Result" version="opset1">'
                      f"<input>{port(0, p, dims)}</input></layer>")
    edges = [(0, 0, 2, 0), (1, 0, 2, 1), (0, 0, 3, 0), (1, 0, 3, 1), (2, 2, 4, 0), (3, 2, 5, 0)]
    return ('<?xml version="1.0"?>\n<net name="add_sub" version="11">\n<layers>\n'
            + "\n".join(layers) + "\n</layers>\n<edges>\n"
            + "\n".join(f'<edge from-layer="{a}" from-port="{b}" to-layer="{c}" to-port="{d}"/>'
                        for a, b, c, d in edges)
            + "\n</edges>\n</net>\n")


def write(out_dir, name, xml):
    base = os.path.join(out_dir, name)
    with open(base + ".xml", "w") as f:
        f.write(xml)
    open(base + ".bin", "wb").close()
    print(base + ".xml")


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    for element_type in TYPES:
        write(out_dir, f"add_sub_{element_type}", add_sub(element_type))
    for element_type in DYNAMIC:
        write(out_dir, f"add_sub_{element_type}_dynamic", add_sub(element_type, (-1, -1)))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
