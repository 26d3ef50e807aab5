#!/usr/bin/env python3
"""Writes the seed corpus of every harness into tests/fuzz/corpus/<name>/:
a few well-formed records (so the fuzzer starts past the magic checks) and
a few malformed ones. Layouts: src/bootstrap/bootstrap.c, src/util/auth.c,
src/net/socket_priv.h. Deterministic; rerun after a format change."""
import os
import shutil
import socket
import struct
import sys

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
corpus = {}


def add(name, tag, data):
    corpus.setdefault(name, []).append((tag, bytes(data)))


# ---- bootstrap (big-endian) ----
def addr_v4(ip, port):
    return struct.pack(">HHI", 4, port, 0) + socket.inet_aton(ip) + bytes(12)


def addr_v6(ip, port, scope=0):
    return struct.pack(">HHI", 6, port, scope) + socket.inet_pton(socket.AF_INET6, ip)


SECRET = bytes(range(16))


def unique_id(addr, magic=b"HCID", version=1):
    b = magic + struct.pack(">HH", version, 0) + addr + SECRET
    return b + bytes(128 - len(b))


add("bootstrap_id", "ok_v4", unique_id(addr_v4("10.1.2.3", 29500)))
add("bootstrap_id", "ok_v6", unique_id(addr_v6("fe80::1", 29500, 1)))
add("bootstrap_id", "bad_magic", unique_id(addr_v4("10.1.2.3", 29500), magic=b"NCCL"))
add("bootstrap_id", "bad_version", unique_id(addr_v4("10.1.2.3", 29500), version=2))
add("bootstrap_id", "port0", unique_id(addr_v4("10.1.2.3", 0)))
add("bootstrap_id", "family5", unique_id(struct.pack(">HHI", 5, 1, 0) + bytes(16)))
add("bootstrap_id", "short", unique_id(addr_v4("10.1.2.3", 29500))[:127])


def hello(rank, nranks, addr, magic=b"HCRH"):
    return magic + struct.pack(">II", rank, nranks) + addr


ring = addr_v4("192.0.2.7", 40000)
add("bootstrap_hello", "single", hello(0, 1, bytes(24)))
add("bootstrap_hello", "three", hello(2, 3, ring) + hello(0, 3, ring) + hello(1, 3, addr_v6("::1", 4)))
add("bootstrap_hello", "nranks0", hello(0, 0, ring))
add("bootstrap_hello", "rank_out_of_range", hello(5, 5, ring))
add("bootstrap_hello", "nranks_huge", hello(1, 0xFFFFFFFF, ring))
add("bootstrap_hello", "nranks_disagree", hello(0, 4, ring) + hello(1, 5, ring))
add("bootstrap_hello", "no_ring_addr", hello(0, 2, bytes(24)))
add("bootstrap_hello", "bad_magic", hello(0, 2, ring, magic=b"HCRG"))


def reply(status, addr, msg):
    m = msg + bytes(256 - len(msg))
    return struct.pack(">I", status) + addr + m[:256]


add("bootstrap_reply", "ok", reply(0, addr_v4("192.0.2.8", 40001), b""))
add("bootstrap_reply", "ok_v6", reply(0, addr_v6("2001:db8::1", 40001), b""))
add("bootstrap_reply", "usage", reply(5, bytes(24), b"rank 3 at 192.0.2.9:1 joined twice"))
add("bootstrap_reply", "status99", reply(99, bytes(24), b"?"))
add("bootstrap_reply", "waiting", reply(0x57414954, bytes(24), b"after 10 s, 2 of 3 ranks arrived; missing: 1"))
add("bootstrap_reply", "unterminated", reply(6, bytes(24), b"A" * 256))
add("bootstrap_reply", "short", reply(0, addr_v4("192.0.2.8", 40001), b"")[:100])

add("bootstrap_ring", "hello", b"HCRG" + struct.pack(">II", 1, 4))
add("bootstrap_ring", "gather", b"HCAG" + struct.pack(">IQ", 3, 8))
add("bootstrap_ring", "gather_huge", b"HCAG" + struct.pack(">IQ", 0xFFFFFFFF, 1 << 63))
add("bootstrap_ring", "hello_bad_magic", b"HCRX" + struct.pack(">II", 1, 4))
add("bootstrap_ring", "gather_short", b"HCAG" + struct.pack(">I", 3))

# ---- auth (big-endian); byte 0 of each input picks the purpose ----
def auth_hello(purpose, magic=b"HCA1"):
    return magic + struct.pack(">I", purpose) + bytes(range(100, 116))


add("auth_server", "ok_boot_root", bytes([0]) + auth_hello(1) + bytes(32))
add("auth_server", "ok_net_socket", bytes([2]) + auth_hello(3) + b"\xff" * 32)
add("auth_server", "wrong_purpose", bytes([0]) + auth_hello(2) + bytes(32))
add("auth_server", "bad_magic", bytes([1]) + auth_hello(2, magic=b"GET ") + bytes(32))
add("auth_server", "short_hello", bytes([1]) + auth_hello(2)[:10])
add("auth_server", "short_proof", bytes([1]) + auth_hello(2) + bytes(5))
add("auth_client", "reply", bytes([0]) + bytes(range(48)))
add("auth_client", "reply_long", bytes([2]) + bytes(range(64)))
add("auth_client", "reply_short", bytes([1]) + bytes(range(20)))
add("auth_client", "nothing", bytes([1]))

