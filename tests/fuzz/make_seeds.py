#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets into tests/fuzz/corpus/<target>/.
Run from anywhere; the seeds are checked in, rerun only when a format changes."""
import hashlib
import hmac
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

# Handshake: secret, server nonce, Hello, Accept, then (got, want) frame header pairs.
# The Hello and Accept carry valid proofs (core/net/handshake.h), so the fuzzer starts
# past the check.
secret = bytes(range(16))
server_nonce = bytes(range(100, 116))


def hello_accept(purpose, rank, job_hash):
    body = struct.pack("<IHHiIIIQ", 0x4F4C4C43, 2, purpose, rank, 1, 0, 0, job_hash)
    body += bytes(range(200, 216))  # client nonce
    mac_c = hmac.new(secret, b"collie/hello/client/v2" + server_nonce + body, hashlib.sha256)
    mac_s = hmac.new(secret, b"collie/hello/server/v2" + server_nonce + body, hashlib.sha256)
    return body + mac_c.digest() + struct.pack("<II", 0x4B4F4C43, 0) + mac_s.digest()


frame = struct.pack("<IBBHQQQQ", 0x52464C43, 0, 1, 0, 0xABCDEF, 4096, 0, 4096)
write("handshake", "hello_frames", secret + server_nonce + hello_accept(2, 3, 0x1234) + frame + frame)
write("handshake", "store_hello", secret + server_nonce + hello_accept(1, -1, 0))
challenge = struct.pack("<IHH", 0x48434C43, 2, 0) + server_nonce
write("handshake", "challenge", secret + server_nonce + challenge)

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
