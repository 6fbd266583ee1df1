"""Types of hotpath's compiled module (python/ext/module.cpp); the package re-exports them."""
import os
from types import TracebackType
from typing import Any, Dict, List, Optional, Sequence, Tuple, Type, TypedDict, Union

import numpy
import numpy.typing

__version__: str
git_commit: str

class Error(ValueError):
    """Bad input of any kind (a file, an option, a model, a tick); the message names the problem."""

class TickError(Error):
    """A tick input the engine refused (NaN/Inf, wrong shape); the state is left as before."""

class UnsupportedError(Error):
    """The platform or build cannot do what was asked (no CUDA device, model too large for a kernel, ...)."""

class BackendError(Error, RuntimeError):
    """The backend failed at run time, not the input (a GPU answer past its deadline, a kernel that stopped, a failed fallback); reset or reopen the engine."""

class Model:
    """A validated model: an nn.LSTM stack and its nn.Linear head (made by hotpath.load)."""

    @property
    def input_size(self) -> int: ...
    @property
    def hidden_size(self) -> int: ...
    @property
    def num_layers(self) -> int: ...
    @property
    def output_size(self) -> int: ...
    @property
    def window(self) -> Optional[int]:
        """The default sliding-window length (metadata or load(window=)); None when unknown."""
    @property
    def bias(self) -> bool: ...
    @property
    def parameter_count(self) -> int: ...
    @property
    def dtype(self) -> str:
        """The weights' dtype in the source: "F32", "F16", "BF16" or "F64" (held exactly in float64)."""
    @property
    def id(self) -> str:
        """16 hex digits of a hash of the model's content (config, weights, scaler): names the model that
        answered a tick after a live swap (Engine.model_id)."""
    @property
    def name(self) -> str:
        """The zoo name, the file path, "<bytes>", "<state_dict>" or "<ClassName module>"."""
    @property
    def lstm_prefix(self) -> str: ...
    @property
    def head_prefix(self) -> str: ...
    def to_safetensors(self) -> bytes:
        """The model as the bytes of a safetensors file (float64 weights, exact): hotpath.load(bytes) reads it back."""
    def save(self, path: Union[str, "os.PathLike[str]"]) -> None:
        """Write to_safetensors() to path (a .safetensors model file), whole or not at all (set by the hotpath package)."""

class _ZooEntry(TypedDict):
    name: str
    input_size: int
    hidden_size: int
    num_layers: int
    output_size: int
    window: Optional[int]
    parameter_count: int

class _WarmUp(TypedDict):
    ticks: int
    seconds: float

class _Metrics(TypedDict):
    count: int
    sum_seconds: float
    p50_seconds: float
    p99_seconds: float
    p999_seconds: float
    answered: int
    late: int
    lost: int
    fallback: int
    gpu_timeouts: int
    lease_renewals: int
    swaps: int
    precompute_backlog: int
    model_id: str
    backend: str
    variant: str
    buckets: List[Tuple[float, int]]

