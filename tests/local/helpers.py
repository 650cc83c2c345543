"""What the local servers' tests share: whether a process lives, and a server's death with
a parent that was SIGKILLed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["alive", "server_dies_with_a_killed_parent"]


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def server_dies_with_a_killed_parent(tmp_path: Path, server_class: str) -> None:
    """Start ``kinesis_actors.<server_class>`` in a child Python, SIGKILL that child (no
    cleanup runs) and wait for the kernel to take the server with it."""
    pid_file = tmp_path / "pid"
    script = (
        "import sys, time\n"
        f"from kinesis_actors import {server_class}\n"
        f"server = {server_class}().__enter__()\n"
        f"open({str(pid_file)!r}, 'w').write(str(server._process.pid))\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=os.getcwd())
    try:
        deadline = time.monotonic() + 60
        while not pid_file.exists() or not pid_file.read_text():
            assert parent.poll() is None, "the parent died before starting the server"
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.05)
        server_pid = int(pid_file.read_text())
        assert alive(server_pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 10
        while alive(server_pid):
            assert time.monotonic() < deadline, "the server outlived its parent"
            time.sleep(0.05)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
