"""Sample webhook receiver: verifies Standard Webhooks signatures, logs each event, answers 200.

WEBHOOK_SECRET (whsec_...) enables verification (401 on a bad signature); unset, it logs
events unverified. PORT (default 8000). Any path is accepted.
"""

import json
import logging
import os

from aiohttp import web
from standardwebhooks.webhooks import Webhook

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
log = logging.getLogger("receiver")
SECRET = os.environ.get("WEBHOOK_SECRET", "").strip()
VERIFIER = Webhook(SECRET) if SECRET else None


async def handle(request: web.Request) -> web.Response:
    body = await request.read()
    verified = False
    if VERIFIER is not None:
        try:
            VERIFIER.verify(body, dict(request.headers), json_parse=False)
            verified = True
        except Exception as exc:  # bad/missing headers, stale timestamp, no matching signature
            log.warning("rejected id=%s: %s", request.headers.get("webhook-id"), exc)
            return web.json_response({"error": "invalid signature"}, status=401)
    try:
        event = json.loads(body)
    except ValueError:
        event = {"raw": body[:200].decode(errors="replace")}
    log.info(
        "event id=%s type=%s verified=%s data=%s",
        request.headers.get("webhook-id"),
        event.get("type") if isinstance(event, dict) else None,
        verified,
        json.dumps(event.get("data") if isinstance(event, dict) else event)[:500],
    )
    return web.json_response({"ok": True})


async def health(_: web.Request) -> web.Response:
    return web.Response(text="ok")


app = web.Application(client_max_size=4 * 1024 * 1024)
app.router.add_get("/healthz", health)
app.router.add_post("/{tail:.*}", handle)

if __name__ == "__main__":
    if VERIFIER is None:
        log.warning("WEBHOOK_SECRET is not set: events are logged UNVERIFIED")
    web.run_app(app, host="0.0.0.0", port=int(os.environ.get("PORT", "8000")), access_log=None)
