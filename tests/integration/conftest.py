"""Fixtures for tests against the real control plane: the CRD and a fresh namespace."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from kubeio.client import Kube
from tests.kube_helpers import create_namespace, install_crd


@pytest.fixture(scope="session")
def cachebackend_crd(kube_api_client: client.ApiClient) -> dict[str, Any]:
    return install_crd(kube_api_client)


@pytest.fixture
def namespace(kube_api_client: client.ApiClient) -> str:
    return create_namespace(kube_api_client)


@pytest.fixture(scope="session")
def kube(kube_api_client: client.ApiClient) -> Kube:
    """The product's client, as the admin, on the session's control plane."""
    return Kube(kube_api_client)
