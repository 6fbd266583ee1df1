"""int8 on the portable kernels (no AVX512_VNNI, or HOTPATH_CPU_ISA=generic) is many times slower than
fp32: Python says so with a RuntimeWarning, and the library's own stderr line stays quiet. The CPU's
features themselves are injected in the C++ tests (tests/cpu/test_cpu_int8.cpp); here the variable
forces the portable kernels on any machine."""
import warnings

import pytest

import hotpath


def test_int8_on_the_portable_kernels_warns(monkeypatch, capfd):
    monkeypatch.setenv("HOTPATH_CPU_ISA", "generic")
    with pytest.warns(RuntimeWarning, match=r"int8 runs on the portable kernels here \(cpu option isa=generic: --cpu-options or HOTPATH_CPU_ISA\)"):
        engine = hotpath.Engine("lstm_s", backend="cpu", precision="int8")
    with engine:
        assert engine.facts()["cpu_int8"].startswith("slow: int8 runs on the portable kernels")
    assert "hotpath: warning" not in capfd.readouterr().err


def test_fp32_and_bf16_do_not_warn(monkeypatch):
    monkeypatch.setenv("HOTPATH_CPU_ISA", "generic")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for precision in ("fp32", "bf16"):
            with hotpath.Engine("lstm_s", backend="cpu", precision=precision) as engine:
                assert "cpu_int8" not in engine.facts()


def test_cpu_options_choose_the_kernels_over_the_environment(monkeypatch):
    """cpu_options= (as --cpu-options) reaches the cpu backend; a key it names wins over HOTPATH_CPU_*."""
    monkeypatch.setenv("HOTPATH_CPU_PREFETCH", "256")
    with hotpath.Engine("lstm_s", backend="cpu", cpu_options="isa=generic,hugepages=0") as engine:
        assert engine.facts()["cpu_options"] == "isa=generic,bf16=auto,amx=auto,int8_act=16,prefetch=256,rewarm=1,hugepages=0,crit_cores=auto,pre_split=auto,pre_cores=auto,pre_row_cores=auto"
    with pytest.raises(hotpath.Error, match=r"isa=sse \(isa takes auto, avx512, avx2, neon, sve or generic\)"):
        hotpath.Engine("lstm_s", backend="cpu", cpu_options="isa=sse")
    with pytest.raises(hotpath.Error, match=r"--cpu-options is for the cpu backend"):
        hotpath.Engine("lstm_s", backend="ref", cpu_options="isa=generic")
