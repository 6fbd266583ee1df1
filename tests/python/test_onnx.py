"""ONNX models in: graphs built with onnx.helper in the shapes exporters give them (one or several LSTM
layers, with and without biases, tf2onnx's Keras layout with Transpose + Squeeze, torch.onnx's with
Gather and zero initial states, layout=1, a Slice of the last step), loaded with hotpath.load and
`hotpath import`, answer as ONNX Runtime does on the same inputs; everything else is refused naming
the node.

Tolerance: ONNX Runtime computes in float32, so its answers are float32 roundings of an exact LSTM:
within the float32 bound of the normalized error (1e-5, as the engine's fp32 path against float64).
hotpath's float64 reference (`ref`) is held to that bound against ONNX Runtime, and its cpu fp32 path
to twice it (both sides are float32 computations, each within 1e-5 of the exact answer).
"""
import os
import re
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import hotpath
from helpers import normalized_error

ONNX_VS_REF = 1e-5
ONNX_VS_CPU = 2e-5
INT_MAX = np.iinfo(np.int64).max


def lstm_weights(rng, i, h, bias=True, dtype=np.float32):
    """ONNX-layout W [1, 4H, I], R [1, 4H, H], B [1, 8H] (gates i, o, f, c), or B None."""
    k = 1.0 / np.sqrt(h)
    w = rng.uniform(-k, k, (1, 4 * h, i)).astype(dtype)
    r = rng.uniform(-k, k, (1, 4 * h, h)).astype(dtype)
    b = rng.uniform(-k, k, (1, 8 * h)).astype(dtype) if bias else None
    return w, r, b


