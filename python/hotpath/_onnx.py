"""ONNX models in: a graph of forward ONNX `LSTM` nodes and a Gemm or MatMul(+Add) head, with the
Transpose/Squeeze/Unsqueeze/Slice/Gather/Identity plumbing exporters (tf2onnx, torch.onnx) put around
them, rewritten as the PyTorch-layout tensors hotpath's loader takes. Needs the `onnx` package.

The graph is read, never run: every node on the path from the input to the output is interpreted
symbolically (which axis is time, batch, features; whose hidden state a value holds), and anything
else on that path is refused naming the node. Values that do not depend on the input's values
(initializers, Constant nodes, shapes computed from the input's shape) are evaluated with onnx's
reference evaluator: LSTM weights, the head, and the zero initial states exporters add.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from . import _hotpath

Error = _hotpath.Error

# ONNX orders an LSTM's four gate blocks i, o, f, c; PyTorch (and hotpath) i, f, g(=c), o.
_ONNX_TO_TORCH_GATES = (0, 2, 3, 1)
_DEFAULT_ACTIVATIONS = ["Sigmoid", "Tanh", "Tanh"]
_PLUMBING = ("Identity", "Transpose", "Squeeze", "Unsqueeze", "Slice", "Gather")
# How a value depends on the graph input: not at all, only through Shape/Size, or on its values.
_CONST, _SHAPE, _DATA = 0, 1, 2
# Axis labels of a value on the data path. Input axes are "x0".."xN" until the first LSTM says what
# they are. "1" is an axis of size 1 (num_directions, an Unsqueeze); "t" is the time axis cut to its
# last step.
_T, _B, _F, _ONE, _LAST = "T", "B", "F", "1", "t"
# The layer axis of the LSTMs' last hidden states concatenated (torch.onnx's h_n).
_LAYERS = "L"
_UNIT = (_ONE, _LAST)


def _onnx():
    try:
        import onnx
    except ImportError:
        raise Error("reading an ONNX model needs the onnx package: pip install 'hotpath[onnx]' (or pip install onnx)") from None
    return onnx


def read(source: Any, name: str):
    """An onnx.ModelProto from a path or a ModelProto; a missing, unreadable or non-ONNX file raises
    hotpath.Error naming it."""
    onnx = _onnx()
    if isinstance(source, onnx.ModelProto):
        return source
    path = os.fspath(source)
    if not os.path.exists(path):
        raise Error(f"{path}: no such file")
    if not os.path.isfile(path):
        raise Error(f"{path}: not a regular file")
    try:
        model = onnx.load(path)
    except Exception as e:  # protobuf's DecodeError, an OSError, a missing external-data file
        raise Error(f"{path}: not a readable ONNX model ({_first_line(e)})") from None
    if not model.HasField("graph") or not model.graph.node:
        raise Error(f"{path}: not an ONNX model with a graph (no nodes)")
    return model


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return (text[0] if text else type(e).__name__)[:200]


def _node_name(node) -> str:
    return f"{node.op_type} node '{node.name or node.output[0]}'"


@dataclass
class _Value:
    """A value on the data path: its axes and what it holds ("input", "seq" = every step's hidden
    state of LSTM `layer`, "last" = its last step, "head" = the head applied to that)."""

    axes: List[str]
    holds: str
    layer: int = -1
    size: int = 0  # the feature axis' length
    stack: List[int] = field(default_factory=list)  # "layers": the layers along the _LAYERS axis


@dataclass
class Converted:
    tensors: Dict[str, np.ndarray]
    metadata: Dict[str, str]
    window: Optional[int]
    input_layout: str  # e.g. "[batch, time, features]"
    every_step: bool  # the graph outputs the head after every step, not only the last


@dataclass
class _State:
    graph: Any
    source: str
    x_name: str
    x_dims: List[Optional[int]]  # None: dynamic
    x_dummy: List[int]  # the lengths the constants are evaluated with (dynamic axes: distinct primes)
    x_dtype: Any
    producer: Dict[str, Any]
    inits: Dict[str, Any]
    kinds: Dict[str, int] = field(default_factory=dict)
    consts: Dict[str, np.ndarray] = field(default_factory=dict)
    binding: Dict[str, str] = field(default_factory=dict)  # input axis label -> T/B/F
    layers: List[Dict[str, np.ndarray]] = field(default_factory=list)
    head_w: Optional[np.ndarray] = None
    head_b: Optional[np.ndarray] = None
    float64: bool = False
    opsets: List[Any] = field(default_factory=list)

    def role(self, label: str) -> str:
        return self.binding.get(label, label)

    def length(self, label: str, value: _Value) -> Optional[int]:
        """The (dummy, for a dynamic one) length of an axis."""
        if label in _UNIT:
            return 1
        if label == _F:
            return value.size
        if label == _LAYERS:
            return len(value.stack)
        if label.startswith("x"):
            return self.x_dummy[int(label[1:])]
        for k, v in self.binding.items():
            if v == label:
                return self.x_dummy[int(k[1:])]
        return None


def convert(model, source: str) -> Converted:
    """The hotpath tensors (lstm.weight_ih_l0 ..., head.weight, head.bias) of an ONNX LSTM graph."""
    onnx = _onnx()
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    inputs = [i for i in graph.input if i.name not in inits]
    if len(inputs) != 1:
        names = ", ".join(repr(i.name) for i in inputs) or "none"
        raise Error(f"{source}: the graph takes {len(inputs)} inputs ({names}); hotpath models take one, the ticks")
    if len(graph.output) != 1:
        raise Error(f"{source}: the graph has {len(graph.output)} outputs; hotpath models have one")
    x = inputs[0]
    ttype = x.type.tensor_type
    if not x.type.HasField("tensor_type") or ttype.elem_type not in (
        onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16
    ):
        raise Error(f"{source}: input '{x.name}' is not a float tensor; hotpath's ticks are floats")
    if not ttype.HasField("shape"):
        raise Error(f"{source}: input '{x.name}' has no shape; hotpath needs its rank (3: time, batch, features)")
    dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in ttype.shape.dim]
    spare = iter((11, 13, 17, 19, 23, 29, 31))
    dummy = []
    for d in dims:
        dummy.append(d if d is not None else next(v for v in spare if v not in dims))
    state = _State(
        graph=graph,
        source=source,
        x_name=x.name,
        x_dims=dims,
        x_dummy=dummy,
        x_dtype=onnx.helper.tensor_dtype_to_np_dtype(ttype.elem_type),
        producer={out: node for node in graph.node for out in node.output if out},
        inits=inits,
        opsets=list(model.opset_import),
    )
    out_name = graph.output[0].name
    if _kind(state, out_name) != _DATA:
        raise Error(f"{source}: the graph's output '{out_name}' does not depend on its input")
    values: Dict[str, _Value] = {x.name: _Value([f"x{i}" for i in range(len(dims))], "input")}
    for node in _path(state, out_name):
        _interpret(state, node, values)
    return _finish(state, values[out_name], out_name)


def _kind(state: _State, name: str, seen: Optional[set] = None) -> int:
    if name in state.kinds:
        return state.kinds[name]
    if name == state.x_name:
        return _DATA
    if name == "" or name in state.inits:
        return _CONST
    node = state.producer.get(name)
    if node is None:
        raise Error(f"{state.source}: value '{name}' is no input, initializer or node output")
    seen = set() if seen is None else seen
    if name in seen:
        raise Error(f"{state.source}: the graph has a cycle through '{name}'")
    seen.add(name)
    inner = max((_kind(state, i, seen) for i in node.input), default=_CONST)
    kind = min(inner, _SHAPE) if node.op_type in ("Shape", "Size") else inner
    for out in node.output:
        state.kinds[out] = kind
    return kind


def _path(state: _State, out_name: str) -> List[Any]:
    """The nodes on a data path to the output, in graph order (ONNX graphs are topologically sorted)."""
    needed, stack = set(), [out_name]
    while stack:
        name = stack.pop()
        node = state.producer.get(name)
        if node is None or id(node) in needed or _kind(state, name) != _DATA:
            continue
        needed.add(id(node))
        stack.extend(i for i in node.input if i)
    return [n for n in state.graph.node if id(n) in needed]


def _const(state: _State, name: str, what: str, node) -> np.ndarray:
    """The value of an input that does not depend on the input's values, evaluated by onnx's
    reference evaluator (with the dummy input, for one that depends on its shape)."""
    if name in state.consts:
        return state.consts[name]
    kind = _kind(state, name)
    if kind == _DATA:
        raise Error(f"{state.source}: {what} of {_node_name(node)} is computed from the input's values; "
                    "hotpath needs it constant")
    if name in state.inits:
        from onnx import numpy_helper

        value = numpy_helper.to_array(state.inits[name])
    else:
        value = _evaluate(state, name, what, node)
    state.consts[name] = value
    return value


def _evaluate(state: _State, name: str, what: str, node) -> np.ndarray:
    onnx = _onnx()
    from onnx.reference import ReferenceEvaluator

    # Only the nodes this value needs, so the evaluator never meets the data path's ops.
    needed, stack = set(), [name]
    while stack:
        n = stack.pop()
        p = state.producer.get(n)
        if p is not None and id(p) not in needed:
            needed.add(id(p))
            stack.extend(i for i in p.input if i)
    nodes = [n for n in state.graph.node if id(n) in needed]
    used = {i for n in nodes for i in n.input}
    graph = onnx.helper.make_graph(
        nodes,
        "constant",
        [i for i in state.graph.input if i.name == state.x_name],
        [onnx.helper.make_empty_tensor_value_info(name)],
        [t for t in state.graph.initializer if t.name in used],
    )
    model = onnx.helper.make_model(graph, opset_imports=state.opsets)
    model.ir_version = min(model.ir_version, 10)
    dummy = np.zeros(state.x_dummy, dtype=state.x_dtype)
    try:
        (value,) = ReferenceEvaluator(model).run(None, {state.x_name: dummy})
    except Exception as e:
        raise Error(f"{state.source}: cannot evaluate {what} of {_node_name(node)}: {_first_line(e)}") from None
    return np.asarray(value)


def _interpret(state: _State, node, values: Dict[str, _Value]) -> None:
    op = node.op_type
    data = [i for i in node.input if i and _kind(state, i) == _DATA]
    if node.domain not in ("", "ai.onnx") or (
        op not in _PLUMBING and op not in ("LSTM", "MatMul", "Gemm", "Add", "Concat")
    ):
        raise Error(f"{state.source}: {_node_name(node)} is not supported (hotpath takes forward LSTM nodes, a "
                    "Gemm or MatMul+Add head, and Transpose/Squeeze/Unsqueeze/Slice/Gather/Identity around them)")
    if op == "Concat":
        values[node.output[0]] = _concat(state, node, [values.get(i) for i in node.input])
        return
    if len(data) != 1 if op == "Add" else node.input[0] != data[0]:
        raise Error(f"{state.source}: {_node_name(node)} combines values computed from the model input in a way "
                    "hotpath does not support")
    if data[0] not in values:
        raise Error(f"{state.source}: {_node_name(node)} comes before the node that computes '{data[0]}' "
                    "(ONNX graphs are in topological order)")
    v = values[data[0]]
    if v is None:
        raise Error(f"{state.source}: {_node_name(node)} uses '{data[0]}', an LSTM's cell state Y_c; hotpath "
                    "answers from the hidden state")
    if op == "LSTM":
        outs = _lstm(state, node, v)
    elif op in ("MatMul", "Gemm", "Add"):
        outs = [_head(state, node, v, data[0])]
    else:
        outs = [_plumbing(state, node, v)]
    for name, value in zip(node.output, outs):
        if name and value is not None:
            values[name] = value
    for name in node.output[len(outs):]:
        if name:
            values[name] = None  # an output hotpath has no meaning for: refused if anything uses it


def _attrs(node) -> Dict[str, Any]:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _ints(state: _State, node, index: int, attr: str, what: str) -> Optional[List[int]]:
    """A list of ints given as an attribute (older opsets) or as input `index` (newer ones)."""
    a = _attrs(node)
    if attr in a:
        return [int(v) for v in a[attr]]
    if len(node.input) > index and node.input[index]:
        return [int(v) for v in np.asarray(_const(state, node.input[index], what, node)).reshape(-1)]
    return None


def _plumbing(state: _State, node, v: _Value) -> _Value:
    op, axes, rank = node.op_type, list(v.axes), len(v.axes)
    where = f"{state.source}: {_node_name(node)}"
    if op == "Identity":
        return _Value(axes, v.holds, v.layer, v.size, v.stack)
    if op == "Transpose":
        perm = _attrs(node).get("perm")
        perm = list(range(rank))[::-1] if perm is None else [int(p) for p in perm]
        if sorted(perm) != list(range(rank)):
            raise Error(f"{where}: perm {perm} is not a permutation of {rank} axes")
        return _Value([axes[p] for p in perm], v.holds, v.layer, v.size, v.stack)
    if op == "Squeeze":
        which = _ints(state, node, 1, "axes", "axes")
        if not which:
            raise Error(f"{where} names no axes (hotpath needs to know which axes go)")
        which = sorted({a + rank if a < 0 else a for a in which})
        holds, layer = v.holds, v.layer
        for a in which:
            if 0 <= a < rank and axes[a] == _LAYERS and len(v.stack) == 1:
                holds, layer = "last", v.stack[0]  # h_n of a single layer
            elif not 0 <= a < rank or axes[a] not in _UNIT:
                label = "out of range" if not 0 <= a < rank else _describe(state.role(axes[a]))
                raise Error(f"{where} removes axis {a} ({label}), which is not of length 1")
        return _Value([l for i, l in enumerate(axes) if i not in which], holds, layer, v.size,
                      v.stack if holds == "layers" else [])
    if op == "Unsqueeze":
        which = _ints(state, node, 1, "axes", "axes") or []
        out_rank = rank + len(which)
        which = sorted({a + out_rank if a < 0 else a for a in which})
        if len(which) != len(_ints(state, node, 1, "axes", "axes") or []) or any(not 0 <= a < out_rank for a in which):
            raise Error(f"{where}: axes {which} do not fit a rank-{out_rank} result")
        for a in which:
            axes.insert(a, _ONE)
        return _Value(axes, v.holds, v.layer, v.size, v.stack)
    if op == "Slice":
        return _slice(state, node, v, where)
    return _gather(state, node, v, where)


def _describe(role: str) -> str:
    return {_T: "time", _B: "batch", _F: "features", _ONE: "length 1", _LAST: "the last step", _LAYERS: "layers"}.get(
        role, "an input axis")


def _concat(state: _State, node, inputs: List[Optional[_Value]]) -> _Value:
    """The last hidden states of several LSTM layers side by side (torch.onnx's h_n = Concat of each
    layer's Y_h), from which a Gather or Slice then picks one."""
    where = f"{state.source}: {_node_name(node)}"
    if any(v is None or v.holds != "last" for v in inputs) or len({tuple(v.axes) for v in inputs}) != 1:
        raise Error(f"{where} concatenates values hotpath does not (it takes only LSTM layers' last hidden states, "
                    "as h_n)")
    axis = int(_attrs(node).get("axis", 0))
    axes = list(inputs[0].axes)
    axis = axis + len(axes) if axis < 0 else axis
    if not 0 <= axis < len(axes) or axes[axis] != _ONE:
        raise Error(f"{where} concatenates along axis {axis}; hotpath takes h_n's layer axis (num_directions)")
    axes[axis] = _LAYERS
    return _Value(axes, "layers", -1, inputs[0].size, [v.layer for v in inputs])


def _slice(state: _State, node, v: _Value, where: str) -> _Value:
    starts = _ints(state, node, 1, "starts", "starts")
    ends = _ints(state, node, 2, "ends", "ends")
    rank = len(v.axes)
    which = _ints(state, node, 3, "axes", "axes") or list(range(len(starts or [])))
    steps = _ints(state, node, 4, "steps", "steps") or [1] * len(which)
    if starts is None or ends is None or not (len(starts) == len(ends) == len(which) == len(steps)):
        raise Error(f"{where}: starts, ends, axes and steps do not match")
    axes, holds, layer = list(v.axes), v.holds, v.layer
    for s, e, a, step in zip(starts, ends, which, steps):
        a = a + rank if a < 0 else a
        if not 0 <= a < rank:
            raise Error(f"{where}: axis {a} is out of range for rank {rank}")
        label = state.role(axes[a])
        n = state.length(axes[a], v)
        s = max(0, min(n, s + n if s < 0 else s))
        e = max(0, min(n, e + n if e < 0 else e))
        if step == 1 and (s, e) == (0, n):
            continue  # the whole axis
        if step == 1 and label == _T and (s, e) == (n - 1, n) and holds in ("seq", "head"):
            axes[a], holds = _LAST, ("last" if holds == "seq" else holds)
            continue
        if step == 1 and label == _LAYERS and e == s + 1:
            axes[a], holds, layer = _ONE, "last", v.stack[s]
            continue
        raise Error(f"{where} takes [{s}:{e}:{step}] of axis {a} ({_describe(label)}); hotpath takes the whole "
                    "axis, or the last time step")
    return _Value(axes, holds, layer, v.size, v.stack if holds == "layers" else [])


def _gather(state: _State, node, v: _Value, where: str) -> _Value:
    a = int(_attrs(node).get("axis", 0))
    rank = len(v.axes)
    a = a + rank if a < 0 else a
    if not 0 <= a < rank:
        raise Error(f"{where}: axis {a} is out of range for rank {rank}")
    index = np.asarray(_const(state, node.input[1], "indices", node))
    label = state.role(v.axes[a])
    n = state.length(v.axes[a], v)
    if index.size != 1 or not np.issubdtype(index.dtype, np.integer):
        raise Error(f"{where} takes {index.size} indices of axis {a}; hotpath takes one (the last time step)")
    i = int(index.reshape(-1)[0])
    i = i + n if i < 0 else i
    axes, holds = list(v.axes), v.holds
    layer = v.layer
    if label == _T and i == n - 1 and holds in ("seq", "head"):
        holds = "last" if holds == "seq" else holds
    elif label == _LAYERS and 0 <= i < n:
        holds, layer = "last", v.stack[i]
    elif not (label in _UNIT and i == 0):
        raise Error(f"{where} takes index {i} of axis {a} ({_describe(label)}); hotpath takes the last time step")
    if index.ndim == 0:
        del axes[a]
    else:
        axes[a] = _LAST if label in (_T, _LAST) else _ONE
    return _Value(axes, holds, layer, v.size)


def _lstm(state: _State, node, x: _Value) -> List[Optional[_Value]]:
    where = f"{state.source}: {_node_name(node)}"
    attrs = _attrs(node)
    for name in attrs:
        if name not in ("hidden_size", "direction", "layout", "activations", "clip", "input_forget"):
            raise Error(f"{where} has attribute {name}, which hotpath does not support")
    direction = attrs.get("direction", b"forward")
    direction = direction.decode() if isinstance(direction, bytes) else str(direction)
    if direction != "forward":
        raise Error(f"{where} is {direction}; hotpath runs forward LSTMs only")
    acts = [a.decode() if isinstance(a, bytes) else str(a) for a in attrs.get("activations", _DEFAULT_ACTIVATIONS)]
    if acts != _DEFAULT_ACTIVATIONS:
        raise Error(f"{where} has activations {acts}; hotpath computes {_DEFAULT_ACTIVATIONS} (sigmoid gates, tanh)")
    if "clip" in attrs:
        raise Error(f"{where} clips its cell (clip={attrs['clip']}); hotpath does not")
    if int(attrs.get("input_forget", 0)) != 0:
        raise Error(f"{where} couples the input and forget gates (input_forget=1); hotpath does not")
    layout = int(attrs.get("layout", 0))
    if layout not in (0, 1):
        raise Error(f"{where} has layout={layout}; ONNX defines 0 and 1")

    layer = len(state.layers)
    want = "input" if layer == 0 else "seq"
    if x.holds != want or (layer > 0 and (x.layer != layer - 1 or _LAST in x.axes)):
        raise Error(f"{where} does not take " + ("the model input" if layer == 0 else
                    f"every step of the previous LSTM layer's output (layer {layer - 1})") +
                    "; hotpath stacks LSTM layers in one chain")
    expect = [_T, _B, _F] if layout == 0 else [_B, _T, _F]
    if len(x.axes) != 3:
        raise Error(f"{where} takes a rank-{len(x.axes)} X; an LSTM takes rank 3")
    if layer == 0:
        for label, role in zip(x.axes, expect):
            if not label.startswith("x"):
                raise Error(f"{where} takes X with an axis of length 1 where it expects {_describe(role)}")
            state.binding[label] = role
    elif [state.role(l) for l in x.axes] != expect:
        got = ", ".join(_describe(state.role(l)) for l in x.axes)
        raise Error(f"{where} takes X as [{got}]; with layout={layout} it reads it as "
                    f"[{', '.join(_describe(r) for r in expect)}]")

    inputs = list(node.input) + [""] * (8 - len(node.input))
    _, w_name, r_name, b_name, lens_name, h0_name, c0_name, p_name = inputs[:8]
    w = np.asarray(_const(state, w_name, "W", node))
    r = np.asarray(_const(state, r_name, "R", node))
    hidden = int(attrs.get("hidden_size", r.shape[-1] if r.ndim == 3 else 0))
    if w.ndim != 3 or w.shape[0] != 1 or w.shape[1] != 4 * hidden:
        raise Error(f"{where}: W has shape {list(w.shape)}, expected [1, {4 * hidden}, input_size]")
    if r.shape != (1, 4 * hidden, hidden):
        raise Error(f"{where}: R has shape {list(r.shape)}, expected [1, {4 * hidden}, {hidden}]")
    size_in = w.shape[2]
    if layer == 0:
        features = state.x_dims[int(x.axes[2][1:])]
        if features is not None and features != size_in:
            raise Error(f"{where}: the model input has {features} features but W takes {size_in}")
    elif x.size != size_in:
        raise Error(f"{where}: W takes {size_in} inputs but layer {layer - 1} gives {x.size}")
    for arr in (w, r):
        state.float64 |= arr.dtype == np.float64
    tensors = {"weight_ih": _gates(w[0]), "weight_hh": _gates(r[0])}
    if b_name:
        b = np.asarray(_const(state, b_name, "B", node))
        if b.shape != (1, 8 * hidden):
            raise Error(f"{where}: B has shape {list(b.shape)}, expected [1, {8 * hidden}]")
        state.float64 |= b.dtype == np.float64
        tensors["bias_ih"] = _gates(b[0, : 4 * hidden])
        tensors["bias_hh"] = _gates(b[0, 4 * hidden :])
    if lens_name:
        lens = np.asarray(_const(state, lens_name, "sequence_lens", node)).reshape(-1)
        steps = state.length(x.axes[0 if layout == 0 else 1], x)
        if not np.all(lens == steps):
            raise Error(f"{where} has sequence_lens shorter than the sequence; hotpath runs every step")
    for name, what in ((h0_name, "initial_h"), (c0_name, "initial_c"), (p_name, "P (peepholes)")):
        if name and np.any(np.asarray(_const(state, name, what, node)) != 0):
            raise Error(f"{where} has a nonzero {what}; hotpath starts from zero state without peepholes")
    state.layers.append(tensors)
    if layout == 0:
        y = _Value([_T, _ONE, _B, _F], "seq", layer, hidden)
        y_h = _Value([_ONE, _B, _F], "last", layer, hidden)
    else:
        y = _Value([_B, _T, _ONE, _F], "seq", layer, hidden)
        y_h = _Value([_B, _ONE, _F], "last", layer, hidden)
    return [y, y_h]  # Y_c (the cell state) has no meaning as a hotpath output


def _gates(m: np.ndarray) -> np.ndarray:
    blocks = np.split(np.asarray(m), 4, axis=0)
    return np.concatenate([blocks[i] for i in _ONNX_TO_TORCH_GATES], axis=0)


def _head(state: _State, node, v: _Value, data_name: str) -> _Value:
    where = f"{state.source}: {_node_name(node)}"
    op = node.op_type
    last = len(state.layers) - 1
    if op == "Add":
        other = node.input[1] if node.input[0] == data_name else node.input[0]
        if v.holds != "head":
            raise Error(f"{where} adds to {_holds(v)}; hotpath takes an Add only as the head's bias")
        bias = _bias(state, _const(state, other, "the bias", node), v.size, len(v.axes), where)
        state.head_b = bias if state.head_b is None else state.head_b + bias
        return _Value(list(v.axes), "head", v.layer, v.size)
    if v.holds not in ("last", "seq") or v.layer != last:
        raise Error(f"{where} takes {_holds(v)}; hotpath's head takes the last LSTM layer's hidden state")
    if state.head_w is not None:
        raise Error(f"{where} is a second head; hotpath has one")
    if state.role(v.axes[-1]) != _F:
        raise Error(f"{where} multiplies along axis {_describe(state.role(v.axes[-1]))}, not the features")
    if op == "MatMul":
        w = np.asarray(_const(state, node.input[1], "B", node))
        if w.ndim != 2 or w.shape[0] != v.size:
            raise Error(f"{where}: B has shape {list(w.shape)}, expected [{v.size}, output_size]")
        state.head_w = w.T
        state.float64 |= w.dtype == np.float64
        return _Value(list(v.axes), "head", v.layer, w.shape[1])
    attrs = _attrs(node)
    if int(attrs.get("transA", 0)) or len(v.axes) != 2:
        raise Error(f"{where} takes A transposed or of rank {len(v.axes)}; hotpath takes A as [batch, hidden]")
    w = np.asarray(_const(state, node.input[1], "B", node))
    w = w.T if int(attrs.get("transB", 0)) else w
    if w.ndim != 2 or w.shape[0] != v.size:
        raise Error(f"{where}: B gives a [{', '.join(map(str, w.shape))}] matrix, expected [{v.size}, output_size]")
    state.float64 |= w.dtype == np.float64
    state.head_w = (float(attrs.get("alpha", 1.0)) * w.astype(np.float64)).T
    if len(node.input) > 2 and node.input[2]:
        c = np.asarray(_const(state, node.input[2], "C", node))
        state.head_b = float(attrs.get("beta", 1.0)) * _bias(state, c, w.shape[1], 2, where).astype(np.float64)
    return _Value(list(v.axes), "head", v.layer, w.shape[1])


def _holds(v: _Value) -> str:
    return {
        "input": "the model input",
        "seq": f"every step of LSTM layer {v.layer}",
        "last": f"the last hidden state of LSTM layer {v.layer}",
        "head": "the head's output",
        "layers": "the last hidden states of several LSTM layers",
    }[v.holds]


def _bias(state: _State, c: np.ndarray, size: int, rank: int, where: str) -> np.ndarray:
    """A bias broadcast over [..., size]: a scalar, [size], [1, size], ..."""
    c = np.asarray(c)
    state.float64 |= c.dtype == np.float64
    if c.size == 1 and c.ndim <= rank:
        return np.full(size, c.reshape(-1)[0])
    if c.ndim >= 1 and c.ndim <= rank and c.shape[-1] == size and all(d == 1 for d in c.shape[:-1]):
        return c.reshape(size)
    raise Error(f"{where}: a bias of shape {list(c.shape)} is not one value per output ([{size}])")


def _finish(state: _State, out: Optional[_Value], out_name: str) -> Converted:
    source = state.source
    if out is None or out.holds != "head":
        what = "the cell state Y_c" if out is None else _holds(out)
        raise Error(f"{source}: the graph's output '{out_name}' is {what}; hotpath needs an LSTM followed by "
                    "a Gemm or MatMul(+Add) head")
    # The head after every step (the output keeps the time axis) is the same model: hotpath's streaming
    # mode gives every step's output, window mode the last step's of each window.
    every_step = _T in [state.role(a) for a in out.axes]
    dtype = np.float64 if state.float64 else np.float32
    tensors: Dict[str, np.ndarray] = {}
    with_bias = any("bias_ih" in layer for layer in state.layers)
    for k, layer in enumerate(state.layers):
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            value = layer.get(name)
            if value is None and name.startswith("bias") and with_bias:
                value = np.zeros(layer["weight_hh"].shape[0])  # a layer without B adds zeros
            if value is not None:
                tensors[f"lstm.{name}_l{k}"] = np.ascontiguousarray(value, dtype=dtype)
    tensors["head.weight"] = np.ascontiguousarray(state.head_w, dtype=dtype)
    if state.head_b is not None:
        tensors["head.bias"] = np.ascontiguousarray(state.head_b, dtype=dtype)
    # A fixed length of the input's time axis is the window; a dynamic one leaves it open (streaming,
    # or a window given to hotpath.load / --window).
    window = next(d for i, d in enumerate(state.x_dims) if state.role(f"x{i}") == _T)
    layout = "[" + ", ".join({_T: "time", _B: "batch", _F: "features"}.get(state.role(f"x{i}"), "?")
                             for i in range(len(state.x_dims))) + "]"
    w0 = tensors["lstm.weight_ih_l0"]
    metadata = {
        "input_size": str(w0.shape[1]),
        "hidden_size": str(tensors["lstm.weight_hh_l0"].shape[1]),
        "num_layers": str(len(state.layers)),
        "output_size": str(tensors["head.weight"].shape[0]),
        "bias": str(with_bias),
        "lstm_prefix": "lstm.",
        "head_prefix": "head.",
    }
    if window is not None:
        metadata["window"] = str(window)
    return Converted(tensors, metadata, window, layout, every_step)


def to_safetensors(source: Any, name: str, window: Optional[int] = None) -> Tuple[bytes, Converted]:
    """The bytes of a hotpath model file for an ONNX model (a path or an onnx.ModelProto)."""
    from ._safetensors import serialize

    model = read(source, name)
    try:
        converted = convert(model, name)
    except Error:
        raise
    except Exception as e:  # a malformed graph the checks above did not foresee: still one line
        raise Error(f"{name}: cannot convert the ONNX graph ({type(e).__name__}: {_first_line(e)})") from None
    if window is not None:
        converted.metadata["window"] = str(int(window))
    return serialize(converted.tensors, converted.metadata), converted
