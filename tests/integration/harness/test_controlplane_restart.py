"""The harness restarts kube-apiserver and etcd in place (the chaos tests inject both
as faults): same ports, same data, same audit log, and clients reconnect."""

from __future__ import annotations

import uuid

from kubeio import client as k
from tests.harness.controlplane import ControlPlane

CONFIGMAPS = k.Resource("", "v1", "configmaps", "ConfigMap")


def test_apiserver_and_etcd_restart_in_place_keeping_objects_and_the_audit_log(
    control_plane: ControlPlane,
) -> None:
    kube = k.Kube(control_plane.api_client())
    name = f"restart-{uuid.uuid4().hex[:8]}"
    url, pids = control_plane.server_url, control_plane.pids
    try:
        kube.create(CONFIGMAPS, "default", {"metadata": {"name": name}, "data": {"a": "1"}})
        control_plane.restart_etcd(kill=True)
        assert control_plane.pids["etcd"] != pids["etcd"]
        assert kube.get(CONFIGMAPS, "default", name)["data"] == {"a": "1"}, "etcd kept its data"

        mark = control_plane.audit_offset()
        control_plane.restart_apiserver()
        assert control_plane.server_url == url
        assert control_plane.pids["kube-apiserver"] != pids["kube-apiserver"]
        assert kube.get(CONFIGMAPS, "default", name)["data"] == {"a": "1"}
        control_plane.audit_barrier(mark)
        assert control_plane.audit_events(mark, resource="configmaps", name=name, verbs=["get"])
    finally:
        kube.delete(CONFIGMAPS, "default", name)
        kube.close()
