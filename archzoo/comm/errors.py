"""Errors raised by the transport. Each names the peer rank and what was awaited."""

from __future__ import annotations


class CommError(RuntimeError):
    """Base class of every transport error."""


class PeerTimeout(CommError):
    """A wait passed its deadline without the peer answering."""

    def __init__(self, rank: int, peer: int | str, what: str, timeout_s: float,
                 direction: str = "from") -> None:
        self.rank, self.peer, self.what, self.timeout_s = rank, peer, what, timeout_s
        if direction == "to":
            text = f"waiting for rank {peer} to take {what}"
        else:
            text = f"waiting for {what} from rank {peer}"
        super().__init__(f"rank {rank}: timed out after {timeout_s:g}s {text}")


class PeerFailure(CommError):
    """The peer died or its connection broke while an operation with it was pending."""

    def __init__(self, rank: int, peer: int | str, what: str, cause: BaseException | str) -> None:
        self.rank, self.peer, self.what = rank, peer, what
        first = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
        super().__init__(f"rank {rank}: rank {peer} failed during {what}: {first[:200]}")


class SchemaMismatch(CommError):
    """Two ranks derived different message layouts from their configs."""
