"""Types of mithrilc's native module (python/src/lib.rs); the package re-exports them."""

from typing import Any

import numpy as np

__version__: str

class Error(Exception):
    """Any error mithrilc reports; its subclass says whose fault it is."""

class ModelError(Error):
    """The model or its data is wrong: a malformed model, an input of the wrong shape
    or type, a missing input (the command's exit 1)."""

class UsageError(Error):
    """The call is wrong: an unknown target or option (the command's exit 2)."""

class ToolchainError(Error):
    """An external toolchain is missing or failed: a C compiler, nvcc (exit 3)."""

class InternalError(Error):
    """A bug in mithrilc, a Rust panic included (exit 101): please report it."""

class Port:
    """One input, output or parameter: its name, NumPy dtype name and shape, each
    dimension a size or the name of a symbol (``("B", 784)``)."""

    name: str
    dtype: str
    shape: tuple[int | str, ...]
    def __init__(self, name: str, dtype: str, shape: tuple[int | str, ...]) -> None: ...

class Model:
    """A model compiled in this process (``mithrilc.load``).

    Calls take NumPy arrays (anything with the buffer protocol, or a DLPack tensor on
    the CPU; lists are converted to the input's type) by position, in ``inputs``' order, or by name, and return a
    dict of new arrays by output name. A C-contiguous array of the input's dtype is
    read in place; another layout is copied first; another dtype is a ``ModelError``.

    Calls release the GIL while the model runs, so threads run models at once; one
    ``Model`` may be called from several threads (each call has its arena; the weights
    are shared and read-only). ``train_step`` and ``load_state_dict`` wait for the
    calls in flight and have the model alone.
    """

    inputs: list[Port]
    outputs: list[Port]
    params: list[Port]
    target: str
    threads: int
    def __call__(self, *args: Any, **kwargs: Any) -> dict[str, np.ndarray]: ...
    def backward(self, *args: Any, **kwargs: Any) -> dict[str, np.ndarray]:
        """The gradients of the parameters, by name, at these inputs: of the loss for a
        model with one, else of the outputs weighted by their cotangents, given as
        ``**{"output_grad/NAME": array}`` (ones where not given). Needs ``grad=``."""
    def train_step(self, batch: dict[str, Any], lr: float, momentum: float = 0.0) -> float:
        """One SGD step on a model with a loss, loaded with ``grad=``: the backward pass
        on ``batch`` (inputs by name), then ``v = momentum * v + g; w -= lr * v`` for
        every trained parameter, in place (velocities kept between steps). Returns the
        loss before the update."""
    def state_dict(self) -> dict[str, np.ndarray]:
        """The parameters' current values by name, as new arrays."""
    def load_state_dict(self, values: dict[str, Any]) -> None:
        """Replaces parameters' values by name (each of its parameter's shape); the
        others keep theirs."""
    def ir(self) -> str:
        """What ``mithrilc inspect`` prints: the IR after the passes and its counts."""
    def report(self) -> str:
        """What ``compile --report`` prints of the compiled model."""

def load(args: dict[str, Any]) -> Model: ...
def main(argv: list[str]) -> int: ...
def command(argv: list[str]) -> str: ...