class Graph:
    """A small onnx.helper graph builder."""

    def __init__(self):
        self.nodes, self.inits, self.n = [], [], 0

    def name(self, prefix):
        self.n += 1
        return f"{prefix}{self.n}"

    def const(self, value, prefix="c"):
        name = self.name(prefix)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(self, op, inputs, n_out=1, name=None, **attrs):
        name = name or self.name(op.lower())
        outs = [f"{name}_out{k}" for k in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=name, **attrs))
        return outs if n_out > 1 else outs[0]

    def squeeze(self, x, axes):
        return self.node("Squeeze", [x, self.const(np.array(axes, np.int64), "axes")])

    def lstm(self, x, weights, **attrs):
        w, r, b = weights
        ins = [x, self.const(w, "W"), self.const(r, "R")] + ([self.const(b, "B")] if b is not None else [])
        return self.node("LSTM", ins, n_out=3, hidden_size=r.shape[-1], **attrs)

    def model(self, x_shape, out, opset=17, dtype=TensorProto.FLOAT):
        graph = helper.make_graph(
            self.nodes, "g", [helper.make_tensor_value_info("x", dtype, x_shape)],
            [helper.make_tensor_value_info(out, dtype, ["n", "o"])], self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 8
        onnx.checker.check_model(m)
        return m


def build(rng, style, i=3, h=5, layers=1, o=2, bias=True, window=6, head_bias=True):
    """(model, time axis of the input) of an LSTM stack + head, as `style`'s exporter lays it out:
      plain:   x [T, B, I] -> LSTM ... -> Y_h -> Squeeze -> Gemm(transB)
      keras:   x [B, T, I] -> Transpose -> LSTM -> Squeeze -> ... -> Y_h -> Squeeze -> MatMul -> Add (tf2onnx)
      torch:   x [B, T, I] -> Transpose -> LSTM(zero initial_h/c from the input's shape) -> Squeeze ->
               ... -> Transpose -> Gather(-1) -> Gemm (torch.onnx)
      slice:   x [T, B, I] -> LSTM -> ... -> Y -> Slice(-1:) -> Squeeze -> MatMul (+ Add)
      layout1: x [B, T, I] -> LSTM(layout=1) -> ... -> Y_h [B, 1, H] -> Squeeze -> Gemm
    """
    g = Graph()
    t = window if window is not None else "time"
    batch_first = style in ("keras", "torch", "layout1")
    x_shape = ["batch", t, i] if batch_first else [t, "batch", i]
    x = g.node("Transpose", ["x"], perm=[1, 0, 2]) if style in ("keras", "torch") else "x"
    size = i
    y = y_h = None
    for layer in range(layers):
        weights = lstm_weights(rng, size, h, bias)
        if style == "torch":
            # torch.onnx: zeros of shape [1, batch, H], the batch read from the input's shape
            batch = g.node("Gather", [g.node("Shape", [x]), g.const(np.array([1], np.int64))], axis=0)
            shape = g.node("Concat", [g.const(np.array([1], np.int64)), batch, g.const(np.array([h], np.int64))], axis=0)
            zeros = g.node("ConstantOfShape", [shape], value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.0]))
            w, r, b = weights
            ins = [x, g.const(w, "W"), g.const(r, "R"), g.const(b, "B") if b is not None else "", "", zeros, zeros]
            y, y_h, _ = g.node("LSTM", ins, n_out=3, hidden_size=h)
        elif style == "layout1":
            y, y_h, _ = g.lstm(x, weights, layout=1)
        else:
            y, y_h, _ = g.lstm(x, weights)
        if layer + 1 < layers:
            x = g.squeeze(y, [2] if style == "layout1" else [1])
        size = h
    head_w = rng.uniform(-0.5, 0.5, (o, h)).astype(np.float32)
    head_b = rng.uniform(-0.5, 0.5, o).astype(np.float32) if head_bias else None
    if style == "plain":
        last = g.squeeze(y_h, [0])
        out = g.node("Gemm", [last, g.const(head_w)] + ([g.const(head_b)] if head_bias else []), transB=1)
    elif style == "keras":
        last = g.squeeze(y_h, [0])
        out = g.node("MatMul", [last, g.const(head_w.T.copy())])
        if head_bias:
            out = g.node("Add", [out, g.const(head_b.reshape(1, o))])
    elif style == "torch":
        seq = g.node("Transpose", [g.squeeze(y, [1])], perm=[1, 0, 2])
        last = g.node("Gather", [seq, g.const(np.array(-1, np.int64))], axis=1)
        out = g.node("Gemm", [last, g.const(head_w)] + ([g.const(head_b)] if head_bias else []), transB=1)
    elif style == "slice":
        step = g.node("Slice", [y, g.const(np.array([-1], np.int64)), g.const(np.array([INT_MAX], np.int64)),
                                g.const(np.array([0], np.int64))])
        last = g.squeeze(step, [0, 1])
        out = g.node("MatMul", [last, g.const(head_w.T.copy())])
        if head_bias:
            out = g.node("Add", [g.const(head_b), out])
    elif style == "layout1":
        last = g.squeeze(y_h, [1])
        out = g.node("Gemm", [last, g.const(head_w)] + ([g.const(head_b)] if head_bias else []), transB=1)
    return g.model(x_shape, out), (1 if batch_first else 0)


def ort_windows(model, windows, time_axis):
    """ONNX Runtime's answers for a batch of windows [N, W, I]."""
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    batch = model.graph.input[0].type.tensor_type.shape.dim[1 - time_axis]
    if batch.HasField("dim_value"):  # a graph made for one window at a time
        return np.concatenate([ort_windows_one(session, w[None], time_axis) for w in windows])
    return ort_windows_one(session, windows, time_axis)


def ort_windows_one(session, windows, time_axis):
    x = windows if time_axis == 1 else windows.transpose(1, 0, 2)
    return session.run(None, {"x": np.ascontiguousarray(x, np.float32)})[0].reshape(len(windows), -1)


def check_windows(model, source, time_axis, rng, window, series_len=20):
    """Every full window of a series: hotpath (ref and cpu fp32, window mode) against ONNX Runtime
    running `model` (whose input's time axis is `time_axis`) on the same windows."""
    loaded = hotpath.load(source)
    assert loaded.window == window
    x = rng.standard_normal((series_len, loaded.input_size)).astype(np.float32)
    windows = np.stack([x[t - window + 1 : t + 1] for t in range(window - 1, series_len)])
    expected = ort_windows(model, windows, time_axis)
    for backend, precision, bound in (("ref", "fp64", ONNX_VS_REF), ("cpu", "fp32", ONNX_VS_CPU)):
        with hotpath.Engine(loaded, backend=backend, precision=precision, mode="window") as engine:
            got = engine.run(x, dtype=np.float64)[window - 1 :]
        assert normalized_error(got, expected) <= bound, (backend, normalized_error(got, expected))
    return loaded


