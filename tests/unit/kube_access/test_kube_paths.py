"""One table of API paths for every resource the project touches
(``kubeio.resources``), built from shared/constants.py.
"""

from __future__ import annotations

from kubeio.resources import CACHEBACKENDS, PODS, SUBJECT_ACCESS_REVIEWS
from shared import constants as c

# ------------------------------------------------------------------ the paths


def test_the_cachebackend_paths_come_from_the_constants() -> None:
    """Rule (docs/api.md, API identity): group inferencecache.io, version v1alpha1,
    plural cachebackends, as shared/constants.py spells them."""
    assert (CACHEBACKENDS.group, CACHEBACKENDS.version) == (c.GROUP, c.VERSION)
    assert (CACHEBACKENDS.plural, CACHEBACKENDS.kind) == (c.PLURAL, c.KIND)
    assert CACHEBACKENDS.api_version == c.API_VERSION
    assert (
        CACHEBACKENDS.collection("team-a")
        == "/apis/inferencecache.io/v1alpha1/namespaces/team-a/cachebackends"
    )
    assert CACHEBACKENDS.collection(None) == "/apis/inferencecache.io/v1alpha1/cachebackends"
    assert (
        CACHEBACKENDS.item("team-a", "b1")
        == "/apis/inferencecache.io/v1alpha1/namespaces/team-a/cachebackends/b1"
    )


def test_paths_of_core_and_cluster_scoped_resources() -> None:
    """Rule (Kubernetes API paths): the core group is under /api/v1; a cluster-scoped
    resource has no namespace segment."""
    assert PODS.item("ns", "p") == "/api/v1/namespaces/ns/pods/p"
    assert SUBJECT_ACCESS_REVIEWS.collection() == (
        "/apis/authorization.k8s.io/v1/subjectaccessreviews"
    )
    assert SUBJECT_ACCESS_REVIEWS.collection("ns") == SUBJECT_ACCESS_REVIEWS.collection()
    assert SUBJECT_ACCESS_REVIEWS.api_version == "authorization.k8s.io/v1"


def test_namespace_and_name_are_one_path_segment_each() -> None:
    """Rule (RFC 3986 path segments): a namespace or name never adds a segment."""
    assert PODS.item("a/b", "c?d") == "/api/v1/namespaces/a%2Fb/pods/c%3Fd"
