"""Helpers shared by the package tests that run real servers (gunicorn, uvicorn): a free port on
127.0.0.1 and the stop of a server process with its metrics directory."""
import shutil
import signal
import socket
import subprocess


def free_port():
    """A port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def stop(server, metrics_dir):
    """SIGTERM to `server` (killed if it has not exited within 30 s), then `metrics_dir` removed."""
    server.send_signal(signal.SIGTERM)
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
    shutil.rmtree(metrics_dir, ignore_errors=True)
