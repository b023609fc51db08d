// node-redlock's column of the comparison: the same four workloads as
// ../compare_test.go, on the nodes it is given, printed as one JSON object.
//
//   REDIS_ADDRS=h:p,... SLOW_ADDRS=h:p,... DURATION_MS=3000 node bench.js
"use strict";
const Redis = require("ioredis");
const { default: Redlock } = require("redlock");

const addrs = process.env.REDIS_ADDRS.split(",");
const slowAddrs = process.env.SLOW_ADDRS.split(",");
const duration = Number(process.env.DURATION_MS || 3000);
const ttl = 10000;

function clients(list) {
  return list.map((a) => {
    const [host, port] = a.split(":");
    return new Redis({ host, port: Number(port), enableOfflineQueue: true, maxRetriesPerRequest: 0 });
  });
}

async function sequential(redlock, key) {
  let n = 0;
  const begin = Date.now();
  while (Date.now() - begin < duration) {
    const lock = await redlock.acquire([key], ttl);
    await lock.release();
    n++;
  }
  return (n * 1000) / (Date.now() - begin);
}

async function parallel(redlock, key) {
  let n = 0;
  const begin = Date.now();
  await Promise.all(
    Array.from({ length: 16 }, async (_, g) => {
      while (Date.now() - begin < duration) {
        const lock = await redlock.acquire([`${key}:${g}`], ttl);
        await lock.release();
        n++;
      }
    })
  );
  return (n * 1000) / (Date.now() - begin);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function contended(redlock, key) {
  let inside = 0, violations = 0, last = -1, handoffs = 0;
  const waits = [];
  const begin = Date.now();
  await Promise.all(
    Array.from({ length: 8 }, async (_, g) => {
      while (Date.now() - begin < duration) {
        const start = process.hrtime.bigint();
        const lock = await redlock.acquire([key], ttl, { retryCount: -1 });
        waits.push(Number(process.hrtime.bigint() - start) / 1e6);
        if (++inside > 1) violations++;
        if (last !== g) handoffs++;
        last = g;
        await sleep(1);
        inside--;
        await lock.release();
        await sleep(5);
      }
    })
  );
  waits.sort((a, b) => a - b);
  const p99 = waits.length ? waits[Math.min(waits.length - 1, Math.floor((waits.length * 99) / 100))] : 0;
  return { handoffs: (handoffs * 1000) / (Date.now() - begin), waitP99: p99, violation: violations };
}

(async () => {
  const fast = clients(addrs);
  const slow = clients(slowAddrs);
  const redlock = new Redlock(fast);
  const slowRedlock = new Redlock(slow);
  const out = {};
  out.seq = await sequential(redlock, "node:seq");
  out.slow = await sequential(slowRedlock, "node:slow");
  out.par = await parallel(redlock, "node:par");
  Object.assign(out, await contended(redlock, "node:cont"));
  process.stdout.write(JSON.stringify(out) + "\n");
  await Promise.all([...fast, ...slow].map((c) => c.quit()));
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
