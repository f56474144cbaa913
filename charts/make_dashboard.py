"""Writes the chart's Grafana dashboard, charts/hulk/files/dashboards/hulk.json.

The JSON is generated so that its panels stay consistent (ids, grid, datasource); edit this
script, then run ``python charts/make_dashboard.py``. tests/charts/test_chart.py checks
that the file matches this script's output and that every metric a query names is one the
operator (hulk_operator/metrics.py) or the probe (hulk_probe/metrics.py) exports.
``python charts/make_dashboard.py --promtool-tests charts/dashboard-test.yaml OUT`` writes
the promtool tests of some panels' queries with those queries filled in (charts/check.sh
runs them with ``promtool test rules``).

Panels: jobs by phase, plans made, planning time (p50/p95/p99 from the histogram),
predicted step time per job, jobs waiting, faster plans on free servers, the operator's
replicas (which acts, their memory), replans by reason, link latency as a source x target matrix
(now) and as a heat map over time (one row per link), the median latency of each region pair,
unreachable links, probe errors. The link panels show the links from the regions the
``region`` variable selects (the probe's ``source_region`` label).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "hulk" / "files" / "dashboards" / "hulk.json"
DS = {"type": "prometheus", "uid": "${datasource}"}
NS = 'namespace=~"$namespace"'
# One figure per operator: an operator is its metrics Service, the scrape target's `job` and
# `namespace` labels (hulk_jobs has neither of its own, so honorLabels keeps the target's).
# Its replicas' figures are not added (a paused standby clears its hulk_jobs, but both may
# report for a scrape across a handover): the largest is taken, then the operators (two
# releases, say) are added up. Before, max() over every series showed 3 where two releases
# ran 3 and 2 (a user trial); charts/dashboard-test.yaml checks the sums with promtool.
PER_OPERATOR = "max by (namespace, job)"
# Bars of events (plans, replans): each bar the increase over its own interval, the panel's
# step (before, over $__rate_interval, four scrapes at least and longer than the step: one
# plan stood in three bars and the legend's figures; a review), at least two of the chart's
# 30 s scrapes long
BAR_MIN_INTERVAL = "1m"
BAR_WINDOW_WORDS = (
    "at least 1m, two of the chart's 30 s scrapes: raise the panel's min interval with a "
    "longer scrape"
)
# The link panels: the links from the selected regions (the source node's; "All" is .*,
# which matches the links of nodes without a region label too)
REGION = 'source_region=~"$region"'
PER_OPERATOR_PHASE = "max by (namespace, job, phase)"

Panel = dict[str, Any]


def target(expr: str, legend: str = "", ref: str = "A", **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"datasource": DS, "expr": expr, "refId": ref}
    if legend:
        out["legendFormat"] = legend
    out.update(extra)
    return out


def stat(title: str, expr: str, desc: str, unit: str = "short") -> Panel:
    return {
        "type": "stat",
        "title": title,
        "description": desc,
        "datasource": DS,
        "targets": [target(expr, instant=True)],
        "fieldConfig": {
            "defaults": {
                "unit": unit,
                "color": {"mode": "thresholds"},
                "thresholds": {"mode": "absolute", "steps": [{"color": "green", "value": None}]},
            },
            "overrides": [],
        },
        "options": {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "value",
            "graphMode": "none",
            "textMode": "auto",
        },
    }


def timeseries(
    title: str,
    targets: list[dict[str, Any]],
    desc: str,
    unit: str = "short",
    stack: bool = False,
    bars: bool = False,
    min_interval: str | None = None,
) -> Panel:
    custom: dict[str, Any] = {
        "drawStyle": "bars" if bars else "line",
        "lineWidth": 1,
        "fillOpacity": 60 if bars else 10,
        "showPoints": "never",
        "spanNulls": False,
    }
    if stack:
        custom["stacking"] = {"mode": "normal", "group": "A"}
    return {
        "type": "timeseries",
        "title": title,
        "description": desc,
        "datasource": DS,
        **({"interval": min_interval} if min_interval else {}),
        "targets": targets,
        "fieldConfig": {"defaults": {"unit": unit, "custom": custom}, "overrides": []},
        "options": {
            "legend": {
                "displayMode": "table",
                "placement": "right",
                "calcs": ["lastNotNull", "max"],
                "showLegend": True,
            },
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
    }


def panels() -> list[Panel]:
    row1 = [
        stat(
            "Jobs running",
            f'sum({PER_OPERATOR} (hulk_jobs{{phase="Running"}}))',
            "HulkTrainingJobs whose stage pods all run (hulk_jobs gauge), added up over the "
            "operators (releases) Prometheus scrapes; of one operator's replicas, the largest "
            "figure (a paused standby exports none, the leader its own).",
        ),
        stat(
            "Jobs pending",
            f'sum({PER_OPERATOR} (sum without (phase) (hulk_jobs{{phase=~"Pending|Placing"}})))',
            "Jobs waiting for servers or being placed, added up over the operators.",
        ),
        stat(
            "Plans made",
            "sum(increase(hulk_plans_total[$__range])) or vector(0)",
            "Planning results in the selected time range (hulk_plans_total).",
        ),
        stat(
            "Replans",
            "sum(increase(hulk_replans_total[$__range])) or vector(0)",
            "Re-plans of running jobs in the selected range (hulk_replans_total).",
        ),
        stat(
            "Links measured",
            # (a pair once, though an old probe pod's series is scraped during a rollout)
            f"count(max by (source, target) (hulk_probe_one_way_latency_seconds{{{REGION}}})) "
            "or vector(0)",
            "Ordered node pairs with a latency estimate (hulk_probe_one_way_latency_seconds), "
            "from the selected regions.",
        ),
        stat(
            "Links unreachable",
            f"count(max by (source, target) (hulk_probe_peer_reachable{{{REGION}}}) == 0) "
            "or vector(0)",
            "Ordered node pairs whose target stopped answering the probe, from the selected "
            "regions.",
        ),
    ]
    for i, p in enumerate(row1):
        p["gridPos"] = {"h": 4, "w": 4, "x": 4 * i, "y": 0}
    q = "sum by (le) (rate(hulk_planning_seconds_bucket[$__rate_interval]))"
    rest: list[tuple[Panel, int, int]] = [
        (
            timeseries(
                "Jobs by phase",
                [target(f"sum by (phase) ({PER_OPERATOR_PHASE} (hulk_jobs))", "{{phase}}")],
                "HulkTrainingJobs by phase (hulk_jobs), added up over the operators.",
                stack=True,
            ),
            12,
            8,
        ),
        (
            timeseries(
                "Plans by result",
                [
                    target(
                        "sum by (result) (increase(hulk_plans_total[$__interval]))",
                        "{{result}}",
                    )
                ],
                "Planning results by result: placed, unplaced (hulk_plans_total), each bar "
                f"those of its interval ({BAR_WINDOW_WORDS}).",
                bars=True,
                min_interval=BAR_MIN_INTERVAL,
            ),
            12,
            8,
        ),
        (
            timeseries(
                "Planning time",
                [
                    target(f"histogram_quantile(0.5, {q})", "p50", "A"),
                    target(f"histogram_quantile(0.95, {q})", "p95", "B"),
                    target(f"histogram_quantile(0.99, {q})", "p99", "C"),
                    target(
                        "sum(rate(hulk_planning_seconds_sum[$__rate_interval])) / "
                        "sum(rate(hulk_planning_seconds_count[$__rate_interval]))",
                        "mean",
                        "D",
                    ),
                ],
                "Seconds per planning round (hulk_planning_seconds histogram).",
                unit="s",
            ),
            12,
            8,
        ),
        (
            timeseries(
                "Predicted step time per job",
                [
                    target(
                        f"max by (namespace, job) (hulk_predicted_iteration_seconds{{{NS}}})",
                        "{{namespace}}/{{job}}",
                    )
                ],
                "The planner's predicted seconds per training iteration for each placed job "
                "(hulk_predicted_iteration_seconds).",
                unit="s",
            ),
            12,
            8,
        ),
        (
            timeseries(
                "Jobs waiting",
                [
                    target(
                        f"max by (namespace, job) (hulk_job_waiting{{{NS}}})",
                        "{{namespace}}/{{job}}",
                    )
                ],
                "Each job while it is Pending or Placing (hulk_job_waiting, 1; no series "
                "otherwise): the alert HulkJobPending fires once one waited pendingFor.",
                bars=True,
            ),
            12,
            8,
        ),
        (
            timeseries(
                "Faster plan on free servers",
                [
                    target(
                        f"max by (namespace, job) (hulk_job_free_speedup{{{NS}}})",
                        "{{namespace}}/{{job}}",
                    )
                ],
                "How many times faster a running job's step would be planned afresh on its "
                "servers plus the free ones (hulk_job_free_speedup; a series only while above "
                "1). Jobs without spec.regrow keep their servers (a FasterPlanAvailable Event "
                "says so); the alert HulkJobSlowerThanFreeServers fires past freeSpeedup.",
            ),
            12,
            8,
        ),
        (
            timeseries(
                "Operator replicas",
                [
                    target('hulk_operator_active{job=~".+-operator-metrics"}', "active: {{pod}}"),
                    target(
                        'process_resident_memory_bytes{job=~".+-operator-metrics"} / 2^20',
                        "MiB: {{pod}}",
                        ref="B",
                    ),
                ],
                "Which operator replica acts (hulk_operator_active: 1 on the leader, 0 on a "
                "standby its peer pauses) and each one's resident memory in MiB "
                "(process_resident_memory_bytes; raise operator.resources' memory limit "
                "before it is reached).",
            ),
            12,
            8,
        ),
        (
            timeseries(
                "Replans",
                [
                    target(
                        "sum by (reason) (increase(hulk_replans_total[$__interval]))",
                        "{{reason}}",
                    ),
                    target(
                        "sum by (action) (increase(hulk_stage_failures_total[$__interval]))",
                        "stage failed: {{action}}",
                    ),
                ],
                "Re-plans of running jobs by cause, e.g. node deleted, NotReady, cordoned "
                "(hulk_replans_total), and stage pods the kubelet ended as Failed, created "
                "again or failing their job (hulk_stage_failures_total); each bar those of "
                f"its interval ({BAR_WINDOW_WORDS}).",
                bars=True,
                min_interval=BAR_MIN_INTERVAL,
            ),
            12,
            8,
        ),
        (
            timeseries(
                "Probe errors",
                [
                    target(
                        f"sum by (reason) (rate(hulk_probe_errors_total{{{REGION}}}"
                        "[$__rate_interval]))",
                        "{{reason}}",
                    )
                ],
                "Failed probes per second by reason: connect, timeout, io, garbled "
                "(hulk_probe_errors_total), from the selected regions.",
                unit="ops",
            ),
            12,
            8,
        ),
        (
            timeseries(
                "Probe status writes",
                [
                    target(
                        "sum(rate(hulk_probe_status_write_bytes_total[$__rate_interval]))",
                        "all probes",
                    )
                ],
                "Bytes per second all probes write into their NodeLatency statuses, which "
                "etcd keeps for 5-10 minutes (hulk_probe_status_write_bytes_total); the "
                "probes keep it within their --write-budget (chart: probe.writeBudget, "
                "500 KB/s) up to --max-publish-interval (docs/probe.md, Write rate).",
                unit="Bps",
            ),
            12,
            8,
        ),
        (
            timeseries(
                "Probe publish spacing",
                [
                    target("max(hulk_probe_publish_interval_seconds)", "longest"),
                    target("min(hulk_probe_publish_interval_seconds)", "shortest", ref="B"),
                ],
                "Seconds between two regular status writes of a probe "
                "(hulk_probe_publish_interval_seconds): the publish interval, longer on "
                "large clusters within the write budget. Reports older than the operator's "
                "--latency-max-age-s are not used.",
                unit="s",
            ),
            12,
            8,
        ),
        (matrix(), 12, 12),
        (heatmap(), 12, 12),
        (region_matrix(), 12, 12),
    ]
    out, x, y = row1, 0, 4
    for panel, w, h in rest:
        if x + w > 24:
            x, y = 0, y + h
        panel["gridPos"] = {"h": h, "w": w, "x": x, "y": y}
        out.append(panel)
        x += w
    for i, p in enumerate(out, start=1):
        p["id"] = i
    return out


def matrix() -> Panel:
    """The latest one-way latency of every link as a source x target table with coloured
    cells: a heat map of the cluster's links right now."""
    return {
        "type": "table",
        "title": "Link latency heat map: source x target (ms, now)",
        "description": "Latest one-way latency (median round trip / 2 of a 64-byte message) "
        "from each source node (row) to each target node (column), measured "
        "by the probes (hulk_probe_one_way_latency_seconds); the sources in the selected "
        "regions.",
        "datasource": DS,
        "targets": [
            target(
                f"max by (source, target) (hulk_probe_one_way_latency_seconds{{{REGION}}}) * 1000",
                format="table",
                instant=True,
            )
        ],
        **_matrix("source", "target"),
    }


