"""The exporter's one way to write a sample line, and its renderers of the Prometheus text
(0.0.4) and OpenMetrics (1.0.0) formats.

Each renderer is byte-identical to prometheus_client's own encoder (`exposition.generate_latest`,
`openmetrics.exposition.generate_latest`). prometheus_client validates and re-escapes every
label name of every sample on every scrape; the exporter's metric and label names are fixed in
code and always valid legacy names (which every OpenMetrics escaping scheme but `dots` leaves
as they are), so these renderers only escape label values.

The GPU and training families are ``WrittenFamily``s: each sample's line is written as it is
added, by its ``Series``, which writes its ``name{labels} `` once and keeps its last line (the
GPU series between scrapes, collectors/base.py; a training worker's from push to push,
collectors/worker_lines.py), so the renderers only join lines. The exporter's own few families
(``mirrorwatch_up``, build info, ingest rejections) are prometheus_client's and go through the
renderers' loop over their samples, which keeps nothing between scrapes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
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


class Series:
    """One series' line, ``name{labels} value``: its ``name{labels} `` written once, here, and
    its last line kept, since a reading often repeats from scrape to scrape (a clock, a limit,
    a temperature in whole degrees, an error count that stays 0); a new value is written after
    the same ``name{labels} `` (the last line up to its last space: a value has none).

    The one line writer of the GPU and training families. ``names`` and ``values`` are the
    labels, in any order: written sorted by name, as prometheus_client writes them. Shared by
    concurrent scrapes: the last value and its line are replaced as one tuple.
    """

    __slots__ = ("_last", "name", "names", "values")

    def __init__(self, name: str, names: tuple[str, ...], values: tuple[str, ...]) -> None:
        if len(names) != len(values):
            raise ValueError(f"{name}: labels {names} for values {values}")
        self.name, self.names, self.values = name, names, values
        labels = _render_labels(dict(zip(names, values, strict=True)))
        # The last line saves formatting a value that repeats: 18%, 12% and 9% of the scrape's
        # own CPU at 2, 8 and 32 GPUs (0.16, 0.25, 0.86 ms; `bench/writer_bench.py`,
        # "last_line"). No line yet: the prefix alone, under NaN, which equals nothing, so it
        # is never reused.
        self._last: tuple[float, str] = (_NAN, f"{name}{labels} ")

    @property
    def labels(self) -> dict[str, str]:
        return dict(zip(self.names, self.values, strict=True))

    def line(self, value: float) -> str:
        """``name{labels} value\\n``, as both formats write a sample without a timestamp."""
        last_value, text = self._last
        # 0.0 and -0.0 are equal but written apart ("0.0", "-0.0"): their signs must match too.
        if value == last_value and (value or _copysign(1.0, value) == _copysign(1.0, last_value)):
            return text
        text = f"{text[: text.rindex(' ') + 1]}{go_float(value)}\n"
        self._last = (value, text)
        return text


# A written sample: its series and value.
Point = tuple[Series, float]


class WrittenFamily(Metric):
    """A family whose sample lines are written as its samples are added (``Series.line``): the
    renderers write its HELP and TYPE and then its ``lines`` as they are.

    ``add`` writes one sample's line; ``extend`` adds lines written before (a training
    worker's, written once per push) with their series and values. ``samples`` makes
    prometheus_client's samples from the series and values only when something reads them
    (/api/v1/gpus, prometheus_client's own encoders), so a scrape through these renderers never
    builds a ``Sample``; it is a fresh list on each read.
    """

    def __init__(self, name: str, documentation: str, typ: str) -> None:
        self.lines: list[str] = []
        # Each line's series and value, side by side (no tuple per sample).
        self._series: list[Series] = []
        self._values: list[float] = []
        super().__init__(name, documentation, typ)

    def add(self, series: Series, value: float) -> None:
        self.lines.append(series.line(value))
        self._series.append(series)
        self._values.append(value)

    def extend(
        self, lines: Sequence[str], series: Sequence[Series], values: Sequence[float]
    ) -> None:
        """Lines written already by ``series`` from ``values``, in their order."""
        self.lines += lines
        self._series += series
        self._values += values

    @property
    def samples(self) -> list[Sample]:
        pairs = zip(self._series, self._values, strict=True)
        return [Sample(series.name, series.labels, value) for series, value in pairs]

    @samples.setter
    def samples(self, samples: list[Sample]) -> None:
        if samples:  # Metric.__init__ sets an empty list; nothing else may set any
            raise TypeError("add a WrittenFamily's samples with add()")


class _Renderer:
    """Renders a scrape's families, one ``_family`` each, and what ends a scrape (``_end``)."""

    _end = ""

    def render(self, families: Iterable[Metric]) -> bytes:
        output = [self._family(family) for family in families]
        output.append(self._end)
        return "".join(output).encode("utf-8")

    def _family(self, family: Metric) -> str:
        raise NotImplementedError


class TextRenderer(_Renderer):
    """Renders families to the Prometheus text format 0.0.4."""

    def _family(self, family: Metric) -> str:
        output: list[str] = []
        name, kind = family.name, family.type
        if kind == "counter":
            name += "_total"
        elif kind == "info":
            name += "_info"
        kind = _TEXT_TYPES.get(kind, "untyped" if kind == "unknown" else kind)
        documentation = _escape_help(family.documentation)
        output.append(f"# HELP {name} {documentation}\n# TYPE {name} {kind}\n")
        if isinstance(family, WrittenFamily):
            output.extend(family.lines)
            return "".join(output)
        trailing: dict[str, list[str]] = {}
        trailing_names = {family.name + suffix: suffix for suffix in _TRAILING_SUFFIXES}
        for sample in family.samples:
            line = f"{sample.name}{_render_labels(sample.labels)} {go_float(sample.value)}"
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


class OpenMetricsRenderer(_Renderer):
    """Renders families to OpenMetrics 1.0.0: every sample in order, `# EOF` last.

    Unlike the text format, counters keep their family name in HELP/TYPE (the samples carry
    `_total` and `_created`), HELP escapes double quotes too, and timestamps are in seconds.
    A family with exemplars or native histograms (the exporter has none) goes through
    prometheus_client, so the output stays identical whatever a collector yields.
    """

    _end = "# EOF\n"

    def _family(self, family: Metric) -> str:
        # A WrittenFamily's lines have none (and reading its samples would make them).
        if not isinstance(family, WrittenFamily) and any(
            s.exemplar or s.native_histogram for s in family.samples
        ):
            return _reference_openmetrics(family)
        output: list[str] = []
        name = family.name
        help_text = escape_label_value(family.documentation)
        output.append(f"# HELP {name} {help_text}\n# TYPE {name} {family.type}\n")
        if family.unit:
            output.append(f"# UNIT {name} {family.unit}\n")
        if isinstance(family, WrittenFamily):
            output.extend(family.lines)
            return "".join(output)
        for sample in family.samples:
            value = "" if sample.value is None else go_float(sample.value)
            line = f"{sample.name}{_render_labels(sample.labels)} {value}"
            if sample.timestamp is not None:
                line += f" {sample.timestamp}"
            output.append(line + "\n")
        return "".join(output)
