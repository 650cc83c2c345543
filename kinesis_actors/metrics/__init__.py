"""Metrics export: the producer's, consumer's and client's snapshots where operators look.

:mod:`kinesis_actors.metrics.otel` reports them as OpenTelemetry instruments (the ``otel``
extra: ``pip install 'kinesis-actors[otel]'``). This package itself imports no exporter:
:data:`INSTRUMENTS` lists every instrument (name, kind, unit, attributes) for documentation
and for exporters to other systems.
"""

from ._catalog import INSTRUMENTS, InstrumentKind, InstrumentSpec

__all__ = ["INSTRUMENTS", "InstrumentKind", "InstrumentSpec"]
