"""A stdio server that floods its stdout, for the relay's bounds (tests/relay_bounds.rs).

Block k of 64 KiB is the alphabet repeated, starting at letter k % 26: no newline anywhere, and a
block out of place or cut short changes the checksum.

usage: stdout_flood.py total BYTES REPORT
         writes BYTES, then reads stdin to its EOF and writes "read N SHA256" to REPORT; exits 0
       stdout_flood.py forever
         writes until its stdin's EOF, then exits 3 at once
"""
import hashlib
import os
import sys
import threading

BLOCK = 64 * 1024
BASE = b"abcdefghijklmnopqrstuvwxyz" * (BLOCK // 26 + 2)
out = sys.stdout.buffer


def block(k: int) -> bytes:
    return BASE[k % 26 : k % 26 + BLOCK]


if sys.argv[1] == "total":
    total, report = int(sys.argv[2]), sys.argv[3]
    k = 0
    while k * BLOCK < total:
        out.write(block(k)[: total - k * BLOCK])
        k += 1
    out.flush()
    h, n = hashlib.sha256(), 0
    while True:
        b = sys.stdin.buffer.read1(1 << 16)
        if not b:
            break
        h.update(b)
        n += len(b)
    with open(report, "w") as f:
        f.write(f"read {n} {h.hexdigest()}\n")
    sys.exit(0)

# forever: the client's EOF ends it.
threading.Thread(
    target=lambda: (sys.stdin.buffer.read(), os._exit(3)), daemon=True
).start()
k = 0
while True:
    out.write(block(k))
    out.flush()
    k += 1
