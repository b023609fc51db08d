// node-redlock's row of the comparison: the same in-process workloads as
// ../compare_test.go, on the nodes it is given, printed as one JSON object
// (WORKLOADS, comma-separated, picks some of seq,slow,par,contended; all by
// default):
//
//   REDIS_ADDRS=h:p,... SLOW_ADDRS=h:p,... DURATION_MS=3000 node bench.js
//
// With MODE=cross it is one process of the cross-process contended workload
// (../cross_test.go): 2 waiters on KEY from BEGIN_NS (wall-clock UnixNano)
// for DURATION_MS, one JSON line per grant written to OUT:
//
//   MODE=cross REDIS_ADDRS=... KEY=k PROC=0 BEGIN_NS=... DURATION_MS=3000 OUT=f node bench.js
"use strict";
const fs = require("fs");
const { performance } = require("perf_hooks");
const Redis = require("ioredis");
const { default: Redlock } = require("redlock");

const addrs = process.env.REDIS_ADDRS.split(",");
const slowAddrs = (process.env.SLOW_ADDRS || "").split(",");
const duration = Number(process.env.DURATION_MS || 3000);
const workloads = (process.env.WORKLOADS || "seq,slow,par,contended").split(",");
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

// contended also reports busy: the % of the elapsed time some waiter held
// the lock, from acquire's return to the call of release.
async function contended(redlock, key) {
  let inside = 0, violations = 0, last = -1, handoffs = 0, held = 0n;
  const waits = [];
  const begin = Date.now();
  const beginNs = process.hrtime.bigint();
  await Promise.all(
    Array.from({ length: 8 }, async (_, g) => {
      while (Date.now() - begin < duration) {
        const start = process.hrtime.bigint();
        const lock = await redlock.acquire([key], ttl, { retryCount: -1 });
        const granted = process.hrtime.bigint();
        waits.push(Number(granted - start) / 1e6);
        if (++inside > 1) violations++;
        if (last !== g) handoffs++;
        last = g;
        await sleep(1);
        inside--;
        held += process.hrtime.bigint() - granted;
        await lock.release();
        await sleep(5);
      }
    })
  );
  const elapsed = process.hrtime.bigint() - beginNs;
  waits.sort((a, b) => a - b);
  const p99 = waits.length ? waits[Math.min(waits.length - 1, Math.floor((waits.length * 99) / 100))] : 0;
  return {
    handoffs: (handoffs * 1000) / (Date.now() - begin),
    busy: (100 * Number(held)) / Number(elapsed),
    waitP99: p99,
    violation: violations,
  };
}

// wallNs is the wall clock in UnixNano, to a fraction of a microsecond
// (Date.now() has milliseconds only), comparable with Go's time.Now().
function wallNs() {
  return BigInt(Math.round((performance.timeOrigin + performance.now()) * 1e6));
}

// cross is one process of the cross-process workload: 2 waiters on key
// from beginNs for the duration; it returns one JSON line per grant.
async function cross(redlock, key, proc, beginNs) {
  await sleep(Math.max(0, Number(beginNs - wallNs()) / 1e6));
  const end = beginNs + BigInt(duration) * 1000000n;
  const lines = [];
  await Promise.all(
    Array.from({ length: 2 }, async (_, g) => {
      while (wallNs() < end) {
        const start = wallNs();
        const lock = await redlock.acquire([key], ttl, { retryCount: -1 });
        const granted = wallNs();
        await sleep(1);
        const released = wallNs();
        await lock.release();
        lines.push(`{"proc":${proc},"g":${g},"start":${start},"granted":${granted},"released":${released}}\n`);
        await sleep(5);
      }
    })
  );
  return lines.join("");
}

async function main() {
  const fast = clients(addrs);
  const redlock = new Redlock(fast);
  if (process.env.MODE === "cross") {
    const lines = await cross(redlock, process.env.KEY, Number(process.env.PROC), BigInt(process.env.BEGIN_NS));
    fs.writeFileSync(process.env.OUT, lines);
    await Promise.all(fast.map((c) => c.quit()));
    return;
  }
  const slow = workloads.includes("slow") ? clients(slowAddrs) : [];
  const out = {};
  if (workloads.includes("seq")) out.seq = await sequential(redlock, "node:seq");
  if (slow.length) out.slow = await sequential(new Redlock(slow), "node:slow");
  if (workloads.includes("par")) out.par = await parallel(redlock, "node:par");
  if (workloads.includes("contended")) Object.assign(out, await contended(redlock, "node:cont"));
  process.stdout.write(JSON.stringify(out) + "\n");
  await Promise.all([...fast, ...slow].map((c) => c.quit()));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
