// Validates the chart's Prometheus objects offline. Reads JSON lines on stdin, each a
// rendered ServiceMonitor or PrometheusRule, or {"dashboard": PATH} for a Grafana dashboard:
//   - ServiceMonitors and PrometheusRules against prometheus-operator's schema, as shipped by
//     @kubernetes-models/prometheus-operator (validators compiled from the monitoring.coreos.com
//     CRDs; kubeconform has no offline schema for them);
//   - every PromQL expression (each rule's `expr`, each dashboard target's `expr`) with
//     Prometheus' own PromQL grammar, @prometheus-io/lezer-promql (the parser of Prometheus'
//     web UI); Grafana's $__range, $__rate_interval and $variables are replaced first.
// charts/check.sh installs the packages into the cache and pipes the objects here. Exit
// status 1 if anything is invalid.
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { PrometheusRule } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule";
import { ServiceMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor";
import { parser } from "@prometheus-io/lezer-promql";

let bad = 0;
const counts = { ServiceMonitor: 0, PrometheusRule: 0, expressions: 0 };

function promqlError(expr) {
  const text = expr.replace(/\$__(range|rate_interval|interval)/g, "5m").replace(/\$\w+/g, "x");
  let at = -1;
  parser.parse(text).iterate({
    enter: (node) => {
      if (at < 0 && node.type.isError) at = node.from;
      return at < 0;
    },
  });
  return at < 0 ? null : `syntax error at ${at}: ${JSON.stringify(text.slice(Math.max(0, at - 20), at + 20))}`;
}

function checkExpr(where, expr) {
  counts.expressions += 1;
  const err = promqlError(expr);
  if (err) {
    bad += 1;
    console.error(`${where}: PromQL ${JSON.stringify(expr)} is INVALID: ${err}`);
  }
}

function exprs(obj, where) {
  if (Array.isArray(obj)) obj.forEach((v) => exprs(v, where));
  else if (obj && typeof obj === "object") {
    if (typeof obj.expr === "string") checkExpr(`${where} ${obj.alert ?? obj.refId ?? ""}`, obj.expr);
    Object.values(obj).forEach((v) => exprs(v, where));
  }
}

for await (const line of createInterface({ input: process.stdin })) {
  if (!line.trim()) continue;
  const obj = JSON.parse(line);
  if (obj.dashboard) {
    exprs(JSON.parse(readFileSync(obj.dashboard, "utf8")), `dashboard ${obj.dashboard}`);
    continue;
  }
  const name = `${obj.kind} ${obj.metadata?.namespace ?? ""}/${obj.metadata?.name ?? "?"}`;
  const Kind = { ServiceMonitor, PrometheusRule }[obj.kind];
  counts[obj.kind] += 1;
  try {
    new Kind(obj).validate();
    console.log(`${name} is valid`);
  } catch (err) {
    bad += 1;
    console.error(`${name} is INVALID: ${err.message ?? err}`);
  }
  if (obj.kind === "PrometheusRule") exprs(obj.spec, name);
}
console.log(
  `${counts.ServiceMonitor} ServiceMonitors, ${counts.PrometheusRule} PrometheusRules and ` +
    `${counts.expressions} PromQL expressions checked, ${bad} invalid`,
);
process.exit(bad ? 1 : 0);
