"""Tick telemetry from Python: Engine(metrics=True).metrics() counts every answered tick of step() and
run(), its quantiles lie inside the histogram, it is refused for an engine made without; and
hotpath.metrics.collector reports engines to a prometheus_client registry under the C++ exporter's
metric names (skipped without prometheus_client)."""
import math
import threading

import numpy as np
import pytest

import hotpath

# The families of src/telemetry/prometheus_exporter.cpp, as they appear in a text exposition.
EXPORTED = [
    "hotpath_tick_latency_seconds_bucket",
    "hotpath_tick_latency_seconds_sum",
    "hotpath_tick_latency_seconds_count",
    "hotpath_ticks_answered_total",
    "hotpath_ticks_late_total",
    "hotpath_ticks_lost_total",
    "hotpath_ticks_fallback_total",
    "hotpath_gpu_timeouts_total",
    "hotpath_lease_renewals_total",
    "hotpath_swaps_total",
    "hotpath_precompute_backlog_ticks",
    "hotpath_engine_info",
]


def engine(**options):
    return hotpath.Engine("lstm_s", backend="cpu", mode="streaming", warm=False, **options)


def inputs(ticks, seed=5):
    return np.random.default_rng(seed).standard_normal((ticks, 32)).astype(np.float32)


def test_off_by_default_and_refused():
    with engine() as e:
        with pytest.raises(hotpath.Error, match="records no telemetry"):
            e.metrics()
    e = engine(metrics=True)
    e.close()
    with pytest.raises(hotpath.Error, match="closed"):
        e.metrics()


def test_counts_every_tick_of_step_and_run():
    x = inputs(250)
    with engine(metrics=True) as e:
        m = e.metrics()
        assert m["count"] == 0 and math.isnan(m["p99_seconds"])
        assert m["model_id"] == hotpath.load("lstm_s").id and m["backend"] == "cpu" and m["variant"] == e.variant
        for t in range(50):
            e.step(x[t])
        e.run(x[50:250])  # resets first: the run's 200 ticks are recorded as ticks too
        m = e.metrics()
    assert m["count"] == m["answered"] == 250
    assert m["late"] == m["lost"] == m["fallback"] == m["gpu_timeouts"] == m["swaps"] == 0
    assert m["lease_renewals"] == 0 and m["precompute_backlog"] == 0
    assert m["sum_seconds"] > 0
    assert 0 < m["p50_seconds"] <= m["p99_seconds"] <= m["p999_seconds"]
    bounds = [b for b, _ in m["buckets"]]
    counts = [c for _, c in m["buckets"]]
    assert bounds == sorted(bounds) and bounds[0] == 128e-9 and math.isinf(bounds[-1])
    assert counts == sorted(counts) and counts[-1] == 250
    # p99 lies in the bucket holding the 99th percentile tick: between its bounds.
    k = next(i for i, c in enumerate(counts) if c >= 0.99 * 250)
    assert (bounds[k - 1] if k else 0.0) <= m["p99_seconds"] <= bounds[k]


def test_a_snapshot_from_another_thread_while_ticking():
    x = inputs(3000)
    seen = []
    with engine(metrics=True) as e:
        done = threading.Event()

        def scrape():
            while not done.is_set():
                seen.append(e.metrics()["count"])

        t = threading.Thread(target=scrape)
        t.start()
        e.run(x)
        done.set()
        t.join()
        assert e.metrics()["count"] == 3000
    assert seen and seen == sorted(seen)


def test_a_swap_is_counted_and_names_the_new_model():
    medium = hotpath.load("lstm_m")
    x = inputs(6)
    with engine(metrics=True) as e:
        e.step(x[0])
        e.swap(medium)
        for t in range(1, 6):
            e.step(x[t])
        m = e.metrics()
    assert m["swaps"] == 1 and m["model_id"] == medium.id and m["answered"] == 6


def test_collector_in_a_registry():
    prometheus_client = pytest.importorskip("prometheus_client")
    import hotpath.metrics

    a, b = engine(metrics=True), engine(metrics=True)
    a.run(inputs(40))
    registry = prometheus_client.CollectorRegistry()
    c = hotpath.metrics.collector(a, {"engine": "0"})
    c.add(b, {"engine": "1"})
    registry.register(c)
    text = prometheus_client.generate_latest(registry).decode()
    for name in EXPORTED:
        assert f"\n{name}{{" in text, name
    assert 'hotpath_ticks_answered_total{engine="0"} 40.0' in text
    assert 'hotpath_tick_latency_seconds_count{engine="1"} 0.0' in text
    assert 'le="+Inf"} 40.0' in text
    assert "# TYPE hotpath_engine_info gauge" in text
    assert f'model_id="{a.metrics()["model_id"]}"' in text
    # The registry reads the same numbers as metrics() gives.
    assert registry.get_sample_value("hotpath_tick_latency_seconds_count", {"engine": "0"}) == 40
    assert registry.get_sample_value("hotpath_tick_latency_seconds_sum", {"engine": "0"}) == pytest.approx(
        a.metrics()["sum_seconds"]
    )
    # A closed engine's series stop.
    b.close()
    assert 'engine="1"' not in prometheus_client.generate_latest(registry).decode()
    a.close()


def test_collector_refusals():
    pytest.importorskip("prometheus_client")
    import hotpath.metrics

    with engine() as off, engine(metrics=True) as on, engine(metrics=True) as other:
        with pytest.raises(hotpath.Error, match="records no telemetry"):
            hotpath.metrics.collector(off)
        with pytest.raises(hotpath.Error, match="families use themselves"):
            hotpath.metrics.collector(on, {"model_id": "x"})
        with pytest.raises(hotpath.Error, match="not one Prometheus takes"):
            hotpath.metrics.collector(on, {"engine-0": "x"})
        c = hotpath.metrics.collector(on, {"engine": "0"})
        with pytest.raises(hotpath.Error, match="already collected"):
            c.add(on, {"engine": "1"})
        with pytest.raises(hotpath.Error, match="already collected"):
            c.add(other, {"engine": "0"})
        with pytest.raises(hotpath.Error, match="one set of label names"):
            c.add(other, {"desk": "fx"})


def test_collector_without_prometheus_client_names_the_package(monkeypatch):
    import builtins

    import hotpath.metrics

    real_import = builtins.__import__

    def no_prometheus(name, *args, **kwargs):
        if name.startswith("prometheus_client"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_prometheus)
    with engine(metrics=True) as e:
        with pytest.raises(ImportError, match="pip install prometheus_client"):
            hotpath.metrics.collector(e)
