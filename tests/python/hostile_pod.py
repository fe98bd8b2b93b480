"""A pod's process that holds one prometheus_client multiprocess file open in
each of many directories (issue 35): the cost one tenant can put on the node
agent.

``hostile_pod.py BASE N`` creates ``BASE/0`` … ``BASE/N-1``, and in each a
``counter_<pid>.db`` written by prometheus_client 0.26.0's own file writer
(``MmapedDict``, which keeps the file open as a writing process does) with
the counter ``hostile_dirs_total`` at 1; raises its own soft descriptor
limit to the hard one to hold them; prints ``ready``; then waits until its
standard input closes.
"""
import json
import os
import resource
import sys

from prometheus_client.mmap_dict import MmapedDict

soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
base, count = sys.argv[1], int(sys.argv[2])
# prometheus_client's key: (family, sample name, labels, help), sorted keys.
key = json.dumps(("hostile_dirs", "hostile_dirs_total", {}, "Directories."), sort_keys=True)
held = []
for i in range(count):
    directory = os.path.join(base, str(i))
    os.makedirs(directory, exist_ok=True)
    mapped = MmapedDict(os.path.join(directory, f"counter_{os.getpid()}.db"))
    mapped.write_value(key, 1.0, 0.0)
    held.append(mapped)
print("ready", flush=True)
sys.stdin.read()
