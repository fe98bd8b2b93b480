"""A small OTLP/HTTP metrics receiver for the tests (tests/it/otlp.rs).

Every POST to /v1/metrics is decoded with the official schemas (PyPI's
opentelemetry-proto, pinned in tests/python/requirements.txt): the body is
gunzipped when Content-Encoding says gzip, parsed as an
ExportMetricsServiceRequest (a body that does not parse is answered 400),
and appended as one JSON line to the output file, with the headers and
every metric's type, temporality, monotonicity, metadata and data points.
Floats are written as Python's repr (``nan``, ``inf``, ``-inf`` included) so
that the Rust side reads them back exactly.

Usage: otlp_receiver.py OUT.jsonl PORT [--status CODE] [--retry-after VALUE] [--reject N]
                       [--status-file PATH]
``--status`` answers every request with CODE (after recording it), with a
``Retry-After: VALUE`` header when ``--retry-after`` is given;
``--status-file`` answers with the code written in PATH while it exists
(the test turns failures on and off); each line records the status
answered (``status``); by default
the answer is 200 with an ExportMetricsServiceResponse, empty unless
``--reject N`` makes it a partial success rejecting N data points.
The listening port is printed on standard output once it is bound.
"""

import argparse
import gzip
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2


def f(value):
    return repr(float(value))


def attributes(kvs):
    out = {}
    for kv in kvs:
        which = kv.value.WhichOneof("value")
        out[kv.key] = str(getattr(kv.value, which)) if which else ""
    return out


def number_point(p):
    which = p.WhichOneof("value")
    return {
        "attributes": attributes(p.attributes),
        "start": p.start_time_unix_nano,
        "time": p.time_unix_nano,
        "flags": p.flags,
        "value": None if which is None else f(getattr(p, which)),
    }


def metric_json(m):
    kind = m.WhichOneof("data")
    out = {
        "name": m.name,
        "description": m.description,
        "unit": m.unit,
        "metadata": attributes(m.metadata),
        "type": kind,
    }
    data = getattr(m, kind)
    if kind in ("sum", "histogram"):
        out["temporality"] = data.aggregation_temporality
    if kind == "sum":
        out["monotonic"] = data.is_monotonic
    if kind in ("gauge", "sum"):
        out["points"] = [number_point(p) for p in data.data_points]
    elif kind == "histogram":
        out["points"] = [
            {
                "attributes": attributes(p.attributes),
                "start": p.start_time_unix_nano,
                "time": p.time_unix_nano,
                "flags": p.flags,
                "count": p.count,
                "sum": f(p.sum) if p.HasField("sum") else None,
                "bounds": [f(b) for b in p.explicit_bounds],
                "counts": list(p.bucket_counts),
            }
            for p in data.data_points
        ]
    elif kind == "summary":
        out["points"] = [
            {
                "attributes": attributes(p.attributes),
                "start": p.start_time_unix_nano,
                "time": p.time_unix_nano,
                "flags": p.flags,
                "count": p.count,
                "sum": f(p.sum),
                "quantiles": [[f(q.quantile), f(q.value)] for q in p.quantile_values],
            }
            for p in data.data_points
        ]
    else:
        out["points"] = []
    return out


def request_json(request, headers):
    resources = []
    for rm in request.resource_metrics:
        scopes = []
        for sm in rm.scope_metrics:
            scopes.append(
                {
                    "scope": sm.scope.name,
                    "version": sm.scope.version,
                    "metrics": [metric_json(m) for m in sm.metrics],
                }
            )
        resources.append({"attributes": attributes(rm.resource.attributes), "scopes": scopes})
    return {"headers": headers, "resources": resources}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("port", type=int)
    parser.add_argument("--status", type=int, default=200)
    parser.add_argument("--reject", type=int, default=0)
    parser.add_argument("--retry-after", default=None)
    parser.add_argument("--status-file", default=None)
    args = parser.parse_args()
    out = open(args.out, "a", encoding="utf-8")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_):
            pass

        def answer(self, status, body=b"", content_type="application/x-protobuf"):
            self.send_response(status)
            if status != 200 and args.retry_after is not None:
                self.send_header("Retry-After", args.retry_after)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.path != "/v1/metrics":
                return self.answer(404, b"not found", "text/plain")
            headers = {k.lower(): v for k, v in self.headers.items()}
            try:
                if headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                request = metrics_service_pb2.ExportMetricsServiceRequest()
                request.ParseFromString(body)
            except Exception as e:  # noqa: BLE001 - any undecodable body is a 400
                return self.answer(400, str(e).encode(), "text/plain")
            status = args.status
            if args.status_file is not None:
                try:
                    with open(args.status_file, encoding="utf-8") as f:
                        status = int(f.read().strip())
                except (OSError, ValueError):
                    pass
            record = request_json(request, headers)
            record["status"] = status
            out.write(json.dumps(record) + "\n")
            out.flush()
            if status != 200:
                return self.answer(status, b"refused by the test", "text/plain")
            response = metrics_service_pb2.ExportMetricsServiceResponse()
            if args.reject:
                response.partial_success.rejected_data_points = args.reject
                response.partial_success.error_message = "rejected by the test"
            self.answer(200, response.SerializeToString())

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(server.server_address[1], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
