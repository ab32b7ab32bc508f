// Drives switchboard's embedded registry with node-consul (the npm package
// "consul"), as a Node service would. Run by registryd's Go test
// TestNodeConsulClient: argv is HOST PORT. It prints one JSON line
// {"ready": INDEX} once it is about to block, then waits for the Go test to
// change the service and prints one JSON line with what it saw.
"use strict";

const { EventEmitter } = require("events");
const Consul = require("consul");

// withResponse asks node-consul for the HTTP response too (for the
// X-Consul-Index header): its ctx option must be an EventEmitter.
function withResponse() {
  const ctx = new EventEmitter();
  ctx.includeResponse = true;
  return ctx;
}

async function main() {
  const [host, port] = process.argv.slice(2);
  const c = new Consul({ host, port: Number(port) });
  const out = {};
  await c.agent.service.register({
    name: "nodesvc",
    id: "nodesvc-1",
    address: "127.0.0.1",
    port: 6000,
    tags: ["js"],
    check: { ttl: "10s" },
  });
  out.registered = true;
  let nodes = await c.health.service({ service: "nodesvc", passing: true });
  out.passing_before_ttl_pass = nodes.length;
  await c.agent.check.pass({ id: "service:nodesvc-1", note: "ok from node" });
  let [res, body] = await c.health.service({ service: "nodesvc", passing: true, ctx: withResponse() });
  out.passing_after_ttl_pass = body.length;
  out.output = body[0].Checks.filter((ch) => ch.CheckID === "service:nodesvc-1").map((ch) => ch.Output);
  const index = res.headers["x-consul-index"];
  out.index1 = Number(index);
  console.log(JSON.stringify({ ready: Number(index) }));

  const start = process.hrtime.bigint();
  [res, body] = await c.health.service({
    service: "nodesvc",
    passing: true,
    index,
    wait: "10s",
    ctx: withResponse(),
  });
  out.blocked_seconds = Number(process.hrtime.bigint() - start) / 1e9;
  out.index2 = Number(res.headers["x-consul-index"]);
  out.ids = body.map((n) => n.Service.ID).sort();
  out.tags = [...new Set(body.flatMap((n) => n.Service.Tags))].sort();

  await c.agent.service.deregister("nodesvc-1");
  out.deregistered = true;
  out.services_left = Object.keys(await c.agent.service.list()).sort();
  out.catalog = await c.catalog.service.list();
  console.log(JSON.stringify(out));
}

main().catch((err) => {
  console.error(err && err.stack ? err.stack : err);
  process.exit(1);
});
