"""The sweep's batch function on a real model (the pendulum of pendulum_sweep.py).

A batch shorter than the sweep's ``Batch`` (the last one, or a retried one) is
padded to the full size, so every jitted function of a worker (integration,
constraint residuals) compiles once, and the padding changes no result.
"""

import numpy as np

from pendulum_sweep import write_pendulum_sweep
from sweep import pipeline
from sweep import status as st
from sweep.spec import load_sweep


def test_short_batches_are_padded_so_each_function_compiles_once(tmp_path):
    spec = load_sweep(write_pendulum_sweep(tmp_path))
    context = pipeline.build_context(spec)
    assert context.batch == 3
    points = spec.points                    # L = 1.0: x0 = 0.5, 0.8, 1.5; then L = 1.2
    full = pipeline.batch_fn({k: v[0:3] for k, v in points.items()}, context)
    short = pipeline.batch_fn({k: v[1:2] for k, v in points.items()}, context)
    entry = pipeline._MODELS[context.key]
    assert entry["run"]._cache_size() == 1
    assert entry["resid"]._cache_size() == 1     # residuals of the padded batch, then cut

    assert full.status.tolist() == [st.SUCCESS, st.SUCCESS, st.NO_ASSEMBLY]
    assert short.status.tolist() == [st.SUCCESS] and short.steps[0] == full.steps[1]
    assert set(short.data) == set(full.data) >= {"x", "y", "lam", "constraint_residual", "y_max"}
    for name, value in short.data.items():
        assert value.shape[0] == 1 and full.data[name].shape[0] == 3
        np.testing.assert_allclose(value[0], full.data[name][1], rtol=0, atol=1e-12)
        assert np.isnan(full.data[name][2]).all()            # the design that cannot assemble
    # released from x0 = 0.8 on a rod of length 1: y(0) = 0.6, the bob swings through y = L
    np.testing.assert_allclose(short.data["y"][0, 0], 0.6, atol=1e-10)
    assert short.data["constraint_residual"].max() < 1e-7
    assert abs(short.data["y_max"][0] - 1.0) < 5e-3
