"""How the report writes numbers and counts: one format everywhere (15 %, 15.2 pp, 1 GPU)."""

from __future__ import annotations


def percent(ratio: float) -> str:
    """A ratio as a percentage with a space before the sign: 15 %, 4.2 % under a tenth, 0 %."""
    ratio = round(ratio, 6)  # 1 - 0.9 is 10 %, not 10.0 %
    if ratio == 0:
        return "0 %"
    return f"{ratio * 100:.0f} %" if abs(ratio) >= 0.1 else f"{ratio * 100:.1f} %"


def points(difference: float) -> str:
    """A difference of two ratios in percentage points: 15.2 pp."""
    return "0 pp" if difference == 0 else f"{difference * 100:.1f} pp"


def size(count: float) -> str:
    """Bytes in binary units: 512 B, 97.5 MiB, 1.2 GiB."""
    for unit in ("B", "KiB", "MiB"):
        if count < 1024:
            return f"{count:.0f} B" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} GiB"


def plural(count: int, noun: str, many: str | None = None) -> str:
    """``count`` and ``noun``, in the plural unless one: 1 GPU, 2 GPUs, 3 processes."""
    return f"{count} {noun if count == 1 else many or noun + 's'}"