class Engine:
    """A model served by one backend. One thread at a time per engine (a second thread's call raises
    Error); many engines may run in parallel. The GIL is released while the engine works."""

    def __init__(
        self,
        model: Any,
        backend: str = "auto",
        precision: Optional[str] = None,
        mode: str = "window",
        window: Optional[int] = None,
        device: int = 0,
        cpuset: Union[str, Sequence[int], None] = None,
        timeout_us: float = 1000000.0,
        fallback: Optional[str] = None,
        variant: Optional[str] = None,
        scaler: Optional[str] = None,
        warm: bool = True,
        kernel: Optional[str] = None,
        cpu_options: Optional[str] = None,
        batch_rows: int = 0,
        metrics: bool = False,
        swap_room: bool = False,
    ) -> None:
        """backend: "auto" (cuda when a GPU is usable and the model fits its kernels, else cpu), "ref",
        "cpu", "cuda" or "hybrid" (the cpu answers each tick, the GPU keeps the open windows: docs/hybrid.md).
        precision: "fp32" | "bf16" | "int8" (cpu), "fp16" | "bf16" (cuda), "fp64" (ref);
        None: the backend's default. mode: "window" or "streaming". window: W in window mode (None: the
        model's). cpuset: cores, e.g. "2-5" or [2, 3, 4, 5]: the first runs the step (the calling thread
        is pinned to it), the rest precompute. fallback: "cpu" to answer on the CPU when the GPU is late.
        scaler: input scaling, "none", "model" (the file's input_scaler tensors) or "rolling:N" (mean and
        std of the past N ticks only); None: "model" when the model carries a scaler, else "none".
        warm: warm the engine on creation (synthetic ticks, then a reset); False: the first ticks meet a
        cold backend. kernel: the cuda kernel family, "auto" (None), "cta", "cluster" or "grid"; another
        name raises hotpath.Error naming the choices. cpu_options: the cpu backend's knobs (and cuda's CPU
        fallback's), as --cpu-options, e.g. "isa=avx2,prefetch=0", over the environment's HOTPATH_CPU_*;
        None: the environment's. batch_rows: cuda, rows of the chunks a backtest or run_batch computes at
        once (1..65536, rounded up to 128); 0: sized to the device; refused for "ref" and "cpu".
        metrics: record tick telemetry (metrics(), hotpath.metrics.collector); off, a tick pays one
        untaken branch. swap_room: cuda, serve on half the GPU's SMs so that swap() brings the next model
        up on the other half while this one answers (a cuda engine's swap is refused without it); refused
        for "ref" and "cpu". `model` may be anything hotpath.load takes."""
    def step(
        self, x: numpy.typing.ArrayLike, out: Optional[numpy.typing.NDArray[numpy.float32]] = None
    ) -> numpy.typing.NDArray[numpy.float32]:
        """One tick: x [I] -> z [O], continuing from the current state. x is read in place when it is a
        float32 C-contiguous array, else converted once. With out= (a writable float32 C-contiguous
        array [O]) z is written there and out returned. Raises TickError (state unchanged) for NaN/Inf
        or a wrong shape."""
    def run(
        self, series: numpy.typing.ArrayLike, *, dtype: numpy.typing.DTypeLike = None, progress: Optional[bool] = None
    ) -> numpy.typing.NDArray[numpy.floating]:
        """A series [T, I] -> [T, O], or S series [S, T, I] -> [S, T, O] (2-D/3-D even when O = 1). Each
        series starts from a fresh state (the engine is reset first); afterwards the engine holds the
        state after the last tick run, so step() continues from there. In window mode row t is the
        output of the window ending at t (partial while t < W-1). dtype: float32 (default) or float64
        (exact for the "ref" backend). A bad tick raises TickError naming it (and the series). Ctrl-C
        raises KeyboardInterrupt within ~0.1 s and leaves the engine reset. progress: None (a bar on
        stderr once the call has run 1 s, when stderr is a terminal), True (from the start), False."""
    def backtest(
        self,
        series: numpy.typing.ArrayLike,
        *,
        dtype: numpy.typing.DTypeLike = None,
        progress: Optional[bool] = None,
        out: Any = None,
    ) -> Any:
        """Backtest: a series [T, I] -> every output [T, O], or S series [S, T, I] -> [S, T, O] (2-D/3-D
        even when O = 1), each series from zero state by the engine's mode (window: row t is the window
        ending at t, partial while t < W-1; streaming: the stream from tick 0), on the backend's
        throughput path, with the GIL released. Every input is checked before anything runs: a NaN/Inf
        raises TickError naming series, tick and input. Afterwards the engine is reset (the next step()
        is t = 0). dtype: float32 (default) or float64 (exact for the "ref" backend). Ctrl-C raises
        KeyboardInterrupt within ~0.1 s (ref, cpu; cuda when its backtest ends), the engine left reset.
        progress: as for run. A CUDA array (anything with __cuda_array_interface__: torch, CuPy, JAX;
        float32, C-contiguous; the cuda backend) stays on the GPU: nothing crosses the host link, and the
        outputs are a CUDA array of the input's library on its device (torch, CuPy), or go into out= (a
        writable float32 CUDA array of the outputs' shape; needed for other libraries). The engine waits
        for the stream the array's library reports before reading it; the outputs are complete on
        return. Returns a numpy array for host input."""
    def run_batch(
        self, x: numpy.typing.ArrayLike, *, progress: Optional[bool] = None, out: Any = None
    ) -> Any:
        """B fresh windows [B, W, I] -> [B, O], each from zero state; the state of step/run is untouched.
        Ctrl-C raises KeyboardInterrupt within ~0.1 s. progress: as for run. A CUDA array stays on the
        GPU, as for backtest (out= likewise; the engine made with mode="batch")."""
    def swap(self, model: Any, precision: Optional[str] = None, warm_ticks: int = 0) -> str:
        """Live swap: makes model (anything hotpath.load takes) ready to answer in place of the serving one
        and returns its id once it is, the old model answering meanwhile; the next tick is still the old
        model's, every later one the new model's (window mode: bit-identical to an engine that served it
        from the start). May be called from another thread while one thread ticks. precision: the new
        model's (default: the engine's). warm_ticks: streaming only, the new state from zero over the last
        K inputs (0: zero state). Raises Error (the old model still serving) for another input or output
        size, bad weights, or a model the backend cannot serve."""
    @property
    def model_id(self) -> str:
        """The id (Model.id) of the model that answered the last tick."""
    @property
    def swaps(self) -> int: ...
    @property
    def swap_pending(self) -> bool: ...
    def reset(self) -> None:
        """Forget all state: the next tick is t = 0."""
    def counters(self) -> Dict[str, float]: ...
    def facts(self) -> Dict[str, str]: ...
    def metrics(self) -> _Metrics:
        """The tick telemetry of an engine made with metrics=True, read at once: every answered tick of
        step() and run() (not backtest, not run_batch) timed from entry into the backend's step to its
        answer. count and sum_seconds; p50/p99/p999_seconds from the histogram's buckets as PromQL's
        histogram_quantile computes them (NaN before the first tick); the counters answered, late (0:
        an engine knows no deadline), lost, fallback, gpu_timeouts, lease_renewals, swaps,
        precompute_backlog (the backend's counts folded in every 1024 ticks and at reset); the serving
        model_id, backend and variant; buckets as (upper_bound_seconds, cumulative_count), the last bound
        inf. May be called from any thread, also while another one ticks. Raises Error for an engine
        made without metrics."""
    def close(self) -> None:
        """Stop and free the engine (idempotent); any later call raises Error."""
    def __enter__(self) -> "Engine": ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...
    @property
    def closed(self) -> bool: ...
    @property
    def backend(self) -> str:
        """The backend serving ("auto" resolved), e.g. "cpu"."""
    @property
    def variant(self) -> str: ...
    @property
    def precision(self) -> str: ...
    @property
    def mode(self) -> str: ...
    @property
    def window(self) -> int:
        """W in window mode, 1 in streaming mode."""
    @property
    def ticks(self) -> int:
        """Ticks consumed since the last reset."""
    @property
    def input_size(self) -> int: ...
    @property
    def output_size(self) -> int: ...
    @property
    def choice_note(self) -> str:
        """Why "auto" chose its backend; empty when the backend was named."""
    @property
    def scaler(self) -> str:
        """The input scaling in force (None resolved): "none", "model" or "rolling:N"."""
    @property
    def warm_up(self) -> _WarmUp:
        """The warm-up on creation: synthetic ticks run (0: warm=False) and the seconds it took."""
    @property
    def model(self) -> Model: ...