@pytest.mark.parametrize("style", ["plain", "keras", "torch", "slice", "layout1"])
@pytest.mark.parametrize("layers", [1, 3])
@pytest.mark.parametrize("bias", [True, False])
def test_graphs_answer_as_onnx_runtime(style, layers, bias, rng, tmp_path):
    model, _ = build(np.random.default_rng(7), style, layers=layers, bias=bias, head_bias=bias)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    # ONNX Runtime does not run layout=1 LSTMs: its reference is then the same weights (the same seed)
    # in the layout-0 graph.
    reference, time_axis = build(np.random.default_rng(7), "plain" if style == "layout1" else style,
                                 layers=layers, bias=bias, head_bias=bias)
    loaded = check_windows(reference, path, time_axis, rng, window=6)
    assert (loaded.input_size, loaded.hidden_size, loaded.num_layers, loaded.output_size) == (3, 5, layers, 2)
    assert loaded.bias == bias
    assert loaded.name == str(path)


def test_a_model_proto_loads_too(rng):
    model, time_axis = build(rng, "keras")
    check_windows(model, model, time_axis, rng, window=6)


def test_some_layers_without_bias(rng):
    """A layer without B adds nothing: it gets zero biases beside a layer that has them."""
    g = Graph()
    w0 = lstm_weights(rng, 3, 4, bias=True)
    w1 = lstm_weights(rng, 4, 4, bias=False)
    y, _, _ = g.lstm("x", w0)
    _, y_h, _ = g.lstm(g.squeeze(y, [1]), w1)
    out = g.node("Gemm", [g.squeeze(y_h, [0]), g.const(rng.standard_normal((4, 2)).astype(np.float32))])
    model = g.model([5, "batch", 3], out)
    loaded = check_windows(model, model, 0, rng, window=5)
    assert loaded.bias


def test_gemm_alpha_beta_and_opset_11_attributes(rng):
    """Gemm's alpha and beta scale the head; opset 11 gives Squeeze its axes as an attribute."""
    g = Graph()
    _, y_h, _ = g.lstm("x", lstm_weights(rng, 3, 4))
    last = g.node("Squeeze", [y_h], axes=[0])
    out = g.node("Gemm", [last, g.const(rng.standard_normal((4, 2)).astype(np.float32)),
                          g.const(rng.standard_normal((1, 2)).astype(np.float32))], alpha=0.5, beta=2.0)
    model = g.model([4, "batch", 3], out, opset=11)
    check_windows(model, model, 0, rng, window=4)


def test_a_dynamic_time_axis_leaves_the_window_open(rng):
    """A dynamic sequence length gives no window: the model streams, and a window can be given."""
    model, time_axis = build(rng, "keras", layers=2, window=None)
    loaded = hotpath.load(model)
    assert loaded.window is None
    assert hotpath.load(model, window=7).window == 7
    x = rng.standard_normal((12, 3)).astype(np.float32)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = np.stack([session.run(None, {"x": x[None, : t + 1]})[0][0] for t in range(len(x))])
    with hotpath.Engine(loaded, backend="ref", mode="streaming") as engine:
        got = engine.run(x, dtype=np.float64)
    assert normalized_error(got, expected) <= ONNX_VS_REF


def test_float64_graphs_load_exactly(rng):
    g = Graph()
    _, y_h, _ = g.lstm("x", lstm_weights(rng, 2, 3, dtype=np.float64))
    out = g.node("MatMul", [g.squeeze(y_h, [0]), g.const(rng.standard_normal((3, 1)))])
    model = g.model([4, 1, 2], out, dtype=TensorProto.DOUBLE)
    loaded = hotpath.load(model)
    assert loaded.dtype == "F64"
    x = rng.standard_normal((4, 2)).astype(np.float32).astype(np.float64)  # the engine takes float32 ticks
    # ONNX Runtime's LSTM is float32 only: onnx's own reference evaluator (numpy, float64) answers here.
    expected = ReferenceEvaluator(model).run(None, {"x": x[:, None, :]})[0]
    with hotpath.Engine(loaded, backend="ref", mode="window") as engine:
        got = engine.run(x, dtype=np.float64)[-1:]
    assert normalized_error(got, expected) <= 1e-12


