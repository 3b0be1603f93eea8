"""Fast renderers of the Prometheus text (0.0.4) and OpenMetrics (1.0.0) formats.

Each is byte-identical to prometheus_client's own encoder (`exposition.generate_latest`,
`openmetrics.exposition.generate_latest`). prometheus_client validates and re-escapes every
label name of every sample on every scrape; the exporter's metric and label names are fixed in
code and always valid legacy names (which every OpenMetrics escaping scheme but `dots` leaves
as they are), so these renderers only escape label values and cache each distinct label set's
text. On an 8-GPU host that is about a third of the scrape's CPU.

Three shortcuts skip even that: a ``LabelSet`` (the collectors' label dicts) carries its own
rendered text, a ``SampleLine`` (``sample_line``) the whole line of a sample that never
changes (a pushed training snapshot's), and a family marked static (``mark_static``:
identity, limits, topology) is rendered once per format and its text reused for as long as
the same family object is yielded.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import exposition as openmetrics
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"

# prometheus_client's text-format type names for OpenMetrics types.
_TEXT_TYPES = {"info": "gauge", "stateset": "gauge", "gaugehistogram": "histogram"}
_TRAILING_SUFFIXES = ("_created", "_gsum", "_gcount")
_NON_FINITE = frozenset({"inf", "-inf", "nan"})


def _escape_value(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def _render_labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    pairs = sorted(labels.items())
    return "{" + ",".join(f'{k}="{_escape_value(v)}"' for k, v in pairs) + "}"


class LabelSet(dict[str, str]):
    """A sample's labels with their exposition text (the same in both formats), made once.

    Never mutate one after ``label_set`` built it: collectors share them between scrapes.
    """

    __slots__ = ("text",)
    text: str


def label_set(labels: dict[str, str]) -> LabelSet:
    made = LabelSet(labels)
    made.text = _render_labels(made)
    return made


class SampleLine(LabelSet):
    """The labels of one sample that never changes, with that sample's whole line.

    Without a timestamp a sample's line is the same in both formats. Made by ``sample_line``;
    never reuse one for another sample or value.
    """

    __slots__ = ("line",)
    line: str


def sample_line(name: str, labels: dict[str, str], value: float) -> Sample:
    """A sample whose line is rendered now, once, instead of at every scrape."""
    made = SampleLine(labels)
    made.text = _render_labels(made)
    made.line = f"{name}{made.text} {_go_float(value)}\n"
    return Sample(name, made, value)


_STATIC = "_mirrorwatch_static"


def mark_static(family: Metric) -> Metric:
    """Mark ``family`` as never changing again: the renderers may reuse its text.

    The caller promises not to change the family (or its samples) after this; a changed
    family must be a new object.
    """
    setattr(family, _STATIC, True)
    return family


class _StaticTexts:
    """The rendered text of each static family, by object; bounded, and kept with its family
    so that an id is never reused while cached."""

    def __init__(self, size: int = 256) -> None:
        self._lock = threading.Lock()
        self._texts: dict[int, tuple[Metric, str]] = {}
        self._size = size

    def get(self, family: Metric) -> str | None:
        if not getattr(family, _STATIC, False):
            return None
        found = self._texts.get(id(family))
        return found[1] if found is not None and found[0] is family else None

    def put(self, family: Metric, text: str) -> None:
        if getattr(family, _STATIC, False):
            with self._lock:
                if len(self._texts) >= self._size:
                    self._texts.clear()
                self._texts[id(family)] = (family, text)


class _LabelCache:
    """A renderer's state kept between scrapes: label-set strings (bounded) and static texts.

    Subclasses render one family (``_family``) and say what ends a scrape (``_end``).
    """

    _end = ""

    def __init__(self, cache_size: int = 50_000) -> None:
        self._labels: dict[tuple[tuple[str, str], ...], str] = {}
        self._cache_size = cache_size
        self._static = _StaticTexts()

    def _label_text(self, labels: dict[str, str]) -> str:
        if type(labels) is LabelSet:
            return labels.text
        if not labels:
            return ""
        # A family adds its labels in one fixed order, so the unsorted items are a fine key.
        key = tuple(labels.items())
        text = self._labels.get(key)
        if text is None:
            if len(self._labels) >= self._cache_size:  # label churn: start afresh, stay bounded
                self._labels.clear()
            text = self._labels[key] = _render_labels(labels)
        return text

    def render(self, families: Iterable[Metric]) -> bytes:
        output: list[str] = []
        for family in families:
            text = self._static.get(family)
            if text is None:
                text = self._family(family)
                self._static.put(family, text)
            output.append(text)
        output.append(self._end)
        return "".join(output).encode("utf-8")

    def _family(self, family: Metric) -> str:
        raise NotImplementedError


class TextRenderer(_LabelCache):
    """Renders families to the Prometheus text format 0.0.4."""

    def _family(self, family: Metric) -> str:
        output: list[str] = []
        label_text = self._label_text
        name, kind = family.name, family.type
        if kind == "counter":
            name += "_total"
        elif kind == "info":
            name += "_info"
        kind = _TEXT_TYPES.get(kind, "untyped" if kind == "unknown" else kind)
        documentation = _escape_help(family.documentation)
        output.append(f"# HELP {name} {documentation}\n# TYPE {name} {kind}\n")
        trailing: dict[str, list[str]] = {}
        trailing_names = {family.name + suffix: suffix for suffix in _TRAILING_SUFFIXES}
        for sample in family.samples:
            labels = sample.labels
            if type(labels) is SampleLine:
                line = labels.line
            else:
                line = f"{sample.name}{label_text(labels)} {_go_float(sample.value)}"
                if sample.timestamp is not None:
                    line += f" {int(float(sample.timestamp) * 1000):d}"
                line += "\n"
            suffix = trailing_names.get(sample.name)
            if suffix is None:
                output.append(line)
            else:  # OpenMetrics-only samples become their own gauge at the end
                trailing.setdefault(suffix, []).append(line)
        for suffix, lines in sorted(trailing.items()):
            extra = family.name + suffix
            output.append(f"# HELP {extra} {documentation}\n# TYPE {extra} gauge\n")
            output.extend(lines)
        return "".join(output)


def _go_float(value: float) -> str:
    """prometheus_client's floatToGoString, without its work for the common short floats."""
    text = repr(float(value))
    if text.find(".") > 6 or text in _NON_FINITE:  # Go's exponent form; +Inf, -Inf, NaN
        go_text: str = floatToGoString(value)  # type: ignore[no-untyped-call]
        return go_text
    return text


