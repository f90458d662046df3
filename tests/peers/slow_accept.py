"""A keep-alive HTTP/1.1 server with a small listen backlog that accepts slowly: it takes what waits
in its accept queue only every ACCEPT_PAUSE_S, as a loop busy elsewhere does. Under a burst of new
connections its accept queue fills and the kernel drops SYNs, which the client's TCP sends again after
1 s (then 3 s, 7 s). Each connection it accepts is then served at once, on its own thread.

usage: slow_accept.py PORT BACKLOG ACCEPT_PAUSE_S
"""
import socket
import sys
import threading
import time

port, backlog, pause = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])


def serve(conn):
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = b""
    try:
        while True:
            while b"\r\n\r\n" not in buf:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                buf += chunk
            head, buf = buf.split(b"\r\n\r\n", 1)
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
            while len(buf) < length:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                buf += chunk
            buf = buf[length:]
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    except OSError:
        pass
    finally:
        conn.close()


s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", port))
s.listen(backlog)
print("listening", flush=True)
s.setblocking(False)
while True:
    time.sleep(pause)
    while True:
        try:
            c, _ = s.accept()
        except BlockingIOError:
            break
        c.setblocking(True)
        threading.Thread(target=serve, args=(c,), daemon=True).start()
