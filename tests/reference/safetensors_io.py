"""Minimal pure-Python safetensors reader/writer (float32 only for writing).

No dependency on numpy, torch or the safetensors package, so compare.py runs under
any python3.

Format: 8-byte little-endian u64 header length N, then N bytes of JSON
{"name": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, ...,
 "__metadata__": {str: str}} padded with spaces to a multiple of 8, then the raw
little-endian tensor data (offsets are relative to the start of the data).
"""

import json
import struct
import sys
from array import array

_DTYPES = {"F32": ("f", 4), "F64": ("d", 8), "I32": ("i", 4), "I64": ("q", 8)}


def _prod(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def write(path, tensors, metadata=None):
    """tensors: ordered list of (name, shape, flat sequence of floats or array('f'))."""
    header = {}
    blobs = []
    off = 0
    for name, shape, values in tensors:
        a = values if isinstance(values, array) and values.typecode == "f" else array("f", values)
        if len(a) != _prod(shape):
            raise ValueError("%s: %d values for shape %s" % (name, len(a), shape))
        if sys.byteorder != "little":
            a = array("f", a)
            a.byteswap()
        b = a.tobytes()
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    hj = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hj += b" " * ((8 - len(hj) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)


def read(path):
    """Returns (dict name -> (shape, array of values), metadata dict), in file order."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError("%s: too short" % path)
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise ValueError("%s: header length %d past end of file" % (path, n))
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    meta = header.pop("__metadata__", {}) or {}
    out = {}
    for name, info in header.items():
        dt = info["dtype"]
        if dt not in _DTYPES:
            raise ValueError("%s: %s: unsupported dtype %s" % (path, name, dt))
        code, size = _DTYPES[dt]
        b, e = info["data_offsets"]
        shape = list(info["shape"])
        if e - b != _prod(shape) * size or e > len(data):
            raise ValueError("%s: %s: bad data_offsets %s for shape %s" % (path, name, [b, e], shape))
        a = array(code)
        a.frombytes(data[b:e])
        if sys.byteorder != "little":
            a.byteswap()
        out[name] = (shape, a)
    return out, meta
