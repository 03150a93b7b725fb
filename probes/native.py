"""The fused kernels of the MLP, query and critic probes, compiled at first use.

One C file (``gelu_readout.c`` beside this module): ``gelu_readout`` runs the hidden
nonlinearity, the readout, the residual and their gradients for a minibatch of a group of
probes without writing the ``[.., h, b]`` activations to memory (its modes also give the
readout alone, or the gradients for a given dL/dout); ``critic_null`` the
critic's null density and its statistics, ``critic_pass`` the critic's pass
(the same pass with its mixture in place of the residual) (see the C file for the exact contracts).
On first use it is compiled with the system C compiler (``$CC``, default ``cc``) for this
machine (``-O3 -march=native``) into ``$XDG_CACHE_HOME/infoprobe/kernels`` (default
``~/.cache/infoprobe/kernels``), under a name that hashes the source, the compiler, the
flags and the CPU, and loaded with :mod:`ctypes` (calls release the GIL, so the probes'
worker threads run it in parallel).

Without a compiler, or with ``INFOPROBE_NATIVE=0`` in the environment, :func:`kernel`
returns None and the probes train with the engine's autograd step: the same arithmetic, in
a different rounding order, 2.6-4x slower on the CPU. The probes reach the kernel only
through :mod:`infoprobe.probes.fused`, their accelerator.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import os
import platform
import subprocess
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

import torch

__all__ = ["ENV_SWITCH", "GeluReadoutKernel", "kernel", "pytorch_steps"]

MODE_RESIDUAL, MODE_FORWARD = 0, 1
"""The C function's modes (gelu_readout.c): squared error, readout only."""

ENV_SWITCH = "INFOPROBE_NATIVE"
"""Environment variable: ``0`` turns the compiled kernel off (the autograd step is used)."""

SOURCE = Path(__file__).with_name("gelu_readout.c")
FLAGS = (
    "-O3",
    "-march=native",
    "-std=c11",
    "-fPIC",
    "-shared",
    # reassociation lets the per-block sums vectorise; NaN and inf keep their meaning
    "-fno-math-errno",
    "-fno-trapping-math",
    "-fno-signed-zeros",
    "-fassociative-math",
    "-ffp-contract=fast",
)


def cache_folder() -> Path:
    """Where compiled kernels are kept: ``$XDG_CACHE_HOME/infoprobe/kernels``."""
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root) / "infoprobe" / "kernels"


def cpu_signature() -> str:
    """What ``-march=native`` depends on: the machine and its CPU's model and flags."""
    lines = []
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("model name", "flags")) and line not in lines:
                    lines.append(line)
                if len(lines) >= 2:
                    break
    except OSError:
        pass
    return platform.machine() + platform.processor() + "".join(lines)


def compiler_version(cc: str) -> str:
    """``cc --version``'s first line (raises OSError or CalledProcessError without one)."""
    result = subprocess.run([cc, "--version"], capture_output=True, text=True, check=True)
    return result.stdout.splitlines()[0] if result.stdout else ""


