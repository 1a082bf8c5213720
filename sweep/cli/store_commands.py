"""``mechsweep status``: progress, status counts and integrity of a sweep store."""

from __future__ import annotations

from sweep.cli.common import EXIT_FAILED, EXIT_OK

__all__ = ["cmd_status"]


def cmd_status(args) -> int:
    """Print ``sweep.store.status_report`` after checking the store's batches.

    A structural store (:mod:`sweep.structural`) is reported group by group.

    Returns:
        0 when no batch is damaged (pending batches are not damage), 1 when a
        batch's chunks are missing or corrupt, or a shared array is undecodable
        (for a structural store: in any group, or a group is missing).

    Raises:
        InputError: no sweep store; ``--verify`` on a store without commit
            records (format 1).
    """
    # Only what reads commit records and chunks: no JAX, xarray or Dask for a plain store.
    from sweep.store.check import check_store
    from sweep.store.report import status_report
    from sweep.store.tree import is_structural_store

    level = "decode" if args.verify else "quick"
    if is_structural_store(args.store):   # one report per structure group
        from sweep import structural

        text, ok = structural.status_report(args.store, level)
        print(text)
        return EXIT_OK if ok else EXIT_FAILED
    check = check_store(args.store, level)
    print(status_report(args.store, check=check))
    return EXIT_OK if check.ok else EXIT_FAILED
