"""Storage-provider adapters: one test per rule of the spec's Resources / provider sections."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from shared.storage_providers import registry
from shared.storage_providers.render import (
    ANNOTATION_SPEC_HASH,
    managed_provider,
    render_managed_objects,
    resource_name,
    service_endpoint,
)
from tests.builders import by_kind
from tests.builders import managed_spec as managed
from tests.builders import rendered_backend as backend


def PASSWORD() -> str:  # noqa: N802 - stands for a constant password source
    return "0" * 64


def container(objs: list[dict[str, Any]], kind: str = "Deployment") -> dict[str, Any]:
    c: dict[str, Any] = by_kind(objs)[kind]["spec"]["template"]["spec"]["containers"][0]
    return c


# ------------------------------------------------------------------ selection


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param({"runtime": "VLLM"}, id="host-only"),
        pytest.param(
            {
                "runtime": "VLLM",
                "remoteStorage": {
                    "provider": "LMCacheServer",
                    "ownership": "External",
                    "endpoint": "h:1",
                },
            },
            id="external",
        ),
        pytest.param(
            {
                "runtime": "VLLM",
                "integration": {"mode": "EventsOnly"},
                "remoteStorage": {"provider": "LMCacheServer", "ownership": "Managed"},
            },
            id="events-only",
        ),
        pytest.param(
            {
                "runtime": "VLLM",
                "type": "SGLangHiCache",
                "remoteStorage": {"provider": "Redis", "ownership": "Managed"},
            },
            id="unsupported-pair",
        ),
        pytest.param(
            {
                "runtime": "SGLang",
                "remoteStorage": {"provider": "LMCacheServer", "ownership": "Managed"},
            },
            id="binding-not-accepted",
        ),
    ],
)
def test_nothing_is_rendered_without_a_managed_provider(spec: dict[str, Any]) -> None:
    assert render_managed_objects(backend(spec)) == []
    assert managed_provider(backend(spec)) is None


def test_select_returns_each_provider_and_rejects_unknown() -> None:
    for name in ("Redis", "LMCacheServer", "Mooncake"):
        assert registry.select_provider(name).provider == name
    with pytest.raises(registry.UnknownProviderError):
        registry.select_provider("Memcached")


@pytest.mark.parametrize(
    ("provider", "protocol"),
    [("Redis", "resp"), ("LMCacheServer", "lm"), ("Mooncake", "mooncakestore")],
)
def test_provider_emits_its_binding_protocol(provider: str, protocol: str) -> None:
    b = registry.select_provider(provider).binding("svc.ns.svc:1")
    assert (b.protocol, b.endpoint) == (protocol, "svc.ns.svc:1")


# ------------------------------------------------------------------ objects


@pytest.mark.parametrize("provider", ["Redis", "LMCacheServer", "Mooncake"])
def test_managed_provider_renders_deployment_and_service_owned_by_the_backend(
    provider: str,
) -> None:
    objs = render_managed_objects(backend(managed(provider)))
    # Plus, for a provider that can be isolated, its password Secret (a provider that
    # requires auth) and NetworkPolicy: tests/unit/tiers/test_tier_isolation.py.
    isolation = {"Redis": ["Secret", "NetworkPolicy"], "LMCacheServer": ["NetworkPolicy"]}
    assert [o["kind"] for o in objs] == [*isolation.get(provider, []), "Deployment", "Service"]
    for o in objs:
        ref = o["metadata"]["ownerReferences"]
        assert ref == [
            {
                "apiVersion": "inferencecache.io/v1alpha1",
                "kind": "CacheBackend",
                "name": "cb",
                "uid": "uid-1",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        assert o["metadata"]["namespace"] == "ns"
        assert o["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "inference-cache"
        assert ANNOTATION_SPEC_HASH in o["metadata"]["annotations"]
    dep, svc = objs[-2:]
    assert dep["spec"]["selector"]["matchLabels"] == svc["spec"]["selector"]
    tmpl_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= tmpl_labels.items()
    assert dep["spec"]["replicas"] == 1


def test_deployment_kind_statefulset_renders_statefulset_governed_by_the_service() -> None:
    objs = by_kind(
        render_managed_objects(
            backend(managed("LMCacheServer", deploymentKind="StatefulSet", replicas=2))
        )
    )
    assert set(objs) == {"NetworkPolicy", "StatefulSet", "Service"}
    sts = objs["StatefulSet"]
    assert sts["spec"]["serviceName"] == objs["Service"]["metadata"]["name"]
    assert sts["spec"]["replicas"] == 2


def test_object_names_are_per_provider_and_fit_dns_labels() -> None:
    long_name = "x" * 80
    objs = render_managed_objects(backend(managed("LMCacheServer"), name=long_name))
    for o in objs:
        assert len(o["metadata"]["name"]) <= 63
        for v in o["metadata"]["labels"].values():
            assert len(v) <= 63
    assert resource_name("a", registry.select_provider("Redis")) != resource_name(
        "a", registry.select_provider("Mooncake")
    )


def test_render_is_pure_and_deterministic() -> None:
    cb = backend(
        managed(
            "Redis",
            remoteStorage={
                "provider": "Redis",
                "ownership": "Managed",
                "redis": {"resources": {"limits": {"memory": "1Gi"}}},
            },
        )
    )
    before = copy.deepcopy(cb.model_dump())
    a = by_kind(render_managed_objects(cb))["Deployment"]
    a["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"] = "99Gi"
    assert cb.model_dump() == before, "rendering must deep-copy provider resources"
    # Deterministic but for a password drawn when there is none yet.
    assert render_managed_objects(cb, generate_password=PASSWORD) == render_managed_objects(
        cb, generate_password=PASSWORD
    )
    assert container(render_managed_objects(cb))["resources"]["limits"]["memory"] == "1Gi"


# ------------------------------------------------------------------ resources


@pytest.mark.parametrize("provider", ["Redis", "LMCacheServer", "Mooncake"])
def test_omitted_resources_block_uses_bounded_4gi_request_8gi_limit(provider: str) -> None:
    res = container(render_managed_objects(backend(managed(provider))))["resources"]
    assert res == {"requests": {"memory": "4Gi"}, "limits": {"memory": "8Gi"}}


def test_explicit_empty_resources_suppresses_the_default() -> None:
    spec = {
        "runtime": "VLLM",
        "remoteStorage": {
            "provider": "LMCacheServer",
            "ownership": "Managed",
            "lmCacheServer": {"resources": {}},
        },
    }
    assert container(render_managed_objects(backend(spec)))["resources"] == {}


def test_typed_resources_are_passed_through() -> None:
    res = {
        "requests": {"memory": "2Gi", "cpu": "1"},
        "limits": {"memory": "3Gi", "nvidia.com/gpu": 1},
    }
    spec = {
        "runtime": "VLLM",
        "remoteStorage": {
            "provider": "Mooncake",
            "ownership": "Managed",
            "mooncake": {"resources": res},
        },
    }
    assert container(render_managed_objects(backend(spec)))["resources"] == res


@pytest.mark.parametrize(
    ("requests", "expected_cpu"),
    [
        (None, "250m"),
        ({"memory": "1Gi"}, "250m"),
        ({"cpu": "0"}, "250m"),
        ({"cpu": 0}, "250m"),
        ({"cpu": "1"}, "1"),
        ({"cpu": "100m"}, "100m"),
    ],
)
def test_autoscaling_fills_cpu_request_when_absent_or_non_positive(
    requests: Any, expected_cpu: str
) -> None:
    block: dict[str, Any] = {"limits": {"memory": "8Gi"}}
    if requests is not None:
        block["requests"] = requests
    spec = managed("Redis", autoscaling={"minReplicas": 1, "maxReplicas": 3})
    spec["remoteStorage"]["redis"] = {"resources": block}
    res = container(render_managed_objects(backend(spec)))["resources"]
    assert res["requests"]["cpu"] == expected_cpu
    # CPU only: never synthesises a memory request.
    if requests is None:
        assert "memory" not in res["requests"]


def test_autoscaling_cpu_fallback_applies_to_the_default_block() -> None:
    res = container(
        render_managed_objects(backend(managed("LMCacheServer", autoscaling={"maxReplicas": 2})))
    )["resources"]
    assert res == {"requests": {"memory": "4Gi", "cpu": "250m"}, "limits": {"memory": "8Gi"}}


# ------------------------------------------------------------------ autoscaling


def test_autoscaling_renders_hpa_v2_with_cpu_target_default_80() -> None:
    objs = by_kind(
        render_managed_objects(
            backend(
                managed(
                    "LMCacheServer", replicas=2, autoscaling={"minReplicas": 2, "maxReplicas": 5}
                )
            )
        )
    )
    hpa = objs["HorizontalPodAutoscaler"]
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "cb-lmcache-server",
    }
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 5)
    assert hpa["spec"]["metrics"][0]["resource"] == {
        "name": "cpu",
        "target": {"type": "Utilization", "averageUtilization": 80},
    }


@pytest.mark.parametrize("kind", ["Deployment", "StatefulSet"])
def test_autoscaled_workload_is_created_at_the_hpa_floor(kind: str) -> None:
    """A backend created with autoscaling starts its workload at
    minReplicas, not at the API server's default of 1."""
    spec = managed(
        "LMCacheServer",
        deploymentKind=kind,
        replicas=1,
        autoscaling={"minReplicas": 3, "maxReplicas": 5},
    )
    objs = by_kind(render_managed_objects(backend(spec)))
    assert objs[kind]["spec"]["replicas"] == 3
    assert objs["HorizontalPodAutoscaler"]["spec"]["minReplicas"] == 3
    # A CR stored without minReplicas: the HPA's own floor of 1 (never spec.replicas).
    del spec["autoscaling"]["minReplicas"]
    spec["replicas"] = 4
    assert by_kind(render_managed_objects(backend(spec)))[kind]["spec"]["replicas"] == 1


