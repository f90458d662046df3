"""A nameserver on UDP port 53 of a loopback address, for the resolution tests.

usage: dns.py ADDR drop              reads every query and answers none (a dead nameserver)
       dns.py ADDR answer NAME=IPV4  answers A NAME with IPV4; AAAA NAME with no address (NOERROR,
                                     no answer); any other name NXDOMAIN

The answer is built by hand (RFC 1035 4.1): the query's header with QR/RA set, its question, and
for an A query one answer record pointing back at the question's name. Prints "ready" once bound.
"""
import socket
import struct
import sys

addr, mode = sys.argv[1], sys.argv[2]
names = {}
for pair in sys.argv[3:]:
    name, _, ip = pair.partition("=")
    names[name.lower().rstrip(".")] = socket.inet_aton(ip)

s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((addr, 53))
print("ready", flush=True)


def question(q):
    """The question's name (lower case), its end offset, and its type."""
    labels, i = [], 12
    while q[i] != 0:
        n = q[i]
        labels.append(q[i + 1 : i + 1 + n].decode("ascii", "replace"))
        i += 1 + n
    i += 1
    qtype = struct.unpack("!H", q[i : i + 2])[0]
    return ".".join(labels).lower(), i + 4, qtype


while True:
    q, peer = s.recvfrom(4096)
    if mode == "drop" or len(q) < 12:
        continue
    try:
        name, end, qtype = question(q)
    except (IndexError, struct.error):
        continue
    qid, flags = struct.unpack("!HH", q[:4])
    rd = flags & 0x0100
    ip = names.get(name)
    rcode = 0 if ip is not None else 3
    answers = b""
    if ip is not None and qtype == 1:
        # Name by pointer to offset 12 (the question's), type A, class IN, TTL 60, 4 bytes.
        answers = struct.pack("!HHHIH", 0xC00C, 1, 1, 60, 4) + ip
    header = struct.pack(
        "!HHHHHH",
        qid,
        0x8000 | 0x0400 | rd | 0x0080 | rcode,  # QR, AA, RD as asked, RA, rcode
        1,
        1 if answers else 0,
        0,
        0,
    )
    s.sendto(header + q[12:end] + answers, peer)
