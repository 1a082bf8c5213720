"""A tiny real sweep for the pipeline and workflow tests.

A pendulum DAE released from x = x0 (y found by the consistent-point
solver), swept over L x x0 = {1.0, 1.2} x {0.5, 0.8, 1.5} in batches of 3:
the two designs with x0 = 1.5 > L cannot assemble (status no_assembly), the
other four integrate.  Small enough to compile and run in seconds.
"""

from pathlib import Path

PENDULUM = """\
Title: Pendulum released from x0
Kind: DAE
PhysicalParams: {g: 9.81, L: 1.0, x0: 0.8}
Variables: [x, y, lam]
Equations:
  - x'' + lam*x
  - y'' + lam*y - g
  - x**2 + y**2 - L**2
ProblemData:
  t0: 0
  tend: 1
  values: {x: x0, y: 0.5, x': 0.0, y': 0.0}
  fixed: [x, x']
  samples: 21
SolverParams:
  Integration: {tol: 1.0e-8}
"""

#: A design file for the shipped pendulum (``{model}``: its path): fit L to the motion of L = 1.1.
PENDULUM_DESIGN = """\
Title: Pendulum length
Model: {model}
Override: {{ProblemData: {{tend: 0.5}}}}
Parameters:
  L: {{start: 0.9, bounds: [0.8, 1.3]}}
Objective:
  path: [x, y]
  target: {{design: {{L: 1.1}}}}
  samples: 11
Optimizer: {{method: L-BFGS-B, max_iterations: 5}}
"""

SWEEP = """\
Title: Pendulum release study
Model: pendulum_x0.yaml
Sweep:
  product:
    L: {values: [1.0, 1.2]}
    x0: {values: [0.5, 0.8, 1.5]}
Outputs:
  samples: 21
  metrics:
    y_max: {of: y, reduce: max}
    x_range: {of: x, reduce: range}
Batch: 3
"""


def write_pendulum_sweep(folder: Path) -> Path:
    """Write the model and the sweep file into ``folder``; the sweep file's path."""
    folder = Path(folder)
    (folder / "pendulum_x0.yaml").write_text(PENDULUM)
    (folder / "sweep.yaml").write_text(SWEEP)
    return folder / "sweep.yaml"
