"""A typical user program, checked by ``mypy --strict`` against the package's annotations."""

from __future__ import annotations

import haar


def use(config: dict[str, object], grib: bytes) -> int:
    with haar.FDB(config) as fdb:
        n: int = fdb.archive(grib)
    fdb.flush()
    for el in fdb.list({"param": ["129", "130"], "step": 0}, level=3):
        key: dict[str, str] = el.combined_key()
        off: int | None = el.offset()
        uri: haar.URI | None = el.uri
        print(key, off, uri.path() if uri else None)
    with fdb.retrieve("class=ea,param=129") as h:
        head: bytes = h.read(4)
        view = memoryview(h)
        print(head, view.readonly, h.lent)
    axes: dict[str, list[str]] = fdb.axes()
    report: list[haar.WipeElement] = list(fdb.wipe({"class": "ea"}))
    kinds: list[haar.WipeElementType] = [e.type() for e in report]
    status: list[haar.StatusElement] = list(fdb.status({"class": "ea"}))
    print(kinds, status, fdb.dirty(), fdb.enabled(haar.ControlIdentifier.RETRIEVE))
    for ev in fdb.watch("param=129", timeout=0.1):
        print(ev.key, ev.length)
    try:
        fdb.wait({"param": "129"}, timeout=1)
    except haar.TimeoutError as e:
        print(e.missing)
    except haar.Error:
        raise
    print(axes, report, fdb.stats(), list(fdb.purge()))
    return n
