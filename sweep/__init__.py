"""mechsweep's sweep pipeline: sweep files, Dask batches, Zarr stores, kinematic design and the CLI."""

from solver.module_aliases import install as _install_aliases

# Old module paths kept for one release (see solver.module_aliases).
_install_aliases({"sweep.design_spec": "sweep.design.spec", "sweep.design_record": "sweep.design.record",
                  "sweep.runner_cli": "sweep.cli.sweep_command"})
