"""mithrilc: an ahead-of-time compiler for machine-learning models, from Python.

``load`` compiles a model in this process (machine code through cranelift, no C
compiler needed) and returns a callable over NumPy arrays; ``compile`` writes and
builds an artifact for a target (C, CUDA, Metal, ggml, XLA) exactly as the
``mithrilc compile`` command does. docs/python.md walks through both.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from . import _mithrilc
from ._mithrilc import (
    Error,
    InternalError,
    Model,
    ModelError,
    Port,
    ToolchainError,
    UsageError,
    __version__,
)

__all__ = [
    "Artifact",
    "CModel",
    "Error",
    "InternalError",
    "Model",
    "ModelError",
    "Port",
    "ToolchainError",
    "UsageError",
    "compile",
    "load",
]


def load(
    model: Any,
    params: Any = None,
    shapes: Mapping[str, Any] | None = None,
    max: Mapping[str, int] | None = None,
    grad: bool | list[str] | None = None,
    target: str = "jit",
    *,
    set: Mapping[str, Any] | None = None,
    threads: int | None = None,
    quantize: str = "f32",
    name: str | None = None,
) -> Model:
    """Loads a model and compiles it in this process; see ``Model``.

    model: a path (Mithril model JSON or ONNX), a Mithril model dict (what
      ``model_to_dict`` returns) or, with ``mithril`` importable, a Mithril model.
    params: a path (.safetensors, .npz) or a dict of arrays by parameter name.
    shapes: input and parameter shapes by name, each a tuple of sizes and symbols
      (``{"input": ("B", 784)}``) or a string (``"B,784"``).
    max: the largest value of each symbol (``{"B": 64}``); calls may use any size
      from 1 to it.
    grad: True for the gradients of every parameter, or a list of names: the model
      then has ``backward`` and, with a loss, ``train_step``.
    target: "jit" (cranelift), "jit-llvm" (LLVM, in a build with it) or "interp"
      (the reference interpreter: slow, exact, static shapes only).
    set: constructor values Mithril left out of the JSON, by their path in error
      messages (``{"submodels.m_2.index": 0}``; as the command's ``--set``).
    threads: the threads a call splits its work over (default: every core).
    quantize: how the weights of products are stored: f32, f16, bf16, q8_0, or int8 (products in int8).
    name: the model's name when ``model`` is not a file (default "model").
    """
    path, text = _model_source(model, name)
    params_path, values = _params(params)
    args = {
        "path": path,
        "json": text,
        "params_path": params_path,
        "params": values,
        "shapes": _shapes(shapes),
        "set": _set(set),
        "max": {str(k): _positive(f"max[{k!r}]", v) for k, v in (max or {}).items()},
        "grad": _grad(grad),
        "target": str(target),
        "threads": None if threads is None else _positive("threads", threads),
        "quantize": str(quantize),
    }
    return _mithrilc.load(args)


def compile(
    model: Any,
    target: str = "c",
    out: str | os.PathLike[str] | None = None,
    *,
    params: Any = None,
    shapes: Mapping[str, Any] | None = None,
    max: Mapping[str, int] | None = None,
    grad: bool | list[str] | None = None,
    set: Mapping[str, Any] | None = None,
    name: str | None = None,
    **options: Any,
) -> Artifact:
    """Writes and builds an artifact for ``target`` into the directory ``out``, as
    ``mithrilc compile MODEL --target TARGET -o OUT`` does.

    ``model``, ``params``, ``shapes``, ``max``, ``grad``, ``set`` and ``name`` are as for
    ``load``. Every other option of the command is a keyword, its name with
    underscores (``weight_layout="plain"``, ``quantize="q8_0"``, ``no_cache=True``,
    ``emit="source"``); True gives a bare flag, a list repeats it. A model or
    parameters given in memory are written to a temporary directory for the command
    and removed after it.
    """
    if out is None and options.get("emit") != "ir":
        raise UsageError("compile needs out=PATH: the directory to write (a new or empty one, or one mithrilc wrote)")
    with tempfile.TemporaryDirectory(prefix="mithrilc-") as scratch:
        path, text = _model_source(model, name)
        if text is not None:
            path = os.path.join(scratch, os.path.basename(path))
            Path(path).write_text(text, encoding="utf-8")
        params_path, values = _params(params)
        if values is not None:
            params_path = os.path.join(scratch, "params.npz")
            np.savez(params_path, **values)
        argv = ["mithrilc", "compile", path, "--target", str(target)]
        if out is not None:
            argv += ["-o", os.fspath(out)]
        if params_path is not None:
            argv += ["--params", params_path]
        for key, dims in _shapes(shapes).items():
            argv += ["--shape", f"{key}={dims}"]
        for key, n in (max or {}).items():
            argv += ["--max", f"{key}={_positive(f'max[{key!r}]', n)}"]
        for arg in _set(set):
            argv += ["--set", arg]
        wrt = _grad(grad)
        if wrt is not None:
            argv.append("--grad" if not wrt else "--grad=" + ",".join(wrt))
        argv += _flags(options)
        printed = _mithrilc.command(argv)
    return Artifact(None if out is None else Path(out), str(target), printed)


class Artifact:
    """What ``compile`` wrote: ``dir``, ``files`` (its paths, sorted), ``target`` and
    ``report`` (what the command printed; with ``emit="ir"``, the IR)."""

    def __init__(self, dir: Path | None, target: str, report: str) -> None:
        self.dir = dir
        self.target = target
        self.report = report

    @property
    def files(self) -> list[Path]:
        if self.dir is None:
            return []
        return sorted(p for p in self.dir.rglob("*") if p.is_file() and p.name != ".mithrilc-output")

    def load(self) -> CModel:
        """The built C library as a callable (``target="c"``, built for this machine)."""
        if self.target != "c" or self.dir is None:
            raise UsageError(f"load() opens a C library (target=\"c\"); this artifact is {self.target}'s")
        return CModel(self.dir)

    def __repr__(self) -> str:
        return f"<mithrilc.Artifact {self.target} in {self.dir}>"


# The C types of the header's port comments, as NumPy's.
_C_TYPES = {
    "float": "float32",
    "double": "float64",
    "int8_t": "int8",
    "int16_t": "int16",
    "int32_t": "int32",
    "int64_t": "int64",
    "uint8_t": "uint8",
    "uint16_t": "uint16",
    "uint32_t": "uint32",
    "uint64_t": "uint64",
    "bool": "bool",
    "uint16_t (f16 bits)": "float16",
}


class CModel:
    """A built C library (``compile(..., target="c").load()``), called as a ``Model``
    is: arrays by position or name in, a dict of new arrays out. Its ports are read
    from the generated header's comments (``/* input 0: "x", float, shape [B, 5] */``).
    Calls are serialized (one arena; the library itself is reentrant with one arena
    per caller)."""

    def __init__(self, dir: str | os.PathLike[str]) -> None:
        dir = Path(dir)
        headers = [h for h in dir.glob("*.h") if (dir / f"lib{h.stem}.so").exists()]
        if len(headers) != 1:
            raise UsageError(f"{dir}: not one built C library (no lib<name>.so beside <name>.h; compile with target=\"c\" and the default emit)")
        header = headers[0]
        self.name = header.stem
        text = header.read_text(encoding="utf-8")
        upper = self.name.upper()

        def define(key: str) -> int:
            m = re.search(rf"^#define {upper}_{key} (\d+)u?$", text, re.M)
            if m is None:
                raise InternalError(f"{header}: no {upper}_{key}")
            return int(m.group(1))

        self._dims = re.findall(r"^/\* symbolic dimension \d+: (\S+) \(argument \w+\) \*/$", text, re.M)
        ports = {"input": [], "output": []}
        for kind, port, ctype, shape in re.findall(r'^/\* (input|output) \d+: "(.*)", (.+), shape \[(.*)\] \*/$', text, re.M):
            if ctype not in _C_TYPES:
                raise UsageError(f"{header}: {kind} {port!r} is {ctype}, which this loader does not pass")
            dims = tuple(int(d) if d.isdigit() else d for d in (s.strip() for s in shape.split(",")) if d)
            ports[kind].append(Port(port, _C_TYPES[ctype], dims))
        self.inputs: list[Port] = ports["input"]
        self.outputs: list[Port] = ports["output"]
        self._lib = ctypes.CDLL(str(dir / f"lib{self.name}.so"))
        self._forward = getattr(self._lib, f"{self.name}_forward")
        self._forward.restype = ctypes.c_int
        size = define("WEIGHTS_SIZE")
        try:
            self._weights = ctypes.addressof((ctypes.c_ubyte * size).in_dll(self._lib, f"{self.name}_weights_data"))
            self._held = None
        except ValueError:  # weights from the file (--weights file, the default)
            blob = dir / "weights.bin"
            if not blob.is_file() or blob.stat().st_size != size:
                raise ModelError(f"{blob}: not the {size} bytes of the library's weights") from None
            self._held = _aligned(size)
            self._held[:] = np.fromfile(blob, dtype=np.uint8)
            self._weights = self._held.ctypes.data
        self._arena = _aligned(define("ARENA_SIZE"))
        self._lock = threading.Lock()

    def __call__(self, *args: Any, **kwargs: Any) -> dict[str, np.ndarray]:
        given = dict(zip((p.name for p in self.inputs), args))
        if len(args) > len(self.inputs):
            raise ModelError(f"{len(args)} arrays given for the model's {len(self.inputs)} inputs")
        for key, value in kwargs.items():
            if key not in (p.name for p in self.inputs):
                raise ModelError(f"`{key}` is not an input of the model (its inputs: {', '.join(p.name for p in self.inputs)})")
            if key in given:
                raise ModelError(f"input `{key}` is given twice, by position and by name")
            given[key] = value
        sizes: dict[str, int] = {}
        arrays = []
        for port in self.inputs:
            if port.name not in given:
                raise ModelError(f"no value for the input(s) {port.name}")
            a = np.ascontiguousarray(given[port.name]) if isinstance(given[port.name], np.ndarray) else np.ascontiguousarray(given[port.name], dtype=port.dtype)
            if a.dtype != np.dtype(port.dtype):
                raise ModelError(f"input `{port.name}` is {a.dtype}, the model takes {port.dtype}")
            if a.ndim != len(port.shape) or any(isinstance(d, int) and n != d for n, d in zip(a.shape, port.shape)):
                raise ModelError(f"input `{port.name}` has shape {list(a.shape)}, the model takes {list(port.shape)}")
            for n, d in zip(a.shape, port.shape):
                if isinstance(d, str) and sizes.setdefault(d, n) != n:
                    raise ModelError(f"`{d}` is {sizes[d]} and {n} in the inputs")
            arrays.append(a)
        outputs = {p.name: np.empty(tuple(sizes[d] if isinstance(d, str) else d for d in p.shape), dtype=p.dtype) for p in self.outputs}
        ins = (ctypes.c_void_p * max(1, len(arrays)))(*(a.ctypes.data for a in arrays))
        outs = (ctypes.c_void_p * max(1, len(outputs)))(*(o.ctypes.data for o in outputs.values()))
        dims = [ctypes.c_int64(sizes[d]) for d in self._dims]
        with self._lock:
            status = self._forward(ctypes.c_void_p(self._weights), ins, outs, ctypes.c_void_p(self._arena.ctypes.data), *dims)
        if status == -2:
            raise ModelError("a gather or embedding index is out of range (outside [-n, n) for an axis of size n)")
        if status != 0:
            raise ModelError(f"{self.name}_forward returned {status}: a size outside the range the library was compiled for")
        return outputs

    def __repr__(self) -> str:
        return f"<mithrilc.CModel {self.name}: inputs {', '.join(p.name for p in self.inputs)}>"


def _aligned(size: int) -> np.ndarray:
    """``size`` zero bytes at a 64-byte boundary (the C ABI's alignment)."""
    raw = np.zeros(size + 64, dtype=np.uint8)
    start = (-raw.ctypes.data) % 64
    return raw[start : start + size]


def _model_source(model: Any, name: str | None) -> tuple[str, str | None]:
    """The model as (path, None) for a file or (name.json, its JSON text)."""
    if isinstance(model, (str, os.PathLike)):
        return os.fspath(model), None
    if name is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise UsageError(f"name={name!r}: a model's name is letters, digits and underscores, not starting with a digit")
    if isinstance(model, Mapping):
        return f"{name or 'model'}.json", json.dumps(model, default=str)
    try:
        from mithril.utils.dict_conversions import model_to_dict  # type: ignore[import-not-found]
    except ImportError:
        raise UsageError(f"model is a {type(model).__name__}: give a path, a model dict, or (with mithril installed) a Mithril model") from None
    return f"{name or 'model'}.json", json.dumps(model_to_dict(model), default=str)


def _params(params: Any) -> tuple[str | None, dict[str, np.ndarray] | None]:
    if params is None:
        return None, None
    if isinstance(params, (str, os.PathLike)):
        return os.fspath(params), None
    if isinstance(params, Mapping) or hasattr(params, "keys"):
        return None, {str(k): np.asarray(params[k]) for k in params.keys()}
    raise UsageError(f"params is a {type(params).__name__}: give a path (.safetensors, .npz) or a dict of arrays")


def _shapes(shapes: Mapping[str, Any] | None) -> dict[str, str]:
    out = {}
    for key, dims in (shapes or {}).items():
        out[str(key)] = dims if isinstance(dims, str) else ",".join(str(d) for d in dims)
    return out


def _set(values: Mapping[str, Any] | None) -> list[str]:
    return [f"{key}={json.dumps(value)}" for key, value in (values or {}).items()]


def _grad(grad: bool | list[str] | None) -> list[str] | None:
    if grad is None or grad is False:
        return None
    if grad is True:
        return []
    if isinstance(grad, str):
        return [grad]
    return [str(g) for g in grad]


def _positive(what: str, n: Any) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise UsageError(f"{what}={n!r}: expected an integer of at least 1")
    return int(n)


def _flags(options: Mapping[str, Any]) -> list[str]:
    """Keyword options as the command's flags."""
    argv = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            argv.append(flag)
        elif isinstance(value, (list, tuple)):
            for v in value:
                argv += [flag, str(v)]
        else:
            argv.append(f"{flag}={value}")
    return argv
