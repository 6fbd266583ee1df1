"""Engine telemetry for the prometheus_client package: a collector that reads hotpath engines made with
metrics=True at every scrape and reports them under the metric names hotpath's C++ exporter uses
(docs/production.md, "Telemetry"), so one set of dashboards and alerts serves both.

    import prometheus_client, hotpath, hotpath.metrics
    engine = hotpath.Engine("lstm_s", backend="cpu", metrics=True)
    prometheus_client.REGISTRY.register(hotpath.metrics.collector(engine, {"engine": "0"}))
    prometheus_client.start_http_server(9464)

prometheus_client is optional (pip install "hotpath[metrics]"): it is imported when a collector is made.
"""
import re
import threading

__all__ = ["collector", "EngineCollector"]

# The families, as src/telemetry/prometheus_exporter.cpp names and describes them.
_LATENCY = ("hotpath_tick_latency_seconds", "Tick latency: from the tick due to its answer visible")
_COUNTERS = (
    ("answered", "hotpath_ticks_answered_total", "Ticks answered"),
    ("late", "hotpath_ticks_late_total", "Ticks answered past their deadline"),
    ("lost", "hotpath_ticks_lost_total", "Ticks never answered"),
    ("fallback", "hotpath_ticks_fallback_total", "Ticks answered by the fallback backend"),
    ("gpu_timeouts", "hotpath_gpu_timeouts_total", "GPU answers or precomputes past their deadline"),
    ("lease_renewals", "hotpath_lease_renewals_total", "Renewals of the GPU kernel's lease"),
    ("swaps", "hotpath_swaps_total", "Model swaps"),
)
_BACKLOG = ("hotpath_precompute_backlog_ticks", "Ticks whose precompute is not done yet")
# prometheus_client adds the _info suffix: the series is hotpath_engine_info, as the C++ exporter's.
_INFO = ("hotpath_engine", "The model and backend serving (value 1)")
_INFO_LABELS = ("model_id", "backend", "variant")

_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*$")


def _prometheus_client():
    try:
        import prometheus_client.core
        import prometheus_client.utils
    except ImportError as e:
        raise ImportError(
            "hotpath.metrics needs the prometheus_client package: pip install prometheus_client "
            '(or pip install "hotpath[metrics]")'
        ) from e
    return prometheus_client


def _check_labels(labels):
    from . import Error

    if labels is None:
        return {}
    if not isinstance(labels, dict):
        raise Error(f"labels must be a dict of label name -> value, got {type(labels).__name__}")
    for name, value in labels.items():
        if not isinstance(name, str) or not _LABEL_NAME.match(name) or name.startswith("__"):
            raise Error(f"label name {name!r} is not one Prometheus takes ([a-zA-Z_][a-zA-Z0-9_]*, no leading __)")
        if name == "le" or name in _INFO_LABELS:
            raise Error(f"label name {name!r} is one the families use themselves (le, model_id, backend, variant)")
        if not isinstance(value, str):
            raise Error(f"label {name!r}: its value must be a str, got {type(value).__name__}")
    return dict(labels)


class EngineCollector:
    """A prometheus_client collector of hotpath engines: collect() reads each engine's metrics() once per
    scrape and yields the histogram, counter, gauge and info families. Register it with a
    prometheus_client registry; add() more engines under other label values. A closed engine's series
    stop. Thread-safe: a scrape may run while engines tick and while engines are added or removed."""

    def __init__(self):
        client = _prometheus_client()
        self._core, self._float_text = client.core, client.utils.floatToGoString
        self._lock = threading.Lock()
        self._entries = []  # (engine, labels)
        self._names = []  # the label names every engine here has, sorted

    def add(self, engine, labels=None):
        """Reports `engine` (made with metrics=True) under `labels` ({"engine": "0"}) from the next
        scrape on. Every engine of one collector has the same label names, each its own values."""
        from . import Error

        labels = _check_labels(labels)
        engine.metrics()  # an engine without telemetry is refused here, not at the first scrape
        with self._lock:
            for other, other_labels in self._entries:
                if other is engine:
                    raise Error(f"this engine is already collected, as {other_labels}")
                if set(other_labels) != set(labels):
                    raise Error(
                        f"labels {sorted(labels)} differ from the names this collector's engines use "
                        f"({sorted(other_labels)}): one collector, one set of label names"
                    )
                if other_labels == labels:
                    raise Error(f"the labels {labels} are already collected")
            self._entries.append((engine, labels))
            self._names = sorted(labels)
        return self

    def remove(self, engine):
        """Stops reporting `engine`."""
        with self._lock:
            self._entries = [(e, l) for e, l in self._entries if e is not engine]

    def describe(self):
        """The families, without samples: lets a registry check names without reading an engine."""
        with self._lock:
            names = self._names
        return self._families(names, [])

    def collect(self):
        """The families with every open engine's samples, read now."""
        from . import Error

        with self._lock:
            entries, names = list(self._entries), self._names
        readings = []
        for engine, labels in entries:
            try:
                readings.append((engine.metrics(), labels))
            except Error:
                # Closed, or an instance restarted since: its series stop, as the C++ exporter's do when
                # an engine goes (add() refused an engine without telemetry).
                continue
        return self._families(names, readings)

    def _families(self, names, readings):
        core = self._core
        latency = core.HistogramMetricFamily(*_LATENCY, labels=names)
        counters = [core.CounterMetricFamily(name, doc, labels=names) for _, name, doc in _COUNTERS]
        backlog = core.GaugeMetricFamily(*_BACKLOG, labels=names)
        info = core.InfoMetricFamily(*_INFO, labels=names)
        for m, labels in readings:
            values = [labels[n] for n in names]
            buckets = [(self._float_text(upper), count) for upper, count in m["buckets"]]  # last: "+Inf"
            latency.add_metric(values, buckets, m["sum_seconds"])
            for family, (key, _, _) in zip(counters, _COUNTERS):
                family.add_metric(values, m[key])
            backlog.add_metric(values, m["precompute_backlog"])
            info.add_metric(values, {k: m[k] for k in _INFO_LABELS})
        return [latency, *counters, backlog, info]


def collector(engine=None, labels=None):
    """A collector for prometheus_client reporting `engine` (a hotpath.Engine made with metrics=True)
    under `labels`, a dict of label name -> value (None: none); add() more engines to it. Raises
    ImportError naming the package when prometheus_client is missing, hotpath.Error for an engine made
    without metrics or a label name the families use themselves."""
    c = EngineCollector()
    if engine is not None:
        c.add(engine, labels)
    return c
