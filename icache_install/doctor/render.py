"""`icache doctor` output: text that reads like ``kubectl describe``, or stable JSON.

Colour only on a terminal (and never with ``NO_COLOR`` set), unless ``--color`` says
otherwise. The JSON shape is documented in docs/doctor.md and fixed by a test.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

from icache_install.doctor.findings import RANK, Finding, Severity
from shared import constants as c

DOCTOR_REPORT_KIND: Final = "DoctorReport"
_COLOURS: Final = {Severity.ERROR: "31", Severity.WARNING: "33", Severity.INFO: "32"}
_LABELS: Final = {Severity.ERROR: "Error", Severity.WARNING: "Warning", Severity.INFO: "Info"}


def counts(findings: Sequence[Finding]) -> dict[str, int]:
    return {s.value: sum(f.severity == s for f in findings) for s in Severity}


def _section(f: Finding) -> str:
    if f.code.startswith("backend."):
        return str(f.object)
    if f.code.startswith("pod."):
        return f"Engine pods in {f.object.namespace}"
    return "Install"


def _paint(text: str, code: str, colour: bool) -> str:
    return f"\033[{code}m{text}\033[0m" if colour else text


def text_report(
    findings: Sequence[Finding],
    *,
    server: str,
    scope: str,
    install_namespace: str,
    pods_checked: int,
    backends: int,
    colour: bool,
    verbose: bool,
) -> str:
    lines = [
        f"Cluster:        {server}",
        f"Scope:          {scope}",
        f"Install:        namespace {install_namespace}",
        f"CacheBackends:  {backends}",
        f"Engine pods:    {pods_checked}",
        "",
    ]
    shown = [f for f in findings if verbose or f.severity != Severity.INFO]
    sections: dict[str, list[Finding]] = {}
    for f in shown:
        sections.setdefault(_section(f), []).append(f)
    order = sorted(sections, key=lambda s: (s != "Install", s.startswith("Engine"), s))
    for title in order:
        lines.append(_paint(f"{title}:", "1", colour))
        for f in sorted(sections[title], key=lambda f: (RANK[f.severity], f.code, str(f.object))):
            label = _paint(f"{_LABELS[f.severity]:<8}", _COLOURS[f.severity], colour)
            target = "" if title == str(f.object) else f"  {f.object}"
            lines.append(f"  {label} {f.code}{target}")
            lines.append(f"           {f.message}")
            if f.next_step:
                lines.append(f"           Next: {f.next_step}")
        lines.append("")
    if not shown:
        lines += ["No problems found.", ""]
    n = counts(findings)
    hidden = "" if verbose or not n["info"] else " (info hidden: -v shows it)"
    lines.append(
        f"Summary: {n['error']} error(s), {n['warning']} warning(s), {n['info']} info{hidden}"
    )
    return "\n".join(lines) + "\n"


def json_report(
    findings: Sequence[Finding],
    *,
    server: str,
    namespace: str | None,
    install_namespace: str,
    pods_checked: int,
    backends: int,
) -> str:
    report: dict[str, Any] = {
        "apiVersion": c.REPORT_API_VERSION,
        "kind": DOCTOR_REPORT_KIND,
        "cluster": {"server": server},
        "scope": {"namespace": namespace, "allNamespaces": namespace is None},
        "install": {"namespace": install_namespace},
        "checked": {"cacheBackends": backends, "enginePods": pods_checked},
        "findings": [f.to_json() for f in findings],
        "summary": counts(findings),
    }
    return json.dumps(report, indent=2) + "\n"
