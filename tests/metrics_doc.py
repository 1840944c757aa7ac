"""docs/metrics.md as data, a Prometheus text-format reader, and the metric names a
PromQL expression reads: what the scrape, alert and dashboard tests compare.

Every table row of docs/metrics.md whose first cell is a backticked name documents
one series family: its type, its labels, and the processes that expose it (the
"Series from other components" rows name Prometheus or kube-apiserver instead).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
METRICS_DOC = REPO / "docs" / "metrics.md"
OUR_PROCESSES = frozenset({"webhook", "dispatcher", "worker"})
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count", "_created")


@dataclass(frozen=True)
class Documented:
    name: str
    type: str
    labels: frozenset[str]
    processes: frozenset[str]

    @property
    def ours(self) -> bool:
        return bool(self.processes & OUR_PROCESSES)


_ROW = re.compile(r"^\|\s*`([a-zA-Z_:][a-zA-Z0-9_:]*)`\s*\|([^|]*)\|([^|]*)\|([^|]*)\|")


def documented(text: str | None = None) -> dict[str, Documented]:
    """The series families docs/metrics.md lists, by name."""
    out: dict[str, Documented] = {}
    for line in (text if text is not None else METRICS_DOC.read_text()).splitlines():
        match = _ROW.match(line)
        if not match:
            continue
        name, type_, labels, processes = (g.strip() for g in match.groups())
        if name in out:
            raise ValueError(f"docs/metrics.md lists {name} twice")
        out[name] = Documented(
            name,
            type_,
            frozenset(re.findall(r"`([a-zA-Z_][a-zA-Z0-9_]*)`", labels)),
            frozenset(p.strip() for p in processes.split(",") if p.strip()),
        )
    return out


# ---------------------------------------------------------------- exposition


@dataclass
class Family:
    name: str
    type: str
    labels: set[str]
    samples: int = 0


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+\S+")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"')


def exposition(text: str) -> dict[str, Family]:
    """Families in Prometheus text format (0.0.4), by the name on their TYPE line,
    with the label names their samples carry (``le`` of histogram buckets left out)."""
    families: dict[str, Family] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, type_ = line.split(None, 3)
            families[name] = Family(name, type_.strip(), set())
            continue
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match:
            raise ValueError(f"not a sample line: {line!r}")
        family = families.get(match.group(1)) or families.get(_histogram_base(match.group(1)))
        if family is None:
            raise ValueError(f"sample without a TYPE line: {line!r}")
        family.samples += 1
        family.labels.update(n for n in _LABEL.findall(match.group(3) or "") if n != "le")
    return families


def _histogram_base(sample: str) -> str:
    for suffix in HISTOGRAM_SUFFIXES:
        if sample.endswith(suffix):
            return sample.removesuffix(suffix)
    return sample


# ---------------------------------------------------------------- PromQL

_KEYWORDS = frozenset(
    {
        "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset",
        "and", "or", "unless", "inf", "nan", "atan2", "start", "end",
    }
)  # fmt: skip
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGES = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENT = re.compile(r"(?<![\w:.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?")


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects (histogram ``_bucket``/``_sum``/``_count``
    kept as written). Functions, aggregation keywords, label names in groupings and
    matchers, durations and string literals are not names."""
    text = _STRINGS.sub('""', expr)
    text = _MATCHERS.sub("{}", text)
    text = _RANGES.sub("[]", text)
    text = _GROUPING.sub(" ", text)
    names: set[str] = set()
    for match in _IDENT.finditer(text):
        word, call = match.group(1), match.group(2)
        if call or word.lower() in _KEYWORDS:
            continue
        if re.fullmatch(r"\d+(ms|s|m|h|d|w|y)", word):
            continue
        names.add(word)
    return names


def family_of(name: str, docs: dict[str, Documented]) -> str | None:
    """The documented family a selected name belongs to (a histogram's sub-series
    belong to the histogram)."""
    if name in docs:
        return name
    base = _histogram_base(name)
    if base in docs and docs[base].type == "histogram":
        return base
    return None


# ---------------------------------------------------------------- PromQL labels

# Labels Prometheus adds to every series it scrapes (job, instance) and those the
# Prometheus Operator's ServiceMonitors add (namespace, pod); not in docs/metrics.md.
SCRAPE_LABELS = frozenset({"job", "instance", "namespace", "pod", "service", "container"})
_SELECTOR = re.compile(r"(?<![\w:.])([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^{}]*)\}")
_MATCHER_LABEL = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")
_AGGREGATION_GROUPING = re.compile(r"\b(by|without)\s*\(([^()]*)\)")
_VECTOR_MATCHING = re.compile(r"\b(on|ignoring|group_left|group_right)\s*\(([^()]*)\)")