def _matrix(row: str, column: str) -> Panel:
    """A table panel's parts that lay an instant query's values out as a ``row`` x
    ``column`` matrix of milliseconds, coloured by value."""
    return {
        "transformations": [
            {
                "id": "groupingToMatrix",
                "options": {"columnField": column, "rowField": row, "valueField": "Value"},
            }
        ],
        "fieldConfig": {
            "defaults": {
                "unit": "ms",
                "decimals": 1,
                "noValue": "-",
                "color": {"mode": "continuous-GrYlRd"},
                "custom": {"align": "center", "cellOptions": {"type": "color-background"}},
            },
            "overrides": [
                {
                    "matcher": {"id": "byName", "options": f"{row}\\{column}"},
                    "properties": [{"id": "custom.cellOptions", "value": {"type": "auto"}}],
                }
            ],
        },
        "options": {"showHeader": True, "cellHeight": "sm"},
    }


def region_matrix() -> Panel:
    """The median latency of the links from each region to each other region (and within
    each), now: what a multi-region cluster's planner chooses between."""
    # (a pair's series from two scrapes, an old probe pod's during a rollout, counted once,
    # as the link panels do with max by (source, target))
    links = (
        "max by (source, target, source_region, target_region) "
        f"(hulk_probe_one_way_latency_seconds{{{REGION}}})"
    )
    median = f"quantile by (source_region, target_region) (0.5, {links}) * 1000"
    # (Prometheus drops an empty label: a node without a region label would make a row and
    # column without a name; "unlabelled", as the operator's inventory calls its region)
    for label in ("source_region", "target_region"):
        median = f'label_replace({median}, "{label}", "unlabelled", "{label}", "")'
    return {
        "type": "table",
        "title": "Median one-way latency by region pair",
        "description": "Median of the latest one-way latencies of the links from each source "
        "region (row) to each target region (column; the diagonal: within a region), of the "
        "probes' hulk_probe_one_way_latency_seconds by its labels source_region and "
        "target_region (the nodes' topology.kubernetes.io/region; unlabelled where a node "
        "has none); the source regions selected.",
        "datasource": DS,
        "targets": [target(median, format="table", instant=True)],
        **_matrix("source_region", "target_region"),
    }


