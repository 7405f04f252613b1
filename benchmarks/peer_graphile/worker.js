"use strict";
/**
 * The task `deliver` of the Graphile Worker peer (benchmarks scenario 3): what a Node user
 * would write instead of dispatcher. One job per delivery, its payload `{id, url, secret,
 * body}`; the body is signed as Standard Webhooks asks (HMAC-SHA256 over `id.timestamp.body`
 * with the key a `whsec_` secret stands for, as dispatcher.domain.signing does) and POSTed
 * with node:http through one keep-alive `http.Agent` whose `maxSockets` is the worker's
 * concurrency, so that every running job has a connection and none is opened per request.
 *
 * Only 127.0.0.1 is accepted as a destination: the benchmarks never leave the machine.
 */

const crypto = require("node:crypto");
const http = require("node:http");

const SECRET_PREFIX = "whsec_";

/** The `webhook-signature` header for one key (dispatcher's `sign` with one key). */
function sign(key, id, timestamp, body) {
  const mac = crypto.createHmac("sha256", key);
  mac.update(`${id}.${timestamp}.`);
  mac.update(body);
  return `v1,${mac.digest("base64")}`;
}

/** A `deliver` task bound to one agent; counts what it sent in `counts`. */
function makeDeliver({ concurrency, timeoutMs, counts }) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: concurrency });
  const keys = new Map(); // secret -> HMAC key: decoded once per endpoint, not per job
  const targets = new Map(); // url -> parsed and checked once per endpoint

  function target(url) {
    let parsed = targets.get(url);
    if (parsed === undefined) {
      const u = new URL(url);
      if (u.protocol !== "http:" || u.hostname !== "127.0.0.1") {
        throw new Error(`refusing ${u.origin}: the benchmarks send to 127.0.0.1 only`);
      }
      parsed = { port: Number(u.port), path: u.pathname + u.search };
      targets.set(url, parsed);
    }
    return parsed;
  }

  function keyOf(secret) {
    let key = keys.get(secret);
    if (key === undefined) {
      key = Buffer.from(secret.slice(SECRET_PREFIX.length), "base64");
      keys.set(secret, key);
    }
    return key;
  }

  return function deliver(payload) {
    const { id, url, secret, body } = payload;
    const { port, path } = target(url);
    const data = Buffer.from(body);
    const timestamp = Math.floor(Date.now() / 1000);
    const headers = {
      "content-type": "application/json",
      "content-length": data.length,
      "webhook-id": id,
      "webhook-timestamp": String(timestamp),
      "webhook-signature": sign(keyOf(secret), id, timestamp, data),
    };
    return new Promise((resolve, reject) => {
      const request = http.request(
        { agent, host: "127.0.0.1", port, path, method: "POST", headers, timeout: timeoutMs },
        (response) => {
          response.resume(); // read the answer to its end so that the socket is reused
          response.on("end", () => {
            if (response.statusCode >= 300) {
              counts.failed += 1;
              reject(new Error(`HTTP ${response.statusCode}`));
            } else {
              counts.ok += 1;
              resolve();
            }
          });
          response.on("error", reject);
        },
      );
      request.on("timeout", () => request.destroy(new Error("request timed out")));
      request.on("error", (err) => {
        counts.failed += 1;
        reject(err);
      });
      request.end(data);
    });
  };
}

module.exports = { makeDeliver, sign };
