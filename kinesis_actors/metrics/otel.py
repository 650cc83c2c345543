"""The producer's, consumer's and client's metrics as OpenTelemetry instruments.

Turn it on from the event loop that runs them::

    from kinesis_actors.metrics.otel import instrument

    with instrument(client, producer, consumer, meter_provider=provider):
        ...  # every collection now reports their figures; leaving stops it

The instruments are asynchronous (observable): nothing runs on the data path. At each
collection the exporter's thread asks each source's event loop for a snapshot
(:mod:`._sampler`), turns it into points (:mod:`._catalog`, which lists every instrument) and
serves every instrument from that one snapshot.

Needs the ``otel`` extra (``pip install 'kinesis-actors[otel]'``). This is the only module
of the library that imports OpenTelemetry; ``import kinesis_actors`` never loads it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self
from weakref import WeakKeyDictionary

try:
    from opentelemetry import metrics as _otel
    from opentelemetry.metrics import CallbackOptions, Meter, MeterProvider, Observation
except ImportError as exc:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        "kinesis_actors.metrics.otel needs OpenTelemetry, which is not installed: "
        "pip install 'kinesis-actors[otel]'",
        name=exc.name,
    ) from exc

from .. import __version__
from ..client import KinesisClient, StreamRef
from ..consumer import Consumer
from ..producer import Producer
from ._catalog import (
    ATTRIBUTES,
    INSTRUMENTS,
    InstrumentSpec,
    Point,
    client_points,
    consumer_points,
    producer_points,
)
from ._sampler import LoopSampler

__all__ = ["Instrumentation", "instrument"]

log = logging.getLogger("kinesis_actors.metrics")

#: How long a collection waits for a source's event loop to take its snapshot.
_LOOP_TIMEOUT = 1.0

Source = Producer | Consumer | KinesisClient


def instrument(
    *sources: Source,
    meter_provider: MeterProvider | None = None,
    attributes: Mapping[str, str] | None = None,
) -> Instrumentation:
    """Report these producers, consumers and clients through OpenTelemetry until closed.

    Call it on the event loop that runs them. ``meter_provider`` defaults to the global one
    (``opentelemetry.metrics.set_meter_provider``). ``attributes`` are added to every point,
    to tell apart two sources that would otherwise look alike (two producers on one stream).
    Returns an :class:`Instrumentation`: ``close()`` it, or use it as a context manager.
    """
    provider = meter_provider if meter_provider is not None else _otel.get_meter_provider()
    extra = dict(attributes or {})
    clashes = sorted(ATTRIBUTES.intersection(extra))
    if clashes:
        raise ValueError(f"attributes {clashes} are set by the instruments themselves")
    readers: list[_Source] = []
    for source in sources:
        try:
            readers.append(_source(source, extra))
        except RuntimeError as exc:  # no event loop in this thread
            raise RuntimeError(
                "instrument() must be called from the event loop that runs the producer, "
                "consumer or client it reports"
            ) from exc
    return Instrumentation(_export_for(provider), readers)


class Instrumentation:
    """The sources one :func:`instrument` call reports; closing stops reporting them.

    Until closed, the export holds the sources (and reports a finished one's last figures).
    OpenTelemetry cannot remove an instrument from a meter, so the instruments stay and
    simply have no points for closed sources.
    """

    def __init__(self, export: _Export, sources: list[_Source]) -> None:
        self._export = export
        self._sources = sources
        export.add(sources)

    def close(self) -> None:
        """Stop reporting these sources (idempotent)."""
        self._export.remove(self._sources)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


@dataclass(slots=True)
class _Source:
    """One reported object: a snapshot taken on its loop, and how it becomes points."""

    sampler: LoopSampler[Any]
    points: Callable[[Any], Iterable[Point]]
    failing: bool = False  # its last snapshot raised (logged once per failing streak)


def _source(source: Source, extra: dict[str, str]) -> _Source:
    if isinstance(source, Producer):
        tags = {**extra, "stream": StreamRef.parse(source.stream).name}  # one name, either form
        return _Source(
            LoopSampler(source.statistics, timeout=_LOOP_TIMEOUT),
            lambda snapshot: producer_points(snapshot, tags),
        )
    if isinstance(source, Consumer):
        return _Source(
            LoopSampler(source.statistics, timeout=_LOOP_TIMEOUT),
            lambda snapshot: consumer_points(snapshot, extra),
        )
    if isinstance(source, KinesisClient):
        tags = {**extra, "cloud.region": source.region}
        return _Source(
            LoopSampler(source.statistics, timeout=_LOOP_TIMEOUT),
            lambda snapshot: client_points(snapshot, tags),
        )
    raise TypeError(
        f"instrument() takes a Producer, Consumer or KinesisClient, got {type(source).__name__}"
    )


class _Export:
    """Every instrument on one meter provider, and the sources they currently report.

    A collection calls each instrument's callback once; the first call of a collection takes
    one snapshot per source and the others are served from it. A callback that finds it has
    already served the current snapshot knows a new collection has begun.
    """

    def __init__(self, meter: Meter) -> None:
        self._lock = threading.Lock()
        self._sources: list[_Source] = []
        self._points: dict[str, list[Observation]] = {}
        self._served: set[str] | None = None  # None: take a new snapshot at the next call
        for spec in INSTRUMENTS:
            _create(meter, spec, self._callback(spec.name))

    def add(self, sources: list[_Source]) -> None:
        with self._lock:
            self._sources.extend(sources)
            self._served = None

    def remove(self, sources: list[_Source]) -> None:
        with self._lock:
            self._sources = [s for s in self._sources if all(s is not o for o in sources)]
            self._served = None

    def _callback(self, name: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            with self._lock:
                if self._served is None or name in self._served:
                    self._refresh()
                assert self._served is not None
                self._served.add(name)
                return self._points.get(name, [])

        return observe

    def _refresh(self) -> None:
        points: dict[str, list[Observation]] = {}
        for source in self._sources:
            try:
                snapshot = source.sampler.sample()
                if snapshot is None:
                    continue
                for point in source.points(snapshot):
                    observation = Observation(point.value, dict(point.attributes))
                    points.setdefault(point.name, []).append(observation)
            except Exception:
                if not source.failing:  # once, not at every collection
                    log.exception("metrics snapshot failed; collections skip that source")
                source.failing = True
            else:
                source.failing = False
        self._points = points
        self._served = set()


def _create(
    meter: Meter, spec: InstrumentSpec, callback: Callable[[CallbackOptions], Iterable[Observation]]
) -> None:
    create = {
        "counter": meter.create_observable_counter,
        "up_down_counter": meter.create_observable_up_down_counter,
        "gauge": meter.create_observable_gauge,
    }[spec.kind]
    create(spec.name, callbacks=[callback], unit=spec.unit, description=spec.description)


_EXPORTS: WeakKeyDictionary[MeterProvider, _Export] = WeakKeyDictionary()
_EXPORTS_LOCK = threading.Lock()


def _export_for(provider: MeterProvider) -> _Export:
    # One set of instruments per provider: creating one twice on a meter makes the SDK warn
    # and keep only the first callbacks.
    with _EXPORTS_LOCK:
        export = _EXPORTS.get(provider)
        if export is None:
            meter = provider.get_meter("kinesis_actors", __version__)
            export = _EXPORTS[provider] = _Export(meter)
        return export