def heatmap() -> Panel:
    """One row per link, time on the x axis, colour = latency."""
    return {
        "type": "heatmap",
        "title": "Link latency over time (ms, one row per link)",
        "description": "One-way latency of each source -> target link over time "
        "(hulk_probe_one_way_latency_seconds), from the selected regions; a row turning "
        "red is a link slowing down.",
        "datasource": DS,
        "targets": [
            target(
                f"max by (source, target) (hulk_probe_one_way_latency_seconds{{{REGION}}}) * 1000",
                "{{source}} -> {{target}}",
            )
        ],
        "options": {
            "calculate": False,
            "rowsFrame": {"layout": "unknown"},
            "color": {
                "mode": "scheme",
                "scheme": "RdYlGn",
                "reverse": True,
                "scale": "exponential",
                "exponent": 0.5,
                "steps": 64,
                "fill": "dark-orange",
            },
            "cellGap": 1,
            "yAxis": {"axisPlacement": "left"},
            "cellValues": {"unit": "ms", "decimals": 1},
            "legend": {"show": True},
            "tooltip": {"show": True, "yHistogram": False},
            "exemplars": {"color": "rgba(255,0,255,0.7)"},
            "showValue": "never",
        },
        "fieldConfig": {"defaults": {"unit": "ms"}, "overrides": []},
    }


