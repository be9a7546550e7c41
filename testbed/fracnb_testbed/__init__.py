"""A local Kubernetes testbed: a real control plane, KWOK nodes and a local process runner.

``fracnb-testbed up`` starts etcd, kube-apiserver, kube-scheduler and KWOK on 127.0.0.1,
creates the fake GPU nodes of a cluster description and starts the runner that executes
pods bound to ``fracnb.io/runner: local`` nodes as real local processes.
"""

from fracnb_testbed.errors import TestbedError

__all__ = ["TestbedError"]