def build(cc: str) -> Path:
    """Compile :data:`SOURCE` into the cache folder (once per source, compiler and CPU)."""
    source = SOURCE.read_bytes()
    key = hashlib.sha256(
        b"\0".join([source, compiler_version(cc).encode(), " ".join(FLAGS).encode()])
        + cpu_signature().encode()
    ).hexdigest()[:16]
    library = cache_folder() / f"gelu_readout-{key}.so"
    if library.exists():
        return library
    library.parent.mkdir(parents=True, exist_ok=True)
    tmp = library.with_name(f"{library.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    try:
        try:
            compile_to(cc, FLAGS, tmp)
        except subprocess.CalledProcessError:  # a compiler without -march=native
            compile_to(cc, tuple(f for f in FLAGS if f != "-march=native"), tmp)
        os.replace(tmp, library)
    finally:
        tmp.unlink(missing_ok=True)
    return library


def compile_to(cc: str, flags: tuple[str, ...], out: Path) -> None:
    """Compile :data:`SOURCE` into the shared library ``out`` (raises CalledProcessError)."""
    subprocess.run([cc, *flags, "-o", str(out), str(SOURCE)], capture_output=True, text=True,
                   check=True)  # fmt: skip


class GeluReadoutKernel:
    """The loaded C function, called on float32 CPU tensors (shapes in :meth:`__call__`)."""

    def __init__(self, library: ctypes.CDLL) -> None:
        fn = library.gelu_readout
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_int64] * 6 + [ctypes.c_void_p] * 5 + [ctypes.c_float, ctypes.c_int]
        fn.argtypes += [ctypes.c_void_p] * 5
        self.fn = fn
        moded = library.gelu_readout_mode
        moded.restype = ctypes.c_int
        moded.argtypes = [*fn.argtypes, ctypes.c_int, ctypes.c_void_p]
        self.moded = moded
        critic = library.critic_pass
        critic.restype = ctypes.c_int
        critic.argtypes = [ctypes.c_int64] * 6 + [ctypes.c_float] * 2 + [ctypes.c_void_p] * 21
        self.critic_fn = critic
        null = library.critic_null
        null.restype = ctypes.c_int
        null.argtypes = [ctypes.c_int64] * 5 + [ctypes.c_void_p] * 6
        self.null_fn = null
        library.gelu_readout_kmax.restype = ctypes.c_int
        self.max_outputs = int(library.gelu_readout_kmax())

    def __call__(
        self,
        base: torch.Tensor,
        off: torch.Tensor | None,
        w: torch.Tensor,
        bias: torch.Tensor,
        y: torch.Tensor,
        scale: float,
        loss: torch.Tensor,
        grads: tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor] | None = None,
    ) -> None:
        """Forward (and with ``grads``, backward) of ``GELU(base + off)`` read out by ``w``.

        ``base [G, h, b]``, ``off [G, Q, h]`` or None (Q = 1), ``w [G, k, h]``,
        ``bias [G, k]``, ``y [S_y, k, b]`` (query q of group g reads target
        ``(g·Q + q) mod S_y``); writes ``loss [G]`` (sum of squared residuals) and, with
        ``grads = (g_base [G, h, b], g_off [G, Q, h] or None, g_w [G, k, h], g_bias [G, k])``,
        the gradients of ``scale/2 · Σ loss``. Every tensor is float32, contiguous, on the CPU.
        """
        self._run(MODE_RESIDUAL, base, off, w, bias, y, scale, loss, grads, None)

    def forward(
        self,
        base: torch.Tensor,
        off: torch.Tensor | None,
        w: torch.Tensor,
        bias: torch.Tensor,
        out: torch.Tensor,
    ) -> None:
        """Write the readout ``out [G, Q, k, b]`` of ``GELU(base + off)`` (shapes as in
        :meth:`__call__`); nothing else."""
        loss = torch.empty(base.shape[0])
        self._run(MODE_FORWARD, base, off, w, bias, None, 0.0, loss, None, out)

    def critic_pass(
        self,
        hidden: tuple[torch.Tensor, ...],
        mixture: tuple[torch.Tensor, ...],
        floor: float,
        scale: float = 1.0,
        grads: tuple[torch.Tensor, ...] | None = None,
        ll: torch.Tensor | None = None,
    ) -> None:
        """The critic's pass (``critic_pass`` in the C file): the hidden layer ``hidden`` =
        (base, off, w, bias) (shapes as in :meth:`__call__`, K+3+k readout rows) and the
        mixture of ``mixture`` = (cm ``[c, K, k, b]``, civ ``[c, K, k, b]``, cn ``[c, K,
        b]``, y ``[S, k, b]``, rot ``[c, k, k]``, null ``[c, S, b]``, ld ``[c]``). Writes
        ``grads`` = (g_base, g_off, g_w, g_bias, then tensors of the shapes of cm, civ, cn,
        rot and ld): the gradients of ``scale`` times the summed log mixture; and ``ll
        [c]``: the summed log mixture per cell."""
        tensors = (*hidden, *mixture, *(grads or ()), *(() if ll is None else (ll,)))
        _check_cpu("critic_pass", tensors)
        (c, H, b), (K, k) = hidden[0].shape, mixture[0].shape[1:3]
        pointers = [t.data_ptr() for t in (*hidden, *mixture)]
        pointers += [None] * 9 if grads is None else [t.data_ptr() for t in grads]
        pointers.append(None if ll is None else ll.data_ptr())
        status = self.critic_fn(c, hidden[1].shape[1], H, b, K, k, float(floor), float(scale),
                                *pointers)  # fmt: skip
        if status != 0:
            raise MemoryError(f"critic_pass: K = {K}, k = {k} too large or no scratch memory")

    def null(self, z: torch.Tensor, params: tuple[torch.Tensor, ...], out: torch.Tensor,
             stats: torch.Tensor) -> None:  # fmt: skip
        """The critic's null (``critic_null`` in the C file): targets ``z [S, k, b]``,
        ``params`` = (means ``[c, S, K0, k]``, inverse variances ``[c, S, K0, k]``,
        constants ``[c, S, K0]``); writes the log-density ``out [c, S, b]`` and the
        responsibilities' sums ``stats [c, S, K0, 2k+1]``."""
        _check_cpu("critic_null", (z, *params, out, stats))
        c, n_pos, K0, k = params[0].shape
        status = self.null_fn(c, n_pos, K0, k, z.shape[2],
                              *(t.data_ptr() for t in (z, *params, out, stats)))  # fmt: skip
        if status != 0:
            raise ValueError(f"critic_null: k = {k} or K0 = {K0} too large")

    def _run(self, mode, base, off, w, bias, y, scale, loss, grads, out) -> None:
        G, H, B = base.shape
        Q = 1 if off is None else off.shape[1]
        K, S_y = w.shape[1], 1 if y is None else y.shape[0]
        tensors = [base, off, w, bias, y, loss, out, *(grads or ())]
        _check_cpu("gelu_readout", [t for t in tensors if t is not None])

        def ptr(t: torch.Tensor | None) -> int | None:
            return None if t is None else t.data_ptr()

        g_base, g_off, g_w, g_bias = grads or (None, None, None, None)
        status = self.moded(
            G, Q, H, B, K, S_y,
            *map(ptr, (base, off, w, bias, y)),
            float(scale), int(grads is not None),
            *map(ptr, (loss, g_base, g_off, g_w, g_bias)),
            mode, ptr(out),
        )  # fmt: skip
        if status != 0:
            raise MemoryError(f"gelu_readout: k = {K} > {self.max_outputs} or no scratch memory")


