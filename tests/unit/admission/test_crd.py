"""The checked-in CRD is generated from the models and matches the spec's identity rules."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from shared.api.crd import crd, crd_yaml
from shared.api.models import CacheBackend, dump
from tests.samples import CRD_PATH, sample_backends


def _spec_schema() -> dict[str, Any]:
    return crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


def test_checked_in_crd_matches_the_models() -> None:
    """Drift check: regenerate with `icache crd > manifests/crd/inferencecache.io_cachebackends.yaml`."""
    assert yaml.safe_load(CRD_PATH.read_text()) == yaml.safe_load(crd_yaml())


def test_identity_group_version_kind_plural_shortname_scope_status() -> None:
    """Spec "Identity": inferencecache.io / v1alpha1 / CacheBackend / cachebackends / cb."""
    spec = crd()["spec"]
    assert spec["group"] == "inferencecache.io"
    assert spec["names"]["kind"] == "CacheBackend"
    assert spec["names"]["plural"] == "cachebackends"
    assert spec["names"]["shortNames"] == ["cb"]
    assert spec["scope"] == "Namespaced"
    (version,) = spec["versions"]
    assert version["name"] == "v1alpha1"
    assert version["served"]
    assert version["storage"]
    assert version["subresources"] == {"status": {}}


def test_literal_defaults_the_api_server_stamps() -> None:
    """Spec "Defaulting": type, deploymentKind, replicas, integration.{mode,role,failOpen},
    observation.firstEventTimeout ride on schema defaults."""
    props = _spec_schema()["properties"]
    assert props["type"]["default"] == "LMCache"
    assert props["deploymentKind"]["default"] == "Deployment"
    assert props["replicas"]["default"] == 1
    integration = props["integration"]["properties"]
    assert integration["mode"]["default"] == "Offload"
    assert integration["role"]["default"] == "ReadWrite"
    assert integration["failOpen"]["default"] is True
    assert props["observation"]["properties"]["firstEventTimeout"]["default"] == "5m"
    # Nothing else is stamped: omitted optional objects stay omitted.
    assert "default" not in props["allowCrossNamespace"]
    assert "default" not in props["autoscaling"]["properties"]["targetCPUUtilizationPercent"]


def test_enums_exclude_removed_type_spellings() -> None:
    """Spec "Cache type validation": type is a closed enum; Mooncake and External are not types."""
    props = _spec_schema()["properties"]
    assert props["runtime"]["enum"] == ["VLLM", "SGLang"]
    assert props["type"]["enum"] == ["LMCache", "SGLangHiCache", "VLLMOffloading"]
    rs = props["remoteStorage"]["properties"]
    assert rs["provider"]["enum"] == ["Redis", "LMCacheServer", "Mooncake"]
    assert rs["ownership"]["enum"] == ["Managed", "External"]
    assert props["deploymentKind"]["enum"] == ["Deployment", "StatefulSet"]


def test_minimums_ranges_and_required_fields() -> None:
    """Spec table: replicas >= 0; autoscaling min/max >= 1; target CPU 1-100; runtime and
    autoscaling.maxReplicas required."""
    schema = _spec_schema()
    props = schema["properties"]
    assert schema["required"] == ["runtime"]
    assert props["replicas"]["minimum"] == 0
    auto = props["autoscaling"]
    assert auto["required"] == ["maxReplicas"]
    assert auto["properties"]["minReplicas"]["minimum"] == 1
    assert auto["properties"]["maxReplicas"]["minimum"] == 1
    cpu = auto["properties"]["targetCPUUtilizationPercent"]
    assert (cpu["minimum"], cpu["maximum"]) == (1, 100)
    assert props["lmCache"]["properties"]["workerPort"]["maximum"] == 65535


def test_removed_fields_are_not_served() -> None:
    """Spec "Breaking API cleanup": integration.engine, integration.firstEventTimeout,
    backendConfig, top-level resources, storage, status.health and status.capacity are gone."""
    root = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    spec_props = root["spec"]["properties"]
    for removed in ("backendConfig", "resources", "storage"):
        assert removed not in spec_props
    assert "engine" not in spec_props["integration"]["properties"]
    assert "firstEventTimeout" not in spec_props["integration"]["properties"]
    assert "health" not in root["status"]["properties"]
    assert "capacity" not in root["status"]["properties"]


def _walk_properties(schema: dict[str, Any], path: str) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for name, prop in (schema.get("properties") or {}).items():
        found.append((f"{path}.{name}", prop))
        found.extend(_walk_properties(prop, f"{path}.{name}"))
        items = prop.get("items")
        if isinstance(items, dict):
            found.extend(_walk_properties(items, f"{path}.{name}[]"))
    return found


def test_every_spec_and_status_field_has_a_description() -> None:
    """kubectl explain shows these descriptions; none may be missing."""
    root = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    missing = [
        path
        for path, prop in _walk_properties(root, "")
        if path not in (".metadata",) and not prop.get("description")
    ]
    assert missing == []


def test_printer_columns_follow_the_spec() -> None:
    """Spec: Ready from the Ready condition, the endpoint, Matched, PREFIXES and LASTEVENT."""
    cols = {c["name"]: c for c in crd()["spec"]["versions"][0]["additionalPrinterColumns"]}
    assert cols["Ready"]["jsonPath"] == '.status.conditions[?(@.type=="Ready")].status'
    assert cols["Endpoint"]["jsonPath"] == ".status.endpoint"
    assert cols["Matched"]["jsonPath"] == ".status.matchedEnginePods"
    assert cols["Prefixes"]["jsonPath"] == ".status.indexParticipation.prefixCount"
    assert cols["LastEvent"]["jsonPath"] == ".status.indexParticipation.lastEventAt"


@pytest.mark.parametrize(("name", "doc"), sample_backends(), ids=[n for n, _ in sample_backends()])
def test_samples_round_trip_unchanged(name: str, doc: dict[str, Any]) -> None:
    """Pointer semantics: an omitted optional object stays omitted when dumped."""
    assert dump(CacheBackend.model_validate(doc)) == doc
