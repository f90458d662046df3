"""A raw HTTP/1.1 server behind `wrap --proxy` (tests/proxy_more.rs): it keeps every request head
as its bytes came (header case included) and answers with headers in mixed case, so the test can
read what the proxy changed, both ways.

usage: raw_upstream.py PORT HEADS_FILE [CERT KEY]   (with CERT and KEY: TLS)
  GET /slow      answers after 2 s
  Upgrade: ...   answers 101, then echoes every byte it reads (a websocket's frames, unread)
  anything else  200, `X-Reply-Case: Kept`, body `ok`, the connection kept
"""
import socket
import ssl
import sys
import threading
import time

port, heads = int(sys.argv[1]), sys.argv[2]
lock = threading.Lock()
tls = None
if len(sys.argv) > 4:
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(sys.argv[3], sys.argv[4])


def serve(c):
    try:
        if tls:
            c = tls.wrap_socket(c, server_side=True)
        buf = b""
        while True:
            while b"\r\n\r\n" not in buf:
                b = c.recv(65536)
                if not b:
                    return
                buf += b
            head, buf = buf.split(b"\r\n\r\n", 1)
            with lock, open(heads, "ab") as f:
                f.write(head + b"\r\n\r\n")
            lower = head.lower()
            if b"\r\nupgrade:" in lower:
                c.sendall(
                    b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                    b"Connection: Upgrade\r\n\r\n"
                )
                if buf:
                    c.sendall(buf)
                while True:
                    b = c.recv(65536)
                    if not b:
                        return
                    c.sendall(b)
            if head.startswith(b"GET /slow "):
                time.sleep(2)
            c.sendall(
                b"HTTP/1.1 200 OK\r\nX-Reply-Case: Kept\r\ncontent-LENGTH: 2\r\n\r\nok"
            )
    except (OSError, ssl.SSLError):
        pass
    finally:
        c.close()


s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", port))
s.listen(64)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