def refusal(model, match):
    with pytest.raises(hotpath.Error, match=match) as info:
        hotpath.load(model)
    assert "\n" not in str(info.value)


def one_lstm(rng, **attrs):
    """A one-layer graph with LSTM attributes `attrs`, and the Graph to change it further."""
    g = Graph()
    _, y_h, _ = g.lstm("x", lstm_weights(rng, 3, 4), **attrs)
    return g, g.squeeze(y_h, [0])


def with_head(g, rng, last, shape=(3, "batch", 3)):
    out = g.node("Gemm", [last, g.const(rng.standard_normal((4, 2)).astype(np.float32))])
    return g.model(list(shape), out)


def test_an_unsupported_node_is_refused_by_op_type_and_name(rng):
    g, last = one_lstm(rng)
    relu = g.node("Relu", [last], name="activation_3")
    refusal(with_head(g, rng, relu), r"Relu node 'activation_3' is not supported")


@pytest.mark.parametrize("attrs, match", [
    ({"direction": "bidirectional"}, r"LSTM node 'lstm\d+' is bidirectional"),
    ({"direction": "reverse"}, r"LSTM node 'lstm\d+' is reverse"),
    ({"activations": ["Sigmoid", "Tanh", "Relu"]}, r"has activations \['Sigmoid', 'Tanh', 'Relu'\]"),
    ({"clip": 3.0}, r"clips its cell"),
    ({"input_forget": 1}, r"input_forget=1"),
    ({"activation_alpha": [1.0]}, r"has attribute activation_alpha"),
])
def test_unsupported_lstm_variants_are_refused(rng, attrs, match):
    g = Graph()
    weights = lstm_weights(rng, 3, 4)
    if attrs.get("direction") == "bidirectional":
        weights = tuple(np.concatenate([a, a]) for a in weights)
    _, y_h, _ = g.lstm("x", weights, **attrs)
    last = g.node("Gather", [y_h, g.const(np.array(0, np.int64))], axis=0)
    refusal(with_head(g, rng, last), match)


def test_default_activations_spelled_out_are_accepted(rng):
    g, last = one_lstm(rng, activations=["Sigmoid", "Tanh", "Tanh"], input_forget=0)
    model = with_head(g, rng, last)
    check_windows(model, model, 0, rng, window=3)


@pytest.mark.parametrize("slot, what", [(5, "initial_h"), (6, "initial_c"), (7, r"P \(peepholes\)")])
def test_nonzero_initial_state_or_peepholes_are_refused_zero_ones_accepted(rng, slot, what):
    for value, refused in ((0.0, False), (0.25, True)):
        g = Graph()
        w, r, b = lstm_weights(rng, 3, 4)
        ins = [g.const(w), g.const(r), g.const(b), "", "", "", ""]
        ins[slot - 1] = g.const(np.full((1, 12) if slot == 7 else (1, 1, 4), value, np.float32))
        _, y_h, _ = g.node("LSTM", ["x"] + ins, n_out=3, hidden_size=4)
        model = with_head(g, rng, g.squeeze(y_h, [0]), shape=(3, 1, 3))
        if refused:
            refusal(model, rf"has a nonzero {what}")
        else:
            check_windows(model, model, 0, rng, window=3)


def test_initial_state_from_the_input_is_refused(rng):
    g = Graph()
    w, r, b = lstm_weights(rng, 4, 4)
    _, y_h, _ = g.node("LSTM", ["x", g.const(w), g.const(r), g.const(b), "", "x"], n_out=3, hidden_size=4, name="rnn")
    refusal(with_head(g, rng, g.squeeze(y_h, [0]), shape=(1, 1, 4)), r"initial_h of LSTM node 'rnn' is computed from the input")


