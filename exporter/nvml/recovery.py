"""Lost GPUs coming back: the background thread re-probes each one with backoff, never a scrape.

A GPU is lost when NVML answers ``GpuIsLost`` or ``Unknown`` for it, or it reports XID 79;
from then on no reading asks it. After a GPU reset (``nvidia-smi -r``) or a transient PCIe
fault NVML can answer for it again within the same session, so each lost GPU is asked again
(``NvmlSession.probe``): first ``initial_s`` after the loss, then after twice the previous wait,
up to ``max_s``. It comes back only as itself: the same UUID at its index, under the handle the
session holds. Its series (labelled by index and UUID) then return on the next scrape, and its
XID counts, which belong to the backend, carry on where they were.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from mirrorwatch.exporter.nvml.session import GpuHandle, NvmlSession

log = logging.getLogger(__name__)

# The first probe of a lost GPU waits this long (or the retry maximum, when that is shorter):
# a GPU that just fell off the bus can make every NVML call on it slow.
LOST_PROBE_INITIAL_S = 5.0


@dataclass
class _Schedule:
    lost_since: float
    wait_s: float
    next_at: float
    other_uuids: set[str] = field(default_factory=set)  # logged once each


class LostGpuRecovery:
    """One session's re-probing of its lost GPUs; a GPU that answers as itself is found again.

    Args:
        session: the NVML session whose GPUs these are; it holds which of them are lost.
        gpus: the GPUs the session opened.
        clock: monotonic seconds, the session's own clock.
        initial_s: the wait from a loss to its first probe.
        max_s: the most the wait between two probes grows to.
    """

    def __init__(
        self,
        session: NvmlSession,
        gpus: Sequence[GpuHandle],
        *,
        clock: Callable[[], float],
        initial_s: float,
        max_s: float,
    ) -> None:
        self._session = session
        self._gpus = tuple(gpus)
        self._clock = clock
        self._initial_s = initial_s
        self._max_s = max_s
        self._schedules: dict[int, _Schedule] = {}

    def run(self) -> None:
        """Probe each lost GPU whose probe is due."""
        if not self._session.any_lost:  # the common case, every background round
            self._schedules.clear()
            return
        for gpu in self._gpus:
            schedule = self._schedule(gpu)
            if schedule is not None and self._clock() >= schedule.next_at:
                self._probe(gpu, schedule)

    def next_probe_in_s(self) -> float | None:
        """Seconds until the next probe is due; None while no GPU is lost."""
        if not self._session.any_lost:
            return None
        due = [s.next_at for gpu in self._gpus if (s := self._schedule(gpu)) is not None]
        return max(min(due) - self._clock(), 0.0) if due else None

    def _schedule(self, gpu: GpuHandle) -> _Schedule | None:
        since = self._session.lost_since(gpu)
        if since is None:
            self._schedules.pop(gpu.index, None)
            return None
        schedule = self._schedules.get(gpu.index)
        if schedule is None or schedule.lost_since != since:
            # A new loss (the first, or again after a recovery) starts the backoff afresh.
            schedule = _Schedule(since, self._initial_s, since + self._initial_s)
            self._schedules[gpu.index] = schedule
        return schedule

    def _probe(self, gpu: GpuHandle, schedule: _Schedule) -> None:
        answer = self._session.probe(gpu)
        context = {"gpu": gpu.index, "uuid": gpu.uuid}
        if answer.outcome == "answers":
            lost_s = self._session.mark_found(gpu)
            del self._schedules[gpu.index]
            log.info(
                "GPU %d (%s) is back after %.0f s lost: NVML answers for it again",
                gpu.index,
                gpu.uuid,
                lost_s or 0.0,
                extra={**context, "lost_seconds": lost_s},
            )
            return
        if answer.outcome == "new_handle":
            # The event set and every reading hold the old handle: only a re-init renews them.
            self._session.gone(
                f"GPU {gpu.index} ({gpu.uuid}) answers again under a new NVML handle"
            )
            return
        if answer.outcome == "other_gpu" and answer.detail not in schedule.other_uuids:
            schedule.other_uuids.add(answer.detail)
            # A GPU's identity, features and topology are read once per NVML session, and its
            # series carry its UUID: another card cannot take over a lost one's series, and a
            # re-init that quietly swapped them would end the lost GPU's alert while that card
            # is still gone. Restarting the exporter re-enumerates on purpose.
            log.warning(
                "GPU %d (%s) stays lost: NVML now answers at index %d as %s, another GPU;"
                " restart the exporter to monitor it",
                gpu.index,
                gpu.uuid,
                gpu.index,
                answer.detail,
                extra={**context, "other_uuid": answer.detail},
            )
        schedule.wait_s = min(schedule.wait_s * 2, self._max_s)
        schedule.next_at = self._clock() + schedule.wait_s
        log.debug(
            "GPU %d (%s) still lost (%s); next probe in %.3g s",
            gpu.index,
            gpu.uuid,
            answer.detail,
            schedule.wait_s,
            extra={**context, "probe_in_s": schedule.wait_s},
        )
