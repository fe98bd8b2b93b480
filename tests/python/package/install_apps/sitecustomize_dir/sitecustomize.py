# What an image adds to make prometheus_client's exposition native (docs/python.md).
import multiproc_exporter
multiproc_exporter.install()
