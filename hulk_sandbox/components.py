"""Command lines of the sandbox's five components, all on 127.0.0.1 (no other address).

Order of start: etcd, kube-apiserver, then kube-controller-manager, kube-scheduler and kwok
together. Each function returns ``argv``; :mod:`hulk_sandbox.processes` runs them.
"""

from __future__ import annotations

import socket
from dataclasses import asdict, dataclass
from pathlib import Path

from hulk_sandbox.certs import FRONT_PROXY_CN, SERVICE_CIDR, Pki
from hulk_sandbox.nodes import FAKE_SELECTOR

HOST = "127.0.0.1"
STAGES = (
    "node-initialize",
    "node-heartbeat-with-lease",
    "pod-ready",
    "pod-complete",
    "pod-delete",
)
NODE_LEASE_SECONDS = 40
# kwok works 4 nodes/pods at a time by default: 1,000 nodes then take a minute to be Ready.
KWOK_CONFIGURATION = """
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  nodePlayStageParallelism: 32
  nodeLeaseParallelism: 16
  podPlayStageParallelism: 16
"""
# Clients of the API server may go faster than client-go's default 20/30 QPS: 1,000 nodes.
_QPS = ["--kube-api-qps=500", "--kube-api-burst=1000"]


@dataclass(frozen=True)
class Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int
    kwok: int

    @classmethod
    def free(cls) -> Ports:
        """Ports the kernel says are free now (bound together, so all distinct)."""
        socks = []
        try:
            for _ in range(6):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.bind((HOST, 0))
                socks.append(s)
            return cls(*(s.getsockname()[1] for s in socks))
        finally:
            for s in socks:
                s.close()

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def etcd(binary: Path, data_dir: Path, ports: Ports) -> list[str]:
    client = f"http://{HOST}:{ports.etcd_client}"
    peer = f"http://{HOST}:{ports.etcd_peer}"
    return [
        str(binary),
        "--name=hulk-sandbox",
        f"--data-dir={data_dir}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=hulk-sandbox={peer}",
        "--unsafe-no-fsync",  # a throw-away store: speed over durability
        "--auto-compaction-retention=1",
        "--quota-backend-bytes=4294967296",
        "--log-level=warn",
    ]


def apiserver(binary: Path, pki: Pki, ports: Ports) -> list[str]:
    return [
        str(binary),
        "kube-apiserver",
        f"--etcd-servers=http://{HOST}:{ports.etcd_client}",
        f"--bind-address={HOST}",
        f"--advertise-address={HOST}",
        f"--secure-port={ports.apiserver}",
        f"--tls-cert-file={pki.apiserver_cert}",
        f"--tls-private-key-file={pki.apiserver_key}",
        f"--client-ca-file={pki.ca_cert}",
        # The aggregation layer (front proxy), as kubeadm sets it up.
        f"--requestheader-client-ca-file={pki.ca_cert}",
        f"--requestheader-allowed-names={FRONT_PROXY_CN}",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={pki.front_proxy_cert}",
        f"--proxy-client-key-file={pki.front_proxy_key}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={pki.sa_pub}",
        f"--service-account-signing-key-file={pki.sa_key}",
        "--authorization-mode=RBAC",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        # A loopback address cannot be an Endpoints address: leave `kubernetes` without one.
        "--endpoint-reconciler-type=none",
        "--allow-privileged=true",
        "--enable-priority-and-fairness=false",
        "--max-requests-inflight=0",
        "--max-mutating-requests-inflight=0",
        "--profiling=false",
        "--v=1",
    ]


def controller_manager(binary: Path, pki: Pki, kubeconfig: Path, ports: Ports) -> list[str]:
    return [
        str(binary),
        "kube-controller-manager",
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--leader-elect=false",
        f"--bind-address={HOST}",
        f"--secure-port={ports.controller_manager}",
        f"--root-ca-file={pki.ca_cert}",
        f"--service-account-private-key-file={pki.sa_key}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--use-service-account-credentials=false",
        "--profiling=false",
        *_QPS,
        "--v=1",
    ]


def scheduler(binary: Path, kubeconfig: Path, ports: Ports) -> list[str]:
    return [
        str(binary),
        "kube-scheduler",
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--leader-elect=false",
        f"--bind-address={HOST}",
        f"--secure-port={ports.scheduler}",
        "--profiling=false",
        *_QPS,
        "--v=1",
    ]


def write_kwok_config(path: Path) -> None:
    """kwok v0.8.0 has no built-in stages: give it node initialize and heartbeat (with a
    lease), pod ready, pod complete (pods of Jobs) and pod delete (without which pods stay
    Terminating and namespaces never go)."""
    folder = Path(__file__).parent / "stages"
    docs = [KWOK_CONFIGURATION] + [(folder / f"{name}.yaml").read_text() for name in STAGES]
    path.write_text("\n---\n".join(d.strip() for d in docs) + "\n")


def kwok(binary: Path, kubeconfig: Path, config: Path, ports: Ports) -> list[str]:
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--config={config}",
        "--manage-all-nodes=false",
        f"--manage-nodes-with-annotation-selector={FAKE_SELECTOR}",
        f"--node-lease-duration-seconds={NODE_LEASE_SECONDS}",
        f"--server-address={HOST}:{ports.kwok}",
        f"--node-port={ports.kwok}",
        "--cidr=10.0.0.1/16",
        "--node-ip=10.255.0.1",
        "--v=INFO",
    ]
