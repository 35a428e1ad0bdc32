#!/usr/bin/env python3
"""make_st_seeds.py - writes the small safetensors seed files of tests/fuzz/seeds/safetensors.

Run by hand (python3 tests/fuzz/make_st_seeds.py) when the seeds should change; its output is kept
in the tree. Each file is a case the reader accepts, or one it must refuse, at a few hundred bytes.
checksummed.safetensors beside them is ppr's own writer's (rt_st_write: a checksum per tensor).
"""
import json
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "seeds", "safetensors")
SIZE = {"F32": 4, "F16": 2, "BF16": 2}


def pack(dtype, values):
    if dtype == "F32":
        return b"".join(struct.pack("<f", v) for v in values)
    if dtype == "F16":
        return b"".join(struct.pack("<e", v) for v in values)
    return b"".join(struct.pack("<f", v)[2:] for v in values)  # BF16: the high half of an F32


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def safetensors(tensors, metadata=None, pad=0, raw_header=None):
    """tensors: (name, dtype, shape, values) in file order."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, values in tensors:
        blob = pack(dtype, values) if values is not None else bytes(numel(shape) * SIZE[dtype])
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    h = raw_header if raw_header is not None else json.dumps(header, separators=(",", ":")).encode()
    h += b" " * pad
    return struct.pack("<Q", len(h)) + h + data


SPECIAL = [0.0, -0.0, 1.0, -2.5, float("inf"), float("-inf"), float("nan"), 6.1e-5, 5.96e-8, 65504.0]

CASES = {
    "f32_2x3": safetensors([("w", "F32", [2, 3], [1, 2, 3, 4, 5, 6])]),
    "mixed_dtypes": safetensors(
        [("a", "F32", [4], [0.5, -1, 2, 3]), ("b", "F16", [2, 2], [1, 2, 3, 4]), ("c", "BF16", [3], [1, -1, 0.25])],
        metadata={"format": "pt", "note": "mixed"}),
    "special_values": safetensors([("h", "F16", [10], SPECIAL), ("bf", "BF16", [10], SPECIAL),
                                   ("f", "F32", [10], SPECIAL)]),
    "scalar": safetensors([("s", "F32", [], [3.0])]),
    "empty_tensor": safetensors([("z", "F32", [0, 4], []), ("y", "F16", [2, 0], [])]),
    "eight_dims": safetensors([("d", "F32", [1, 2, 1, 2, 1, 1, 1, 2], list(range(8)))]),
    "padded_header": safetensors([("p", "F32", [2], [1, 2])], pad=7),
    "escaped_names": safetensors([("a\"b\\c", "F32", [1], [1]), ("caf\u00e9.w", "F32", [1], [2]),
                                  ("tab\tname", "F32", [1], [3]),
                                  ("smile\U0001F600", "F32", [1], [4])]),
    "no_tensors": safetensors([], metadata={"k": "v"}),
    "checkpoint_names": safetensors([
        ("model.embed_tokens.weight", "F32", [4, 2], None),
        ("model.layers.0.input_layernorm.weight", "F32", [2], [1, 1]),
        ("model.layers.0.self_attn.q_proj.weight", "BF16", [2, 2], [1, 0, 0, 1]),
        ("model.norm.weight", "F16", [2], [1, 1]),
        ("lm_head.weight", "F32", [4, 2], None)], metadata={"format": "pt"}),
    # refused: the reader must say why without reading out of bounds
    "bad_offsets": safetensors([], raw_header=b'{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}}'),
    "bad_dtype": safetensors([], raw_header=b'{"w":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}}') + bytes(8),
    "dup_names": safetensors([], raw_header=b'{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                                            b'"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}') + bytes(4),
    "huge_shape": safetensors([], raw_header=b'{"w":{"dtype":"F32","shape":[4294967296,4294967296,16],'
                                             b'"data_offsets":[0,4]}}') + bytes(4),
    "short_header": struct.pack("<Q", 1000) + b'{"w":',
}


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, blob in CASES.items():
        with open(os.path.join(OUT, name + ".safetensors"), "wb") as f:
            f.write(blob)
    print("%d seeds in %s" % (len(CASES), OUT))


if __name__ == "__main__":
    main()
