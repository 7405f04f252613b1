// A webhook receiver on Node.js's own `http` server, for the conformance suite
// (tests/conformance): it checks each request's Standard Webhooks signature itself and
// counts the sockets that carried webhooks. Run: node receiver.js PORT [KEEP_ALIVE_MS] (on
// 127.0.0.1; KEEP_ALIVE_MS: how long an idle connection is kept, Node's default 5 s if not given).
//
// The test tells it each path's signing secret (POST /_control/secret {"path", "secret"});
// a webhook to a path then answers as the path says:
//   /signed/...      200 "ok" when the signature verifies, else 401
//   /chunked/...     the same check, then 200 in three chunks (no Content-Length)
//   /status/NNN/...  the same check, then NNN with a short body
//   /reset/...       the body read, then the TCP connection reset (RST)
//   /hang/...        never answered (until the client gives up)
// GET /_control/stats: per path, the requests, the verified and rejected ones, and the
// sockets that carried them; in all, the sockets the server accepted, and how many of those
// that carried webhooks are closed.
"use strict";

const http = require("http");
const crypto = require("crypto");

const TOLERANCE_SECONDS = 300;
const secrets = new Map();
const paths = new Map();
let socketsAccepted = 0;
let socketsClosed = 0;
let nextSocket = 0;

function statsOf(path) {
  if (!paths.has(path)) {
    paths.set(path, { requests: 0, verified: 0, rejected: 0, sockets: new Set(), ids: [] });
  }
  return paths.get(path);
}

// Standard Webhooks: HMAC-SHA256 over `${id}.${timestamp}.${body}`, keyed with the base64
// bytes after `whsec_`; the header holds space-separated `v1,<base64>` signatures.
function verify(secret, headers, body) {
  const id = headers["webhook-id"];
  const timestamp = headers["webhook-timestamp"];
  const signatures = headers["webhook-signature"];
  if (!id || !timestamp || !signatures || !secret.startsWith("whsec_")) return false;
  if (Math.abs(Date.now() / 1000 - Number(timestamp)) > TOLERANCE_SECONDS) return false;
  const key = Buffer.from(secret.slice("whsec_".length), "base64");
  const expected = crypto
    .createHmac("sha256", key)
    .update(`${id}.${timestamp}.`)
    .update(body)
    .digest();
  return signatures.split(" ").some((entry) => {
    const [version, value] = entry.split(",", 2);
    if (version !== "v1" || !value) return false;
    const given = Buffer.from(value, "base64");
    return given.length === expected.length && crypto.timingSafeEqual(given, expected);
  });
}

function control(req, res, body) {
  if (req.method === "POST" && req.url === "/_control/secret") {
    const { path, secret } = JSON.parse(body.toString("utf8"));
    secrets.set(path, secret);
    res.writeHead(204).end();
  } else if (req.method === "GET" && req.url === "/_control/stats") {
    const out = {};
    for (const [path, s] of paths) {
      out[path] = { requests: s.requests, verified: s.verified, rejected: s.rejected,
                    sockets: s.sockets.size, ids: s.ids };
    }
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ socketsAccepted, socketsClosed, paths: out }));
  } else {
    res.writeHead(404).end();
  }
}

function webhook(req, res, body) {
  const path = req.url;
  const s = statsOf(path);
  s.requests += 1;
  if (req.socket.conformanceId === undefined) req.socket.conformanceId = nextSocket++;
  s.sockets.add(req.socket.conformanceId);
  const kind = path.split("/")[1];
  if (kind === "reset") {
    req.socket.resetAndDestroy();
    return;
  }
  if (kind === "hang") return;
  const secret = secrets.get(path);
  if (secret === undefined || !verify(secret, req.headers, body)) {
    s.rejected += 1;
    res.writeHead(401, { "content-type": "text/plain" });
    res.end("signature rejected");
    return;
  }
  s.verified += 1;
  s.ids.push(req.headers["webhook-id"]);
  if (kind === "chunked") {
    res.writeHead(200, { "content-type": "text/plain" });  // no length: chunked
    res.write("accepted, ");
    res.write("in three ");
    res.end("chunks by node");
  } else if (kind === "status") {
    const status = Number(path.split("/")[2]);
    res.writeHead(status, { "content-type": "text/plain" });
    res.end(`node says ${status}`);
  } else {
    res.writeHead(200, { "content-type": "text/plain", "content-length": 2 });
    res.end("ok");
  }
}

const server = http.createServer((req, res) => {
  const parts = [];
  req.on("data", (part) => parts.push(part));
  req.on("end", () => {
    const body = Buffer.concat(parts);
    if (req.url.startsWith("/_control/")) control(req, res, body);
    else webhook(req, res, body);
  });
});
server.on("connection", (socket) => {
  socketsAccepted += 1;
  socket.on("close", () => {
    if (socket.conformanceId !== undefined) socketsClosed += 1;
  });
});
if (process.argv[3] !== undefined) server.keepAliveTimeout = Number(process.argv[3]);
server.listen(Number(process.argv[2]), "127.0.0.1", () => {
  console.log(`listening on ${server.address().port}`);
});