def every_step_graph(rng, window):
    """x [B, T, I] -> Transpose -> 2 LSTMs -> Transpose -> MatMul + Add: [B, T, O], the head after every
    step (as a torch module returning self.fc(y) exports)."""
    g = Graph()
    y, _, _ = g.lstm(g.node("Transpose", ["x"], perm=[1, 0, 2]), lstm_weights(rng, 3, 4))
    y, _, _ = g.lstm(g.squeeze(y, [1]), lstm_weights(rng, 4, 4))
    seq = g.node("Transpose", [g.squeeze(y, [1])], perm=[1, 0, 2])
    z = g.node("MatMul", [seq, g.const(rng.standard_normal((4, 2)).astype(np.float32))])
    z = g.node("Add", [z, g.const(rng.standard_normal(2).astype(np.float32))])
    graph = helper.make_graph(g.nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", window, 3])],
                              [helper.make_tensor_value_info(z, TensorProto.FLOAT, ["batch", window, 2])], g.inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_head_after_every_step_streams(rng):
    """Every step's output of the graph is hotpath's streaming output for that tick."""
    model = every_step_graph(np.random.default_rng(3), "time")
    loaded = hotpath.load(model)
    assert loaded.window is None and loaded.num_layers == 2
    x = rng.standard_normal((15, 3)).astype(np.float32)
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x[None]})[0][0]
    for backend, precision, bound in (("ref", "fp64", ONNX_VS_REF), ("cpu", "fp32", ONNX_VS_CPU)):
        with hotpath.Engine(loaded, backend=backend, precision=precision, mode="streaming") as engine:
            assert normalized_error(engine.run(x, dtype=np.float64), expected) <= bound


def test_a_head_after_every_step_then_the_last_step(rng):
    """The same graph cut to its last step after the head (Gather -1): window mode, every window."""
    model = every_step_graph(np.random.default_rng(3), 5)
    out = model.graph.output[0].name
    model.graph.initializer.append(numpy_helper.from_array(np.array(-1, np.int64), "minus_one"))
    model.graph.node.append(helper.make_node("Gather", [out, "minus_one"], ["z"], axis=1))
    del model.graph.output[:]
    model.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", 2]))
    check_windows(model, model, 1, rng, window=5)


def test_outputs_hotpath_cannot_give_are_refused(rng):
    g = Graph()  # the cell state
    _, _, y_c = g.lstm("x", lstm_weights(rng, 3, 4))
    out = g.node("Gemm", [g.squeeze(y_c, [0]), g.const(rng.standard_normal((4, 2)).astype(np.float32))])
    refusal(g.model([3, "batch", 3], out), r"uses 'lstm\d+_out2', an LSTM's cell state Y_c")
    g, last = one_lstm(rng)  # no head
    refusal(g.model([3, "batch", 3], last), r"output 'squeeze\d+_out0' is the last hidden state of LSTM layer 0")
    g = Graph()  # the first step, not the last
    y, _, _ = g.lstm("x", lstm_weights(rng, 3, 4))
    first = g.node("Gather", [y, g.const(np.array(0, np.int64))], axis=0, name="first")
    refusal(with_head(g, rng, g.squeeze(first, [0])), r"Gather node 'first' takes index 0 of axis 0 \(time\)")


def test_graphs_with_two_inputs_or_integer_input_are_refused(rng):
    g, last = one_lstm(rng)
    model = with_head(g, rng, last)
    model.graph.input.append(helper.make_tensor_value_info("y", TensorProto.FLOAT, [1]))
    refusal(model, r"the graph takes 2 inputs \('x', 'y'\)")
    g, last = one_lstm(rng)
    model = with_head(g, rng, last)
    model.graph.input[0].type.tensor_type.elem_type = TensorProto.INT64
    refusal(model, r"input 'x' is not a float tensor")


