#!/usr/bin/env bash
# Copies the CRDs' sources of truth into the chart, which renders them with .Files.Get (a
# chart cannot read outside its folder), and into the package, whose `hulk operator
# --install-crds` installs them from an installed wheel or the image too:
#   crds/*.yaml                      -> charts/hulk/files/crds/   (HulkTrainingJob, NodeLatency)
#                                    -> hulk_operator/crds/
#   hulk_operator/kopf-peering.yaml  -> charts/hulk/files/kopf/   (kopf's peering CRDs)
# Run it after changing a CRD; tests/charts/test_chart.py and charts/check.sh fail while a
# copy differs. Also removes copies whose source is gone.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
src=$root/crds
for dst in "$root/charts/hulk/files/crds" "$root/hulk_operator/crds"; do
  mkdir -p "$dst"
  for f in "$dst"/*.yaml; do
    [ -e "$f" ] || continue
    [ -e "$src/$(basename "$f")" ] || { rm -f "$f"; echo "removed $f (no longer in crds/)"; }
  done
  for f in "$src"/*.yaml; do
    [ -e "$f" ] || continue
    if ! cmp -s "$f" "$dst/$(basename "$f")"; then
      cp "$f" "$dst/"
      echo "copied crds/$(basename "$f") -> ${dst#"$root/"}/"
    fi
  done
done
kopf_src=$root/hulk_operator/kopf-peering.yaml
kopf_dst=$root/charts/hulk/files/kopf/kopf-peering.yaml
mkdir -p "$(dirname "$kopf_dst")"
if [ -e "$kopf_src" ] && ! cmp -s "$kopf_src" "$kopf_dst"; then
  cp "$kopf_src" "$kopf_dst"
  echo "copied hulk_operator/kopf-peering.yaml -> charts/hulk/files/kopf/"
fi
