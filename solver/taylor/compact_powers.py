"""Products and quotients of powers of one base, folded into one power while the compact tape is built.

``x^p · x^q = x^(p+q)``.  Differentiated, the Lagrangian of a gravitational
(or Coulomb) pair reads ``(1/2)/sqrt(s) · 1/(sqrt(s)·sqrt(s))`` with ``s``
the squared distance: five recurrences (a square root, two quotients, two
products) for what one power, ``s^(-3/2)``, computes.  The builder records
which of its atoms are powers of which base (square roots, reciprocals,
constant powers) and folds a product or quotient of two powers of one base
into one; the atoms the fold leaves unread are dropped with the tape's other
dead nodes.
"""

from __future__ import annotations

__all__ = ["PowerFolding"]


class PowerFolding:
    """The power-folding rules of :class:`~solver.taylor.compact_build.ScalarBuilder` (a mix-in).

    ``self._power`` maps an atom that is a power of a scalar to (the base's
    handle, exponent).  The rules hold wherever the operands are defined (a
    square root's base is not negative, a reciprocal's not zero).
    """

    def _power_form(self, sc):
        """``sc`` as ``w · c · base^e``: (w, constant factor node or -1, base handle, e, recorded), or None.

        A single term is a power of its atom's base when the atom was
        recorded as one (``recorded``), else the first power of the atom; a
        combination of several terms is the first power of itself, or of
        itself without the constant factor all its terms share.
        """
        if not sc or not self.is_series(sc):
            return None
        if len(sc) > 1:
            factors = {cf for (_, cf) in sc}
            if len(factors) == 1 and min(factors) >= 0:
                return 1.0, min(factors), self.h({(a, -1): w for (a, _), w in sc.items()}), 1.0, False
            return 1.0, -1, self.h(sc), 1.0, False
        (a, cf), w = next(iter(sc.items()))
        if a in self._power:
            base, e = self._power[a]
            return w, cf, base, e, True
        return w, cf, self.h(self.atom_sc(a)), 1.0, False

    def _recorded(self, sc) -> bool:
        """Whether ``sc`` is one term whose atom is a recorded power."""
        return len(sc) == 1 and next(iter(sc))[0] in self._power

    def _constant_form(self, sc):
        """A non-series scalar as (w, constant factor node or -1): ``w · c``, or None."""
        kv = self.known(sc)
        if kv is not None:
            return kv, -1
        single = self._single_constant(sc)
        return None if single is None else (single[1], single[0])

    def _fold_powers(self, a, b, sign: float):
        """``a · b^sign`` as one power when both are powers of one base and one a recorded power, else None.

        Plain products of series (``x · x``) are left alone: a power's
        recurrence divides by the base's value, a product's does not.

        Args:
            a, b: the operands (scalars of the builder).
            sign: 1.0 for the product ``a · b``, -1.0 for the quotient ``a / b``.

        Returns:
            The folded scalar, or None where the rule does not apply.
        """
        if not (self._recorded(a) or self._recorded(b)):
            return None  # the common case, decided without interning anything
        pa, pb = self._power_form(a), self._power_form(b)
        if pa is None and sign < 0 and pb is not None and pb[4] and pb[1] < 0 and a:
            # c / (w x^e): c/w times the reciprocal atom 1/x^e, a quotient as
            # before, now known as x^(-e) to the products that read it.
            ca = self._constant_form(a)
            if ca is None:
                return None
            (atom, _), wb = next(iter(b.items()))
            node = self._atom("div", (self.ONE, atom))
            self._power.setdefault(node, (pb[2], -pb[3]))
            out = self.scale(self.atom_sc(node), ca[0] / wb)
            return out if ca[1] < 0 else self.scale_by_const(out, self.atom_sc(ca[1]))
        if pa is None or pb is None or pa[2] != pb[2] or not (pa[4] or pb[4]):
            return None
        (wa, ca, base, ea, _), (wb, cb, _, eb, _) = pa, pb
        out = self.scale(self._power_sc(base, ea + sign * eb), wa * (wb if sign > 0 else 1.0 / wb))
        if cb >= 0 and sign < 0:
            cb = self._const(("recip", cb))
        for cf in (ca, cb):  # the operands' constant factors, multiplied into the terms' own
            if cf >= 0:
                out = self.scale_by_const(out, self.atom_sc(cf))
        return out

    def _power_sc(self, base: int, e: float):
        """The scalar ``H[base]^e``: a known 1, the base, a product, a square root, a reciprocal or a power."""
        x = self.H[base]
        if e == 0.0:
            return self.known_sc(1.0)
        if e == 1.0:
            return x
        if e.is_integer() and 2 <= e <= 8:
            return self._ipow(x, int(e))
        if e == 0.5:
            node = self._atom("sqrt", (self.mat(x),))
        elif e == -1.0:
            node = self._atom("div", (self.ONE, self.mat(x)))
        else:
            node = self._atom("powc", (self.mat(x), self._const(("lit", float(e)))), "pow")
        self._power.setdefault(node, (base, e))
        return self.atom_sc(node)
