"""The resources a list lives under, checked before the list is read: a list's read takes
`at: InWebhook` (a `Listing` annotated with its check, api/framework/routing.py) to have the
webhook in its path checked first. Each check answers 404, as the parent's own read does,
when the workspace has no such parent."""

from __future__ import annotations

from typing import Annotated

from dispatcher.api.framework.pagination import Listing
from dispatcher.store import webhooks


async def readable_webhook(at: Listing) -> None:
    """The webhook in the path (`webhook_id`), the workspace's and not deleted."""
    await webhooks.require_readable(at.db, at.workspace_id, at.path["webhook_id"])


# A list under /v1/webhooks/{webhook_id}.
InWebhook = Annotated[Listing, readable_webhook]
