"""Background power sampling, so a benchmark can ask for the energy of any window afterwards.

    with suite.power_monitor() as mon:
        t0 = time.time(); run(); t1 = time.time()
        reading = mon.window(t0, t1)      # EnergyReading
        seen = mon.health(t0, t1)         # throttling / under-voltage seen during the window

Counters (RAPL, NVML) are sampled as cumulative joules and differenced; instantaneous sensors
(INA3221, PMIC, tegrastats) are sampled as watts and integrated with the trapezoid rule.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import TYPE_CHECKING, Any, Deque, Dict, List, Optional, Tuple

from .base import Issue, summarize
from .energy import EnergyReading, Sample, WindowNotCovered, counter_energy, inside, integrate_power

if TYPE_CHECKING:
    from .suite import SensorSuite

HEALTH_INTERVAL_S = 0.5
# At 20 samples a second this holds almost three hours.
MAX_SAMPLES = 200_000


class PowerMonitor:
    def __init__(
        self, suite: "SensorSuite", interval_s: float = 0.05, health_interval_s: float = HEALTH_INTERVAL_S
    ):
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {interval_s}")
        self._suite = suite
        self._sensor = suite.power
        floor = self._sensor.min_interval_s if self._sensor is not None else 0.0
        self.interval_s = max(interval_s, floor)
        self.health_interval_s = max(health_interval_s, self.interval_s)
        self._samples: Deque[Sample] = collections.deque(maxlen=MAX_SAMPLES)
        self._sample_lock = threading.Lock()
        self._failure: Optional[Tuple[float, str]] = None
        # (time, issues now, conditions latched since boot) per health poll
        self._polls: Deque[Tuple[float, List[Issue], List[Issue]]] = collections.deque(maxlen=MAX_SAMPLES)
        self._health_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    # -- lifecycle -----------------------------------------------------------------------

    def __enter__(self) -> "PowerMonitor":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("the power monitor is already running")
        self.sample_now()
        self._poll_health()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="edgeopt-power-monitor", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        next_health = time.monotonic() + self.health_interval_s
        while not self._stop.wait(self.interval_s):
            self.sample_now()
            if time.monotonic() >= next_health:
                self._poll_health()
                next_health = time.monotonic() + self.health_interval_s

    # -- sampling ------------------------------------------------------------------------

    @property
    def samples(self) -> int:
        return len(self._samples)

    def sample_now(self) -> None:
        """Take one power sample now (the thread does this every interval_s)."""
        sensor = self._sensor
        if sensor is None or self._failure is not None:
            return
        with self._sample_lock:
            before = time.time()
            try:
                value = sensor.joules() if sensor.is_counter else sensor.measure().watts
            except Exception as exc:  # the sensor is disabled and the window reports why
                self._failure = (before, str(exc) or type(exc).__name__)
                self._suite.disable(sensor, self._failure[1])
                return
            stamp = (before + time.time()) / 2.0
            # A wall clock stepped backwards (NTP) would break the time order; skip the sample.
            if not self._samples or stamp > self._samples[-1][0]:
                self._samples.append((stamp, value))

    def _poll_health(self) -> None:
        stamp = time.time()
        now, latched = self._suite.issues(), self._suite.latched()
        with self._health_lock:
            self._polls.append((stamp, now, latched))

    # -- results -------------------------------------------------------------------------

    def window(self, t0: float, t1: float) -> EnergyReading:
        """Energy between two time.time() instants inside the monitor's lifetime."""
        if not t1 > t0:
            raise ValueError(f"the window must end after it starts (t0={t0}, t1={t1})")
        duration = t1 - t0
        sensor = self._sensor
        if sensor is None:
            return EnergyReading(None, None, None, None, 0, self._suite.power_reason, duration)
        with self._sample_lock:
            needs_sample = not self._samples or self._samples[-1][0] < t1
        if needs_sample:
            self.sample_now()
        with self._sample_lock:
            samples = list(self._samples)
        count = inside(samples, t0, t1)
        if self._failure is not None and self._failure[0] <= t1:
            reason = f"power sensor {sensor.name} failed before the window ended: {self._failure[1]}"
            return EnergyReading(None, None, sensor.source, sensor.rail, count, reason, duration)
        try:
            joules = (
                counter_energy(samples, t0, t1) if sensor.is_counter else integrate_power(samples, t0, t1)
            )
        except WindowNotCovered:
            if not samples or t0 < samples[0][0]:
                reason = "the window starts before the power monitor's first sample"
            else:
                reason = "the window ends after the power monitor's latest sample"
            return EnergyReading(None, None, sensor.source, sensor.rail, count, reason, duration)
        reason = None
        if not sensor.is_counter and count == 0:
            reason = (
                "window shorter than the sampling interval: power interpolated from the samples around it"
            )
        return EnergyReading(joules, joules / duration, sensor.source, sensor.rail, count, reason, duration)

    def health(self, t0: float, t1: float) -> Dict[str, Any]:
        """Throttling and under-voltage seen between t0 and t1, like SensorSuite.health().

        Counts the health polls inside the window (every health_interval_s) and the first one
        after it, and any condition the hardware latched between the last poll before the
        window and that one; a condition that comes and goes between polls is only seen when
        the hardware latches it (Raspberry Pi firmware does).
        """
        if not t1 > t0:
            raise ValueError(f"the window must end after it starts (t0={t0}, t1={t1})")
        self._poll_health()
        with self._health_lock:
            polls = list(self._polls)
        before = [p for p in polls if p[0] <= t0] or polls[:1]
        after = [p for p in polls if p[0] >= t1][:1] or polls[-1:]
        during = [p for p in polls if t0 < p[0] < t1] + after
        issues = [issue for _, now, _ in during for issue in now]
        latched_before = {i.reason for i in before[-1][2]}
        issues += [
            Issue(i.kind, f"{i.reason} occurred during the window (latched by the hardware)")
            for i in after[0][2]
            if i.reason not in latched_before
        ]
        return summarize(issues)
