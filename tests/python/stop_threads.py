"""Stops some threads of another process, as a read stuck in the kernel
(a hung NFS or FUSE mount) stops the thread that makes it, and lets them go
again when its standard input closes.

``stop_threads.py TID...`` attaches to each thread with ``PTRACE_SEIZE`` and
stops it with ``PTRACE_INTERRUPT``: only that thread stops (no group stop:
the process's other threads run on), and waits until each one is stopped;
prints ``stopped``; then waits until its standard input closes and exits,
which detaches the threads and lets them run on from where they stood.
Needs root (or ``CAP_SYS_PTRACE``).
"""
import ctypes
import os
import sys

PTRACE_SEIZE = 0x4206
PTRACE_INTERRUPT = 0x4207
WALL = 0x40000000  # __WALL: wait for a thread of another process

libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
libc.ptrace.restype = ctypes.c_long


def ptrace(request, tid):
    if libc.ptrace(request, tid, None, None) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"ptrace({request:#x}, {tid}): {os.strerror(errno)}")


tids = [int(t) for t in sys.argv[1:]]
for tid in tids:
    ptrace(PTRACE_SEIZE, tid)
    ptrace(PTRACE_INTERRUPT, tid)
for tid in tids:
    os.waitpid(tid, WALL)
print("stopped", flush=True)
sys.stdin.read()
