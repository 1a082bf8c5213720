"""Dense linear algebra the engine runs inside jit and vmap: LU, KKT systems, forward Jacobians."""
