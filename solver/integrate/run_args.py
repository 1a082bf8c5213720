"""A run's arguments on the device: cached scalars and output times, and output-time padding.

A jitted call converts its Python-number and numpy arguments anew on every
call; :meth:`~solver.integrate.integrator.Integrator.run` hands it cached
device arrays instead.  The number of output times is a shape of the
compiled program: :func:`pad_output_times` pads them to a sparse ladder of
sizes so that nearby counts share one program.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

import jax

__all__ = ["CACHED_TIMES_MAX", "device_number", "device_times", "output_rows", "pad_output_times"]


@lru_cache(maxsize=512)
def _cached_number(kind: type, value, sign: float):
    # device_put, not jnp.asarray: the same weakly typed array, without the
    # conversion program that jnp.asarray compiles on its first call (5 ms).
    return jax.device_put(value)


def device_number(x):
    """A Python int or float as a (cached) device array; anything else unchanged.

    A jitted call converts each Python number argument anew, about 3 µs
    apiece: a tenth of a small model's run (pendulum: 0.20 -> 0.19 ms with
    the six scalars of :meth:`Integrator.run` cached).  The array is the one
    ``jnp.asarray`` makes of the number, so the compiled signature is the same.
    """
    if type(x) in (int, float):
        return _cached_number(type(x), x, math.copysign(1.0, x))
    return x


# Output-time arrays up to this length are kept on the device (8 bytes each).
CACHED_TIMES_MAX = 4096


@lru_cache(maxsize=64)
def _cached_times(data: bytes):
    return jax.device_put(np.frombuffer(data, dtype=np.float64))


def device_times(t_eval):
    """Output times given as a 1-D float64 numpy array (up to :data:`CACHED_TIMES_MAX`) as a cached device array.

    A jitted call copies a numpy argument to the device anew, about 9 µs for
    101 times against 1 µs to look its bytes up here: a twentieth of the
    pendulum's run, whose callers (``solve``, sweeps, benchmarks) pass the
    same times call after call.  Anything else (lists, device arrays,
    tracers, longer arrays) is returned unchanged.
    """
    if (isinstance(t_eval, np.ndarray) and t_eval.dtype == np.float64 and t_eval.ndim == 1
            and t_eval.size <= CACHED_TIMES_MAX):
        return _cached_times(t_eval.tobytes())
    return t_eval


def output_rows(n: int) -> int:
    """Rows of output a compiled run holds for ``n`` output times: n rounded up to 2^k or 3·2^(k-1).

    The number of output times is a shape of the compiled program, so every
    new count would compile the whole integration again (seconds to
    minutes).  :func:`solver.solve` and :func:`solver.solve_batch` pad the
    output times to this sparse ladder (:func:`pad_output_times`), so that
    counts from 65 to 96, say, share one program; at most a third of the
    rows are padding.

    Args:
        n: the number of output times (≥ 0).

    Returns:
        The rows: n itself up to 4, else the smallest 2^k or 3·2^(k-1) ≥ n.
    """
    if n <= 4:
        return n
    k = 1 << (n - 1).bit_length()  # the power of two ≥ n
    return 3 * k // 4 if 3 * k // 4 >= n else k


def pad_output_times(t_eval) -> tuple[np.ndarray, int]:
    """Output times padded with +inf to :func:`output_rows` rows.

    A time of +inf is never reached, so :meth:`Integrator.run` (and
    ``run_batch``, ``run_tangents``) leave its rows unwritten (NaN): the
    caller keeps the first ``n`` rows of every output.

    Args:
        t_eval: sorted output times (1-D).

    Returns:
        (padded times, n): n the number of times given.
    """
    t = np.asarray(t_eval, dtype=np.float64)
    n = int(t.shape[0])
    return np.concatenate([t, np.full(output_rows(n) - n, np.inf)]), n
