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
    from sweep import store  # dask and zarr: loaded for sweep commands only
    from sweep import structural

    level = "decode" if args.verify else "quick"
    if structural.is_structural_store(args.store):   # one report per structure group
        text, ok = structural.status_report(args.store, level)
        print(text)
        return EXIT_OK if ok else EXIT_FAILED
    check = store.check_store(args.store, level)
    print(store.status_report(args.store, check=check))
    return EXIT_OK if check.ok else EXIT_FAILED
