"""Fast renderers of the Prometheus text (0.0.4) and OpenMetrics (1.0.0) formats.

Each is byte-identical to prometheus_client's own encoder (`exposition.generate_latest`,
`openmetrics.exposition.generate_latest`). prometheus_client validates and re-escapes every
label name of every sample on every scrape; the exporter's metric and label names are fixed in
code and always valid legacy names (which every OpenMetrics escaping scheme but `dots` leaves
as they are), so these renderers only escape label values and cache each distinct label set's
text. On an 8-GPU host that is about a third of the scrape's CPU.

Three shortcuts skip even that: a ``RenderedFamily`` carries its sample lines written already
(a pushed training snapshot's, written once per push with a ``LabelTemplate``), a
``WrittenFamily`` writes each line as its sample is added, from a ``Series`` that keeps its
``name{labels} `` and last line between scrapes (the GPU families), and a family marked static
(``mark_static``: identity, limits, topology) is rendered once per format and its text reused
for as long as the same family object is yielded.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from math import copysign as _copysign

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import exposition as openmetrics
from prometheus_client.samples import Sample

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"

# prometheus_client's text-format type names for OpenMetrics types.
_TEXT_TYPES = {"info": "gauge", "stateset": "gauge", "gaugehistogram": "histogram"}
_TRAILING_SUFFIXES = ("_created", "_gsum", "_gcount")
_NON_FINITE = {"inf": "+Inf", "-inf": "-Inf", "nan": "NaN"}
_NAN = float("nan")


def escape_label_value(value: str) -> str:
    """A label value as both formats write it between its double quotes."""
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def _render_labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    pairs = sorted(labels.items())
    return "{" + ",".join(f'{k}="{escape_label_value(v)}"' for k, v in pairs) + "}"


class LabelTemplate:
    """The label text of samples that share their label names, in the order both formats write
    labels (sorted by name, as prometheus_client does); the names are sorted once, here.

    ``text`` takes values already escaped (``escape_label_value``), so a value many samples
    share (a worker's run id) is escaped once, not once per sample.
    """

    def __init__(self, *names: str) -> None:
        self.names = tuple(sorted(names))

    def text(self, escaped: Mapping[str, str]) -> str:
        return "{" + ",".join([f'{name}="{escaped[name]}"' for name in self.names]) + "}"


class RenderedFamily(Metric):
    """A family whose sample lines are written already: the renderers write its HELP and TYPE
    and then ``lines`` as they are.

    Each item of ``lines`` is one or more whole lines, ``name{labels} value\\n`` (see
    ``sample_text``): without timestamps, exemplars or ``_created`` samples a line is the
    same in both formats. It has no ``samples``, so only these renderers can write it.
    """

    def __init__(self, name: str, documentation: str, typ: str, lines: Sequence[str]) -> None:
        super().__init__(name, documentation, typ)
        self.lines = lines


class Series:
    """One series' line, ``name{labels} value``, for a ``WrittenFamily``: its last line kept,
    since a reading often repeats from scrape to scrape (a clock, a limit, a temperature in
    whole degrees, an error count that stays 0), and a new value written after the same
    ``name{labels} `` (the last line up to its last space: a value has none).

    Shared by concurrent scrapes: the last value and its line are replaced as one tuple.
    """

    __slots__ = ("_last", "labels")

    def __init__(self, name: str, labels: dict[str, str]) -> None:
        self.labels = labels  # shared by the samples a WrittenFamily makes: never mutate it
        # No line yet: the prefix alone, under NaN, which equals nothing, so it is never reused.
        self._last: tuple[float, str] = (_NAN, line_prefix(name, _render_labels(labels)))

    def line(self, value: float) -> str:
        last_value, text = self._last
        # 0.0 and -0.0 are equal but written apart ("0.0", "-0.0"): their signs must match too.
        if value == last_value and (value or _copysign(1.0, value) == _copysign(1.0, last_value)):
            return text
        text = f"{text[: text.rindex(' ') + 1]}{go_float(value)}\n"
        self._last = (value, text)
        return text


class WrittenFamily(RenderedFamily):
    """A family whose lines are written as its samples are added, one ``Series`` each.

    ``add`` writes the sample's line at once and keeps its labels and value; ``samples`` makes
    prometheus_client's samples from those only when something reads them (/api/v1/gpus,
    prometheus_client's own encoders), so a scrape through these renderers never builds a
    ``Sample``. ``samples`` is a fresh list on each read: add samples with ``add`` only.
    """

    def __init__(self, name: str, documentation: str, typ: str, sample_name: str) -> None:
        self.sample_name = sample_name
        self._lines: list[str] = []
        self._points: list[tuple[dict[str, str], float]] = []
        super().__init__(name, documentation, typ, self._lines)

    def add(self, series: Series, value: float) -> None:
        """One sample; ``series`` must be of this family's ``sample_name``."""
        self._lines.append(series.line(value))
        self._points.append((series.labels, value))

    @property
    def samples(self) -> list[Sample]:
        name = self.sample_name
        return [Sample(name, labels, value) for labels, value in self._points]

    @samples.setter
    def samples(self, samples: list[Sample]) -> None:
        if samples:  # Metric.__init__ sets an empty list; nothing else may set any
            raise TypeError("add a WrittenFamily's samples with add()")


def line_prefix(name: str, label_text: str) -> str:
    """What a sample's line says before its value: ``name{labels} ``."""
    return f"{name}{label_text} "


def sample_text(prefix: str, value: float) -> str:
    """One sample's line as both formats write it (no timestamp), for a ``RenderedFamily``;
    ``prefix`` is its ``line_prefix``."""
    return f"{prefix}{go_float(value)}\n"


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
        if isinstance(family, RenderedFamily):
            output.extend(family.lines)
            return "".join(output)
        trailing: dict[str, list[str]] = {}
        trailing_names = {family.name + suffix: suffix for suffix in _TRAILING_SUFFIXES}
        for sample in family.samples:
            line = f"{sample.name}{label_text(sample.labels)} {go_float(sample.value)}"
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


def go_float(value: float) -> str:
    """A value as prometheus_client's ``floatToGoString`` writes it, at half its cost: Python's
    repr, except Go's exponent form for positive values from 1e7 up (``8.1234e+10``) and
    ``+Inf``, ``-Inf``, ``NaN`` (tests hold it to ``floatToGoString`` itself)."""
    text = repr(float(value))
    dot = text.find(".")
    if dot > 6 and value > 0:
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return _NON_FINITE.get(text, text)


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
        # A RenderedFamily's lines have none (and a WrittenFamily would make its samples).
        if not isinstance(family, RenderedFamily) and any(
            s.exemplar or s.native_histogram for s in family.samples
        ):
            return _reference_openmetrics(family)
        output: list[str] = []
        label_text = self._label_text
        name = family.name
        help_text = escape_label_value(family.documentation)
        output.append(f"# HELP {name} {help_text}\n# TYPE {name} {family.type}\n")
        if family.unit:
            output.append(f"# UNIT {name} {family.unit}\n")
        if isinstance(family, RenderedFamily):
            output.extend(family.lines)
            return "".join(output)
        for sample in family.samples:
            value = "" if sample.value is None else go_float(sample.value)
            line = f"{sample.name}{label_text(sample.labels)} {value}"
            if sample.timestamp is not None:
                line += f" {sample.timestamp}"
            output.append(line + "\n")
        return "".join(output)