def test_bad_files_are_refused_naming_them(tmp_path):
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"not an onnx model\n")
    refusal(garbage, r"garbage\.onnx: not a readable ONNX model")
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    refusal(empty, r"empty\.onnx: not an ONNX model with a graph")
    refusal(tmp_path / "missing.onnx", r"missing\.onnx: no such file")
    folder = tmp_path / "folder.onnx"
    folder.mkdir()
    refusal(folder, r"folder\.onnx: not a regular file")


def test_prefixes_are_refused_for_onnx(rng, tmp_path):
    model, _ = build(rng, "plain")
    with pytest.raises(hotpath.Error, match="lstm_prefix, head_prefix and ignore name safetensors keys"):
        hotpath.load(model, lstm_prefix="rnn.")
    with pytest.raises(hotpath.Error, match="lstm_prefix, head_prefix and ignore name safetensors keys"):
        hotpath.load(model, ignore=["fc1."])


# --- hotpath import --onnx -----------------------------------------------------------------------------


def hotpath_cmd(*args):
    return subprocess.run([sys.executable, "-m", "hotpath", *map(str, args)], capture_output=True, text=True, timeout=120)


def test_import_writes_a_model_that_loads_as_the_onnx_does(rng, tmp_path):
    model, time_axis = build(rng, "torch", layers=2)
    onnx.save(model, tmp_path / "m.onnx")
    r = hotpath_cmd("import", "--onnx", tmp_path / "m.onnx", "--out", tmp_path / "m.safetensors")
    assert r.returncode == 0, r.stderr
    assert "I=3 H=5 L=2 O=2" in r.stdout and "window 6" in r.stdout and "output at the last step" in r.stdout
    loaded = check_windows(model, tmp_path / "m.safetensors", time_axis, rng, window=6)
    assert loaded.num_layers == 2
    r = hotpath_cmd("import", "--onnx", tmp_path / "m.onnx", "--out", tmp_path / "w.safetensors", "--window", "4")
    assert r.returncode == 0, r.stderr
    assert hotpath.load(tmp_path / "w.safetensors").window == 4


@pytest.mark.parametrize("args, match", [
    (["--onnx", "{dir}/garbage.onnx", "--out", "{dir}/o.safetensors"], r"garbage\.onnx: not a readable ONNX model"),
    (["--onnx", "{dir}/relu.onnx", "--out", "{dir}/o.safetensors"], r"Relu node 'activation_3' is not supported"),
    (["--onnx", "{dir}/relu.onnx"], r"the following arguments are required: --out"),
    (["--out", "{dir}/o.safetensors"], r"the following arguments are required: --onnx"),
    (["--onnx", "{dir}/relu.onnx", "--out", "{dir}/o.npy"], r"--out must be a \.safetensors file"),
    (["--onnx", "{dir}/m.onnx", "--out", "{dir}/o.safetensors", "--window", "0"], r"--window .*0"),
    (["--onnx", "{dir}/m.onnx", "--out", "{dir}/o.safetensors", "--bogus"], r"unrecognized arguments: --bogus"),
    (["--onnx", "{dir}/m.onnx", "--out", "{dir}/sub.safetensors"], r"--out .*sub\.safetensors is a directory"),
    (["--onnx", "{dir}/m.onnx", "--out", "{dir}/link.safetensors"], r"--out .*link\.safetensors is a symbolic link"),
    (["--onnx", "{dir}/m.onnx", "--out", "{dir}/nofolder/o.safetensors"], r"--out .*nofolder.*: no such folder"),
])
def test_import_refusals_are_one_line_and_exit_2(rng, tmp_path, args, match):
    (tmp_path / "garbage.onnx").write_bytes(b"not an onnx model\n")
    g, last = one_lstm(rng)
    onnx.save(with_head(g, rng, g.node("Relu", [last], name="activation_3")), tmp_path / "relu.onnx")
    onnx.save(build(rng, "plain")[0], tmp_path / "m.onnx")
    (tmp_path / "sub.safetensors").mkdir()
    (tmp_path / "link.safetensors").symlink_to(tmp_path / "m.onnx")
    r = hotpath_cmd("import", *[a.format(dir=tmp_path) for a in args])
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hotpath import: error: "), r.stderr
    assert re.search(match, lines[0]), lines[0]
    assert not (tmp_path / "o.safetensors").exists()