def test_autoscaled_workload_keeps_the_live_replica_count_the_hpa_wrote() -> None:
    """After creation replicas belong to the HPA: the render carries the
    live value (so server-side apply neither fights the HPA nor drops the field), and
    the HPA moving it is not drift."""
    from reconciler.steps.diff import needs_apply

    spec = managed("LMCacheServer", autoscaling={"minReplicas": 2, "maxReplicas": 8})
    spec["remoteStorage"]["lmCacheServer"] = {"resources": {"limits": {"memory": "1024Mi"}}}
    cb = backend(spec)
    created = by_kind(render_managed_objects(cb))["Deployment"]
    assert created["spec"]["replicas"] == 2
    live = _live(created)
    live["spec"]["replicas"] = 7  # scaled by the HPA
    again = by_kind(render_managed_objects(cb, {("Deployment", "cb-lmcache-server"): live}))[
        "Deployment"
    ]
    assert again["spec"]["replicas"] == 7
    assert again["metadata"]["annotations"] == created["metadata"]["annotations"]
    assert not needs_apply(again, live), "the HPA's replica count is not drift"
    # Another object's replicas are not this workload's.
    other = {("StatefulSet", "cb-lmcache-server"): live}
    assert by_kind(render_managed_objects(cb, other))["Deployment"]["spec"]["replicas"] == 2


