"""The lag refresh: a thread that has the lag book show every group's lag again as samples arrive.

After every poll round of the log-end poller, and at least every third of the tracker's staleness
limit (so a series whose log-end sample goes stale leaves the next scrape), the book is refreshed
(:meth:`streaming.lag.book.LagBook.refresh`); never while a batch is being folded. Its stop has the
book write what it counted lost since its last write.
"""

from __future__ import annotations

import time

from streaming.lag.book import LagBook
from streaming.lifecycle import PollingThread


class LagRefresh(PollingThread):
    """A component (see :mod:`streaming.lifecycle`) refreshing ``book`` after each poll round."""

    def __init__(self, book: LagBook) -> None:
        super().__init__("lag-refresh")
        self.book = book

    def _run(self) -> None:
        book = self.book
        period_s = max(1.0, book.tracker.stale_after_s / 3)
        while not self._stopping.wait(1.0):
            if book.in_batch():
                continue
            now = time.time()
            if book.tracker.last_round_at() != book.round or now - book.rendered_at >= period_s:
                book.refresh(now)

    def _close(self) -> None:
        self.book.close()  # what was counted lost since the last write, as the job stops
