"""One request to the lab switch's control socket (newline-delimited JSON,
labswitch/switch_protocol.hpp) and its reply, for the bench scripts that read the switch's
ground truth (watchdog_condition.py, switch_io.py)."""
import json
import socket


def control(sock_path, req, timeout=5):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(sock_path)
        s.sendall((json.dumps(req) + "\n").encode())
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            buf += chunk
    return json.loads(buf)
