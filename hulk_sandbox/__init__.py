"""A real local Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler built from the Go module proxy) with kwok simulating Hulk's GPU servers.

``hulk sandbox up|down|status|build`` drives it; :class:`hulk_sandbox.sandbox.Sandbox` is the
Python API the tests' fixture uses. See ``docs/sandbox.md``.
"""
