"""Small helpers shared by the pytest files (no third-party imports)."""
import os
import pty
import subprocess


def head(src, dst, n):
    """Writes the first n lines of the UTF-8 text file src to dst."""
    with open(src, encoding="utf-8") as f, open(dst, "w", encoding="utf-8") as g:
        for _ in range(n):
            g.write(next(f))


def stderr_on_pty(args, env=None, timeout=300):
    """Runs args with stderr on a pseudo-terminal (stdin and stdout to /dev/null) and returns
    (exit status, what the terminal showed)."""
    master, slave = pty.openpty()
    p = subprocess.Popen([str(a) for a in args], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=slave, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return p.wait(timeout=timeout), b"".join(chunks).decode(errors="replace")


def safetensors_header(path):
    """A safetensors file's header: {name: {"dtype", "shape", "data_offsets"}} and "__metadata__"."""
    import json
    import struct
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n))
