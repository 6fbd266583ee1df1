"""What the package carries besides the engine: the `hotpath` command (a launcher for the bundled C++
CLI, and `hotpath import` itself), Model.save, and hotpath.export (also as python/hotpath_export.py
for scripts run from a checkout)."""
import os
import subprocess
import sys

import numpy as np
import pytest

import hotpath
from hotpath import _cli
from helpers import REPO


def hotpath_cmd(*args, env=None):
    return subprocess.run([sys.executable, "-m", "hotpath", *map(str, args)], capture_output=True, text=True,
                          timeout=120, env=env)


def test_the_package_carries_the_cli():
    exe = _cli.cli_path()
    assert exe is not None, "no hotpath/bin/hotpath beside the package: built without the CLI?"
    direct = subprocess.run([exe, "models"], capture_output=True, text=True, timeout=60)
    launched = hotpath_cmd("models")
    assert launched.returncode == 0 and launched.stdout == direct.stdout and "lstm_s" in launched.stdout


def test_the_cli_exit_code_and_message_come_through():
    r = hotpath_cmd("info", "--model", "no-such-model")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == ["hotpath: error: no model file or zoo model named 'no-such-model' "
                                             "(hotpath models lists the zoo)"]


def test_help_lists_the_cli_and_import():
    r = hotpath_cmd("--help")
    assert r.returncode == 0, r.stderr
    assert "scaler" in r.stdout and "bench" in r.stdout
    assert "import  Convert an ONNX model" in r.stdout
    r = hotpath_cmd("import", "--help")
    assert r.returncode == 0 and "--onnx" in r.stdout and "--window" in r.stdout


def test_without_the_cli_binary_one_line_and_exit_2(monkeypatch, capsys):
    monkeypatch.setattr(_cli, "cli_path", lambda: None)
    assert _cli.main(["models"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("hotpath: error: this hotpath package was built without the hotpath command")


def test_pyproject_declares_the_console_script():
    tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11+")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["hotpath"] == "hotpath._cli:main"
    assert any(d.startswith("onnx") for d in project["optional-dependencies"]["onnx"])


def test_model_save_round_trips(tmp_path, rng):
    model = hotpath.load("lstm_s", window=12)
    path = tmp_path / "m.safetensors"
    model.save(path)
    again = hotpath.load(path)
    assert (again.input_size, again.hidden_size, again.num_layers, again.output_size, again.window) == (
        model.input_size, model.hidden_size, model.num_layers, model.output_size, 12)
    x = rng.standard_normal((30, model.input_size)).astype(np.float32)
    with hotpath.Engine(model, backend="ref") as a, hotpath.Engine(again, backend="ref") as b:
        assert np.array_equal(a.run(x, dtype=np.float64), b.run(x, dtype=np.float64))
    assert os.listdir(tmp_path) == ["m.safetensors"]


def test_model_save_refusals_leave_the_target_alone(tmp_path):
    model = hotpath.load("lstm_s")
    (tmp_path / "dir.safetensors").mkdir()
    for path, match in ((tmp_path / "dir.safetensors", "is a directory"),
                        (tmp_path / "none" / "m.safetensors", "no such folder")):
        with pytest.raises(hotpath.Error, match=match) as info:
            model.save(path)
        assert "\n" not in str(info.value)
    assert os.listdir(tmp_path) == ["dir.safetensors"]


def test_export_is_part_of_the_package():
    assert callable(hotpath.export.save) and callable(hotpath.export.load) and callable(hotpath.export.metadata_for)


def test_hotpath_export_script_loads_without_the_package():
    """python/hotpath_export.py works from a checkout with no compiled module: it is hotpath/export.py."""
    code = ("import sys; sys.path.insert(0, 'python'); import hotpath_export; "
            "print(hotpath_export.__file__); print('hotpath' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(REPO / "python" / "hotpath" / "export.py"), "False"]
