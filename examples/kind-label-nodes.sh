#!/usr/bin/env bash
# Labels the kind cluster of examples/kind-multi-region.yaml with what its kubelets may not
# set themselves, and optionally advertises fake GPUs. Idempotent; run it after
# `kind create cluster --config examples/kind-multi-region.yaml`.
#
#   examples/kind-label-nodes.sh [--context kind-hulk] [--fake-gpus] [--gpu-taint]
#
# 1. node-role.kubernetes.io/worker="" on every worker (kubernetes.io/ labels outside the
#    kubelet's allow-list can only be set by an admin: see the kind config's header).
# 2. --fake-gpus: status.capacity/allocatable "nvidia.com/gpu" = the node's
#    nvidia.com/gpu.count label, through the Node's status subresource, as Kubernetes'
#    "advertise extended resources for a node" task does. Hulk counts usable GPUs from
#    allocatable, not from the label; without a device plugin the kubelet leaves the
#    value alone. Remove it with the same patch and a null value.
# 3. --gpu-taint: the nvidia.com/gpu=present:NoSchedule taint many GPU pools carry, to see
#    the probe's toleration at work.
set -euo pipefail
context=kind-hulk
fake_gpus=false
gpu_taint=false
while [ $# -gt 0 ]; do
  case $1 in
    --context) context=$2; shift 2 ;;
    --fake-gpus) fake_gpus=true; shift ;;
    --gpu-taint) gpu_taint=true; shift ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done
kc() { kubectl --context "$context" "$@"; }

workers=$(kc get nodes -l '!node-role.kubernetes.io/control-plane' -o name)
[ -n "$workers" ] || { echo "no worker nodes in context $context" >&2; exit 1; }
for node in $workers; do
  kc label --overwrite "$node" node-role.kubernetes.io/worker=
  gpus=$(kc get "$node" -o jsonpath='{.metadata.labels.nvidia\.com/gpu\.count}')
  if [ "$fake_gpus" = true ] && [ -n "$gpus" ]; then
    kc patch "$node" --subresource=status --type=merge -p \
      "{\"status\":{\"capacity\":{\"nvidia.com/gpu\":\"$gpus\"},\"allocatable\":{\"nvidia.com/gpu\":\"$gpus\"}}}"
  fi
  if [ "$gpu_taint" = true ] && [ -n "$gpus" ]; then
    kc taint --overwrite nodes "${node#node/}" nvidia.com/gpu=present:NoSchedule
  fi
done
kc get nodes -o custom-columns='NAME:.metadata.name,REGION:.metadata.labels.topology\.kubernetes\.io/region,ZONE:.metadata.labels.topology\.kubernetes\.io/zone,GPU:.metadata.labels.nvidia\.com/gpu\.product,ALLOCATABLE:.status.allocatable.nvidia\.com/gpu'
