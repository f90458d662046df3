"""A stdio peer for the relay tests: it hashes every byte it reads on stdin and writes a mix on
stdout that no parser would like (JSON-RPC lines, a banner, binary, a line over 4 MiB, a message in
many small writes with pauses, a batch array), then, at its stdin's EOF, one last line, and exits.

Environment: SEED (the mix), REPORT (a file: the SHA-256 and length of what it read and wrote),
NEVER_READ=1 (never read stdin: write one line, sleep HOLD_S seconds, exit 0)."""
import hashlib
import os
import random
import sys
import time

out = sys.stdout.buffer
sent = hashlib.sha256()
sent_len = 0


def write(b: bytes) -> None:
    global sent_len
    out.write(b)
    out.flush()
    sent.update(b)
    sent_len += len(b)


if os.environ.get("NEVER_READ") == "1":
    write(b"not reading my stdin\n")
    time.sleep(float(os.environ.get("HOLD_S", "3")))
    sys.exit(0)

rng = random.Random(int(os.environ.get("SEED", "1")))
parts = [
    b"server banner: ready (not JSON-RPC)\n",
    b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"x"}]}}\n',
    bytes(rng.randrange(256) for _ in range(4096)) + b"\n",
    b'[{"jsonrpc":"2.0","id":2,"result":{}},{"jsonrpc":"2.0","method":"notifications/message","params":{}}]\n',
    b'{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"' + b"y" * (5 << 20) + b'"}]}}\n',
]
rng.shuffle(parts)
for p in parts:
    # Each part in a few writes of random sizes, some with a pause between.
    i = 0
    while i < len(p):
        n = rng.choice([1, 7, 100, 4096, 65536, 1 << 20])
        write(p[i : i + n])
        i += n
        if rng.random() < 0.05:
            time.sleep(0.002)
write(b"no newline at the end of this one")

got = hashlib.sha256()
got_len = 0
while True:
    b = sys.stdin.buffer.read1(65536)
    if not b:
        break
    got.update(b)
    got_len += len(b)
write(f"\neof after {got_len} bytes\n".encode())
with open(os.environ["REPORT"], "w") as f:
    f.write(f"read {got_len} {got.hexdigest()}\nwrote {sent_len} {sent.hexdigest()}\n")
