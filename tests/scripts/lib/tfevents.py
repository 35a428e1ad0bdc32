"""tfevents.py - a TensorBoard event file read with the standard library alone, for the tests that
run without the tensorboard package: every TFRecord's length and data checked against their masked
CRC-32C, each Event decoded (wall_time, step, file_version, summary values).

    python3 tests/scripts/lib/tfevents.py FILE    prints "STEP TAG VALUE" a line
"""
import struct
import sys


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def fields(buf):
    """(field, wire type, value) of a protocol buffer's top level."""
    i = 0
    while i < len(buf):
        k, i = varint(buf, i)
        f, w = k >> 3, k & 7
        if w == 0:
            v, i = varint(buf, i)
        elif w == 1:
            v, i = buf[i:i + 8], i + 8
        elif w == 2:
            n, i = varint(buf, i)
            v, i = buf[i:i + n], i + n
        elif w == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise ValueError("wire type %d" % w)
        yield f, w, v


def varint(buf, i):
    v, s = 0, 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << s
        s += 7
        if not b & 0x80:
            return v, i


def events(path):
    """Every Event of the file as a dict: wall_time, step, file_version, values {tag: value}."""
    data = open(path, "rb").read()
    out, i = [], 0
    while i < len(data):
        head = data[i:i + 8]
        (n,) = struct.unpack("<Q", head)
        (hc,) = struct.unpack("<I", data[i + 8:i + 12])
        body = data[i + 12:i + 12 + n]
        (bc,) = struct.unpack("<I", data[i + 12 + n:i + 16 + n])
        if hc != masked(head) or bc != masked(body) or len(body) != n:
            raise ValueError("%s: record at byte %d: bad length or CRC" % (path, i))
        i += 16 + n
        ev = {"step": 0, "values": {}}
        for f, _, v in fields(body):
            if f == 1:
                ev["wall_time"] = struct.unpack("<d", v)[0]
            elif f == 2:
                ev["step"] = v
            elif f == 3:
                ev["file_version"] = v.decode()
            elif f == 5:
                for g, _, val in fields(v):
                    if g == 1:
                        d = dict((h, x) for h, _, x in fields(val))
                        ev["values"][d[1].decode()] = struct.unpack("<f", d[2])[0]
        out.append(ev)
    return out


if __name__ == "__main__":
    for e in events(sys.argv[1]):
        for tag, v in sorted(e["values"].items()):
            print(e["step"], tag, repr(v))
