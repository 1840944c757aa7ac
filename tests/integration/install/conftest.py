"""Fixtures the install modules share: a server-side applier on the session's control
plane."""

from __future__ import annotations

import pytest
from kubernetes import client

from tests.integration.manifest_apply import Applier


@pytest.fixture(scope="module")
def applier(kube_api_client: client.ApiClient) -> Applier:
    """Server-side apply (and dry run) of any manifest, as the admin; its discovery is
    cached per module (a module may install CRDs first)."""
    return Applier(kube_api_client)
