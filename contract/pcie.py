"""PCIe line rates: what one lane carries per generation, read by the simulator and the costs."""

from __future__ import annotations

# Payload bytes per second one PCIe lane carries in each direction, by generation: the line
# rate after encoding (8b/10b to gen 2, 128b/130b from gen 3, FLIT 242/256 at gen 6; PCI-SIG
# base specifications), before packet overhead.
PCIE_LANE_BYTES_PER_SECOND = {
    1: 2.5e8,
    2: 5.0e8,
    3: 8e9 * 128 / 130 / 8,
    4: 16e9 * 128 / 130 / 8,
    5: 32e9 * 128 / 130 / 8,
    6: 64e9 * 242 / 256 / 8,
}
