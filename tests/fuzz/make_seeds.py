#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets into tests/fuzz/corpus/<target>/.
Run from anywhere; the seeds are checked in, rerun only when a format changes."""
import os
import struct

here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def write(target, name, data):
    d = os.path.join(here, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def request(op, key, arg, value=b""):
    return struct.pack("<B3xIQ", op, len(key), arg) + key + value


# Store protocol: a set, a get with a wait, an add, and a reply header.
write("store_protocol", "set_get_add",
      request(1, b"collie/ab/0/host/0", 5, b"hello") + request(2, b"collie/ab/0/host/1", 3000) +
      request(3, b"counter", 1))
write("store_protocol", "reply_ok", struct.pack("<B7xQ", 0, 8) + struct.pack("<q", 7))
write("store_protocol", "reply_timeout", struct.pack("<B7xQ", 1, 0))

# Handshake: secret, Hello, then (got, want) frame header pairs.
secret = bytes(range(16))
hello = struct.pack("<IHH", 0x4F4C4C43, 1, 2) + secret + struct.pack("<iIIIQ", 3, 1, 0, 0, 0x1234)
frame = struct.pack("<IBBHQQQQ", 0x52464C43, 0, 1, 0, 0xABCDEF, 4096, 0, 4096)
write("handshake", "hello_frames", secret + hello + frame + frame)
store_hello = struct.pack("<IHH", 0x4F4C4C43, 1, 1) + secret + struct.pack("<iIIIQ", -1, 0, 0, 0, 0)
write("handshake", "store_hello", secret + store_hello)

# Unique id: text forms and a 128-byte blob.
write("unique_id", "text_v4", b"collie1:127.0.0.1:29500:000102030405060708090a0b0c0d0e0f")
write("unique_id", "text_v6", b"collie1:[::1]:1:ffffffffffffffffffffffffffffffff")


def fnv1a32(data):
    h = 2166136261
    for b in data:
        h ^= b
        h = (h * 16777619) & 0xFFFFFFFF
    return h


host = b"10.0.0.1"
blob = bytearray(128)
blob[0:4] = b"CLID"
blob[4] = 1
blob[5] = len(host)
blob[6:8] = struct.pack("<H", 29500)
blob[8:24] = secret
blob[24:24 + len(host)] = host
blob[124:128] = struct.pack("<I", fnv1a32(bytes(blob[:124])))
write("unique_id", "blob", bytes(blob))

# shm segment: geometry bytes (rank 1 of 2, 1 channel, 4 pages), then a valid header
# with one FIFO slot (for sender 0) and its slot table.
page = 4096
header = struct.pack("<QIiiiiiQQQQQQ", 0x31454D48534C4C43, 1, 1, 2, 1, 1, 1234, 0,
                     page, 2 * page, page, 256, 4 * page) + bytes(range(16))
image = bytearray(4 * page)
image[:len(header)] = header
image[256:264] = struct.pack("<ii", 0, -1)
write("shm_segment", "valid_segment", bytes([1, 1, 0, 3]) + bytes(image[:512]))
