// Validates ServiceMonitor objects (JSON lines on stdin) against prometheus-operator's
// schema, as shipped by the npm package @kubernetes-models/prometheus-operator (validators
// compiled from the monitoring.coreos.com CRDs). kubeconform has no offline schema for
// them; charts/check.sh installs the package into the cache and pipes the rendered
// ServiceMonitors here. Exit status 1 if any is invalid.
import { createInterface } from "node:readline";
import { ServiceMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor";

let bad = 0;
let seen = 0;
for await (const line of createInterface({ input: process.stdin })) {
  if (!line.trim()) continue;
  const obj = JSON.parse(line);
  const name = `${obj.metadata?.namespace ?? ""}/${obj.metadata?.name ?? "?"}`;
  seen += 1;
  try {
    new ServiceMonitor(obj).validate();
    console.log(`ServiceMonitor ${name} is valid`);
  } catch (err) {
    bad += 1;
    console.error(`ServiceMonitor ${name} is INVALID: ${err.message ?? err}`);
  }
}
console.log(`ServiceMonitors: ${seen} checked, ${bad} invalid`);
process.exit(bad ? 1 : 0);