# ---- net/socket (little-endian; the handle in host order, x86-64) ----
SOCK_MAGIC = 0x4B534348


def handle(magic, sockaddr):
    return (struct.pack("<II", magic, 0) + sockaddr).ljust(64, b"\0")


sin = struct.pack("<H", socket.AF_INET) + struct.pack(">H", 40002) + socket.inet_aton("192.0.2.10") + bytes(8)
sin6 = (struct.pack("<H", socket.AF_INET6) + struct.pack(">HI", 40002, 0)
        + socket.inet_pton(socket.AF_INET6, "2001:db8::2") + struct.pack("<I", 0))
add("socket_handle", "v4", handle(SOCK_MAGIC, sin))
add("socket_handle", "v6", handle(SOCK_MAGIC, sin6))
add("socket_handle", "bad_magic", handle(0x12345678, sin))
add("socket_handle", "af_unix", handle(SOCK_MAGIC, struct.pack("<H", socket.AF_UNIX) + b"/tmp/x\0"))
add("socket_handle", "short", handle(SOCK_MAGIC, sin)[:20])


def sock_hello(rank, stream, nstreams, chunk, magic=SOCK_MAGIC):
    return struct.pack("<IIIIQ", magic, rank, stream, nstreams, chunk)


add("socket_hello", "one_stream", sock_hello(0, 0, 1, 128 << 10))
add("socket_hello", "stream3_of_4", sock_hello(2, 3, 4, 4096))
add("socket_hello", "nstreams0", sock_hello(0, 0, 0, 1))
add("socket_hello", "stream_past_end", sock_hello(0, 4, 4, 1))
add("socket_hello", "nstreams65", sock_hello(0, 0, 65, 1))
add("socket_hello", "bad_magic", sock_hello(0, 0, 1, 1, magic=0x48434131))
add("socket_hello", "short", sock_hello(0, 0, 1, 1)[:23])


def frames(nstreams, chunk, msgs, hdr_lens=None, cut=0):
    """Input of fuzz_socket_frames: messages striped as the transport does."""
    streams = [bytearray() for _ in range(nstreams)]
    for i, payload in enumerate(msgs):
        n = len(payload)
        streams[0] += struct.pack("<Q", hdr_lens[i] if hdr_lens else n)
        sb = max(n, 1) if nstreams == 1 else chunk
        k = 0
        while k * sb < n:
            streams[k % nstreams] += payload[k * sb:k * sb + sb]
            k += 1
    if cut:
        streams[-1] = streams[-1][:-cut]
    out = bytes([nstreams - 1, chunk - 1, len(msgs) - 1])
    for payload in msgs:
        out += struct.pack("<H", len(payload))
    for s, b in enumerate(streams):
        if s < nstreams - 1:
            out += struct.pack("<H", len(b))
        out += bytes([min(len(b) // 2, 255)]) + b
    return out


m1, m2, m3 = bytes(range(37)), bytes(200), bytes(i * 7 % 256 for i in range(100))
add("socket_frames", "one_stream", frames(1, 1, [m1, m2]))
add("socket_frames", "three_streams", frames(3, 7, [m1, m3, b""]))
add("socket_frames", "four_streams", frames(4, 16, [m3, m1, m2, m1]))
add("socket_frames", "zero_bytes", frames(2, 8, [b"", b""]))
add("socket_frames", "count_mismatch", frames(2, 5, [m1, m3], hdr_lens=[37, 99]))
add("socket_frames", "truncated", frames(3, 7, [m3], cut=5))

# ---- ib setup record (src/net/ib_wire.c, little endian, 136 bytes) ----
def ib_setup(magic=0x42494348, rank=1, nqps=2, slots=16, eager=8192, cts=64, chunk=1 << 19, mtu=5):
    rec = struct.pack("<IIIIII", magic, rank, nqps, slots, eager, cts) + struct.pack("<Q", chunk)
    rec += struct.pack("<III", 7, 2, mtu) + bytes(range(16))
    rec += struct.pack("<8I", *[100 + i for i in range(8)])
    rec += struct.pack("<QIQI", 0x7F0000001000, 0x1234, 0x7F0000002000, 0x1235)
    return rec + bytes(136 - len(rec))


add("ib_setup", "valid", ib_setup())
add("ib_setup", "one_qp_infiniband", ib_setup(nqps=1, mtu=3))
add("ib_setup", "too_many_qps", ib_setup(nqps=9))
add("ib_setup", "zero_slots", ib_setup(slots=0))
add("ib_setup", "bad_magic", ib_setup(magic=0))
add("ib_setup", "short", ib_setup()[:100])

names = sys.argv[1:] or sorted(corpus)
for name in names:
    d = os.path.join(root, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for tag, data in corpus[name]:
        with open(os.path.join(d, tag), "wb") as f:
            f.write(data)
    print(f"{name}: {len(corpus[name])} inputs")