def _label_variable(name: str, label: str, query: str) -> Panel:
    """A dashboard variable of a label's values (``query``: ``label_values(...)``), any
    number of them selected, All matching every value (``.*``)."""
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DS,
        "query": {"query": query, "refId": name},
        "definition": query,
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "current": {},
        "refresh": 2,
        "sort": 1,
        "hide": 0,
    }


def dashboard() -> dict[str, Any]:
    return {
        "uid": "hulk-overview",
        "title": "Hulk: placement and links",
        "description": "Hulk's operator (plans, planning time, predicted step time, replans) "
        "and probe (node-to-node latency). Shipped by the hulk Helm chart.",
        "tags": ["hulk", "gpu", "training"],
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "timezone": "browser",
        "annotations": {"list": []},
        "links": [],
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Data source",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                    "refresh": 1,
                },
                # (the jobs placed and those waiting: a namespace whose jobs all waited
                # was missing, and so were its jobs from "Jobs waiting"; a review)
                _label_variable(
                    "namespace",
                    "Job namespace (per-job panels)",
                    'label_values({__name__=~"hulk_predicted_iteration_seconds|hulk_job_waiting"}'
                    ", namespace)",
                ),
                # (.*, not the values joined: it matches the links of unlabelled nodes)
                _label_variable(
                    "region",
                    "Source region (link panels)",
                    "label_values(hulk_probe_one_way_latency_seconds, source_region)",
                ),
            ]
        },
        "panels": panels(),
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2, ensure_ascii=False) + "\n"