class Instances:
    """N independent instances of one model on one GPU (cuda backend), each an Engine on SMs of its own:
    green contexts (an SM partition and a kernel each) or one persistent launch serving all. Drive each
    instance's Engine from a thread of its own."""

    def __init__(
        self,
        model: Any,
        count: int,
        *,
        isolation: str = "green",
        sms_each: int = 0,
        placement: str = "sm",
        backend: str = "cuda",
        precision: Optional[str] = None,
        mode: str = "window",
        window: Optional[int] = None,
        device: int = 0,
        timeout_us: float = 1000000.0,
        variant: Optional[str] = None,
        scaler: Optional[str] = None,
        warm: bool = True,
        metrics: bool = False,
    ) -> None:
        """isolation: "green" or "shared" (one launch). sms_each: SMs per instance (0: the largest equal
        share). placement: "sm" or "block" (shared only). backend: "cuda" or "auto" (no fallback). The
        other arguments as Engine's. Raises UnsupportedError when the GPU cannot hold them (naming what
        fits), Error for bad options."""
    def __len__(self) -> int: ...
    def __getitem__(self, k: int) -> Engine:
        """Instance k's Engine (valid until restart(k) or close(); its close() leaves the instance)."""
    def restart(self, k: int) -> None:
        """Close instance k and open it again on its SMs, warmed, while the others serve; its old Engine
        handles refuse every call after this. No call on instance k meanwhile."""
    def close(self) -> None:
        """Stop every instance (once no Engine handle of the set is left); idempotent."""
    def __enter__(self) -> Instances: ...
    def __exit__(self, *args: Any) -> bool: ...
    @property
    def closed(self) -> bool: ...
    @property
    def layout(self) -> Dict[str, Any]:
        """The split: isolation, count, sms_each, fine_split, device_sms, launch_sms, placement."""

def backends() -> List[str]:
    """The backends built in ("ref", "cpu", and "cuda" when built with CUDA); Engine also takes "auto"."""

def zoo() -> List[_ZooEntry]:
    """The built-in model zoo (`hotpath models`): names and shapes."""

def _open_model(
    path_or_zoo_name: str,
    lstm_prefix: Optional[str] = None,
    head_prefix: Optional[str] = None,
    window: Optional[int] = None,
    ignore: Optional[Sequence[str]] = None,
) -> Model: ...
def _open_model_bytes(
    data: bytes,
    name: str = "<bytes>",
    lstm_prefix: Optional[str] = None,
    head_prefix: Optional[str] = None,
    window: Optional[int] = None,
    ignore: Optional[Sequence[str]] = None,
) -> Model: ...
def _time_step_cpp(engine: Engine, x: numpy.typing.ArrayLike, n: int) -> numpy.typing.NDArray[numpy.int64]: ...