@dataclass(frozen=True)
class LabelUse:
    """A label an expression filters or groups by, and the metric names it must be a
    label of (every one for a matcher or an aggregation; at least one for vector
    matching, whose sides are not told apart here)."""

    label: str
    names: frozenset[str]
    how: str
    every: bool = True


def _balanced(text: str, open_at: int) -> int:
    """The index just past the parenthesis closing the one at ``open_at``."""
    depth = 0
    for index in range(open_at, len(text)):
        if text[index] == "(":
            depth += 1
        elif text[index] == ")":
            depth -= 1
            if depth == 0:
                return index + 1
    raise ValueError(f"unbalanced parentheses in {text!r}")


def _opening(text: str, close_at: int) -> int:
    """The index of the parenthesis opening the one that closes at ``close_at``."""
    depth = 0
    for index in range(close_at, -1, -1):
        if text[index] == ")":
            depth += 1
        elif text[index] == "(":
            depth -= 1
            if depth == 0:
                return index
    raise ValueError(f"unbalanced parentheses in {text!r}")


def label_uses(expr: str) -> list[LabelUse]:
    """Every label ``expr`` filters by (a selector's matchers) or groups by (``by``,
    ``without``, ``on``, ``ignoring``, ``group_left``/``group_right``), with the metric
    names it must belong to. An aggregation's labels belong to the series in its
    argument: ``sum by (l) (arg)`` and ``sum (arg) by (l)``."""
    uses: list[LabelUse] = []
    unquoted = _STRINGS.sub('""', expr)
    for match in _SELECTOR.finditer(unquoted):
        name = match.group(1)
        if name.lower() in _KEYWORDS:
            continue
        for label in _MATCHER_LABEL.findall(match.group(2)):
            if label != "__name__":
                uses.append(LabelUse(label, frozenset({name}), f"{name}{{{label}...}}"))
    text = _MATCHERS.sub("{}", unquoted)
    text = _RANGES.sub("[]", text)
    for match in _AGGREGATION_GROUPING.finditer(text):
        after = text[match.end() :].lstrip()
        if after.startswith("("):
            start = match.end() + (len(text[match.end() :]) - len(after))
            scope = text[start : _balanced(text, start)]
        else:  # postfix: sum (arg) by (labels)
            before = text[: match.start()].rstrip()
            if not before.endswith(")"):
                raise ValueError(f"{match.group(0)!r} without an argument in {expr!r}")
            scope = before[_opening(before, len(before) - 1) :]
        names = frozenset(metric_names(scope))
        for label in re.findall(r"[a-zA-Z_][a-zA-Z0-9_]*", match.group(2)):
            uses.append(LabelUse(label, names, f"{match.group(1)} ({label})"))
    everything = frozenset(metric_names(text))
    for match in _VECTOR_MATCHING.finditer(text):
        for label in re.findall(r"[a-zA-Z_][a-zA-Z0-9_]*", match.group(2)):
            uses.append(LabelUse(label, everything, f"{match.group(1)} ({label})", every=False))
    return uses


def labels_of(name: str, docs: dict[str, Documented]) -> frozenset[str]:
    """The labels series ``name`` can carry: its documented ones, the scrape's, and
    ``le`` on a histogram's buckets."""
    family = family_of(name, docs)
    if family is None:
        return SCRAPE_LABELS
    extra = {"le"} if docs[family].type == "histogram" and name.endswith("_bucket") else set()
    return docs[family].labels | SCRAPE_LABELS | extra


def undocumented_labels(expr: str, docs: dict[str, Documented]) -> list[str]:
    """What ``expr`` filters or groups by that docs/metrics.md does not list for the
    series it reads (empty: nothing)."""
    problems: list[str] = []
    for use in label_uses(expr):
        holders = [name for name in sorted(use.names) if use.label in labels_of(name, docs)]
        if use.every:
            missing = sorted(use.names - set(holders))
            if missing:
                problems.append(f"{use.how}: {', '.join(missing)} has no label {use.label!r}")
        elif not holders:
            problems.append(f"{use.how}: no series of the expression has label {use.label!r}")
    return problems