def test_without_autoscaling_replicas_follow_the_spec_whatever_the_live_value() -> None:
    """spec.replicas is ours when no HPA owns the count: a live value is overwritten."""
    from reconciler.steps.diff import needs_apply

    spec = managed("LMCacheServer", replicas=2)
    spec["remoteStorage"]["lmCacheServer"] = {"resources": {"limits": {"memory": "1024Mi"}}}
    cb = backend(spec)
    desired = by_kind(render_managed_objects(cb))["Deployment"]
    live = _live(desired)
    live["spec"]["replicas"] = 7
    again = by_kind(render_managed_objects(cb, {("Deployment", "cb-lmcache-server"): live}))[
        "Deployment"
    ]
    assert again["spec"]["replicas"] == 2
    assert needs_apply(again, live)


def test_autoscaling_target_cpu_is_honoured_and_a_missing_min_falls_back_to_one() -> None:
    objs = by_kind(
        render_managed_objects(
            backend(
                managed(
                    "LMCacheServer",
                    deploymentKind="StatefulSet",
                    replicas=3,
                    autoscaling={"maxReplicas": 5, "targetCPUUtilizationPercent": 55},
                )
            )
        )
    )
    hpa = objs["HorizontalPodAutoscaler"]
    assert hpa["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"] == 55
    # minReplicas is the defaulter's, first apply only; unset, the HPA floor of 1
    # applies ("the reconciler's HPA fallback silently picks 1").
    assert hpa["spec"]["minReplicas"] == 1
    assert hpa["spec"]["scaleTargetRef"]["kind"] == "StatefulSet"


# ------------------------------------------------------------------ template


