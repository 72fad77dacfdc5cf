"""The circuit breaker of an LLM endpoint (Nygard, *Release It!*, 2007, ch. 5 "Circuit Breaker").

After ``threshold`` consecutive calls failed in a way no later call would fare better with (the endpoint
cannot be reached, or what answers is not a chat completion: :data:`BREAKER`), the breaker is open and the
remaining calls are not sent: they fail at once with the same error class. A dead endpoint would otherwise
cost every call its full transport retries. A call that gets a reply closes it again.
"""

from __future__ import annotations

import threading

from rerankeval.llm.client import NOT_CHAT

BREAKER_THRESHOLD = 8  # consecutive unreachable-endpoint failures before the remaining calls are skipped
UNREACHABLE = frozenset({"APIConnectionError", "APITimeoutError"})
BREAKER = UNREACHABLE | {NOT_CHAT}  # failures that trip the breaker: no later call would fare better


class Breaker:
    """Counts consecutive :data:`BREAKER` failures; ``open`` names the error class once ``threshold`` is reached."""

    def __init__(self, threshold: int = BREAKER_THRESHOLD) -> None:
        self.threshold = threshold
        self.consecutive = 0
        self.error_class: str | None = None  # the last failure that counted
        self._lock = threading.Lock()

    @property
    def open(self) -> str | None:
        """The error class every remaining call fails with, or None while calls may be sent."""
        if self.error_class and self.consecutive >= self.threshold:
            return self.error_class
        return None

    def failure(self, error_class: str) -> None:
        """A call failed with ``error_class`` (only :data:`BREAKER` classes count)."""
        if error_class in BREAKER:
            with self._lock:
                self.consecutive += 1
                self.error_class = error_class

    def success(self) -> None:
        """A call got a reply: the endpoint is there."""
        self.consecutive = 0