class _OneFamily:
    def __init__(self, family: Metric) -> None:
        self.family = family

    def collect(self) -> Iterator[Metric]:
        yield self.family


def _reference_openmetrics(family: Metric) -> str:
    """One family through prometheus_client's own encoder, without its `# EOF`."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_OneFamily(family))
    encoded: bytes = openmetrics.generate_latest(registry)  # type: ignore[no-untyped-call]
    return encoded.decode("utf-8").removesuffix("# EOF\n")


class OpenMetricsRenderer(_LabelCache):
    """Renders families to OpenMetrics 1.0.0: every sample in order, `# EOF` last.

    Unlike the text format, counters keep their family name in HELP/TYPE (the samples carry
    `_total` and `_created`), HELP escapes double quotes too, and timestamps are in seconds.
    A family with exemplars or native histograms (the exporter has none) goes through
    prometheus_client, so the output stays identical whatever a collector yields.
    """

    _end = "# EOF\n"

    def _family(self, family: Metric) -> str:
        if any(s.exemplar or s.native_histogram for s in family.samples):
            return _reference_openmetrics(family)
        output: list[str] = []
        label_text = self._label_text
        name = family.name
        help_text = _escape_value(family.documentation)
        output.append(f"# HELP {name} {help_text}\n# TYPE {name} {family.type}\n")
        if family.unit:
            output.append(f"# UNIT {name} {family.unit}\n")
        for sample in family.samples:
            labels = sample.labels
            if type(labels) is SampleLine:
                output.append(labels.line)
                continue
            value = "" if sample.value is None else _go_float(sample.value)
            line = f"{sample.name}{label_text(labels)} {value}"
            if sample.timestamp is not None:
                line += f" {sample.timestamp}"
            output.append(line + "\n")
        return "".join(output)
