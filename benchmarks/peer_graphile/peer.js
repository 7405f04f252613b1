"use strict";
/**
 * The Graphile Worker peer of benchmarks scenario 3, driven by benchmarks/scenarios/peer.py:
 *
 *   node peer.js install --dsn URL
 *   node peer.js enqueue --dsn URL --events E --endpoints-file F [--chunk 2000]
 *   node peer.js work --dsn URL --concurrency C [--local-queue N] [--batch-delay MS]
 *                     [--max-pool-size P] [--timeout-ms T]
 *
 * `install` runs Graphile Worker's migrations; `enqueue` adds one `deliver` job per (event,
 * endpoint), `--chunk` jobs per `addJobs` call (one `graphile_worker.add_jobs` statement);
 * `work` runs the worker (`run()`) with `concurrency` C, `localQueue.size` N (-1: off, the
 * default) and `completeJobBatchDelay` = `failJobBatchDelay` = MS (-1: off, the default)
 * until it is stopped (SIGTERM: Graphile's own graceful shutdown). The harness times the
 * drain (first request at the sink -> no job left in the table) and stops it. `install` and
 * `enqueue` print one JSON line last, as benchmarks/common.run_json expects.
 *
 * Logging is left at warnings and above: Graphile logs every completed job at `info`, which
 * would cost the peer a console write per delivery that a real deployment would also switch
 * off. The peer is measured at its best.
 */

const fs = require("node:fs");
const crypto = require("node:crypto");
const { Logger, makeWorkerUtils, run, runMigrations } = require("graphile-worker");
const { makeDeliver } = require("./worker.js");

const LEVELS = { error: 3, warning: 2, info: 1, debug: 0 };

const logger = new Logger((scope) => (level, message) => {
  if (LEVELS[level] >= LEVELS.warning) {
    console.error(`[graphile ${level}] ${scope.label ?? ""} ${message}`);
  }
});

function parse(argv) {
  const [command, ...rest] = argv;
  const args = { command };
  for (let i = 0; i < rest.length; i += 2) {
    if (!rest[i].startsWith("--") || rest[i + 1] === undefined) {
      throw new Error(`expected --name value pairs, got ${rest.slice(i).join(" ")}`);
    }
    args[rest[i].slice(2).replace(/-(\w)/g, (_, c) => c.toUpperCase())] = rest[i + 1];
  }
  if (!args.dsn) throw new Error("--dsn is required");
  return args;
}

function integer(value, fallback) {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isInteger(n)) throw new Error(`expected an integer, got ${value}`);
  return n;
}

/** An event body shaped like dispatcher's envelope (as benchmarks/peer_pgqueuer.py makes). */
function envelope(n) {
  return JSON.stringify({
    id: `EV${crypto.randomUUID().replaceAll("-", "")}`,
    type: "contact.updated",
    apiVersion: "2026-11-01",
    createdAt: new Date().toISOString(),
    data: { id: `CT${n}` },
  });
}

async function enqueue(args) {
  const events = integer(args.events);
  const chunk = integer(args.chunk, 2000);
  const endpoints = JSON.parse(fs.readFileSync(args.endpointsFile, "utf8"));
  const utils = await makeWorkerUtils({ connectionString: args.dsn, logger });
  let total = 0;
  try {
    let specs = [];
    const flush = async () => {
      if (specs.length) {
        await utils.addJobs(specs);
        total += specs.length;
        specs = [];
      }
    };
    for (let n = 1; n <= events; n += 1) {
      const body = envelope(n);
      for (const { url, secret } of endpoints) {
        const id = `WD${crypto.randomUUID().replaceAll("-", "")}`;
        specs.push({ identifier: "deliver", payload: { id, url, secret, body } });
        if (specs.length >= chunk) await flush();
      }
    }
    await flush();
  } finally {
    await utils.release();
  }
  return { enqueued: total };
}

async function work(args) {
  const concurrency = integer(args.concurrency, 10);
  const localQueue = integer(args.localQueue, -1);
  const batchDelay = integer(args.batchDelay, -1);
  const counts = { ok: 0, failed: 0 };
  const deliver = makeDeliver({
    concurrency,
    timeoutMs: integer(args.timeoutMs, 15000),
    counts,
  });
  const worker = {
    concurrentJobs: concurrency,
    maxPoolSize: integer(args.maxPoolSize, 10),
    completeJobBatchDelay: batchDelay,
    failJobBatchDelay: batchDelay,
  };
  if (localQueue > 0) worker.localQueue = { size: localQueue };
  const runner = await run({
    connectionString: args.dsn,
    concurrency,
    logger,
    preset: { worker },
    taskList: { deliver: (payload) => deliver(payload) },
  });
  console.error(`graphile worker running: ${JSON.stringify(worker)}`);
  await runner.promise;
  console.log(JSON.stringify(counts));
}

async function main() {
  const args = parse(process.argv.slice(2));
  if (args.command === "install") {
    await runMigrations({ connectionString: args.dsn, logger });
    console.log(JSON.stringify({ installed: true }));
  } else if (args.command === "enqueue") {
    console.log(JSON.stringify(await enqueue(args)));
  } else if (args.command === "work") {
    await work(args);
  } else {
    throw new Error(`unknown command ${args.command}; one of install, enqueue, work`);
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
