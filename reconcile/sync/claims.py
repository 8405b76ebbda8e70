"""A create answered AlreadyExists: whose is the name?

The job's own object (a create whose answer was lost, or whose event is on its way) is
no news: ``Ours``. Anyone else's is a failed create, ``NameHeld``, naming the holder and
counted towards failing the job, since a name the job's TF_CONFIG points at must not
quietly be somebody else's pod or Service; a holder already being deleted is waited
for (``NameReleasing``), never counted.
"""

from __future__ import annotations

from controller import errors
from controller.types import (
    JSON,
    ObjectWriter,
    controller_ref,
)


class Ours(Exception):
    """The create was answered AlreadyExists and the object is the job's own."""


class NameHeld(errors.Conflict):
    """The name a child of the job must have is taken by an object the job does not
    control. Nothing changes that until its holder deletes it: the job fails once this
    has gone on for the create grace (reconcile.policy.failures)."""

    def __init__(self, kind: str, name: str, holder: str) -> None:
        super().__init__(
            409, "AlreadyExists", f"{kind.lower()} {name} already exists and is {holder}"
        )


class NameReleasing(errors.Conflict):
    """The name is taken by an object being deleted (an earlier job's child on its way
    out): retried with the queue's backoff, never counted towards failing the job."""

    def __init__(self, kind: str, name: str, holder: str) -> None:
        super().__init__(
            409, "AlreadyExists", f"{kind.lower()} {name} is {holder}, which is being deleted"
        )


def controlled_by(obj: JSON, owner: str) -> bool:
    return (controller_ref(obj) or {}).get("uid") == owner


def holder_of(found: JSON) -> str:
    """Who holds an object, said for an event or a condition message."""
    ref = controller_ref(found)
    uid = (found.get("metadata") or {}).get("uid", "")
    if ref is None:
        return f"not controlled by this TFJob (no controller; uid {uid})"
    return (
        f"controlled by {ref.get('kind', '?')} {ref.get('name', '?')} "
        f"(uid {ref.get('uid', '?')}), not by this TFJob"
    )


async def claim(
    writer: ObjectWriter, kind: str, namespace: str, name: str, owner: str, e: errors.AlreadyExists
) -> JSON:
    """A create answered AlreadyExists: whose is the object? Raises ``Ours`` for the
    job's own, ``NameReleasing`` or ``NameHeld`` for anyone else's, ``e`` when it
    cannot tell."""
    try:
        found = await writer.get(namespace, name)
    except Exception:
        raise e from None  # can't tell: a conflict, retried like any
    if found is None:
        raise e  # gone again since: the retry creates it
    if controlled_by(found, owner):
        raise Ours() from e
    holder = holder_of(found)
    if (found.get("metadata") or {}).get("deletionTimestamp"):
        raise NameReleasing(kind, name, holder) from e
    raise NameHeld(kind, name, holder) from e
