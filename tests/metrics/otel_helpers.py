"""Reading what an OpenTelemetry reader collected, as plain values for the tests."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.metrics.export import InMemoryMetricReader

Collected = dict[str, list[tuple[dict[str, Any], float]]]


def collect(reader: InMemoryMetricReader) -> Collected:
    """Instrument name -> [(attributes, value)] of one collection."""
    collected: Collected = {}
    data = reader.get_metrics_data()
    if data is None:  # no instrument had a point
        return collected
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            assert scope.scope.name == "kinesis_actors"
            for metric in scope.metrics:
                points = collected.setdefault(metric.name, [])
                for point in metric.data.data_points:
                    points.append((dict(point.attributes or {}), point.value))  # type: ignore[union-attr]
    return {name: points for name, points in collected.items() if points}


def only(collected: Collected, name: str, **attributes: str) -> float:
    """The one value of ``name`` whose attributes include ``attributes``."""
    values = [
        value
        for tags, value in collected.get(name, [])
        if all(tags.get(key) == wanted for key, wanted in attributes.items())
    ]
    assert len(values) == 1, (name, attributes, collected.get(name))
    return values[0]
