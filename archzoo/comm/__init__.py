"""Transport layer: one interface over gloo (torch.distributed) and MPI (mpi4py)."""

from archzoo.comm.base import DEFAULT_TIMEOUT_S, Counters, Request, Transport
from archzoo.comm.control import ControlChannel
from archzoo.comm.errors import CommError, PeerFailure, PeerTimeout, SchemaMismatch
from archzoo.comm.inbox import Inbox
from archzoo.messages import Message, Schema

__all__ = [
    "DEFAULT_TIMEOUT_S", "CommError", "ControlChannel", "Counters", "Inbox", "Message",
    "PeerFailure", "PeerTimeout", "Request", "Schema", "SchemaMismatch", "Transport",
]
