"""Mechanics on top of the DAE core: Euler–Lagrange equations, natural coordinates, mechanism parts, cloth, the Siconos view."""
