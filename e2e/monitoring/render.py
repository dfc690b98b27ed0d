#!/usr/bin/env python3
"""Renders celgate's Grafana dashboard panels to one PNG, from the range query results the
monitoring e2e test writes (`CELGATE_DASHBOARD_DATA=<file>`, see `make dashboard-png`).

    python3 e2e/monitoring/render.py <dashboard-data.json> <out.png>

A tool for looking at the dashboard without Grafana, not a test. Needs matplotlib
(`pip install matplotlib`).
"""

import json
import math
import sys
from datetime import datetime

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit("render.py needs matplotlib: pip install matplotlib")


def legend(fmt, metric):
    """Grafana's legendFormat: {{label}} replaced by the series' label."""
    out = fmt or "{}"
    for key, value in metric.items():
        out = out.replace("{{" + key + "}}", value)
    return out


def series(target):
    for result in target["result"] or []:
        points = [(float(t), float(v)) for t, v in result.get("values", [])]
        points = [(t, v) for t, v in points if math.isfinite(v)]
        if points:
            yield legend(target["legend"], result["metric"]), points


def main(data_path, out_path):
    with open(data_path) as f:
        panels = json.load(f)["panels"]
    columns = 3
    rows = math.ceil(len(panels) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(6 * columns, 3.4 * rows), squeeze=False)
    fig.suptitle("celgate (Grafana dashboard config/monitoring/dashboard.json, rendered from a real run)")
    for ax, panel in zip(axes.flat, panels):
        ax.set_title(panel["title"], fontsize=10)
        drawn = 0
        for target in panel["targets"]:
            for name, points in series(target):
                times = [datetime.fromtimestamp(t) for t, _ in points]
                ax.plot(times, [v for _, v in points], label=name[:48], linewidth=1.2)
                drawn += 1
        if drawn == 0:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
        ax.set_ylabel(panel["unit"], fontsize=8)
        ax.tick_params(labelsize=7)
        ax.xaxis.set_major_formatter(matplotlib.dates.DateFormatter("%H:%M:%S"))
        if 0 < drawn <= 8:
            ax.legend(fontsize=6, loc="best")
        elif drawn > 8:
            ax.text(0.01, 0.95, f"{drawn} series", fontsize=7, transform=ax.transAxes, va="top")
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(out_path, dpi=80)
    print(f"wrote {out_path}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
