"""The workspace's numbers as the API checks them: one lookup (`workspaces.find_numbers`) and
one refusal, whichever field names the number (a message's `from`, an inbound `to`, a
webhook's `numberIds`, an event's `numberId`)."""

from __future__ import annotations

from collections.abc import Sequence

from dispatcher.api.framework.context import Services
from dispatcher.errors import FieldError, ValidationFailed
from dispatcher.store import workspaces
from dispatcher.store.workspaces import PhoneNumber


def not_the_workspaces(path: str, refs: Sequence[str]) -> ValidationFailed:
    """The one refusal for numbers that are not the workspace's (unknown ones and other
    workspaces' alike: which is which is not told)."""
    return ValidationFailed(
        [FieldError(path, f"not one of the workspace's numbers: {', '.join(refs)}")]
    )


async def foreign_numbers(svc: Services, workspace_id: str, refs: Sequence[str]) -> set[str]:
    """Those of the number ids `refs` that are not the workspace's, in one lookup (a batch
    names each event whose number they are)."""
    found = await workspaces.find_numbers(svc.db, workspace_id, refs)
    return {ref for ref in refs if ref not in found}


async def own_numbers(
    svc: Services, workspace_id: str, path: str, refs: Sequence[str], *, e164: bool = False
) -> dict[str, PhoneNumber]:
    """Every one of `refs` (ids; with `e164`, E.164 forms too), or the refusal naming those
    that are not the workspace's."""
    found = await workspaces.find_numbers(svc.db, workspace_id, refs, e164=e164)
    missing = [ref for ref in refs if ref not in found]
    if missing:
        raise not_the_workspaces(path, missing)
    return found


async def own_number(
    svc: Services, workspace_id: str, path: str, ref: str, *, e164: bool = False
) -> PhoneNumber:
    """`ref` as one of the workspace's numbers, or the refusal."""
    found = await own_numbers(svc, workspace_id, path, [ref], e164=e164)
    return found[ref]
