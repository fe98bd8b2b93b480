"""Prints Ray's Serve-LLM Grafana dashboard, as the installed ``ray`` wheel generates it.

Used by tests/it/ray_dashboard.rs: Ray ships the dashboard's panels as Python
(``ray/dashboard/modules/metrics/dashboards/serve_llm_dashboard_panels.py``),
and ``ray.dashboard.modules.metrics.grafana_dashboard_factory`` turns them into
the Grafana JSON that ``ray start --head`` writes for Grafana to import (global
filters from ``RAY_GRAFANA_SERVE_LLM_DASHBOARD_GLOBAL_FILTERS``, unset here).
The JSON goes to standard output, with ``rayVersion`` set to ``ray.__version__``.

Usage: ray_dashboard.py   (with the Python of a venv that has ray==2.60.0)
"""
import json

import ray
from ray.dashboard.modules.metrics import grafana_dashboard_factory


def main():
    dashboard = grafana_dashboard_factory.generate_serve_llm_grafana_dashboard()
    if isinstance(dashboard, tuple):  # (dashboard, uid) in Ray 2.60
        dashboard = dashboard[0]
    if isinstance(dashboard, str):
        dashboard = json.loads(dashboard)
    dashboard['rayVersion'] = ray.__version__
    print(json.dumps(dashboard))


if __name__ == '__main__':
    main()