def test_template_overrides_are_merged_into_the_pod_spec() -> None:
    template = {
        "nodeSelector": {"pool": "cache"},
        "affinity": {"nodeAffinity": {}},
        "tolerations": [{"key": "k", "operator": "Exists"}],
        "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}
        ],
        "imagePullSecrets": [{"name": "reg"}],
        "serviceAccountName": "cache-sa",
        "securityContext": {"runAsNonRoot": True},
        "priorityClassName": "high",
        "schedulerName": "custom",
        "runtimeClassName": "kata",
        "terminationGracePeriodSeconds": 5,
    }
    pod = by_kind(render_managed_objects(backend(managed("Mooncake", template=template))))[
        "Deployment"
    ]["spec"]["template"]["spec"]
    for key, value in template.items():
        if key != "securityContext":
            assert pod[key] == value
    # securityContext is merged field by field over ours (test_provider_hardening).
    assert pod["securityContext"]["runAsNonRoot"] is True
    # Provider defaults survive the merge.
    assert pod["hostNetwork"] is True
    assert pod["containers"][0]["name"] == "mooncake-master"


# ------------------------------------------------------------------ redis


def redis_args(limit: Any) -> list[str]:
    spec = managed("Redis")
    if limit is not None:
        spec["remoteStorage"]["redis"] = {"resources": {"limits": {"memory": limit}}}
    return list(container(render_managed_objects(backend(spec)))["args"])