def test_import_leaves_an_existing_output_alone_on_error(rng, tmp_path):
    (tmp_path / "garbage.onnx").write_bytes(b"not an onnx model\n")
    out = tmp_path / "o.safetensors"
    out.write_bytes(b"keep")
    r = hotpath_cmd("import", "--onnx", tmp_path / "garbage.onnx", "--out", out)
    assert r.returncode == 2 and out.read_bytes() == b"keep"
    assert sorted(os.listdir(tmp_path)) == ["garbage.onnx", "o.safetensors"]


# --- torch.onnx ----------------------------------------------------------------------------------------


def test_torch_onnx_export_answers_as_onnx_runtime(rng, tmp_path):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed here; the torch.onnx export test runs where it is")
    nn = torch.nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.LSTM(3, 5, 2, batch_first=True)
            self.fc = nn.Linear(5, 2)

        def forward(self, x):  # [B, T, I] -> [B, O]: the head on the last step
            y, _ = self.rnn(x)
            return self.fc(y[:, -1])

    torch.manual_seed(0)
    net = Net().eval()
    path = tmp_path / "net.onnx"
    torch.onnx.export(net, (torch.zeros(1, 8, 3),), str(path), input_names=["x"], output_names=["z"],
                      dynamic_axes={"x": {0: "batch"}}, dynamo=False)
    check_windows(onnx.load(path), path, 1, rng, window=8)


def test_malformed_graphs_are_refused_in_one_line(rng):
    g, last = one_lstm(rng)
    model = with_head(g, rng, last)
    nodes = list(model.graph.node)
    del model.graph.node[:]
    model.graph.node.extend(nodes[::-1])  # out of topological order
    refusal(model, r"comes before the node that computes")
    g, last = one_lstm(rng)
    model = with_head(g, rng, last)
    model.graph.node[0].attribute.append(helper.make_attribute("layout", 2))
    refusal(model, r"layout=2")
    g = Graph()  # W of the wrong shape for hidden_size
    w, r, b = lstm_weights(rng, 3, 4)
    _, y_h, _ = g.node("LSTM", ["x", g.const(w[:, :8]), g.const(r), g.const(b)], n_out=3, hidden_size=4)
    model = helper.make_model(helper.make_graph(
        g.nodes + [helper.make_node("Squeeze", [y_h, g.const(np.array([0], np.int64))], ["s"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 1, 3])],
        [helper.make_tensor_value_info("s", TensorProto.FLOAT, None)], g.inits))
    refusal(model, r"W has shape \[1, 8, 3\], expected \[1, 16, input_size\]")


def test_a_corrupt_initializer_is_refused_in_one_line(rng):
    g, last = one_lstm(rng)
    model = with_head(g, rng, last)
    w = next(t for t in model.graph.initializer if t.name.startswith("W"))
    w.raw_data = w.raw_data[:-4]  # one float short of its shape
    refusal(model, r"cannot convert the ONNX graph \(ValueError: ")


def h_n_graph(rng, pick):
    """torch.onnx's h_n: Concat of the layers' Y_h ([L, B, H]), then Gather(pick) -> Gemm."""
    g = Graph()
    y, h0, _ = g.lstm("x", lstm_weights(rng, 3, 4))
    _, h1, _ = g.lstm(g.squeeze(y, [1]), lstm_weights(rng, 4, 4))
    h_n = g.node("Concat", [h0, h1], axis=0)
    last = g.node("Gather", [h_n, g.const(np.array(pick, np.int64))], axis=0, name="pick")
    out = g.node("Gemm", [last, g.const(rng.standard_normal((2, 4)).astype(np.float32))], transB=1)
    return g.model([6, "batch", 3], out)


def test_h_n_of_the_last_layer_is_its_last_hidden_state(rng):
    model = h_n_graph(np.random.default_rng(5), -1)
    check_windows(model, model, 0, rng, window=6)
    refusal(h_n_graph(np.random.default_rng(5), 0),
            r"Gemm node 'gemm\d+' takes the last hidden state of LSTM layer 0; hotpath's head takes the last LSTM layer's")