# Grafana's variables in the queries, as the promtool tests evaluate them.
GRAFANA_VARIABLES = {
    "$__range": "1h",
    "$__rate_interval": "5m",
    "$__interval": "1m",
    "$namespace": ".*",
    "$region": ".*",
}


def panel_expr(title: str) -> str:
    """The query of the panel titled ``title`` (``Title/B``: its target B), with Grafana's
    variables replaced as GRAFANA_VARIABLES says."""
    name, _, ref = title.partition("/")
    found = [p for p in panels() if p["title"] == name]
    if len(found) != 1:
        raise SystemExit(f"dashboard: {len(found)} panels titled {name!r}")
    targets = [t for t in found[0]["targets"] if not ref or t["refId"] == ref]
    if len(targets) != 1:
        raise SystemExit(f"dashboard: panel {name!r} has {len(targets)} targets {ref or ''}")
    expr = str(targets[0]["expr"])
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    return expr


def promtool_tests(text: str) -> str:
    """A promtool test file whose ``expr: "panel: <title>"`` entries (charts/dashboard-test.yaml)
    are replaced by that panel's query, for ``promtool test rules``."""
    import yaml

    doc = yaml.safe_load(text)
    for test in doc.get("tests") or []:
        for case in test.get("promql_expr_test") or []:
            if str(case.get("expr", "")).startswith("panel: "):
                case["expr"] = panel_expr(case["expr"].removeprefix("panel: "))
    return str(yaml.safe_dump(doc, sort_keys=False))


def main(argv: list[str]) -> int:
    if argv[:1] == ["--promtool-tests"] and len(argv) == 3:
        Path(argv[2]).write_text(promtool_tests(Path(argv[1]).read_text()))
        return 0
    text = render()
    if argv[:1] == ["--check"]:
        same = OUT.is_file() and OUT.read_text() == text
        print(f"{OUT}: {'up to date' if same else 'STALE: run python charts/make_dashboard.py'}")
        return 0 if same else 1
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