def test_redis_pinned_image_port_and_resp_binding() -> None:
    objs = by_kind(render_managed_objects(backend(managed("Redis"))))
    c = objs["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert c["image"] == "docker.io/library/redis:7.4-alpine"
    assert c["ports"][0]["containerPort"] == 6379
    assert objs["Service"]["spec"]["ports"][0]["port"] == 6379
    assert "clusterIP" not in objs["Service"]["spec"]


@pytest.mark.parametrize(
    ("limit", "maxmemory"),
    [
        ("1Gi", str(int(1024**3 * 0.8))),
        ("8Gi", str(int(8 * 1024**3 * 0.8))),
        ("1000M", "800000000"),
        (None, str(int(8 * 1024**3 * 0.8))),
    ],
)
def test_redis_maxmemory_is_80_percent_of_memory_limit_with_allkeys_lru(
    limit: Any, maxmemory: str
) -> None:
    args = redis_args(limit)
    assert args[args.index("--maxmemory") + 1] == maxmemory
    assert args[args.index("--maxmemory-policy") + 1] == "allkeys-lru"


def test_redis_without_memory_limit_has_no_maxmemory() -> None:
    spec = managed("Redis")
    spec["remoteStorage"]["redis"] = {"resources": {"requests": {"memory": "1Gi"}}}
    args = container(render_managed_objects(backend(spec)))["args"]
    assert "--maxmemory" not in args
    assert "allkeys-lru" in args


def test_redis_image_override() -> None:
    spec = managed("Redis")
    spec["remoteStorage"]["redis"] = {"image": "example.com/redis:7.2"}
    assert container(render_managed_objects(backend(spec)))["image"] == "example.com/redis:7.2"


# ------------------------------------------------------------------ lmcache server


def test_lmcache_server_pinned_image_never_latest_and_default_command() -> None:
    c = container(render_managed_objects(backend(managed("LMCacheServer"))))
    assert c["image"] == "lmcache/standalone:v0.4.7"
    assert not c["image"].endswith(":latest")
    assert c["command"] == ["lmcache_server", "0.0.0.0", "65432"]
    assert c["ports"][0]["containerPort"] == 65432


def test_lmcache_server_command_override() -> None:
    spec = managed("LMCacheServer")
    spec["remoteStorage"]["lmCacheServer"] = {
        "command": ["python3", "-m", "lmcache.v1.server", "0.0.0.0", "65432"]
    }
    assert container(render_managed_objects(backend(spec)))["command"][:2] == ["python3", "-m"]


# ------------------------------------------------------------------ mooncake


def test_mooncake_master_runs_on_host_network_with_recreate_and_headless_service() -> None:
    objs = by_kind(render_managed_objects(backend(managed("Mooncake"))))
    dep, svc = objs["Deployment"], objs["Service"]
    pod = dep["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True
    assert pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert dep["spec"]["strategy"] == {"type": "Recreate"}
    assert svc["spec"]["clusterIP"] == "None"
    assert [p["port"] for p in svc["spec"]["ports"]] == [50051, 8080]
    c = pod["containers"][0]
    assert c["image"] == "docker.io/kvcacheai/mooncake:0.3.11.post1"
    assert c["command"] == [
        "mooncake_master",
        "--rpc_port=50051",
        "--metrics_port=9003",
        "--enable_http_metadata_server=true",
        "--http_metadata_server_host=0.0.0.0",
        "--http_metadata_server_port=8080",
    ]
    assert c["readinessProbe"] == {"tcpSocket": {"port": 50051}}


def test_mooncake_command_override_never_moves_the_fixed_ports() -> None:
    """remoteStorage.mooncake.command: 'the rendered Service, readiness probe, status
    endpoint, and engine binding use those fixed values and are not derived from
    free-form command text.'"""
    spec = managed("Mooncake")
    spec["remoteStorage"]["mooncake"] = {
        "command": ["mooncake_master", "--rpc_port=6000", "--http_metadata_server_port=7000"]
    }
    objs = by_kind(render_managed_objects(backend(spec)))
    c = container(list(objs.values()))
    assert c["command"] == [
        "mooncake_master",
        "--rpc_port=6000",
        "--http_metadata_server_port=7000",
    ]
    assert [p["containerPort"] for p in c["ports"]] == [50051, 8080, 9003]
    assert c["readinessProbe"] == {"tcpSocket": {"port": 50051}}
    assert [p["port"] for p in objs["Service"]["spec"]["ports"]] == [50051, 8080]
    assert service_endpoint(objs["Service"]) == "cb-mooncake.ns.svc:50051"


def test_mooncake_statefulset_keeps_host_network_without_a_deployment_strategy() -> None:
    """'its Deployment uses the Recreate rollout strategy': `strategy` is a Deployment
    field; a StatefulSet has none (server-side apply rejects undeclared fields), and
    the master's host networking and headless Service do not depend on the kind."""
    objs = by_kind(
        render_managed_objects(backend(managed("Mooncake", deploymentKind="StatefulSet")))
    )
    sts = objs["StatefulSet"]
    assert "strategy" not in sts["spec"]
    assert sts["spec"]["template"]["spec"]["hostNetwork"] is True
    assert objs["Service"]["spec"]["clusterIP"] == "None"


def test_service_endpoint_publishes_the_first_service_port() -> None:
    svc = by_kind(render_managed_objects(backend(managed("Mooncake"))))["Service"]
    assert service_endpoint(svc) == "cb-mooncake.ns.svc:50051"
    assert service_endpoint({"metadata": {"name": "x"}, "spec": {}}) == ""


# ------------------------------------------------------------------ live comparison


def _live(obj: dict[str, Any]) -> dict[str, Any]:
    """What the API server returns: our fields plus defaults and canonical quantities."""
    live = copy.deepcopy(obj)
    live["metadata"]["uid"] = "x"
    live["metadata"]["resourceVersion"] = "7"
    if live["kind"] == "Deployment":
        pod = live["spec"]["template"]["spec"]
        pod["restartPolicy"] = "Always"
        c = pod["containers"][0]
        c["imagePullPolicy"] = "IfNotPresent"
        c["terminationMessagePath"] = "/dev/termination-log"
        c["readinessProbe"]["periodSeconds"] = 10
        c["resources"]["limits"]["memory"] = "1Gi"  # the spec said 1024Mi
        live["spec"]["strategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%"}}
    return live


def test_server_defaults_and_canonical_quantities_are_not_drift() -> None:
    from reconciler.steps.diff import needs_apply

    spec = managed("Redis")
    spec["remoteStorage"]["redis"] = {"resources": {"limits": {"memory": "1024Mi"}}}
    for obj in render_managed_objects(backend(spec)):
        assert not needs_apply(obj, _live(obj)), obj["kind"]


def test_changed_or_removed_fields_are_drift() -> None:
    from reconciler.steps.diff import needs_apply

    dep = by_kind(render_managed_objects(backend(managed("Redis")), generate_password=PASSWORD))[
        "Deployment"
    ]
    live = _live(dep)
    live["spec"]["template"]["spec"]["containers"][0]["image"] = "redis:6"
    assert needs_apply(dep, live), "someone edited a field we own"
    assert needs_apply(dep, None), "missing"
    # A field we stopped setting (nodeSelector removed from spec.template) changes
    # the rendered hash even though the new desired object is a subset of live.
    old = by_kind(
        render_managed_objects(
            backend(managed("Redis", template={"nodeSelector": {"a": "b"}})),
            generate_password=PASSWORD,
        )
    )["Deployment"]
    assert needs_apply(dep, _live(old))