def _check_cpu(name: str, tensors) -> None:
    """ValueError unless every tensor is float32, contiguous and on the CPU."""
    for t in tensors:
        if not (t.dtype == torch.float32 and t.is_contiguous() and t.device.type == "cpu"):
            raise ValueError(f"{name}: every tensor must be float32, contiguous, CPU")


_switched_off = False


@contextlib.contextmanager
def pytorch_steps() -> Iterator[None]:
    """Within this block the probes train with the engine's autograd step (comparisons)."""
    global _switched_off
    before, _switched_off = _switched_off, True
    try:
        yield
    finally:
        _switched_off = before


def kernel() -> GeluReadoutKernel | None:
    """The compiled kernel, or None when it is switched off (``INFOPROBE_NATIVE=0``,
    :func:`pytorch_steps`) or cannot be built (warned once)."""
    if _switched_off or os.environ.get(ENV_SWITCH, "1") == "0":
        return None
    return _load()


@functools.cache
def _load() -> GeluReadoutKernel | None:
    """Build (once per machine) and load the kernel; None with a warning when it fails."""
    cc = os.environ.get("CC", "cc")
    try:
        return GeluReadoutKernel(ctypes.CDLL(str(build(cc))))
    except (OSError, subprocess.CalledProcessError) as err:
        detail = getattr(err, "stderr", "") or str(err)
        warnings.warn(
            f"infoprobe: the fused probe kernel could not be built with {cc!r} "
            f"({detail.strip()[:300]}); the MLP, query and critic probes train with "
            f"autograd (same results up to rounding, slower). Set {ENV_SWITCH}=0 to silence this.",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
